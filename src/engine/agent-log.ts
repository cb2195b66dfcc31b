/**
 * AgentLog: the facade on the caller's thread. It validates entries, routes each workspace to
 * its owner worker (one for the pool's life), coalesces everything appended in one event-loop
 * turn into one message per worker, and resolves each append when its ack comes back, which the
 * owner sends only after the fdatasync that covers the entry.
 */

import { randomBytes } from 'node:crypto'
import { closeSync, realpathSync } from 'node:fs'
import { availableParallelism } from 'node:os'
import { basename, dirname, isAbsolute, join, resolve } from 'node:path'
import { MessageChannel, type MessagePort } from 'node:worker_threads'
import type { Piscina } from 'piscina'
import { mkdirDurable } from './atomic.js'
import { type LogBase, parseBase, readBase } from './base.js'
import { isRecordEntry, LOG_END, LOG_HELD, type ObjectChecks, STORE_APPEND } from './checks.js'
import {
  type ArchiveFormat,
  type CompactFileReport,
  type CompactPlan,
  snapshotEntries,
  writeArchive,
} from './compact.js'
import { openFileBudget } from './descriptors.js'
import {
  type Ack,
  checkSnapshotId,
  checkWorkspace,
  type Entry,
  type EntryInput,
  encodeBody,
  parseEntry,
} from './entry.js'
import { deserializeError, Errors, type NoaError } from './errors.js'
import { checkRoot, filePathProblem, isInside, statFile } from './files.js'
import { type ForwarderOf, installedForwarder, installForwarder } from './forwarding.js'
import { MAX_JOURNAL_SIZE } from './journal-format.js'
import { recoverJournals } from './journal-recovery.js'
import { LocalPort } from './local-port.js'
import {
  existingLog,
  listWorkspaces,
  logDirOf,
  readWorkspace,
  readWorkspaceBatches,
  readWorkspaceBytes,
  recoverLog,
  resolveRoot,
  verifyWorkspace,
  type WorkspaceInfo,
} from './logs.js'
import { loadNative } from './native.js'
import { checkOptionKeys } from './options.js'
import { PHASE, phaseStamps, stamp } from './phases.js'
import {
  ACK_SLOT,
  type AtomicPart,
  type Durability,
  type FileWrite,
  type FromOwner,
  type OpenReport,
  type OwnerInit,
  type OwnerStatus,
  type RawAppendOptions,
  slotTag,
  type ToOwner,
} from './protocol.js'
import { type EntryReadOptions, seekSeq } from './reader.js'
import type { VerifyOptions, VerifyReport } from './recovery.js'
import { checkWatchOptions, followLog, type WatchOptions } from './watch.js'

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
}

const OPTION_KEYS = new Set([
  'root',
  'workers',
  'maxOpenFiles',
  'syncThreads',
  'inlineCommit',
  'durability',
  'objects',
  'checkBlobs',
  'journalSize',
  'maxPendingBytes',
  'ioModule',
  'ioOptions',
])

interface Pending {
  /** Its request id, once it is queued for its owner. */
  id?: number
  resolve(value: unknown): void
  reject(err: Error): void
  /** -1: one entry (resolve an Ack); -2: raw bytes (resolve void); n ≥ 0: appendMany of n. */
  count: number
  owner: Owner
  /** Body bytes counted against maxPendingBytes until it settles. */
  bytes?: number
  /** Removes the abort listener once it settled. */
  unlisten?: () => void
  workspace?: string
  /** While it waits for room (backpressure): what it sends then. */
  bodies?: string | string[]
  expect?: number
  files?: FileWrite[] | null
}

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

interface Outbox {
  ids: number[]
  /** Per request, its ifLastSeq or -1; null while no request of this outbox has one. */
  expects: number[] | null
  ws: string[]
  counts: number[]
  bodies: string[]
  /** Per request, its files or null; null while no request of this outbox has any. */
  files: Array<FileWrite[] | null> | null
}

interface Owner {
  index: number
  /** Null until the owner is started (on first use), and again after its worker died. */
  port: MessagePort | LocalPort | null
  task: Promise<OwnerStatus> | null
  outbox: Outbox
  scheduled: boolean
  failed: Error | null
  /**
   * The descriptors the owner worker holds (registered by it in shared memory): if its thread
   * dies they are still open in this process, holding their locks, until closed from here.
   */
  fds: Int32Array | null
  /** The owner's close counter (OwnerInit.closes), kept across restarts so that it only grows. */
  closes: Int32Array
  /** Starts so far (a respawned owner gets a journal of its own name). */
  generation: number
  /** When it was last started, and how many times in a row it died young. */
  startedAt: number
  quickDeaths: number
  /** A worker owner's ack slot (ACK_SLOT): word 0, and the ack's Float64 words. Null in-thread. */
  slot: Int32Array | null
  slotData: Float64Array | null
  /** Lone appends still to go without waiting after a wait that ran out (LONE_SKIP_AFTER_MISS). */
  slotSkip: number
}

function optionError(name: string, rule: string, value: unknown): NoaError {
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

type CheckedOptions = ReturnType<typeof checkOptions>

const OWNER_MODULE = new URL('../workers/owner.js', import.meta.url).href

/** A worker owner's channel: port1 stays here, port2 goes to the worker. */
function channel(): [MessagePort, MessagePort] {
  const { port1, port2 } = new MessageChannel()
  return [port1, port2]
}

/**
 * What an in-thread owner posts, as a MessagePort would deliver it: a reply's value (an open's
 * report, a status) cloned, so that the caller owns what it gets; acks and failures are made
 * fresh for each message and pass as they are.
 */
function copyReply(msg: unknown): unknown {
  const m = msg as FromOwner
  if (m.t === 'reply' && typeof m.value === 'object' && m.value !== null) {
    return { ...m, value: structuredClone(m.value) }
  }
  return msg
}

/**
 * A serial writer's next append comes one hop after its ack. A worker that went back to sleep
 * in its event loop is woken for it by the kernel, which on a virtual machine costs tens of µs
 * (an idle vCPU is halted); polling its port for a little longer than a hop saves that wake.
 */
const SPIN_MICROS = 150

/**
 * A lone append (nothing else outstanding on the AgentLog) to a worker owner: at the end of its
 * turn the caller's thread waits for the ack in the owner's ack slot (ACK_SLOT, Atomics.wait)
 * instead of going back to its event loop, for at most this long. The message back and the wake
 * of the event loop cost a serial append about a quarter of its time (`npm run bench`'s
 * breakdown); an owner in the caller's thread (workers: 0) blocks it for the whole commit
 * anyway, as SQLite does. Past this the ack comes by the port as any other.
 */
const LONE_WAIT_MS = 2
/**
 * After a wait that ran out (a slow disk, a busy machine), this many lone appends of that owner
 * go without waiting, so that a disk slower than the wait costs the caller's thread 2 ms per 17
 * appends at most, not per append (a first append, which creates its workspace and its
 * worker's journal, is one such).
 */
const LONE_SKIP_AFTER_MISS = 16

function checkOptions(options: AgentLogOptions) {
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
    durability: durability as Durability,
    objects,
    checkBlobs: options.checkBlobs ?? false,
    journalSize,
    maxPendingBytes: positiveInt(options, 'maxPendingBytes', 8 << 20, Number.MAX_SAFE_INTEGER),
  }
}

/**
 * How `AgentLog.open` reaches a daemon (`noa serve`) serving its root: resolves with an AgentLog
 * that talks to it, or null when none serves the root. Installed by the daemon's client, a layer
 * above this one, so that the engine does not import it.
 */
export type Forwarder = ForwarderOf<AgentLog, AgentLogOptions>

/** Installs (or, with null, removes) the forwarder `AgentLog.open` asks first. */
export function setForwarder(f: Forwarder | null): void {
  installForwarder(f)
}

export const DEFAULT_JOURNAL_SIZE = 16 << 20
/**
 * Open logs kept by default (within the descriptor limit): enough that 10,000 live workspaces
 * are never closed and opened again between appends (with 4,096, 10,000 workspaces appending in
 * turn made every append reopen a log: 3.6k entries/s against 49.6k with all of them open, in
 * one run of a scratch loop here). An open workspace costs one descriptor and ~10 KB.
 */
const DEFAULT_MAX_OPEN_FILES = 16384
/**
 * Room in a worker's descriptor table beyond its open logs: the root lock, its journal (and one
 * being allocated), a sidecar or log being appended to through a descriptor of its own, object logs.
 */
const FD_TABLE_SLACK = 64
const MIN_JOURNAL_SIZE = 256 << 10

/** FNV-1a: a stable owner for a name, the same in every run. */
function ownerIndex(name: string, n: number): number {
  let h = 0x811c9dc5
  for (let i = 0; i < name.length; i++) {
    h ^= name.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return (h >>> 0) % n
}

export class AgentLog {
  readonly root: string
  readonly logDir: string
  private readonly options: CheckedOptions
  private readonly ioModule: string | undefined
  private readonly ioOptions: unknown
  private readonly journalBase: string
  private piscina: Promise<Piscina> | null = null
  private readonly owners: Owner[]
  private readonly pending = new Map<number, Pending>()
  private nextId = 1
  private pendingBytes = 0
  /** The last seq acknowledged per workspace this log wrote, and its watchers' wake-up. */
  private readonly ackedSeq = new Map<string, number>()
  private readonly commits = new Map<string, { promise: Promise<void>; resolve: () => void }>()
  private readonly maxPendingBytes: number
  /** Appends waiting for room (backpressure), oldest first from `waitingHead`. */
  private waiting: Array<Pending | null> = []
  private waitingHead = 0
  private nextBatch = 1
  /**
   * Atomic batches committed by one owner whose parts on other owners are not durable yet: the
   * committing owner's journal holds their only durable copy until every other owner answers.
   */
  private readonly coordinators = new Map<number, { owner: Owner; waiting: Set<Owner>; ok: boolean }>()
  /** appendAtomic calls not yet settled. */
  private atomicsRunning = 0
  /** close() waits for running appendAtomic calls and for the coordinators' answers. */
  private drained: (() => void) | null = null
  private closing: Promise<OwnerStatus[]> | null = null
  /** The `objects` option: what vouches for snapshot and merge entries appended here (none: refused). */
  readonly objects: ObjectChecks | undefined
  private readonly checkBlobs: boolean

  /** Protected for the daemon's client (src/serve), which extends this class and starts no owner. */
  protected constructor(o: CheckedOptions, options: AgentLogOptions) {
    this.maxPendingBytes = o.maxPendingBytes
    this.objects = o.objects
    this.checkBlobs = o.checkBlobs
    this.root = o.root
    this.logDir = logDirOf(o.root)
    this.options = o
    this.ioModule = options.ioModule
    this.ioOptions = options.ioOptions
    this.journalBase = `${process.pid}-${randomBytes(4).toString('hex')}`
    const count = Math.max(1, o.workers)
    this.owners = Array.from({ length: count }, (_, index) => ({
      index,
      port: null,
      task: null,
      outbox: { ids: [], ws: [], counts: [], bodies: [], expects: null, files: null },
      scheduled: false,
      failed: null,
      fds: null,
      closes: new Int32Array(new SharedArrayBuffer(4)),
      generation: 0,
      startedAt: 0,
      quickDeaths: 0,
      slot: null,
      slotData: null,
      slotSkip: 0,
    }))
  }

  /** For the daemon's client (src/serve): the checked options its constructor passes on. */
  protected static checkedOptions(options: AgentLogOptions): CheckedOptions {
    return checkOptions(options)
  }

  /**
   * Opens a root: replays the journals of processes that died, checks the root; starts nothing.
   * Owner workers start when a workspace routed to them is first written (`workers: 0`: one
   * owner runs in this thread instead, for processes that commit little, such as a CLI).
   */
  static async open(options: AgentLogOptions = {}): Promise<AgentLog> {
    const o = checkOptions(options)
    checkRoot(o.root, false) // a root that is a file is refused here, not at the first append
    const forwarder = installedForwarder<AgentLog, AgentLogOptions>()
    if (forwarder) {
      // A daemon serving this root owns its workspaces: talk to it instead of starting owners.
      const remote = await forwarder(o.root, options)
      if (remote) return remote
    }
    loadNative() // a missing addon is an error now, not at the first append
    recoverJournals(o.root) // journals left by a process that died are replayed before anything
    return new AgentLog(o, options)
  }

  /** The worker pool, made when the first owner worker starts (piscina is loaded then too). */
  private async pool(): Promise<Piscina> {
    this.piscina ??= import('piscina').then(
      ({ Piscina }) =>
        new Piscina({
          filename: OWNER_MODULE,
          minThreads: 0,
          maxThreads: this.options.workers,
          concurrentTasksPerWorker: 1,
          idleTimeout: Number.POSITIVE_INFINITY,
        }),
    )
    return this.piscina
  }

  /** The owner, started if it is not running. */
  private started(owner: Owner): Owner {
    if (owner.port !== null || owner.failed !== null) return owner
    const o = this.options
    const inThread = o.workers === 0
    const [port1, port2] = inThread ? LocalPort.pair(undefined, copyReply, true) : channel()
    owner.fds = inThread
      ? null
      : new Int32Array(new SharedArrayBuffer(4 * (this.perWorker + FD_TABLE_SLACK))).fill(-1)
    const ackSlot = inThread ? null : new SharedArrayBuffer(ACK_SLOT.bytes)
    owner.slot = ackSlot ? new Int32Array(ackSlot, 0, 1) : null
    owner.slotData = ackSlot ? new Float64Array(ackSlot, ACK_SLOT.dataOffset, ACK_SLOT.dataWords) : null
    const init: OwnerInit = {
      port: port2,
      index: owner.index,
      root: o.root,
      logDir: logDirOf(o.root),
      maxOpenFiles: this.perWorker,
      syncThreads: o.syncThreads,
      inlineCommit: o.inlineCommit,
      spinMicros: inThread ? 0 : SPIN_MICROS,
      durability: o.durability,
      journalSize: o.journalSize,
      journalName: owner.generation === 0 ? this.journalBase : `${this.journalBase}.${owner.generation}`,
      fds: owner.fds,
      closes: owner.closes,
      ...(phaseStamps() ? { phases: phaseStamps() as Float64Array } : {}),
      ...(ackSlot ? { ackSlot } : {}),
      ioModule: this.ioModule,
      ioOptions: this.ioOptions,
    }
    owner.generation++
    owner.startedAt = performance.now()
    owner.port = port1
    port1.on('message', (msg: unknown) => this.onMessage(msg as FromOwner, owner))
    // Each task runs for the owner's life, so with one task per worker each lands on its own thread.
    const task = inThread
      ? // A literal specifier (the module OWNER_MODULE names), so the CLI's bundle carries the owner
        // instead of loading a second copy of the engine beside its own.
        (import('../workers/owner.js').then((m: { default: (init: OwnerInit) => Promise<OwnerStatus> }) =>
          m.default(init),
        ) as Promise<OwnerStatus>)
      : (this.pool().then((pool) =>
          pool.run(init, { transferList: [port2 as MessagePort] }),
        ) as Promise<OwnerStatus>)
    owner.task = task
    task.catch((err: unknown) => this.ownerFailed(owner, port1, err))
    return owner
  }

  private get perWorker(): number {
    return Math.max(1, Math.floor(this.options.maxOpenFiles / Math.max(1, this.options.workers)))
  }

  /** Appends one entry; resolves with its seq and ts once it is durable. */
  append(workspace: string, entry: EntryInput, options?: AppendOptions): Promise<Ack> {
    try {
      checkWorkspace(workspace)
      const body = encodeBody(entry)
      if (options !== undefined || this.checkBlobs || isRecordEntry(entry)) {
        this.checkEntries(workspace, [entry], options, () => 'entry')
      }
      return this.submit(workspace, body, -1, options) as Promise<Ack>
    } catch (err) {
      return Promise.reject(err)
    }
  }

  /**
   * Appends entries together: all are validated before any is sent, they get consecutive seqs,
   * and the promise resolves once all are durable (they share one commit).
   */
  appendMany(workspace: string, entries: readonly EntryInput[], options?: AppendOptions): Promise<Ack[]> {
    try {
      checkWorkspace(workspace)
      if (!Array.isArray(entries)) throw Errors.BAD_ARGUMENT('appendMany takes an array of entries')
      if (entries.length === 0) return Promise.resolve([])
      const bodies = entries.map((e, i) => encodeBody(e, `entry ${i + 1}`))
      this.checkEntries(workspace, entries, options, (i) => `entry ${i + 1}`)
      return this.submit(workspace, bodies, entries.length, options) as Promise<Ack[]>
    } catch (err) {
      return Promise.reject(err)
    }
  }

  /** The store's path for its own records: no record check (see STORE_APPEND). */
  [STORE_APPEND](
    workspace: string,
    entries: readonly EntryInput[],
    options?: Pick<AppendOptions, 'files'>,
  ): Promise<Ack[] & { [LOG_END]?: number; [LOG_HELD]?: () => boolean }> {
    try {
      checkWorkspace(workspace)
      const bodies = entries.map((e, i) => encodeBody(e, `entry ${i + 1}`))
      return this.submit(workspace, bodies, entries.length, options) as Promise<
        Ack[] & { [LOG_END]?: number; [LOG_HELD]?: () => boolean }
      >
    } catch (err) {
      return Promise.reject(err)
    }
  }

  /** Record entries must be vouched for by `objects`; blobs checked when asked. */
  protected checkEntries(
    workspace: string,
    entries: readonly EntryInput[],
    options: AppendOptions | undefined,
    where: (i: number) => string,
  ): void {
    if (options !== undefined) checkOptionKeys(options, APPEND_OPTION_KEYS, 'append')
    const checkBlobs = options?.checkBlobs ?? this.checkBlobs
    if (typeof checkBlobs !== 'boolean') throw optionError('checkBlobs', 'must be a boolean', checkBlobs)
    const objects = this.objects
    if (checkBlobs && !objects) {
      throw Errors.BAD_OPTION(
        'append option checkBlobs needs the log opened with option objects (e.g. new ObjectStore(root))',
        { field: 'checkBlobs' },
      )
    }
    let records = false
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i] as EntryInput
      if (e.op === 'snapshot' || e.op === 'merge') records = true
      else if (checkBlobs && e.op === 'write' && !(objects as ObjectChecks).hasBlob(e.blob)) {
        throw Errors.MISSING_BLOB(
          `${where(i)}: blob ${e.blob} (for ${JSON.stringify(e.path)}) is not in the object store; store it first (noa blob put), or append with checkBlobs: false`,
          { field: 'blob', blob: e.blob, path: e.path },
        )
      }
    }
    if (!records) return
    if (!objects) {
      const i = entries.findIndex((e) => e.op === 'snapshot' || e.op === 'merge')
      throw Errors.BAD_ENTRY(
        `${where(i)}: ${entries[i]?.op} entries are written by the store (SnapshotEngine snapshot, fork, merge); to append one by hand, open the log with option objects so it can check the record it names`,
        { field: 'op' },
      )
    }
    objects.checkRecords(workspace, entries, where)
  }

  /**
   * Appends entries to several workspaces as one: after any crash, all of them are in their logs
   * or none is. Each workspace's entries get consecutive seqs. The parts of every owner worker
   * involved are prepared (each workspace waits until it is idle, then gets its seqs and is held),
   * then committed in one journal frame of the first owner (one fdatasync), then written to their
   * logs; the promise resolves once every part is in its log. Needs `durability: 'journal'`.
   */
  async appendAtomic(batch: Readonly<Record<string, readonly EntryInput[]>>): Promise<Record<string, Ack[]>> {
    if (typeof batch !== 'object' || batch === null || Array.isArray(batch)) {
      throw Errors.BAD_ARGUMENT('appendAtomic takes an object: { workspace: [entries] }')
    }
    if (this.closing) throw closedError() // before ownerOf, which would start an owner
    const groups = new Map<Owner, { ws: string[]; counts: number[]; bodies: string[] }>()
    for (const [workspace, entries] of Object.entries(batch)) {
      checkWorkspace(workspace)
      if (!Array.isArray(entries)) {
        throw Errors.BAD_ARGUMENT(`appendAtomic: ${workspace} must map to an array of entries`)
      }
      if (entries.length === 0) continue
      const bodies = entries.map((e, i) => encodeBody(e, `${workspace} entry ${i + 1}`))
      this.checkEntries(workspace, entries, undefined, (i) => `${workspace} entry ${i + 1}`)
      const owner = this.ownerOf(workspace)
      let g = groups.get(owner)
      if (!g) {
        g = { ws: [], counts: [], bodies: [] }
        groups.set(owner, g)
      }
      g.ws.push(workspace)
      g.counts.push(bodies.length)
      for (const b of bodies) g.bodies.push(b)
    }
    const owners = [...groups.keys()]
    if (owners.length === 0) return {}
    // A close that starts meanwhile lets the batch finish (its steps are sent even while
    // closing): owners holding prepared parts would otherwise never become idle.
    this.atomicsRunning++
    try {
      return await this.runAtomic(groups, owners)
    } finally {
      this.atomicsRunning--
      this.checkDrained()
    }
  }

  private async runAtomic(
    groups: Map<Owner, { ws: string[]; counts: number[]; bodies: string[] }>,
    owners: Owner[],
  ): Promise<Record<string, Ack[]>> {
    const coordinator = owners[0] as Owner
    const id = this.nextBatch++
    const step = (o: Owner, make: (rid: number) => ToOwner) => this.request(o, make, true)
    const abortAll = () =>
      Promise.allSettled(owners.map((o) => step(o, (rid) => ({ t: 'abort', id: rid, batch: id }))))
    const prepared = await Promise.allSettled(
      owners.map((o) => {
        const g = groups.get(o) as { ws: string[]; counts: number[]; bodies: string[] }
        return step(o, (rid) => ({ t: 'prepare', id: rid, batch: id, ...g })) as Promise<AtomicPart[]>
      }),
    )
    const refused = prepared.find((r) => r.status === 'rejected')
    if (refused) {
      await abortAll()
      throw (refused as PromiseRejectedResult).reason
    }
    const parts = prepared.map((r) => (r as PromiseFulfilledResult<AtomicPart[]>).value)
    const others = owners.slice(1)
    if (others.length > 0) {
      this.coordinators.set(id, { owner: coordinator, waiting: new Set(others), ok: true })
    }
    try {
      await step(coordinator, (rid) => ({
        t: 'atomicCommit',
        id: rid,
        batch: id,
        foreign: parts.slice(1).flat(),
      }))
    } catch (err) {
      this.forgetBatch(id)
      await abortAll()
      throw err
    }
    await Promise.all(
      others.map((o) =>
        step(o, (rid) => ({ t: 'apply', id: rid, batch: id })).catch((err: unknown) => {
          // Nothing was applied there, so no answer will come.
          this.partsApplied(id, o, false)
          throw err
        }),
      ),
    )
    const out: Record<string, Ack[]> = {}
    for (const part of parts.flat()) {
      out[part.ws] = Array.from({ length: part.count }, (_, k) => ({
        seq: part.firstSeq + k,
        ts: part.firstTs + k,
      }))
      this.committed(part.ws, part.firstSeq + part.count - 1)
    }
    return out
  }

  /**
   * Appends complete lines copied from another log (a replica), verbatim: they keep their seq
   * and ts, which must continue this log (seq = last + 1, ts increasing), or the request fails
   * with NOA_REPLICA_GAP and nothing is written. Each line is checked like any stored entry.
   */
  appendReplicated(workspace: string, lines: readonly string[]): Promise<Ack[]> {
    try {
      checkWorkspace(workspace)
      if (lines.length === 0) return Promise.resolve([])
      const out: string[] = []
      const acks: Ack[] = []
      let prev: Entry | null = null
      let first: Entry | null = null
      let startsAtBase = false
      for (let i = 0; i < lines.length; i++) {
        const raw = lines[i] as string
        const text = raw.endsWith('\n') ? raw.slice(0, -1) : raw
        if (text.includes('\n')) throw Errors.BAD_ENTRY(`line ${i + 1}: holds more than one line`)
        let e: Entry
        try {
          // A compacted origin's base record (base.ts) may come first: it starts an empty log.
          const base = i === 0 ? parseBase(text) : null
          e = base
            ? ({
                op: 'snapshot',
                snapshot_id: base.snapshotId,
                message: '',
                seq: base.seq,
                ts: base.ts,
              } as Entry)
            : parseEntry(text)
          if (base) startsAtBase = true
        } catch (err) {
          throw Errors.BAD_ENTRY(`line ${i + 1}: ${(err as Error).message}`)
        }
        if (prev && (e.seq !== prev.seq + 1 || e.ts <= prev.ts)) {
          throw Errors.REPLICA_GAP(
            `line ${i + 1}: seq ${e.seq} ts ${e.ts} does not follow seq ${prev.seq} ts ${prev.ts}`,
          )
        }
        first ??= e
        prev = e
        out.push(`${text}\n`)
        acks.push({ seq: e.seq, ts: e.ts })
      }
      const f = first as Entry
      const l = prev as Entry
      if (this.closing) return Promise.reject(closedError())
      const owner = this.ownerOf(workspace)
      return this.request(owner, (id) => ({
        t: 'replica',
        id,
        ws: workspace,
        lines: out,
        firstSeq: f.seq,
        firstTs: f.ts,
        lastSeq: l.seq,
        lastTs: l.ts,
        ...(startsAtBase ? { base: true } : {}),
      })).then(() => {
        this.committed(workspace, l.seq)
        return acks
      })
    } catch (err) {
      return Promise.reject(err)
    }
  }

  /**
   * Durably appends bytes to a file outside the workspace logs (transcripts use this): the same
   * owner workers, group commit and fdatasync. `file` must be absolute.
   */
  appendToFile(file: string, data: string, options: Partial<RawAppendOptions> = {}): Promise<void> {
    if (typeof file !== 'string' || !isAbsolute(file)) {
      return Promise.reject(Errors.BAD_ARGUMENT(`appendToFile needs an absolute path, got ${file}`))
    }
    try {
      this.checkOutsideLogs(file)
    } catch (err) {
      return Promise.reject(err)
    }
    const owner = this.started(this.owners[ownerIndex(file, this.owners.length)] as Owner)
    return this.request(owner, (id) => ({
      t: 'raw',
      id,
      file,
      data,
      options: { lock: options.lock ?? true, repairTail: options.repairTail ?? true },
    })) as Promise<void>
  }

  /**
   * Workspace logs are written only through their owner (seq, ts, recovery): raw bytes aimed
   * into `agent-logs/` (by any path, symlinked folders included) are refused.
   */
  private checkOutsideLogs(file: string): void {
    let dir = dirname(file)
    try {
      dir = realpathSync(dir)
    } catch {
      // a folder that does not exist yet cannot be the log folder (which exists once used)
    }
    let logs = this.logDir
    try {
      logs = realpathSync(logs)
    } catch {
      // no log folder yet
    }
    if (isInside(logs, join(dir, 'x'))) {
      throw Errors.BAD_ARGUMENT(
        `appendToFile refuses ${file}: it is inside the workspace logs folder ${this.logDir}, which only append (through the workspace's owner) may write`,
        { file },
      )
    }
  }

  /**
   * Every entry of a workspace from `fromSeq` (default 1) in order, then each new one as it
   * commits, until the signal aborts or the iterator is returned. Resuming from the seq after
   * the last one seen gives no gap and no duplicate. A slow consumer holds nothing but its read
   * position. Entries appended by other processes are seen too (the file is followed). A bad
   * option or workspace fails the first `next()`, as `read` does and as through the daemon.
   */
  async *watch(workspace: string, options: WatchOptions = {}): AsyncGenerator<Entry> {
    checkWatchOptions(options)
    const file = existingLog(this.root, workspace)
    yield* followLog(file, workspace, options, {
      nextCommit: () => this.nextCommit(workspace),
      // This process writes it: deliver only what it acknowledged (a line is in the file before
      // the fdatasync of a commit made straight to it returns).
      limit: () => this.ackedSeq.get(workspace) ?? Number.POSITIVE_INFINITY,
    })
  }

  private nextCommit(workspace: string): Promise<void> {
    let c = this.commits.get(workspace)
    if (!c) {
      let resolve!: () => void
      const promise = new Promise<void>((r) => {
        resolve = r
      })
      c = { promise, resolve }
      this.commits.set(workspace, c)
    }
    return c.promise
  }

  /** LOG_HELD of an append acknowledged with this close counter and last seq. */
  private heldSince(owner: Owner, workspace: string, closes: number, lastSeq: number): () => boolean {
    const port = owner.port
    return () =>
      owner.port === port &&
      this.closing === null &&
      Atomics.load(owner.closes, 0) === closes &&
      this.ackedSeq.get(workspace) === lastSeq
  }

  /** A commit of this workspace was acknowledged: its watchers look at the file again. */
  private committed(workspace: string, lastSeq: number): void {
    if (lastSeq > (this.ackedSeq.get(workspace) ?? 0)) this.ackedSeq.set(workspace, lastSeq)
    const c = this.commits.get(workspace)
    if (c) {
      this.commits.delete(workspace)
      c.resolve()
    }
  }

  /** Entries of a workspace in seq order, streamed (never the whole file in memory). */
  read(workspace: string, options: EntryReadOptions = {}): AsyncGenerator<Entry> {
    return readWorkspace(this.root, workspace, options)
  }

  /** The same, a chunk's worth of entries at a time (faster for replays). */
  readBatches(workspace: string, options: EntryReadOptions = {}): AsyncGenerator<Entry[]> {
    return readWorkspaceBatches(this.root, workspace, options)
  }

  /** The stored lines, as bytes exactly as on disk. */
  readBytes(workspace: string, fromSeq = 1): AsyncGenerator<Buffer> {
    return readWorkspaceBytes(this.root, workspace, fromSeq)
  }

  /**
   * Reopens a workspace in its owner: releases it once idle, then opens it again (lock, cut a
   * torn tail, read the last seq). This also clears a workspace poisoned by a failed fdatasync.
   */
  async recover(workspace: string): Promise<OpenReport> {
    existingLog(this.root, workspace) // recovering a workspace that does not exist would create it
    const idle = this.owners[ownerIndex(workspace, this.owners.length)] as Owner
    if (idle.port === null && idle.failed === null) return recoverLog(this.root, workspace) // no owner to start
    const owner = this.ownerOf(workspace)
    await this.request(owner, (id) => ({ t: 'release', id, target: workspace }))
    return (await this.request(owner, (id) => ({ t: 'open', id, ws: workspace }))) as OpenReport
  }

  /** Opens a workspace (creating its log) without appending: takes the lock, recovers the tail. */
  async openWorkspace(workspace: string): Promise<OpenReport> {
    checkWorkspace(workspace)
    return (await this.request(this.ownerOf(workspace), (id) => ({
      t: 'open',
      id,
      ws: workspace,
    }))) as OpenReport
  }

  /** Closes a workspace's fd (and so its lock) once its queue is drained. */
  async release(workspace: string): Promise<boolean> {
    checkWorkspace(workspace)
    return (await this.request(this.ownerOf(workspace), (id) => ({
      t: 'release',
      id,
      target: workspace,
    }))) as boolean
  }

  /** Closes a file written by `appendToFile` (and so its lock) once its queue is drained. */
  async releaseFile(file: string): Promise<boolean> {
    if (typeof file !== 'string' || !isAbsolute(file)) {
      throw Errors.BAD_ARGUMENT(`releaseFile needs an absolute path, got ${file}`)
    }
    const owner = this.owners[ownerIndex(file, this.owners.length)] as Owner
    if (owner.port === null) return false // never started: it holds nothing
    return (await this.request(owner, (id) => ({
      t: 'release',
      id,
      target: file,
    }))) as boolean
  }

  /**
   * Compacts a workspace's log (docs/compaction.md): the entries up to the seq a snapshot of it
   * covers are replaced by one base record naming that snapshot; every later line is kept byte
   * for byte, seqs included. `before` picks the snapshot: a snapshot id, or a seq (the newest
   * snapshot covering only seqs before it); by default the newest snapshot. With `archive`, the
   * replaced lines are first kept, compressed, in that folder (outside the root's own folders).
   * Needs the log's `objects` (the object store says what a snapshot covers). Refused, with
   * nothing changed: a `before` no snapshot covers (NOA_NOT_COVERED), a workspace another
   * process is appending to (NOA_WORKSPACE_LOCKED), an archive folder inside the root's own
   * folders (NOA_BAD_OPTION). Appends to the workspace wait while its owner replaces the file.
   */
  async compact(workspace: string, options: CompactOptions = {}): Promise<CompactResult> {
    checkOptionKeys(options, COMPACT_KEYS, 'compact')
    checkWorkspace(workspace)
    const { before, archive } = options
    const format = options.archiveFormat ?? 'gzip'
    if (
      before !== undefined &&
      !(typeof before === 'string' && before.startsWith('noa_')) &&
      !(typeof before === 'number' && Number.isSafeInteger(before) && before >= 1)
    ) {
      throw badOption('before', 'must be a snapshot id (noa_…) or a seq (an integer >= 1)', before)
    }
    if (typeof before === 'string') checkSnapshotId(before, 'before')
    if (format !== 'gzip' && format !== 'brotli')
      throw badOption('archiveFormat', "must be 'gzip' or 'brotli'", format)
    const archiveDir = archive === undefined ? null : this.archiveDir(archive)
    const cover = this.objects?.snapshotCover?.bind(this.objects)
    if (!cover) {
      throw Errors.BAD_OPTION(
        'compact needs option objects with snapshotCover (an ObjectStore): the store says which seqs a snapshot covers',
        { field: 'objects' },
      )
    }
    const file = existingLog(this.root, workspace)
    // The log made whole on disk first: a dead process's journal replayed, a torn tail cut, and
    // every byte this process's owner journaled written and fdatasynced (release). Another
    // process appending is refused here, before anything is read or written.
    await this.openWorkspace(workspace)
    await this.release(workspace)
    const base = readBase(file)
    const plan = planCompaction(file, workspace, base, before, cover)
    const result: CompactResult = {
      workspace,
      compacted: false,
      baseSeq: base?.seq ?? 0,
      snapshotId: base?.snapshotId ?? null,
      bytesBefore: statFile(file, 'workspace log')?.size ?? 0,
      bytesAfter: 0,
      archive: null,
    }
    result.bytesAfter = result.bytesBefore
    if (plan === null) return result
    if (archiveDir !== null) {
      mkdirDurable(archiveDir)
      const path = join(
        archiveDir,
        `${workspace}.${base ? base.seq : 1}-${plan.baseSeq}.log.${format === 'gzip' ? 'gz' : 'br'}`,
      )
      const bytes = await writeArchive(file, plan.cut, path, format)
      result.archive = { path, bytes, format, rawBytes: plan.cut }
    }
    const done = (await this.request(this.ownerOf(workspace), (id) => ({
      t: 'compact',
      id,
      plan,
    }))) as CompactFileReport
    result.compacted = done.compacted
    result.baseSeq = done.baseSeq
    result.snapshotId = done.snapshotId
    result.bytesBefore = done.bytesBefore
    result.bytesAfter = done.bytesAfter
    return result
  }

  /** An archive folder, resolved; refused inside the root's own folders (by any path). */
  private archiveDir(archive: unknown): string {
    if (typeof archive !== 'string' || archive === '')
      throw badOption('archive', 'must be a folder path', archive)
    const dir = resolve(archive)
    const real = (p: string): string => {
      // The nearest folder that exists, resolved (symlinks included), with the rest after it.
      let at = p
      const rest: string[] = []
      for (;;) {
        try {
          return join(realpathSync(at), ...rest)
        } catch {
          if (dirname(at) === at) return p
          rest.unshift(basename(at))
          at = dirname(at)
        }
      }
    }
    const target = real(dir)
    for (const own of ['agent-logs', 'journal', 'checksums', 'object-logs', 'objects']) {
      const inside = join(this.root, own)
      if (isInside(inside, dir) || isInside(real(inside), target)) {
        throw Errors.BAD_OPTION(
          `option archive ${archive} is inside ${inside}, a folder of the root's own (${own}/): keep archives outside agent-logs/, journal/, checksums/, object-logs/ and objects/`,
          { field: 'archive', file: dir },
        )
      }
    }
    return dir
  }

  /** Full scan: every line valid, seq strictly increasing, ts non-decreasing. */
  verify(workspace: string, options: VerifyOptions = {}): Promise<VerifyReport> {
    try {
      return verifyWorkspace(this.root, workspace, options)
    } catch (err) {
      return Promise.reject(err)
    }
  }

  workspaces(): Promise<WorkspaceInfo[]> {
    return listWorkspaces(this.root)
  }

  status(): Promise<OwnerStatus[]> {
    const running = this.owners.filter((o) => o.port !== null && o.failed === null)
    return Promise.all(running.map((o) => this.request(o, (id) => ({ t: 'status', id })))) as Promise<
      OwnerStatus[]
    >
  }

  /** Drains every queued append, closes the files (releasing their locks) and ends the workers. */
  close(): Promise<OwnerStatus[]> {
    if (this.closing) return this.closing
    this.closing = (async () => {
      // An owner that committed an atomic batch may remove its journal only once the other
      // owners' parts are durable in their logs: wait for their answers (they come without
      // further requests: each owner fdatasyncs the parts it wrote on its own).
      if (this.atomicsRunning > 0 || this.coordinators.size > 0) {
        await new Promise<void>((resolve) => {
          this.drained = resolve
        })
      }
      const live = this.owners.filter((o) => o.failed === null && o.port !== null)
      const finals = await Promise.all(
        live.map((o) => this.request(o, (id) => ({ t: 'close', id }), true).catch(() => null)),
      )
      await Promise.allSettled(live.map((o) => o.task))
      await (await this.piscina)?.destroy()
      for (const o of this.owners) o.port?.close()
      // Nothing can answer any more: whatever is still waiting (it should be nothing) fails.
      for (const [id, p] of this.pending) {
        this.pending.delete(id)
        p.reject(closedError())
      }
      return finals.filter((s): s is OwnerStatus => s !== null)
    })()
    return this.closing
  }

  get closed(): boolean {
    return this.closing !== null
  }

  private ownerOf(workspace: string): Owner {
    return this.started(this.owners[ownerIndex(workspace, this.owners.length)] as Owner)
  }

  /**
   * Queues bodies (one, or an appendMany's array) for the owner; flushed at the end of the turn.
   * Past maxPendingBytes not yet acknowledged, the append waits its turn first.
   */
  private submit(
    workspace: string,
    bodies: string | string[],
    count: number,
    options?: AppendOptions,
  ): Promise<unknown> {
    if (this.closing) return Promise.reject(closedError())
    const owner = this.ownerOf(workspace)
    if (owner.failed) return Promise.reject(owner.failed)
    const expect = checkAppendOptions(options)
    const files = checkFiles(options?.files)
    const signal = options?.signal
    if (signal?.aborted) return Promise.reject(abortedError(workspace, signal))
    let bytes = 0
    if (typeof bodies === 'string') bytes = bodies.length
    else for (const b of bodies) bytes += b.length
    if (files) for (const f of files) bytes += f.data.length
    return new Promise((resolve, reject) => {
      const p: Pending = { resolve, reject, count, owner, bytes, workspace }
      if (files) p.files = files
      const queued = this.waitingHead < this.waiting.length // FIFO: nobody overtakes a waiting append
      if (queued || (this.pendingBytes > 0 && this.pendingBytes + bytes > this.maxPendingBytes)) {
        p.bodies = bodies
        p.expect = expect
        this.waiting.push(p)
        if (signal) this.listen(p, signal, () => this.dropWaiter(p))
        return
      }
      if (signal) this.listen(p, signal, null)
      this.enqueueAppend(p, workspace, bodies, expect)
    })
  }

  private enqueueAppend(p: Pending, workspace: string, bodies: string | string[], expect: number): void {
    if (this.closing) {
      this.settle(-1, p)
      p.reject(closedError())
      return
    }
    const owner = p.owner
    const id = this.nextId++
    this.pendingBytes += p.bytes ?? 0
    this.pending.set(id, p)
    p.id = id
    const out = owner.outbox
    out.ids.push(id)
    out.ws.push(workspace)
    if (expect >= 0 || out.expects) {
      out.expects ??= new Array(out.ids.length - 1).fill(-1)
      out.expects.push(expect)
    }
    if (p.files || out.files) {
      out.files ??= new Array(out.ids.length - 1).fill(null)
      out.files.push(p.files ?? null)
    }
    if (typeof bodies === 'string') {
      out.counts.push(1)
      out.bodies.push(bodies)
    } else {
      out.counts.push(bodies.length)
      for (const b of bodies) out.bodies.push(b)
    }
    if (!owner.scheduled) {
      owner.scheduled = true
      queueMicrotask(() => this.flush(owner, true))
    }
    stamp(PHASE.queued)
  }

  /**
   * On abort: an append still waiting (backpressure) or still in this thread's outbox is simply
   * dropped; one already with its owner is asked back, and fails only if the owner had not yet
   * taken it into a commit.
   */
  private listen(p: Pending, signal: AbortSignal, waitingDrop: (() => boolean) | null): void {
    const onAbort = () => {
      if (waitingDrop?.()) {
        p.unlisten?.()
        p.reject(abortedError(p.workspace as string, signal))
        return
      }
      const id = p.id
      if (id === undefined || !this.pending.has(id)) return
      if (this.removeFromOutbox(p.owner, id)) {
        this.pending.delete(id)
        this.settle(id, p)
        p.reject(abortedError(p.workspace as string, signal))
        return
      }
      p.owner.port?.postMessage({ t: 'cancel', ws: p.workspace as string, id } satisfies ToOwner)
    }
    signal.addEventListener('abort', onAbort, { once: true })
    p.unlisten = () => signal.removeEventListener('abort', onAbort)
  }

  private dropWaiter(waiter: Pending): boolean {
    const i = this.waiting.indexOf(waiter, this.waitingHead)
    if (i < 0) return false
    this.waiting[i] = null
    return true
  }

  private removeFromOutbox(owner: Owner, id: number): boolean {
    const out = owner.outbox
    const i = out.ids.indexOf(id)
    if (i < 0) return false
    let b = 0
    for (let k = 0; k < i; k++) b += out.counts[k] as number
    out.bodies.splice(b, out.counts[i] as number)
    out.ids.splice(i, 1)
    out.ws.splice(i, 1)
    out.counts.splice(i, 1)
    out.expects?.splice(i, 1)
    out.files?.splice(i, 1)
    return true
  }

  /** An append settled: its bytes no longer count, its listener goes, and waiting appends move up. */
  private settle(_id: number, p: Pending): void {
    p.unlisten?.()
    if (p.bytes !== undefined && p.id !== undefined) {
      this.pendingBytes -= p.bytes
      p.bytes = undefined
    }
    while (this.waitingHead < this.waiting.length) {
      const next = this.waiting[this.waitingHead]
      if (next === null || next === undefined) {
        this.waitingHead++
        continue
      }
      if (this.pendingBytes > 0 && this.pendingBytes + (next.bytes ?? 0) > this.maxPendingBytes) break
      this.waiting[this.waitingHead++] = null
      const { bodies, expect } = next
      next.bodies = undefined
      this.enqueueAppend(next, next.workspace as string, bodies as string | string[], expect ?? -1)
    }
    // A queue with a moving head: compacted once the head has passed half of it.
    if (this.waitingHead > 1024 && this.waitingHead * 2 > this.waiting.length) {
      this.waiting = this.waiting.slice(this.waitingHead)
      this.waitingHead = 0
    }
  }

  /** `turnEnd`: at the end of the caller's turn (not inside a call of its own): a lone append may wait there. */
  private flush(owner: Owner, turnEnd = false): void {
    owner.scheduled = false
    const out = owner.outbox
    if (out.ids.length === 0) return
    owner.outbox = { ids: [], ws: [], counts: [], bodies: [], expects: null, files: null }
    const msg: ToOwner = { t: 'append', ids: out.ids, ws: out.ws, counts: out.counts, bodies: out.bodies }
    if (out.expects) msg.expects = out.expects
    if (out.files) msg.files = out.files
    const slot = owner.slot
    let lone = turnEnd && slot !== null && out.ids.length === 1 && !out.files && this.pending.size === 1
    if (lone && owner.slotSkip > 0) {
      owner.slotSkip--
      lone = false
    }
    const id = out.ids[0] as number
    if (lone) {
      msg.slot = slotTag(id)
      Atomics.store(slot as Int32Array, 0, msg.slot)
    }
    stamp(PHASE.posted)
    ;(owner.port as MessagePort | LocalPort).postMessage(msg)
    if (lone) this.waitLone(owner, slot as Int32Array, msg.slot as number)
  }

  /**
   * Waits up to LONE_WAIT_MS for a lone append's answer in the owner's ack slot, and takes the
   * ack from there; a failure, or an ack that takes longer, comes by the port (ACK_SLOT).
   */
  private waitLone(owner: Owner, slot: Int32Array, tag: number): void {
    const deadline = performance.now() + LONE_WAIT_MS
    let v = Atomics.load(slot, 0)
    while (v === tag) {
      const left = deadline - performance.now()
      if (left <= 0) {
        v = Atomics.compareExchange(slot, 0, tag, 0)
        if (v === tag) {
          owner.slotSkip = LONE_SKIP_AFTER_MISS // given up: the owner posts the answer
          return
        }
        break
      }
      Atomics.wait(slot, 0, tag, left)
      v = Atomics.load(slot, 0)
    }
    Atomics.store(slot, 0, 0)
    if (v === ACK_SLOT.ack) {
      this.onMessage({ t: 'acks', data: Float64Array.from(owner.slotData as Float64Array) }, owner)
    }
  }

  private request(owner: Owner, make: (id: number) => ToOwner, closing = false): Promise<unknown> {
    if (this.closing && !closing) return Promise.reject(closedError())
    if (owner.failed) return Promise.reject(owner.failed)
    this.flush(owner) // keep order: earlier appends go first
    const id = this.nextId++
    const p = new Promise((resolve, reject) => this.pending.set(id, { resolve, reject, count: -2, owner }))
    ;(owner.port as MessagePort | LocalPort).postMessage(make(id))
    return p
  }

  private onMessage(msg: FromOwner, from?: Owner): void {
    switch (msg.t) {
      case 'acks': {
        stamp(PHASE.ackReceived)
        const d = msg.data
        for (let i = 0; i < d.length; i += 5) {
          const id = d[i] as number
          const p = this.pending.get(id)
          if (!p) continue
          this.pending.delete(id)
          this.settle(id, p)
          const seq = d[i + 1] as number
          const ts = d[i + 2] as number
          if (p.workspace !== undefined) this.committed(p.workspace, seq + Math.max(1, p.count) - 1)
          if (p.count === -1) p.resolve({ seq, ts })
          else if (p.count === -2) p.resolve(undefined)
          else {
            const acks: Ack[] & { [LOG_END]?: number; [LOG_HELD]?: () => boolean } = new Array(p.count)
            for (let k = 0; k < p.count; k++) acks[k] = { seq: seq + k, ts: ts + k }
            acks[LOG_END] = d[i + 3] as number
            if (p.workspace !== undefined && from !== undefined) {
              acks[LOG_HELD] = this.heldSince(from, p.workspace, d[i + 4] as number, seq + p.count - 1)
            }
            p.resolve(acks)
          }
        }
        break
      }
      case 'fail': {
        for (const id of msg.ids) {
          const p = this.pending.get(id)
          if (!p) continue
          this.pending.delete(id)
          this.settle(id, p)
          p.reject(deserializeError(msg.error))
        }
        break
      }
      case 'applied':
        if (from) this.partsApplied(msg.batch, from, msg.ok)
        break
      case 'reply': {
        const p = this.pending.get(msg.id)
        if (!p) break
        this.pending.delete(msg.id)
        if (msg.error) p.reject(deserializeError(msg.error))
        else p.resolve(msg.value)
        break
      }
    }
  }

  /**
   * One other owner's answer for an atomic batch: its parts are durable in its logs (ok), or one
   * could not be made so. Once all answered, the committing owner may reuse the batch's frame
   * if all were ok; otherwise the frame stays, and its journal is kept at close for the next
   * opener to replay.
   */
  private partsApplied(batch: number, from: Owner, ok: boolean): void {
    const c = this.coordinators.get(batch)
    // Each owner answers once, whichever way (its message, its failure, a refused apply).
    if (!c?.waiting.delete(from)) return
    if (!ok) c.ok = false
    if (c.waiting.size > 0) return
    if (c.ok) c.owner.port?.postMessage({ t: 'unpin', batch } satisfies ToOwner)
    this.forgetBatch(batch)
  }

  private forgetBatch(batch: number): void {
    this.coordinators.delete(batch)
    this.checkDrained()
  }

  private checkDrained(): void {
    if (this.drained === null || this.atomicsRunning > 0 || this.coordinators.size > 0) return
    const drained = this.drained
    this.drained = null
    drained()
  }

  /**
   * An owner worker died (an addon fault, out of memory in the worker): what was in flight on it
   * fails with NOA_WORKER_FAILED, the descriptors it held are closed (releasing their locks, and
   * its journal's), and the next use starts a new one, whose first open replays that journal as
   * a dead process's. One that keeps dying at once is not started again.
   */
  private ownerFailed(owner: Owner, port: MessagePort | LocalPort, err: unknown): void {
    if (owner.port !== port) return
    const failed = Errors.WORKER_FAILED(
      `owner worker ${owner.index} failed: ${(err as Error)?.message ?? String(err)}; what was in flight on it was not committed`,
      {},
      { cause: err },
    )
    for (const [id, p] of this.pending) {
      if (p.owner !== owner) continue
      this.pending.delete(id)
      this.settle(id, p)
      p.reject(failed)
    }
    port.close()
    owner.port = null
    owner.task = null
    owner.outbox = { ids: [], ws: [], counts: [], bodies: [], expects: null, files: null }
    owner.scheduled = false
    // Its descriptors close now (from here, or they closed with its thread): no lock is held.
    Atomics.add(owner.closes, 0, 1)
    if (owner.fds) {
      for (let i = 0; i < owner.fds.length; i++) {
        const fd = Atomics.exchange(owner.fds, i, -1)
        if (fd >= 0) {
          try {
            closeSync(fd)
          } catch {
            // already closed
          }
        }
      }
    }
    owner.quickDeaths = performance.now() - owner.startedAt < 1000 ? owner.quickDeaths + 1 : 0
    if (owner.quickDeaths >= 3 || this.closing) {
      owner.failed = Errors.WORKER_FAILED(
        `owner worker ${owner.index} keeps failing (${failed.message}); its workspaces refuse appends`,
        {},
        { cause: err },
      )
    }
    // It will not answer for the atomic batches it had parts of (nor unpin those it committed).
    for (const [batch, c] of [...this.coordinators]) {
      if (c.owner === owner) this.forgetBatch(batch)
      else this.partsApplied(batch, owner, false)
    }
  }
}

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

const APPEND_OPTION_KEYS = new Set(['ifLastSeq', 'signal', 'checkBlobs', 'files'])

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

function closedError(): NoaError {
  return Errors.CLOSED('the AgentLog is closed')
}

/** Options of `AgentLog.compact`. */
export interface CompactOptions {
  /** A snapshot id, or a seq: compact up to the newest snapshot covering only seqs before it. Default: the newest snapshot. */
  before?: string | number
  /** Keep the replaced lines, compressed, in this folder (outside the root's own folders). */
  archive?: string
  /** How the archive is compressed (node:zlib). Default 'gzip'. */
  archiveFormat?: ArchiveFormat
}

export interface CompactResult {
  workspace: string
  /** False when the log already started at that base (nothing changed). */
  compacted: boolean
  /** The seq the base record stands for (0: the log has no base). */
  baseSeq: number
  snapshotId: string | null
  bytesBefore: number
  bytesAfter: number
  archive: { path: string; bytes: number; format: ArchiveFormat; rawBytes: number } | null
}

const COMPACT_KEYS = new Set(['before', 'archive', 'archiveFormat'])

function badOption(field: string, rule: string, value: unknown): NoaError {
  return Errors.BAD_OPTION(`option ${field} ${rule}, got ${JSON.stringify(value)}`, { field })
}

/**
 * Picks the base of a compaction from the log's snapshot entries (each one's record says what it
 * covers): null when the log already starts at it. A snapshot entry only ever follows the seqs
 * its record covers, so the lines from the base on keep it, and the workspace's head with it.
 */
function planCompaction(
  file: string,
  workspace: string,
  base: LogBase | null,
  before: string | number | undefined,
  cover: (workspace: string, snapshotId: string) => number | null,
): CompactPlan | null {
  const from = base?.seq ?? 0
  let best: { seq: number; id: string } | null = null
  let named = false
  for (const e of snapshotEntries(file)) {
    if (typeof before === 'string' && e.snapshot_id !== before) continue
    const seq = cover(workspace, e.snapshot_id)
    if (seq === null || seq >= e.seq) continue
    named = true
    if (typeof before === 'number' && seq >= before) continue
    if (best === null || seq > best.seq) best = { seq, id: e.snapshot_id }
  }
  if (best !== null && best.seq <= from) return null // the log starts there already (or later)
  if (best === null || best.seq === 0) {
    if (base !== null && (before === base.snapshotId || (typeof before === 'number' && before <= from + 1)))
      return null
    const what =
      before === undefined
        ? 'it has no snapshot whose tree is stored'
        : typeof before === 'string'
          ? named
            ? `snapshot ${before} covers nothing after its base (seq ${from})`
            : `${before} is not a snapshot of it with its tree stored (is it in this log, and not collected by gc?)`
          : `no snapshot of it covers only seqs before ${before}`
    throw Errors.NOT_COVERED(
      `workspace ${workspace} cannot be compacted: ${what}; take a snapshot first (noa snapshot ${workspace})`,
      {
        workspace,
        ...(before === undefined ? {} : { before }),
      },
    )
  }
  return { workspace, baseSeq: best.seq, snapshotId: best.id, cut: seekSeq(file, best.seq + 1) }
}
