/**
 * Every message between the caller's thread and an owner worker, in one place.
 * One MessagePort per worker carries both directions, so order is preserved per worker.
 */
import type { MessagePort } from 'node:worker_threads'
import type { SerializedError } from './errors.js'

export type Durability = 'fdatasync' | 'syncfs'

/** The piscina task that turns a pool thread into an owner for the pool's life. */
export interface OwnerInit {
  port: MessagePort
  index: number
  /** The root folder (`logDir` is below it; folders below the root are checked, not followed). */
  root: string
  logDir: string
  /** Open files this worker may keep before it closes idle ones. */
  maxOpenFiles: number
  /** Threads in the addon's pool of this worker: how many fdatasyncs may be in flight. */
  syncThreads: number
  /** Run a lone commit on the worker thread itself when nothing else is in flight. */
  inlineCommit: boolean
  durability: Durability
  /** Test seam: a module whose default export wraps the I/O layer (see src/workers/io.ts). */
  ioModule?: string
  ioOptions?: unknown
}

/**
 * Appends, flattened so structured clone handles a few flat arrays instead of many objects.
 * Request i targets `ws[i]` with `counts[i]` bodies taken in order from `bodies`.
 */
export interface AppendMsg {
  t: 'append'
  ids: number[]
  ws: string[]
  counts: number[]
  bodies: string[]
}

export interface RawAppendOptions {
  /** Take an exclusive flock on the file while it is open (a second process is refused). */
  lock: boolean
  /** Cut a partial last line when the file is opened, so new lines never glue onto it. */
  repairTail: boolean
}

/** Pre-serialized bytes for a file outside the workspace logs (transcripts). */
export interface RawAppendMsg {
  t: 'raw'
  id: number
  file: string
  data: string
  options: RawAppendOptions
}

/** Complete lines copied from another log (replication): written verbatim, seq and ts kept. */
export interface ReplicaMsg {
  t: 'replica'
  id: number
  ws: string
  /** Each ends with `\n`. */
  lines: string[]
  firstSeq: number
  firstTs: number
  lastSeq: number
  lastTs: number
}

export interface OpenMsg {
  t: 'open'
  id: number
  ws: string
}

export interface ReleaseMsg {
  t: 'release'
  id: number
  /** A workspace name, or an absolute file path for raw files. */
  target: string
}

export interface StatusMsg {
  t: 'status'
  id: number
}

export interface CloseMsg {
  t: 'close'
  id: number
}

export type ToOwner = AppendMsg | RawAppendMsg | ReplicaMsg | OpenMsg | ReleaseMsg | StatusMsg | CloseMsg

/** Triples (request id, first seq, first ts); a request's k entries got seq..seq+k-1, ts..ts+k-1. */
export interface AcksMsg {
  t: 'acks'
  data: Float64Array
}

export interface FailMsg {
  t: 'fail'
  ids: number[]
  error: SerializedError
}

export interface ReplyMsg {
  t: 'reply'
  id: number
  value?: unknown
  error?: SerializedError
}

export type FromOwner = AcksMsg | FailMsg | ReplyMsg

/** What opening a workspace found and did (tail recovery). */
export interface OpenReport {
  workspace: string
  file: string
  created: boolean
  /** Bytes of a partial last line that were cut. */
  truncatedBytes: number
  /** Length of the log after recovery. */
  size: number
  lastSeq: number
  lastTs: number
}

export interface OwnerStatus {
  index: number
  open: number
  workspaces: string[]
  rawFiles: string[]
  commits: number
  entries: number
  inlineCommits: number
  pool: { threads: number; idle: number; maxThreads: number; queued: number; pending: number }
}
