/**
 * What the caller's side of an AgentLog keeps: an append in flight (Pending), an owner's outbox
 * for the current turn, an owner as seen from here (its port, its ack slot, its deaths), and
 * AgentLogState, the fields every part of the class reads and writes, with the constructor
 * that sets them up.
 *
 * AgentLog is one object whose class is built in layers, each in its own file and each
 * importing only the ones below it (farm-studio look: no circles):
 *   agent-log-state.ts    the shared fields and the constructor
 *   agent-log-owners.ts   starting owners (the pool, in-thread or a worker), routing, a death
 *   agent-log-outbox.ts   queueing appends for an owner, backpressure, aborts, requests
 *   agent-log-acks.ts     posting an owner's outbox (the ack slot of a lone append), its answers
 *   agent-log-atomic.ts   appendAtomic and its coordinators
 *   agent-log-compact.ts  compact
 *   agent-log.ts          AgentLog: open, append, appendMany, reads, the other methods, close
 * and agent-log-options.ts checks the options. A lower layer calls up only through the few
 * abstract methods it declares.
 */
import { randomBytes } from 'node:crypto'
import type { MessagePort } from 'node:worker_threads'
import type { Piscina } from 'piscina'
import type { AgentLogOptions, CheckedOptions } from './agent-log-options.js'
import type { ObjectChecks } from './checks.js'
import type { LocalPort } from './local-port.js'
import { logDirOf } from './logs.js'
import type { FileWrite, OwnerStatus } from './protocol.js'

export interface Pending {
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

export interface Outbox {
  ids: number[]
  /** Per request, its ifLastSeq or -1; null while no request of this outbox has one. */
  expects: number[] | null
  ws: string[]
  counts: number[]
  bodies: string[]
  /** Per request, its files or null; null while no request of this outbox has any. */
  files: Array<FileWrite[] | null> | null
}

export interface Owner {
  index: number
  /** Runs in the caller's thread (workers: 0, or the lone lane of `loneInThread`). */
  inThread: boolean
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

export abstract class AgentLogState {
  readonly root: string
  readonly logDir: string
  protected readonly options: CheckedOptions
  protected readonly ioModule: string | undefined
  protected readonly ioOptions: unknown
  protected readonly journalBase: string
  protected piscina: Promise<Piscina> | null = null
  /** The worker owners (or the one in-thread owner with workers: 0), then the lone lane's, if any. */
  protected readonly owners: Owner[]
  /** Owners a name is hashed over (ownerIndex): the workers, or the in-thread one. */
  protected readonly poolSize: number
  /** The lone lane's in-thread owner (`loneInThread`), or null. */
  protected readonly local: Owner | null
  /** With a lone lane: which owner each workspace this log touched is on now. */
  protected readonly route = new Map<string, Owner>()
  /** Workspaces routed to the lone lane's owner since its outbox was last posted. */
  protected readonly freshOnLocal = new Set<string>()
  /** Workspaces moving between owners: their appends and requests wait for this. */
  protected readonly moving = new Map<string, Promise<void>>()
  /** Where a workspace touched now goes: the lone lane, or its worker (appends overlap). */
  protected lane: 'local' | 'pool' = 'local'
  /** When appends last overlapped (performance.now()). */
  protected lastBusy = Number.NEGATIVE_INFINITY
  /** Workspaces moved between owners so far (laneStatus). */
  protected moves = 0
  protected readonly pending = new Map<number, Pending>()
  protected nextId = 1
  protected pendingBytes = 0
  /** The last seq acknowledged per workspace this log wrote, and its watchers' wake-up. */
  protected readonly ackedSeq = new Map<string, number>()
  protected readonly commits = new Map<string, { promise: Promise<void>; resolve: () => void }>()
  protected readonly maxPendingBytes: number
  /** Appends waiting for room (backpressure), oldest first from `waitingHead`. */
  protected waiting: Array<Pending | null> = []
  protected waitingHead = 0
  protected nextBatch = 1
  /**
   * Atomic batches committed by one owner whose parts on other owners are not durable yet: the
   * committing owner's journal holds their only durable copy until every other owner answers.
   */
  protected readonly coordinators = new Map<number, { owner: Owner; waiting: Set<Owner>; ok: boolean }>()
  /** appendAtomic calls not yet settled. */
  protected atomicsRunning = 0
  /** close() waits for running appendAtomic calls and for the coordinators' answers. */
  protected drained: (() => void) | null = null
  protected closing: Promise<OwnerStatus[]> | null = null
  /** The `objects` option: what vouches for snapshot and merge entries appended here (none: refused). */
  readonly objects: ObjectChecks | undefined
  protected readonly checkBlobs: boolean

  /** Protected for the daemon's client (src/serve), which extends AgentLog and starts no owner. */
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
    this.poolSize = Math.max(1, o.workers)
    const count = this.poolSize + (o.loneInThread ? 1 : 0)
    this.owners = Array.from({ length: count }, (_, index) => ({
      index,
      inThread: o.workers === 0 || index === this.poolSize,
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
    this.local = o.loneInThread ? (this.owners[this.poolSize] as Owner) : null
  }
}
