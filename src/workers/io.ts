/**
 * The I/O layer an owner worker writes through: the addon, plus the few file operations the
 * journal's life needs (create, zero-fill, rename, unlink). A test can name a module
 * (`AgentLog.open({ ioModule })`) whose default export wraps it, to count the fdatasyncs, record
 * every operation for the crash-state explorer, or make one fail with EIO or ENOSPC.
 */
import {
  closeSync,
  constants,
  fdatasyncSync,
  openSync,
  renameSync,
  rmdirSync,
  rmSync,
  unlinkSync,
  write,
  writeSync,
} from 'node:fs'
import { openError } from '../engine/files.js'
import { type CompletionHandler, loadNative, type NativeIo } from '../engine/native.js'

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
   * Writes each file's `data` to a new file `temp` (O_CREAT|O_EXCL|O_NOFOLLOW, `mode` before the
   * umask), fdatasyncs it if `durable`, and renames it to `target` (same folder): on the addon's
   * pool, off this thread. A file whose step fails has its temp removed, and the call rejects;
   * files renamed before it stay.
   */
  placeFiles(files: readonly PlacedFile[], durable: boolean): Promise<void>
  /** placeFiles on the calling thread (blocking it): for a few files when nothing else waits. */
  placeFilesSync(files: readonly PlacedFile[], durable: boolean): void
}

export interface PlacedFile {
  temp: string
  target: string
  data: Uint8Array
  mode: number
}

export type IoWrapper = (io: LogIo, options: unknown) => LogIo | Promise<LogIo>

const ZERO_CHUNK = 1 << 20
const PLACE_SHARES = 4
const PLACE_SHARE_MIN = 16

function openChecked(path: string, flags: number, mode = 0o666): number {
  try {
    return openSync(path, flags | constants.O_NOFOLLOW | constants.O_NONBLOCK, mode)
  } catch (err) {
    throw openError(err, path)
  }
}

/**
 * The addon has one completion handler per thread, and the ids are each owner's own: with two
 * owners on one thread (two logs opened with `workers: 0`), the second handler would take the
 * first one's completions. So every job gets a thread-wide id here, routed back to its owner.
 */
type Route = (err: Error | null, logErrors?: ReadonlyArray<number | Error> | null) => void
const routes = new Map<number, Route>()
let nextRoute = 1
let routing = false

function routed(native: NativeIo, route: Route): number {
  if (!routing) {
    native.setCompletionHandler((id, err, logErrors) => {
      const r = routes.get(id)
      routes.delete(id)
      r?.(err, logErrors)
    })
    routing = true
  }
  const id = nextRoute++
  routes.set(id, route)
  return id
}

export function defaultIo(): LogIo {
  const native = loadNative()
  let handler: CompletionHandler = () => {}
  // Descriptors opened through node:fs are closed through it too: Node tracks them, and warns
  // when it hands out a number again that it never saw closed.
  const fsFds = new Set<number>()
  const owned = (id: number): number => routed(native, (err, logErrors) => handler(id, err, logErrors))
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
    setCompletionHandler(h) {
      handler = h
    },
    commit: (id, fd, data, mode) => native.commit(owned(id), fd, data, mode),
    commitRound: (id, fd, data, offset, mode, logFds, logData) =>
      native.commitRound(owned(id), fd, data, offset, mode, logFds, logData),
    placeFiles(files, durable) {
      // One pool job per share of the list (each open/write/close/rename in C, one hand-off per
      // share instead of four per file through libuv), a few shares so a large batch spreads
      // over the pool's threads.
      const shares = Math.min(PLACE_SHARES, Math.ceil(files.length / PLACE_SHARE_MIN))
      const size = Math.ceil(files.length / shares)
      const jobs: Array<Promise<void>> = []
      for (let at = 0; at < files.length; at += size) {
        const share = files.slice(at, at + size)
        let id = 0
        jobs.push(
          new Promise<void>((resolve, reject) => {
            id = routed(native, (err) =>
              err === null ? resolve() : reject(openError(err, (err as NodeJS.ErrnoException).path ?? '')),
            )
          }),
        )
        native.placeBatch(
          id,
          share.map((f) => f.temp),
          share.map((f) => f.target),
          share.map((f) => f.data),
          share.map((f) => f.mode),
          durable,
        )
      }
      // Every share settles before the call does: none is still renaming when the caller moves on.
      return Promise.allSettled(jobs).then((results) => {
        for (const r of results) if (r.status === 'rejected') throw r.reason
      })
    },
    placeFilesSync(files, durable) {
      for (const f of files) {
        let fd: number
        try {
          fd = openSync(
            f.temp,
            constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
            f.mode,
          )
        } catch (err) {
          throw openError(err, f.temp)
        }
        try {
          try {
            for (let done = 0; done < f.data.length; ) done += writeSync(fd, f.data, done)
            if (durable) fdatasyncSync(fd)
          } finally {
            closeSync(fd)
          }
          renameSync(f.temp, f.target)
        } catch (err) {
          rmSync(f.temp, { force: true })
          throw openError(err, f.target)
        }
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
