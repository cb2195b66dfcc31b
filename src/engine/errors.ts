/**
 * One error class for everything noa refuses, with stable string codes, each made by one factory
 * of `Errors` below (as hypercore's and piscina's errors are), typed with the details that code
 * always carries. System errors (EIO, ENOSPC, …) stay Node-shaped: a plain Error with `code`,
 * `errno`, `syscall` and `path`.
 */

/** Every code a NoaError carries; stable across releases (scripts match on them). */
export const NOA_ERROR_CODES = [
  'NOA_BAD_ENTRY',
  'NOA_BAD_WORKSPACE',
  'NOA_BAD_OPTION',
  'NOA_BAD_ARGUMENT',
  'NOA_WORKSPACE_LOCKED',
  'NOA_WORKSPACE_POISONED',
  'NOA_CORRUPT_LOG',
  'NOA_CORRUPT_OBJECT',
  'NOA_NOT_FOUND',
  'NOA_CLOSED',
  'NOA_WORKER_FAILED',
  'NOA_NATIVE_MISSING',
  'NOA_REPLAY',
  'NOA_CONFLICT',
  'NOA_EXISTS',
  'NOA_REPLICA_GAP',
  'NOA_REPLICATION',
  'NOA_REPLICA_DIVERGED',
  'NOA_STREAM_CONFIG',
  'NOA_BAD_TRANSCRIPT',
  'NOA_BAD_RECORD',
  'NOA_BAD_STATE',
  'NOA_BAD_ARCHIVE',
  'NOA_COMPRESS',
  'NOA_MISSING_BLOB',
  'NOA_NOT_REGULAR_FILE',
  'NOA_NOT_DIRECTORY',
  'NOA_NAME_TOO_LONG',
  'NOA_BAD_ROOT',
  'NOA_JOURNAL',
  'NOA_ABORTED',
  'NOA_SEQ_MISMATCH',
  'NOA_BAD_BOUNDARY',
  // the daemon (noa serve) and its clients
  'NOA_PROTOCOL',
  'NOA_TOO_LARGE',
  'NOA_UNAUTHORIZED',
  'NOA_TOO_MANY_CONNECTIONS',
  'NOA_SHUTTING_DOWN',
  'NOA_DAEMON_LOST',
  'NOA_DAEMON_UNAVAILABLE',
  'NOA_DAEMON_RUNNING',
  'NOA_BAD_SOCKET',
  'NOA_SLOW_CONSUMER',
  'NOA_BUSY',
  // compaction (docs/compaction.md)
  'NOA_COMPACTED',
  'NOA_NOT_COVERED',
] as const

export type NoaErrorCode = (typeof NOA_ERROR_CODES)[number]

export interface NoaErrorDetails {
  /** File the problem was found in. */
  file?: string
  /** 1-based line number in that file. */
  line?: number
  /** Byte offset in that file. */
  offset?: number
  workspace?: string
  seq?: number
  field?: string
  [key: string]: unknown
}

export class NoaError extends Error {
  override name = 'NoaError'
  readonly code: NoaErrorCode
  readonly details: NoaErrorDetails

  constructor(code: NoaErrorCode, message: string, details: NoaErrorDetails = {}, options?: ErrorOptions) {
    super(message, options)
    this.code = code
    this.details = details
  }
}

/** Details a code's errors always carry, on top of the optional ones of NoaErrorDetails. */
interface Required {
  NOA_BAD_OPTION: { field: string }
  /** `workspace` is unset for a raw file appended through the same owners. */
  NOA_WORKSPACE_LOCKED: { file: string }
  NOA_WORKSPACE_POISONED: { file: string }
  NOA_NATIVE_MISSING: { tried: string[] }
  NOA_NOT_REGULAR_FILE: { file: string }
  NOA_NOT_DIRECTORY: { file: string }
  NOA_NAME_TOO_LONG: { file: string }
  NOA_BAD_ROOT: { root: string }
  NOA_SEQ_MISMATCH: { workspace: string; lastSeq: number; expected: number }
  NOA_BAD_ARCHIVE: { reason: string }
  NOA_BAD_BOUNDARY: { ref: string; kind: 'unknown' | 'consumed' | 'invalid' }
  NOA_COMPACTED: { file: string; baseSeq: number; snapshotId: string }
  NOA_NOT_COVERED: { workspace: string }
  NOA_REPLICA_DIVERGED: { workspace: string; seqs: number[] }
}

export type DetailsOf<C extends NoaErrorCode> = C extends keyof Required
  ? NoaErrorDetails & Required[C]
  : NoaErrorDetails

type Short<C extends string> = C extends `NOA_${infer S}` ? S : never
type Factory<C extends NoaErrorCode> = C extends keyof Required
  ? (message: string, details: DetailsOf<C>, options?: ErrorOptions) => NoaError
  : (message: string, details?: DetailsOf<C>, options?: ErrorOptions) => NoaError

/** One factory per code, named as the code without its prefix: `Errors.BAD_OPTION(…)`. */
export type ErrorFactories = { [C in NoaErrorCode as Short<C>]: Factory<C> }

function factory<C extends NoaErrorCode>(code: C): Factory<C> {
  return ((message: string, details: NoaErrorDetails = {}, options?: ErrorOptions) =>
    new NoaError(code, message, details, options)) as Factory<C>
}

/** Where every NoaError is made (the constructor is for these and for `rebuildError` only). */
export const Errors: ErrorFactories = Object.freeze(
  Object.fromEntries(NOA_ERROR_CODES.map((code) => [code.slice(4), factory(code)])),
) as ErrorFactories

/**
 * The same error again under another message (and code, and more details): how a layer adds
 * what it knows (a line number, the workspace) to a refusal from the layer below, keeping it as
 * the cause.
 */
export function rewrap(
  err: NoaError,
  message: string,
  details: NoaErrorDetails = {},
  code: NoaErrorCode = err.code,
): NoaError {
  return new NoaError(code, message, { ...err.details, ...details }, { cause: err })
}

export function isNoaError(err: unknown, code?: NoaErrorCode): err is NoaError {
  return err instanceof NoaError && (code === undefined || err.code === code)
}

/** What crosses a MessagePort: subclasses and own properties do not survive structured clone. */
export interface SerializedError {
  name: string
  message: string
  code?: string
  errno?: number
  syscall?: string
  path?: string
  details?: NoaErrorDetails
  noa: boolean
}

export function serializeError(err: unknown): SerializedError {
  if (err instanceof NoaError) {
    return { name: err.name, message: err.message, code: err.code, details: err.details, noa: true }
  }
  if (err instanceof Error) {
    const e = err as NodeJS.ErrnoException
    const out: SerializedError = { name: e.name, message: e.message, noa: false }
    if (typeof e.code === 'string') out.code = e.code
    if (typeof e.errno === 'number') out.errno = e.errno
    if (typeof e.syscall === 'string') out.syscall = e.syscall
    if (typeof e.path === 'string') out.path = e.path
    return out
  }
  return { name: 'Error', message: String(err), noa: false }
}

export function deserializeError(s: SerializedError): Error {
  if (s.noa) return new NoaError(s.code as NoaErrorCode, s.message, s.details ?? {})
  const e = new Error(s.message) as NodeJS.ErrnoException
  if (s.name !== 'Error') e.name = s.name
  if (s.code !== undefined) e.code = s.code
  if (s.errno !== undefined) e.errno = s.errno
  if (s.syscall !== undefined) e.syscall = s.syscall
  if (s.path !== undefined) e.path = s.path
  return e
}

/** Adds the path to a system error raised on an fd (the addon does not know the file name). */
export function withPath(err: unknown, path: string): unknown {
  if (err instanceof Error && !(err instanceof NoaError)) {
    const e = err as NodeJS.ErrnoException
    if (e.path === undefined) {
      e.path = path
      e.message = `${e.message} '${path}'`
    }
  }
  return err
}
