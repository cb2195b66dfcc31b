/**
 * One writer at a time per memory directory, across processes. Norma takes no lock; without
 * one, a process that rebuilds MEMORY.md from a scan taken before another process deleted a
 * note would publish a link to a missing file. flock is released by the kernel when a holder
 * dies, so a killed writer never leaves the directory locked.
 */
import { closeSync } from 'node:fs'
import { join } from 'node:path'
import { APPEND_CREATE, openFileSync } from '../engine/files.js'
import { loadNative } from '../engine/native.js'

/** Not `.md`, so no reader (noa's or Norma's) takes it for a note. */
export const LOCK_FILE = '.memory.lock'

/** File systems without flock: proceed unlocked rather than refuse to write at all. */
const NO_LOCKING = new Set(['ENOLCK', 'EOPNOTSUPP', 'ENOTSUP', 'ENOSYS'])

/** Runs `fn` holding the directory's exclusive lock (waiting for it). The directory must exist. */
export function withDirLock<T>(dir: string, fn: () => T): T {
  const native = loadNative()
  // Never through a symlink: a dangling `.memory.lock` link would otherwise create its target.
  const fd = openFileSync(join(dir, LOCK_FILE), APPEND_CREATE, { what: 'lock file' })
  try {
    try {
      native.flock(fd, true, false)
    } catch (err) {
      if (!NO_LOCKING.has((err as NodeJS.ErrnoException).code ?? '')) throw err
    }
    return fn()
  } finally {
    closeSync(fd) // releases the lock
  }
}
