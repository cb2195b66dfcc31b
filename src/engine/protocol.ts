/**
 * Every message between the caller's thread and an owner worker, in one place.
 * One MessagePort per worker carries both directions, so order is preserved per worker.
 */
import type { MessagePort } from 'node:worker_threads'
import type { CompactPlan } from './compact.js'
import type { SerializedError } from './errors.js'
import type { QuarantinedJournal } from './journal-recovery.js'
import type { LocalPort } from './local-port.js'

export type Durability = 'journal' | 'fdatasync'

/** The piscina task that turns a pool thread into an owner for the pool's life. */
export interface OwnerInit {
  /** A worker's end of its MessageChannel, or an in-thread owner's LocalPort. */
  port: MessagePort | LocalPort
  /**
   * One counter, in memory shared with the caller's thread: the owner adds 1 to it before it
   * closes any descriptor, and each ack carries its value at the commit (see LOG_HELD).
   */
  closes: Int32Array
  /** The per-phase stamps of `npm run bench` (NOA_PHASES=1, see phases.ts); absent otherwise. */
  phases?: Float64Array
  /** A worker owner's ack slot (ACK_SLOT), shared with the caller's thread; absent in its thread. */
  ackSlot?: SharedArrayBuffer
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
  /**
   * After an inline commit, how long (µs) the worker polls its port for the next request before
   * it goes back to sleep in its event loop; 0 for an in-thread owner (it would block its caller).
   */
  spinMicros: number
  durability: Durability
  /** Journal durability: the journal's size in bytes, and a name unique to this AgentLog. */
  journalSize: number
  journalName: string
  /**
   * Where the worker registers the descriptors it holds (-1: free slot), so that if its thread
   * dies the caller's thread can close them (they hold locks). Null for an in-thread owner.
   */
  fds: Int32Array | null
  /** Test seam: a module whose default export wraps the I/O layer (see src/workers/io.ts). */
  ioModule?: string
  ioOptions?: unknown
}

/** A whole file an append writes beside its entries (AppendOptions.files). */
export interface FileWrite {
  /** Relative to the root, checked (checkFilePath). */
  path: string
  data: Uint8Array
  /** Made read-only (write bits cleared) before it is renamed into place. */
  readOnly?: boolean
  /** May be appended to the owner's object log instead (engine/object-log.ts). */
  packed?: boolean
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
  /** Per request, the last seq it expects (compare-and-append) or -1; absent when none does. */
  expects?: number[]
  /** Per request, the files it writes (or null); absent when none does. */
  files?: Array<FileWrite[] | null>
  /**
   * A lone append whose caller waits for its ack in the shared ack slot (OwnerInit.ackSlot):
   * the tag the caller put there (see ACK_SLOT). Absent for every other message.
   */
  slot?: number
}

/**
 * The ack slot of a worker owner: memory shared with the caller's thread, through which a lone
 * append's ack comes back without a message. Int32 word 0: 0 (nobody waits), the tag of the
 * append the caller is waiting for, SLOT_ACK (the ack is in the Float64 words: id, seq, ts, log
 * end, closes, as in an 'acks' message) or SLOT_PORT (the answer, a failure, comes by the port).
 * The caller and the owner each take the word from the tag with compareExchange: whichever
 * comes first decides whether the ack goes through the slot or through the port, never both.
 */
export const ACK_SLOT = { bytes: 64, dataOffset: 8, dataWords: 5, ack: -1, port: -2 } as const

/** The tag of append id `id` in the ack slot: positive, fits an Int32. */
export function slotTag(id: number): number {
  return (id % 0x3fffffff) + 1
}

/** Asks an append back (its AbortSignal fired): dropped unless already taken into a commit. */
export interface CancelMsg {
  t: 'cancel'
  ws: string
  id: number
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
  /** The first line is a compacted origin's base record: only an empty log takes it. */
  base?: boolean
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

/**
 * Compacts a workspace's log (engine/compact.ts): once the workspace is idle, its log is made
 * complete and closed, then replaced. Replies with a CompactFileReport.
 */
export interface CompactMsg {
  t: 'compact'
  id: number
  plan: CompactPlan
}

export interface StatusMsg {
  t: 'status'
  id: number
  /** Count what idle files hold (OwnerStatus.held): a look at every field of every file. */
  held?: boolean
}

export interface CloseMsg {
  t: 'close'
  id: number
}

/**
 * appendAtomic, step 1 on every owner of one of its workspaces: once each workspace is idle,
 * assign the entries their seq and ts, and hold the workspace (nothing else is appended to it)
 * until the batch is committed or aborted. Replies with an AtomicPart per workspace.
 */
export interface PrepareMsg {
  t: 'prepare'
  id: number
  batch: number
  ws: string[]
  counts: number[]
  bodies: string[]
}

/** The bytes a prepared workspace will get, where, and what they were acknowledged as. */
export interface AtomicPart {
  ws: string
  /** The log's inode (its journal record names it). */
  ino: bigint
  offset: number
  data: Uint8Array
  firstSeq: number
  firstTs: number
  count: number
}

/**
 * Step 2, on one owner: commit its own prepared parts and the other owners' (`foreign`) in one
 * journal frame, one fdatasync; its own parts then reach their logs. Replies once durable.
 */
export interface AtomicCommitMsg {
  t: 'atomicCommit'
  id: number
  batch: number
  foreign: AtomicPart[]
}

/** Step 3, on every other owner: the batch is durable; write the prepared parts to the logs. */
export interface ApplyMsg {
  t: 'apply'
  id: number
  batch: number
}

/** Instead of step 2 or 3: give the prepared parts up (nothing was written). */
export interface AbortMsg {
  t: 'abort'
  id: number
  batch: number
}

/** To the committing owner: another owner's parts of the batch are durable in its logs. */
export interface UnpinMsg {
  t: 'unpin'
  batch: number
}

export type ToOwner =
  | AppendMsg
  | RawAppendMsg
  | ReplicaMsg
  | OpenMsg
  | ReleaseMsg
  | CompactMsg
  | StatusMsg
  | CloseMsg
  | PrepareMsg
  | AtomicCommitMsg
  | ApplyMsg
  | AbortMsg
  | UnpinMsg
  | CancelMsg

/**
 * Quintuples (request id, first seq, first ts, end, closes); a request's k entries got
 * seq..seq+k-1, ts..ts+k-1; `end`: the file's size in bytes just after the request's last line;
 * `closes`: the owner's close counter when it wrote them (the file open, its lock held).
 */
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

/**
 * From an owner that applied foreign-committed parts, once each was written and fdatasynced
 * (ok), or once one of them could not be (its only durable copy stays in the committing
 * owner's journal).
 */
export interface AppliedMsg {
  t: 'applied'
  batch: number
  ok: boolean
}

export type FromOwner = AcksMsg | FailMsg | ReplyMsg | AppliedMsg

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
  /** Files this owner keeps open at most (its share of maxOpenFiles, within the descriptor limit). */
  maxOpenFiles: number
  workspaces: string[]
  rawFiles: string[]
  commits: number
  entries: number
  inlineCommits: number
  /** Acks that went back through the ack slot to a caller waiting for its lone append. */
  slotAcks: number
  /** Journal rounds, checkpoints, and commits made straight to a file (before the journal was allocated, or too large for it). */
  rounds: number
  checkpoints: number
  directCommits: number
  /** Times a round went back to the start of the journal. */
  wraps: number
  /** Times a round found the journal full and waited for a checkpoint to free space (a sign the journal is small for the load). */
  spaceWaits: number
  /** Files written beside entries (AppendOptions.files), and the checkpoints that made many of them durable with one syncfs. */
  filesWritten: number
  fileSyncfs: number
  /** fsyncs of the log folder that made new workspaces' entries durable (one per pass that created any). */
  dirSyncs: number
  /** syncfs calls that made many logs durable at once at a checkpoint or a close, instead of an fdatasync each. */
  logSyncfs: number
  /** Workspace logs opened (each reopen after one was closed to make room counted again), and logs closed to make room for others. */
  opens: number
  evictions: number
  journal: {
    state: 'none' | 'creating' | 'ready' | 'failed'
    path: string
    size: number
    /** Live bytes (between the tail and the head). */
    used: number
    frames: number
    /** Why allocating it failed, if it did (commits then go file by file). */
    error: string | null
  } | null
  pool: { threads: number; idle: number; maxThreads: number; queued: number; pending: number }
  /** Commit journals of the root that were not trusted (moved aside, not replayed), and the workspaces they keep refused. */
  quarantined: QuarantinedJournal[]
  /** Workspaces refused since an fdatasync of theirs failed (until they are reopened), and why. */
  poisoned: { workspace: string; code: string; message: string }[]
  /**
   * What the owner keeps per file it knows (its open or busy workspaces and raw files; a closed
   * idle one is forgotten): `files`, of which `idle` (nothing queued or in flight, durable in its
   * log, no sync running), and of those `holding`, the ones still keeping a buffer or a non-empty
   * list (a journal record header, say) in their state. An idle workspace keeps a few scalars
   * only: `holding` is 0 once the checkpoint after the last append has run. Null unless asked
   * for (`status({ held: true })`): it looks at every field of every file the owner keeps
   * (~1-2 ms at 5,000 files), which a status polled in a loop would pay each time.
   */
  held: { files: number; idle: number; holding: number } | null
}
