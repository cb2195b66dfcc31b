/**
 * The wire protocol of `noa serve`, version 1, shared by the daemon and its clients (docs/serve.md
 * describes it for clients in other languages; examples/python has one).
 *
 * Newline-delimited JSON over a unix stream socket (or TCP): every message is one UTF-8 JSON
 * object on one line. A client sends `hello` first, then requests, each with an `id` of its
 * choosing (a safe integer, unique among its requests still in flight), as many at once as it
 * likes (pipelining). Each request gets exactly one final answer with its id, `ok` true with a
 * `result` or false with an `error`; streams (read, readBytes, watch) send `chunk`s with their id
 * before it. Answers come in the order requests complete, not the order they were sent, but
 * appends of one connection to one workspace are committed in the order they were sent.
 */
import { Errors, type NoaError } from '../engine/errors.js'

export const PROTOCOL_VERSION = 1

/** The socket a daemon listens on, inside the root it serves. */
export const SOCKET_NAME = 'noa.sock'
/** Held (flock) by the daemon for its life: whoever can take it knows no daemon serves the root. */
export const LOCK_NAME = 'noa.serve.lock'

export interface Limits {
  /** Longest request line, in bytes (an appendMany must fit in one). */
  maxLineBytes: number
  /** Largest entry: one entry's JSON, one replicated line, one appendToFile's data, in bytes. */
  maxEntryBytes: number
  /** Connections at once; one more is answered NOA_TOO_MANY_CONNECTIONS and closed. */
  maxConnections: number
  /** Requests one connection may have in flight before the daemon stops reading from it. */
  maxInFlight: number
  /** Streams (read, readBytes, watch) one connection may have open at once. */
  maxStreams: number
  /**
   * Request bytes in flight across all connections before the daemon stops reading new ones
   * (each request counted with 512 bytes more for its bookkeeping).
   */
  maxPendingBytes: number
  /**
   * What the daemon holds for its clients, all connections together: answers not yet taken,
   * request lines still arriving, a share for each open stream reader. Past it, new streams,
   * read-only answers and growing request lines are refused with NOA_BUSY.
   */
  maxBufferedBytes: number
  /**
   * A connection whose answers wait this long with none taken off the socket (the client reads
   * nothing) is closed with NOA_SLOW_CONSUMER, in milliseconds.
   */
  slowConsumerMs: number
  /**
   * Time a new connection has to send `hello` (a TCP peer its token), in milliseconds; then it
   * is answered NOA_PROTOCOL and closed.
   */
  helloTimeoutMs: number
}

export const DEFAULT_LIMITS: Readonly<Limits> = {
  maxLineBytes: 8 << 20,
  maxEntryBytes: 1 << 20,
  maxConnections: 1024,
  maxInFlight: 4096,
  maxStreams: 64,
  maxPendingBytes: 64 << 20,
  maxBufferedBytes: 256 << 20,
  slowConsumerMs: 30_000,
  helloTimeoutMs: 10_000,
}

/** What an unauthenticated peer may send before `hello` is accepted. */
export const HELLO_MAX_LINE = 64 << 10

/** Chunks a stream may send ahead of `more` unless the request asks for another window. */
export const DEFAULT_WINDOW = 16
export const MAX_WINDOW = 256
/** A stream chunk holds at most this many entries, or about this many bytes. */
export const CHUNK_ENTRIES = 512
export const CHUNK_BYTES = 256 << 10

export const OPS = [
  'hello',
  'append',
  'appendMany',
  'storeAppend',
  'appendAtomic',
  'appendReplicated',
  'appendToFile',
  'releaseFile',
  'read',
  'readBytes',
  'watch',
  'verify',
  'workspaces',
  'recover',
  'openWorkspace',
  'release',
  'lastSeq',
  'status',
  'serverStatus',
  'more',
  'cancel',
] as const
export type Op = (typeof OPS)[number]

export const STREAM_OPS: ReadonlySet<string> = new Set(['read', 'readBytes', 'watch'])
/** Control messages: no id of their own and no answer; `ref` names the request they act on. */
export const CONTROL_OPS: ReadonlySet<string> = new Set(['more', 'cancel'])

/** What a request line holds once parsed: its id, op and the op's own fields. */
export interface Request {
  id: number
  op: string
  [field: string]: unknown
}

export interface WireError {
  name?: string
  code?: string
  message: string
  details?: Record<string, unknown>
  errno?: number
  syscall?: string
  path?: string
}

export function protocolError(message: string, details: Record<string, unknown> = {}): NoaError {
  return Errors.PROTOCOL(message, details)
}

/** The fields every request has, checked before anything else happens. */
export function parseRequest(line: string): Request {
  let msg: unknown
  try {
    msg = JSON.parse(line)
  } catch (err) {
    throw protocolError(`a request line is not JSON: ${(err as Error).message}`)
  }
  if (typeof msg !== 'object' || msg === null || Array.isArray(msg)) {
    throw protocolError('a request must be a JSON object')
  }
  const m = msg as Record<string, unknown>
  if (typeof m.op !== 'string') throw protocolError('a request needs "op", a string')
  if (!(OPS as readonly string[]).includes(m.op)) {
    throw protocolError(`unknown op ${JSON.stringify(m.op.slice(0, 40))} (known: ${OPS.join(', ')})`)
  }
  if (CONTROL_OPS.has(m.op)) {
    if (!isId(m.ref)) throw protocolError(`${m.op} needs "ref", the id of the request it acts on`)
    return { ...m, id: -1, op: m.op }
  }
  if (!isId(m.id)) throw protocolError(`${m.op} needs "id", an integer from 0 to 2^53-1`)
  return m as Request
}

export function isId(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0
}

/** Byte length of a string as UTF-8 (what the limits count). */
export function utf8Bytes(s: string): number {
  return Buffer.byteLength(s, 'utf8')
}

export function tooLarge(what: string, bytes: number, max: number, flag: string): NoaError {
  return Errors.TOO_LARGE(
    `${what} is ${bytes} bytes, over the daemon's limit of ${max} bytes (noa serve ${flag})`,
    { bytes, limit: max },
  )
}

export function badArgument(message: string): NoaError {
  return Errors.BAD_ARGUMENT(message)
}

/** A request's fields beyond id and op must be the op's own: a misspelled one is refused by name. */
export function checkFields(req: Request, known: readonly string[]): void {
  for (const key of Object.keys(req)) {
    if (key === 'id' || key === 'op' || known.includes(key)) continue
    throw Errors.BAD_ARGUMENT(
      `unknown field ${JSON.stringify(key)} in ${req.op} (known: ${known.join(', ') || 'none'})`,
      { field: key },
    )
  }
}

export function bool(v: unknown, what: string): boolean {
  if (typeof v !== 'boolean') throw badArgument(`${what} must be true or false, got ${JSON.stringify(v)}`)
  return v
}

export function seqArg(v: unknown, what: string): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) {
    throw badArgument(`${what} must be an integer >= 1, got ${JSON.stringify(v)}`)
  }
  return v
}
