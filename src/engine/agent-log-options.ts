/**
 * The options of an AgentLog and of one append, checked before anything is started or sent (the
 * daemon's client checks an append's with the same functions), with the defaults they take,
 * and the errors of an append that was cancelled or came after close.
 */
import { availableParallelism } from 'node:os'
import type { ObjectChecks } from './checks.js'
import { openFileBudget } from './descriptors.js'
import { Errors, type NoaError } from './errors.js'
import { filePathProblem } from './files.js'
import { MAX_JOURNAL_SIZE } from './journal-format.js'
import { resolveRoot } from './logs.js'
import { checkOptionKeys } from './options.js'
import type { Durability, FileWrite } from './protocol.js'
import type { ReplicateOptions } from './replicating.js'

export interface AgentLogOptions {
  /** Root folder; logs go to `<root>/agent-logs/`. Default `$NOA_ROOT` or `./.noa`. */
  root?: string
  /**
   * Owner worker threads. Default: 2, or 1 on a single core. 0: one owner runs in the caller's
   * thread (the lowest cost for a process that commits little, such as a CLI command).
   */
  workers?: number
  /**
   * Open log files kept across all workers before idle ones are closed. Default 16384; never more
   * than the process's descriptor limit leaves room for (one per workspace, a quarter of
   * `ulimit -n` kept for the host).
   */
  maxOpenFiles?: number
  /** fdatasyncs each worker may have in flight (threads in the addon's pool). Default 64. */
  syncThreads?: number
  /** Run a lone commit on the worker thread when nothing else is in flight. Default true. */
  inlineCommit?: boolean
  /**
   * With workers: a workspace appended to while nothing else of this AgentLog is in flight (one
   * agent awaiting each append) is owned by an owner in the caller's thread, which commits a
   * lone append there (as `workers: 0` does: no hop to a worker and back); as soon as appends
   * overlap, each workspace moves to its worker (its log made durable and closed, then opened
   * there), and back after a quiet spell. Default true; false keeps every workspace on its worker.
   */
  loneInThread?: boolean
  /**
   * With `loneInThread`: how long (ms) after appends last overlapped a workspace appended to
   * alone moves back to the caller's thread. A move costs its log an fdatasync, a close and an
   * open (~0.3 ms here), so a workspace moves at most a few times a second. Default 500.
   */
  laneQuietMs?: number
  /**
   * `journal` (default): each worker commits everything queued for all its files with one write
   * and one fdatasync of its preallocated journal, and makes the files themselves durable at
   * checkpoints. `fdatasync`: each commit flushes its own file (the seed's literal behaviour):
   * every byte is written once, where the journal writes it twice, for a disk that wears.
   */
  durability?: Durability
  /**
   * What the object store above says about blobs and records (the store's `ObjectStore`
   * implements it). Without it, snapshot and merge entries are refused from callers (only the
   * store writes them) and `checkBlobs` cannot be used.
   */
  objects?: ObjectChecks
  /** Default of the append option `checkBlobs`: refuse writes whose blob is not stored. Default false. */
  checkBlobs?: boolean
  /** Size of each worker's commit journal in bytes (a multiple of 4096). Default 16 MiB. */
  journalSize?: number
  /**
   * Bytes of entries handed to append and not yet acknowledged, past which a new append waits
   * for earlier ones to commit before it is queued (backpressure). Default 8 MiB (some 50,000
   * entries in flight: ample for group commit across thousands of workspaces).
   */
  maxPendingBytes?: number
  /** Test seam: module URL whose default export wraps the I/O layer of each worker. */
  ioModule?: string
  ioOptions?: unknown
  /**
   * Publish every append to a JetStream stream (docs/replication.md, "Replicated acks"): with
   * `durability: 'replicated'` (the default) an append resolves only once the stream holds it.
   * Needs the replicate layer loaded (the package entry `noa` and `noa/replicate` load it).
   */
  replicate?: ReplicateOptions
}

const OPTION_KEYS = new Set([
  'root',
  'workers',
  'maxOpenFiles',
  'syncThreads',
  'inlineCommit',
  'loneInThread',
  'laneQuietMs',
  'durability',
  'objects',
  'checkBlobs',
  'journalSize',
  'maxPendingBytes',
  'ioModule',
  'ioOptions',
  'replicate',
])

/** Options of one append (append, appendMany). */
export interface AppendOptions {
  /**
   * Compare-and-append: commit only if the workspace's last seq, when the commit takes these
   * entries, is this; otherwise fail with NOA_SEQ_MISMATCH carrying the current last seq
   * (`details.lastSeq`). How a client retries after a lost acknowledgement without duplicating.
   */
  ifLastSeq?: number
  /**
   * Cancels the append while it is not yet taken into a commit (it then fails with
   * NOA_ABORTED); once taken, it commits and resolves as usual.
   */
  signal?: AbortSignal
  /**
   * Refuse a `write` whose blob is not stored (NOA_MISSING_BLOB), checked through the log's
   * `objects`. Default: the log's `checkBlobs` option (false unless set). Hosts that upload
   * blobs after appending leave it off.
   */
  checkBlobs?: boolean
  /**
   * Whole files to write beside the entries, each at `path` relative to the root (below no
   * folder of the engine's own: agent-logs, journal, checksums): written to a temp file and
   * renamed into place before the entries are, durable once the append resolves (in the commit
   * journal with the entries, or fdatasynced with their folder first). What a content-addressed
   * store needs so that an entry never names an object a crash could lose, at the cost of one
   * sync for both. A failed append may leave them written. With `packed`, a file may instead be
   * appended to an object log of the owner's (`object-logs/`, see engine/object-log.ts), much
   * cheaper than a file of its own; a reader then finds it there by its path.
   */
  files?: ReadonlyArray<{ path: string; data: Uint8Array; readOnly?: boolean; packed?: boolean }>
}

export function optionError(name: string, rule: string, value: unknown): NoaError {
  return Errors.BAD_OPTION(`option ${name} ${rule}, got ${JSON.stringify(value)}`, {
    field: name,
  })
}

function positiveInt(
  options: AgentLogOptions,
  name: keyof AgentLogOptions,
  fallback: number,
  max: number,
): number {
  const v = options[name]
  if (v === undefined) return fallback
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > max) {
    throw optionError(name, `must be an integer from 1 to ${max}`, v)
  }
  return v
}

export type CheckedOptions = ReturnType<typeof checkOptions>

export function checkOptions(options: AgentLogOptions) {
  checkOptionKeys(options, OPTION_KEYS)
  if (options.root !== undefined && (typeof options.root !== 'string' || options.root === '')) {
    throw optionError('root', 'must be a non-empty string', options.root)
  }
  const durability = options.durability ?? 'journal'
  if ((durability as string) === 'syncfs') {
    // Measured beside the journal on 100 and 1,000 workspaces, a syncfs per round lost (46k
    // against 73k entries/s, 63k against 92k) while it flushed every program's dirty pages on
    // the disk; the mode is gone, and a caller that asks for it is told what replaced it.
    throw optionError(
      'durability',
      "'syncfs' was retired: the commit journal (the default, 'journal') syncs once per round for every workspace and is faster",
      durability,
    )
  }
  if (durability !== 'journal' && durability !== 'fdatasync') {
    throw optionError('durability', "must be 'journal' or 'fdatasync'", durability)
  }
  const journalSize = options.journalSize ?? DEFAULT_JOURNAL_SIZE
  if (
    typeof journalSize !== 'number' ||
    !Number.isSafeInteger(journalSize) ||
    journalSize < MIN_JOURNAL_SIZE ||
    journalSize > MAX_JOURNAL_SIZE ||
    journalSize % 4096 !== 0
  ) {
    throw optionError(
      'journalSize',
      `must be a multiple of 4096 from ${MIN_JOURNAL_SIZE} to ${MAX_JOURNAL_SIZE}`,
      journalSize,
    )
  }
  if (options.inlineCommit !== undefined && typeof options.inlineCommit !== 'boolean') {
    throw optionError('inlineCommit', 'must be a boolean', options.inlineCommit)
  }
  if (options.loneInThread !== undefined && typeof options.loneInThread !== 'boolean') {
    throw optionError('loneInThread', 'must be a boolean', options.loneInThread)
  }
  const objects = options.objects
  if (
    objects !== undefined &&
    (typeof objects !== 'object' ||
      objects === null ||
      typeof objects.hasBlob !== 'function' ||
      typeof objects.checkRecords !== 'function')
  ) {
    throw Errors.BAD_OPTION(
      'option objects must have hasBlob(hash) and checkRecords(workspace, entries, where) (an ObjectStore does)',
      { field: 'objects' },
    )
  }
  if (options.checkBlobs !== undefined && typeof options.checkBlobs !== 'boolean') {
    throw optionError('checkBlobs', 'must be a boolean', options.checkBlobs)
  }
  if (options.checkBlobs && !objects) {
    throw Errors.BAD_OPTION('option checkBlobs needs option objects (e.g. new ObjectStore(root))', {
      field: 'checkBlobs',
    })
  }
  if (options.ioModule !== undefined && typeof options.ioModule !== 'string') {
    throw optionError('ioModule', 'must be a module URL string', options.ioModule)
  }
  const workers =
    options.workers === 0 ? 0 : positiveInt(options, 'workers', Math.min(2, availableParallelism()), 256)
  return {
    root: resolveRoot(options.root),
    workers,
    // Within what the process's descriptor limit leaves room for (descriptors.ts).
    maxOpenFiles: Math.min(
      positiveInt(options, 'maxOpenFiles', DEFAULT_MAX_OPEN_FILES, 1 << 20),
      openFileBudget(),
    ),
    syncThreads: positiveInt(options, 'syncThreads', 64, 1024),
    inlineCommit: options.inlineCommit ?? true,
    loneInThread: workers > 0 && (options.loneInThread ?? true),
    laneQuietMs: options.laneQuietMs === 0 ? 0 : positiveInt(options, 'laneQuietMs', 500, 3_600_000),
    durability: durability as Durability,
    objects,
    checkBlobs: options.checkBlobs ?? false,
    journalSize,
    maxPendingBytes: positiveInt(options, 'maxPendingBytes', 8 << 20, Number.MAX_SAFE_INTEGER),
  }
}

export const DEFAULT_JOURNAL_SIZE = 16 << 20

/**
 * Open logs kept by default (within the descriptor limit): enough that 10,000 live workspaces
 * are never closed and opened again between appends (with 4,096, 10,000 workspaces appending in
 * turn made every append reopen a log: 3.6k entries/s against 49.6k with all of them open, in
 * one run of a scratch loop here). An open workspace costs one descriptor and ~10 KB.
 */
const DEFAULT_MAX_OPEN_FILES = 16384

const MIN_JOURNAL_SIZE = 256 << 10

/** Checks an append's options (also the daemon's client, before anything is sent); → ifLastSeq or -1. */
export function checkAppendOptions(options: AppendOptions | undefined): number {
  if (options === undefined) return -1
  checkOptionKeys(options, APPEND_OPTION_KEYS, 'append')
  const { ifLastSeq, signal } = options
  if (ifLastSeq !== undefined && (!Number.isSafeInteger(ifLastSeq) || ifLastSeq < 0)) {
    throw optionError('ifLastSeq', 'must be an integer >= 0', ifLastSeq)
  }
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw optionError('signal', 'must be an AbortSignal', typeof signal)
  }
  return ifLastSeq ?? -1
}

export const APPEND_OPTION_KEYS = new Set(['ifLastSeq', 'signal', 'checkBlobs', 'files'])

/** An append's `files`, checked: each a relative path that stays below the root. */
export function checkFiles(files: AppendOptions['files']): FileWrite[] | null {
  if (files === undefined) return null
  if (!Array.isArray(files)) throw optionError('files', 'must be an array of { path, data }', typeof files)
  if (files.length === 0) return null
  const seen = new Set<string>()
  return files.map((f, i) => {
    const where = `files[${i}]`
    if (typeof f !== 'object' || f === null)
      throw optionError('files', `${where} must be { path, data }`, typeof f)
    const { path, data, readOnly, packed } = f as {
      path: unknown
      data: unknown
      readOnly?: unknown
      packed?: unknown
    }
    if (typeof path !== 'string') throw optionError('files', `${where}.path must be a string`, typeof path)
    if (!(data instanceof Uint8Array)) {
      throw optionError('files', `${where}.data must be a Uint8Array (a Buffer)`, typeof data)
    }
    if (readOnly !== undefined && typeof readOnly !== 'boolean') {
      throw optionError('files', `${where}.readOnly must be a boolean`, typeof readOnly)
    }
    if (packed !== undefined && typeof packed !== 'boolean') {
      throw optionError('files', `${where}.packed must be a boolean`, typeof packed)
    }
    const bad = (why: string) =>
      Errors.BAD_OPTION(`append option files: ${where}.path ${JSON.stringify(path)} ${why}`, {
        field: 'files',
        path,
      })
    const problem = filePathProblem(path)
    if (problem !== null) throw bad(problem)
    if (seen.has(path)) throw bad('is named twice')
    seen.add(path)
    // A copy the size of the file: what the caller does with its buffer later does not matter,
    // and the message to the owner carries these bytes, not a whole pooled slab behind a view.
    const out: FileWrite = { path, data: new Uint8Array(data) }
    if (readOnly) out.readOnly = true
    if (packed) out.packed = true
    return out
  })
}

export function abortedError(workspace: string, signal: AbortSignal): NoaError {
  return Errors.ABORTED(
    `append to workspace ${workspace} was cancelled before it was committed`,
    { workspace },
    { cause: signal.reason },
  )
}

export function closedError(): NoaError {
  return Errors.CLOSED('the AgentLog is closed')
}
