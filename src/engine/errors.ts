/**
 * One error class for everything noa refuses, with stable string codes. System errors (EIO,
 * ENOSPC, …) stay Node-shaped: a plain Error with `code`, `errno`, `syscall` and `path`.
 */

export type NoaErrorCode =
  | 'NOA_BAD_ENTRY'
  | 'NOA_BAD_WORKSPACE'
  | 'NOA_BAD_OPTION'
  | 'NOA_BAD_ARGUMENT'
  | 'NOA_WORKSPACE_LOCKED'
  | 'NOA_WORKSPACE_POISONED'
  | 'NOA_CORRUPT_LOG'
  | 'NOA_CORRUPT_OBJECT'
  | 'NOA_NOT_FOUND'
  | 'NOA_CLOSED'
  | 'NOA_WORKER_FAILED'
  | 'NOA_NATIVE_MISSING'
  | 'NOA_REPLAY'
  | 'NOA_CONFLICT'
  | 'NOA_EXISTS'
  | 'NOA_BAD_FORMAT'
  | 'NOA_REPLICA_GAP'
  | 'NOA_REPLICATION'
  | 'NOA_STREAM_CONFIG'
  | 'NOA_BAD_TRANSCRIPT'
  | 'NOA_BAD_RECORD'
  | 'NOA_BAD_STATE'
  | 'NOA_BAD_ARCHIVE'
  | 'NOA_COMPRESS'
  | 'NOA_MISSING_BLOB'
  | 'NOA_NOT_REGULAR_FILE'
  | 'NOA_NOT_DIRECTORY'
  | 'NOA_NAME_TOO_LONG'
  | 'NOA_BAD_ROOT'
  | 'NOA_JOURNAL'
  | 'NOA_ABORTED'
  | 'NOA_SEQ_MISMATCH'
  // the daemon (noa serve) and its clients
  | 'NOA_PROTOCOL'
  | 'NOA_TOO_LARGE'
  | 'NOA_UNAUTHORIZED'
  | 'NOA_TOO_MANY_CONNECTIONS'
  | 'NOA_SHUTTING_DOWN'
  | 'NOA_DAEMON_LOST'
  | 'NOA_DAEMON_UNAVAILABLE'
  | 'NOA_DAEMON_RUNNING'
  | 'NOA_BAD_SOCKET'

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
