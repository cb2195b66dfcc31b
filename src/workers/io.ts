/**
 * The I/O layer an owner worker writes through: the addon, plus the few file operations the
 * journal's life needs (create, zero-fill, rename, unlink). A test can name a module
 * (`AgentLog.open({ ioModule })`) whose default export wraps it, to count the fdatasyncs, record
 * every operation for the crash-state explorer, or make one fail with EIO or ENOSPC.
 */
import { closeSync, constants, openSync, renameSync, rmdirSync, unlinkSync, write } from 'node:fs'
import { type FileHandle, default as fsp } from 'node:fs/promises'
import { openError } from '../engine/files.js'
import { loadNative, type NativeIo } from '../engine/native.js'

export interface LogIo extends NativeIo {
  /** A new file, O_RDWR|O_CREAT|O_EXCL|O_NOFOLLOW, `mode` (default 0666) before the umask → fd. */
  createFile(path: string, mode?: number): number
  /** A descriptor for positional writes into an existing regular file (O_RDWR, never O_APPEND). */
  openPositional(path: string): number
  /** A read-only descriptor of an existing regular file (to fdatasync it). */
  openRead(path: string): number
  /** A folder's descriptor, O_RDONLY|O_DIRECTORY|O_NOFOLLOW (to fsync it on the pool, or syncfs its file system). */
  openDir(path: string): number
  /** Writes zeros over [offset, offset + length) (on libuv's pool: it must not stall the worker). */
  zeroFill(fd: number, offset: number, length: number): Promise<void>
  rename(from: string, to: string): void
  unlink(path: string): void
  /** Removes an empty folder; false when it is not empty. */
  rmdir(path: string): boolean
  /**
   * On libuv's pool: writes `data` to a new file `temp` (O_CREAT|O_EXCL|O_NOFOLLOW, `mode`
   * before the umask), fdatasyncs it if `durable`, and renames it to `target` (same folder).
   * The temp file is removed if any step fails.
   */
  placeFile(temp: string, target: string, data: Uint8Array, mode: number, durable: boolean): Promise<void>
}

export type IoWrapper = (io: LogIo, options: unknown) => LogIo | Promise<LogIo>

const ZERO_CHUNK = 1 << 20

function openChecked(path: string, flags: number, mode = 0o666): number {
  try {
    return openSync(path, flags | constants.O_NOFOLLOW | constants.O_NONBLOCK, mode)
  } catch (err) {
    throw openError(err, path)
  }
}

export function defaultIo(): LogIo {
  const native = loadNative()
  // Descriptors opened through node:fs are closed through it too: Node tracks them, and warns
  // when it hands out a number again that it never saw closed.
  const fsFds = new Set<number>()
  const open = (path: string, flags: number, mode?: number) => {
    const fd = openChecked(path, flags, mode)
    fsFds.add(fd)
    return fd
  }
  return {
    ...native,
    createFile: (path, mode) => open(path, constants.O_RDWR | constants.O_CREAT | constants.O_EXCL, mode),
    openPositional: (path) => open(path, constants.O_RDWR),
    openRead: (path) => open(path, constants.O_RDONLY),
    openDir: (path) => open(path, constants.O_RDONLY | constants.O_DIRECTORY),
    close(fd) {
      if (fsFds.delete(fd)) closeSync(fd)
      else native.close(fd)
    },
    async zeroFill(fd, offset, length) {
      const zeros = Buffer.alloc(Math.min(ZERO_CHUNK, length))
      for (let done = 0; done < length; done += zeros.length) {
        const len = Math.min(zeros.length, length - done)
        await new Promise<void>((resolve, reject) =>
          write(fd, zeros, 0, len, offset + done, (err) => (err ? reject(err) : resolve())),
        )
      }
    },
    rename: (from, to) => renameSync(from, to),
    async placeFile(temp, target, data, mode, durable) {
      let handle: FileHandle
      try {
        handle = await fsp.open(
          temp,
          constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
          mode,
        )
      } catch (err) {
        throw openError(err, temp)
      }
      try {
        try {
          await handle.writeFile(data)
          if (durable) await handle.datasync()
        } finally {
          await handle.close()
        }
        await fsp.rename(temp, target)
      } catch (err) {
        await fsp.rm(temp, { force: true })
        throw openError(err, target)
      }
    },
    unlink: (path) => unlinkSync(path),
    rmdir(path) {
      try {
        rmdirSync(path)
        return true
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code
        if (code === 'ENOTEMPTY' || code === 'EEXIST' || code === 'ENOENT') return false
        throw err
      }
    },
  }
}

export async function loadIo(ioModule: string | undefined, options: unknown): Promise<LogIo> {
  const io = defaultIo()
  if (ioModule === undefined) return io
  const mod = (await import(ioModule)) as { default?: IoWrapper }
  if (typeof mod.default !== 'function') {
    throw new TypeError(`ioModule ${ioModule} must export a default function (io, options) => io`)
  }
  return mod.default(io, options)
}
