/**
 * Whole-file replacement that survives a crash at any point: the old content or the new one,
 * never a mix. Temp file in the same directory, write, fsync, rename over the target, fsync the
 * directory (so the rename itself is durable). Used for objects, memory notes, state files.
 *
 * The pieces are exported for writers whose target is known only at the end (a blob streamed in
 * is named by its hash) or that write many files and want their fsyncs in flight together.
 */

import { randomBytes } from 'node:crypto'
import { closeSync, fchmodSync, fsync, fsyncSync, openSync, renameSync, rmSync, writeSync } from 'node:fs'
import { type FileHandle, open, rm } from 'node:fs/promises'
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

/** fsync on libuv's pool: the only call here slow enough to keep off the event loop. */
function fsyncAsync(fd: number): Promise<void> {
  return new Promise((resolve, reject) => fsync(fd, (err) => (err ? reject(err) : resolve())))
}

/** fsync several directories at once (the fsyncs run in parallel on libuv's pool). */
export async function fsyncDirs(dirs: Iterable<string>): Promise<void> {
  await Promise.all(
    [...dirs].map(async (dir) => {
      const fd = openSync(dir, 'r')
      try {
        await fsyncAsync(fd)
      } finally {
        closeSync(fd)
      }
    }),
  )
}

/** A fresh name for a temp file in `dir` (random, so concurrent writers never share one). */
export function tempPath(dir: string, prefix: string, suffix = '.tmp'): string {
  return join(dir, `${prefix}${randomBytes(6).toString('hex')}${suffix}`)
}

/** Writes `data` to `file` atomically and durably; returns the path written. */
export function writeFileAtomic(
  file: string,
  data: string | Uint8Array,
  options: AtomicWriteOptions = {},
): string {
  const dir = dirname(file)
  const temp = tempPath(dir, options.tempPrefix ?? `.${basename(file)}.`, options.tempSuffix)
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

/**
 * A temp file filled piece by piece (asynchronously), fsynced and closed by `finish`. The caller
 * then renames it into place (`renameSync` + `fsyncDir` of the target's directory) or drops it
 * with `abort`. Until the rename, a crash leaves only a stray temp file.
 */
export class TempFile {
  private constructor(
    readonly path: string,
    private handle: FileHandle | null,
  ) {}

  static async create(dir: string, options: AtomicWriteOptions = {}): Promise<TempFile> {
    const path = tempPath(dir, options.tempPrefix ?? '.tmp-', options.tempSuffix)
    const mode = options.mode ?? 0o644
    const handle = await open(path, 'wx', mode)
    try {
      await handle.chmod(mode)
    } catch (err) {
      await handle.close()
      await rm(path, { force: true })
      throw err
    }
    return new TempFile(path, handle)
  }

  async write(data: Uint8Array): Promise<void> {
    if (!this.handle) throw new Error(`temp file ${this.path} is already closed`)
    let off = 0
    while (off < data.length) {
      const { bytesWritten } = await this.handle.write(data, off, data.length - off)
      off += bytesWritten
    }
  }

  /** fsync and close: the bytes are durable, the name is not yet. */
  async finish(): Promise<void> {
    const handle = this.handle
    if (!handle) return
    this.handle = null
    try {
      await handle.sync()
    } finally {
      await handle.close()
    }
  }

  /** Closes (if open) and removes the temp file. */
  async abort(): Promise<void> {
    const handle = this.handle
    this.handle = null
    if (handle) await handle.close().catch(() => {})
    await rm(this.path, { force: true })
  }
}

/**
 * Writes `data` to a new temp file in `dir`, fsynced and closed; returns its path. Open and write
 * are synchronous (they only reach the page cache); the fsync runs on libuv's pool, so several
 * of these at once have their fsyncs in flight together.
 */
export async function writeTempFile(
  dir: string,
  data: Uint8Array,
  options: AtomicWriteOptions = {},
): Promise<string> {
  const temp = tempPath(dir, options.tempPrefix ?? '.tmp-', options.tempSuffix)
  const mode = options.mode ?? 0o644
  const fd = openSync(temp, 'wx', mode)
  let ok = false
  try {
    fchmodSync(fd, mode) // exact mode, whatever the umask
    let off = 0
    while (off < data.length) off += writeSync(fd, data, off, data.length - off)
    await fsyncAsync(fd)
    ok = true
  } finally {
    closeSync(fd)
    if (!ok) rmSync(temp, { force: true })
  }
  return temp
}
