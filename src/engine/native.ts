/**
 * The one place the addon is loaded. Lazily, so that modules which never write (readers, the
 * transcript loader, the CLI's read-only commands) work even where the addon was not built.
 * The package ships a prebuilt addon for linux-x64 (prebuilds/), so installing it needs no
 * compiler and runs no install script; elsewhere `npx node-gyp rebuild` builds one.
 */
import { existsSync, readdirSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Errors } from './errors.js'

export interface PoolStats {
  threads: number
  idle: number
  maxThreads: number
  queued: number
  pending: number
}

/** What a pool commit does after its write: 0 nothing, 1 fdatasync(fd), 2 syncfs(fd). */
export const SYNC_NONE = 0
export const SYNC_FDATASYNC = 1
export const SYNC_SYNCFS = 2
/** fsync: for a folder's descriptor, whose new entries fdatasync need not commit. */
export const SYNC_FSYNC = 3
export type SyncMode = typeof SYNC_NONE | typeof SYNC_FDATASYNC | typeof SYNC_SYNCFS | typeof SYNC_FSYNC

export type CompletionHandler = (
  id: number,
  err: Error | null,
  logErrors?: ReadonlyArray<number | Error> | null,
) => void

export interface NativeIo {
  /**
   * open(O_RDWR|O_APPEND|O_CLOEXEC|O_NOFOLLOW|O_NONBLOCK [|O_CREAT], 0666 before the umask),
   * refused unless a regular file (code ENOTREG), [+ flock(LOCK_EX|LOCK_NB)] → fd
   */
  openAppend(path: string, create: boolean, lock: boolean): number
  flock(fd: number, exclusive: boolean, nonBlocking: boolean): void
  /** Writes all of data, resuming after short writes; returns the byte count. */
  write(fd: number, data: Uint8Array | readonly Uint8Array[]): number
  /** Writes all of data at `offset` (never on an O_APPEND descriptor); returns the byte count. */
  pwrite(fd: number, data: Uint8Array | readonly Uint8Array[], offset: number): number
  fdatasync(fd: number): void
  /**
   * The size of the regular file at `path` (never through a symlink), -1 when nothing is there,
   * -2 when something else is. Asks the kernel for type and size alone, not the change time:
   * see files.ts `fileSize`.
   */
  fileSize(path: string): number
  ftruncate(fd: number, length: number): void
  fsyncDir(path: string): void
  syncfs(fd: number): void
  close(fd: number): void
  /**
   * Called on the loading thread for each finished commit: (id, error|null), and for a round a
   * third argument, null or the [index, error] pairs (flattened) of the logs whose write failed.
   */
  setCompletionHandler(handler: CompletionHandler): void
  /** On one of the addon's pool threads: write data, then sync by mode. */
  commit(id: number, fd: number, data: Uint8Array | readonly Uint8Array[], mode: SyncMode): void
  /**
   * On a pool thread: pwrite journalData at journalOffset, fdatasync it (mode 1; 0: the
   * descriptor syncs itself), then append logData[i] to logFds[i]. A journal failure fails the
   * whole round before any log is written; a log's failure is reported for that log alone.
   */
  commitRound(
    id: number,
    journalFd: number,
    journalData: readonly Uint8Array[],
    journalOffset: number,
    mode: typeof SYNC_NONE | typeof SYNC_FDATASYNC,
    logFds: readonly number[],
    logData: readonly Uint8Array[],
  ): void
  /**
   * On a pool thread, in order: write data[i] to a new file temps[i] (O_CREAT|O_EXCL|O_NOFOLLOW,
   * modes[i] before the umask), fdatasync it if `durable`, rename it to targets[i]. The first
   * failure (its error names the path) removes that file's temp and skips the rest.
   */
  placeBatch(
    id: number,
    temps: readonly string[],
    targets: readonly string[],
    data: readonly Uint8Array[],
    modes: readonly number[],
    durable: boolean,
  ): void
  setMaxThreads(n: number): void
  /** A Buffer of zeros whose memory is aligned (for O_DIRECT writes); freed with the Buffer. */
  alignedBuffer(size: number, alignment: number): Buffer
  poolStats(): PoolStats
}

/** The addon's file name, in build/ and in prebuilds/<platform>-<arch>/. */
export const NATIVE_FILE = 'noa_io.node'

/** The package's root folder (this module is dist/src/engine/native.js). */
function packageRoot(): string {
  return resolve(fileURLToPath(new URL('../../../', import.meta.url)))
}

/**
 * Where the addon can be, in the order tried (the order of node-gyp-build, which native
 * packages share):
 * 1. `NOA_NATIVE_PATH`, when set: the only place tried.
 * 2. `build/Release/noa_io.node`, then `build/Debug/noa_io.node`: a build from the sources in
 *    the package (`npx node-gyp rebuild`, where no prebuild fits or while native/ is being
 *    changed; `npm run build:prebuild` leaves one too), so a build made on purpose always wins.
 * 3. `prebuilds/<platform>-<arch>/noa_io.node`: the build that ships in the package.
 */
export function nativeCandidates(): string[] {
  const fromEnv = process.env.NOA_NATIVE_PATH
  if (fromEnv) return [fromEnv]
  const root = packageRoot()
  return [
    join(root, 'build', 'Release', NATIVE_FILE),
    join(root, 'build', 'Debug', NATIVE_FILE),
    join(root, 'prebuilds', `${process.platform}-${process.arch}`, NATIVE_FILE),
  ]
}

/** The platforms whose prebuild ships in the package, for the message when none fits. */
function shippedPrebuilds(): string[] {
  try {
    return readdirSync(join(packageRoot(), 'prebuilds')).filter((d) =>
      existsSync(join(packageRoot(), 'prebuilds', d, NATIVE_FILE)),
    )
  } catch {
    return []
  }
}

let cached: NativeIo | undefined
let loadedFrom: string | undefined

/** The file the addon was loaded from, once it is loaded. */
export function nativePath(): string | undefined {
  return loadedFrom
}

export function loadNative(): NativeIo {
  if (cached) return cached
  const tried: string[] = []
  for (const candidate of nativeCandidates()) {
    if (!existsSync(candidate)) {
      tried.push(`${candidate} (not found)`)
      continue
    }
    try {
      // What require() of a .node file does, without it: the first require from an ES module
      // sets up the CommonJS loader, 1.2-1.5 ms of a fresh process's first open (dlopen: 0.2).
      const module = { exports: {} }
      process.dlopen(module, candidate)
      cached = module.exports as NativeIo
      loadedFrom = candidate
      return cached
    } catch (err) {
      tried.push(`${candidate} (${(err as Error).message.split('\n')[0]})`)
    }
  }
  const here = `${process.platform}-${process.arch}`
  const shipped = shippedPrebuilds()
  const why = process.env.NOA_NATIVE_PATH
    ? 'NOA_NATIVE_PATH names the only place tried'
    : shipped.includes(here)
      ? `the prebuild for ${here} does not load here (see above)`
      : `no prebuild for ${here} ships with noa (${shipped.length > 0 ? `only ${shipped.join(', ')}` : 'none'})`
  throw Errors.NATIVE_MISSING(
    `noa's native addon could not be loaded: ${why}; tried:\n  ${tried.join('\n  ')}\n` +
      `Build it from source in ${packageRoot()}: \`npx node-gyp rebuild\` (needs python3, make and a C++17 compiler).`,
    { tried },
  )
}
