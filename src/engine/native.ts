/**
 * The one place the addon is loaded. Lazily, so that modules which never write (readers, the
 * transcript loader, the CLI's read-only commands) work even where the addon was not built.
 */
import { existsSync } from 'node:fs'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { NoaError } from './errors.js'

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
export type SyncMode = typeof SYNC_NONE | typeof SYNC_FDATASYNC | typeof SYNC_SYNCFS

export interface NativeIo {
  /** open(O_WRONLY|O_APPEND|O_CLOEXEC [|O_CREAT], 0644) [+ flock(LOCK_EX|LOCK_NB)] → fd */
  openAppend(path: string, create: boolean, lock: boolean): number
  flock(fd: number, exclusive: boolean, nonBlocking: boolean): void
  /** Writes all of data, resuming after short writes; returns the byte count. */
  write(fd: number, data: Uint8Array | readonly Uint8Array[]): number
  fdatasync(fd: number): void
  ftruncate(fd: number, length: number): void
  fsyncDir(path: string): void
  syncfs(fd: number): void
  close(fd: number): void
  /** Called on the loading thread with (id, error|null) for each finished commit. */
  setCompletionHandler(handler: (id: number, err: Error | null) => void): void
  /** On one of the addon's pool threads: write data, then sync by mode. */
  commit(id: number, fd: number, data: Uint8Array | readonly Uint8Array[], mode: SyncMode): void
  setMaxThreads(n: number): void
  poolStats(): PoolStats
}

/** Where the build can be, in the order tried. NOA_NATIVE_PATH, when set, is the only place tried. */
export function nativeCandidates(): string[] {
  const fromEnv = process.env.NOA_NATIVE_PATH
  if (fromEnv) return [fromEnv]
  const root = new URL('../../../', import.meta.url) // dist/src/engine → package root
  return [
    fileURLToPath(new URL('build/Release/noa_io.node', root)),
    fileURLToPath(new URL('build/Debug/noa_io.node', root)),
  ]
}

let cached: NativeIo | undefined

export function loadNative(): NativeIo {
  if (cached) return cached
  const require = createRequire(import.meta.url)
  const tried: string[] = []
  for (const candidate of nativeCandidates()) {
    if (!existsSync(candidate)) {
      tried.push(`${candidate} (not found)`)
      continue
    }
    try {
      cached = require(candidate) as NativeIo
      return cached
    } catch (err) {
      tried.push(`${candidate} (${(err as Error).message})`)
    }
  }
  throw new NoaError(
    'NOA_NATIVE_MISSING',
    `noa's native addon is not built (run \`npm install\` or \`npx node-gyp rebuild\`); tried:\n  ${tried.join('\n  ')}`,
    { tried },
  )
}
