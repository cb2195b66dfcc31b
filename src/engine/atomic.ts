/**
 * Whole-file replacement that survives a crash at any point: the old content or the new one,
 * never a mix. Temp file in the same directory, write, fsync, rename over the target, fsync the
 * directory (so the rename itself is durable). Used for objects, memory notes, state files.
 */

import { randomBytes } from 'node:crypto'
import { closeSync, fchmodSync, fsyncSync, openSync, renameSync, rmSync, writeSync } from 'node:fs'
import { basename, dirname, join } from 'node:path'

export interface AtomicWriteOptions {
  /** File mode of the result (default 0o644, set exactly, whatever the umask). */
  mode?: number
  /** Prefix of the temp file name in the target's directory (default `.<name>.`). */
  tempPrefix?: string
  /** Suffix of the temp file name (default `.tmp`). */
  tempSuffix?: string
}

/** fsync a directory so that entries created, renamed or removed in it are durable. */
export function fsyncDir(dir: string): void {
  const fd = openSync(dir, 'r')
  try {
    fsyncSync(fd)
  } finally {
    closeSync(fd)
  }
}

/** Writes `data` to `file` atomically and durably; returns the path written. */
export function writeFileAtomic(
  file: string,
  data: string | Uint8Array,
  options: AtomicWriteOptions = {},
): string {
  const dir = dirname(file)
  const prefix = options.tempPrefix ?? `.${basename(file)}.`
  const temp = join(dir, `${prefix}${randomBytes(6).toString('hex')}${options.tempSuffix ?? '.tmp'}`)
  const mode = options.mode ?? 0o644
  const fd = openSync(temp, 'wx', mode)
  let renamed = false
  try {
    try {
      fchmodSync(fd, mode) // exact mode, whatever the umask
      const buf = typeof data === 'string' ? Buffer.from(data, 'utf8') : data
      let off = 0
      while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off)
      fsyncSync(fd)
    } finally {
      closeSync(fd)
    }
    renameSync(temp, file)
    renamed = true
    fsyncDir(dir)
  } finally {
    if (!renamed) rmSync(temp, { force: true })
  }
  return file
}
