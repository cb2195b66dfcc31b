/**
 * The owner worker's shared state (see owner.ts for what the worker does): the shapes of requests,
 * batches, rounds and jobs, one owned file, and `OwnerState`, the fields every part of the owner
 * reads, with the constructor that sets them up. The owner is one object built in layers, each
 * file one job and importing only the one below it (no circles):
 *
 *   owner-state  ← owner-sums   (checksum sidecars)
 *                ← owner-files  (registry of open files: fd table, LRU, opening, closing, log syncs)
 *                ← owner-place  (files an append carries: placing them, syncing them at checkpoints)
 *                ← owner-commit (journal commit rounds, direct commits, checkpoints)
 *                ← owner-batch  (building a file's batch, finishing it, acks)
 *                ← owner-atomic (appendAtomic: prepare, commit, apply, abort)
 *                ← owner        (the message loop: handle, receive, pump; the module AgentLog starts)
 *
 * A lower layer calls up only through the few abstract methods it declares.
 */
import { dirname, join } from 'node:path'
import { openFileLimit } from '../engine/descriptors.js'
import type { NoaError } from '../engine/errors.js'
import { mkdirBelow } from '../engine/files.js'
import { type EncodedFrame, type FramePart, RECORD_HEADER, recordHeader } from '../engine/journal-format.js'
import { journalDir } from '../engine/journal-recovery.js'
import { usePhaseStamps } from '../engine/phases.js'
import { ACK_SLOT, type FileWrite, type OwnerInit, type RawAppendOptions } from '../engine/protocol.js'
import type { LogIo } from './io.js'
import { type FrameFile, Journal } from './journal.js'

export const EMPTY = Buffer.alloc(0)

/**
 * The queue of a file with nothing queued, shared by all of them (frozen: enqueue makes a file
 * an array of its own when its first request comes), so that an idle workspace keeps none.
 */
export const NO_REQS = Object.freeze([]) as unknown as Req[]

/** A request's bodies once its batch is built (they are in the batch's data then). */
export const NO_BODIES = Object.freeze([]) as unknown as string[]

export interface Req {
  id: number
  /** Entry bodies (workspace), whole lines (replica), or one chunk of bytes (raw file); NO_BODIES once built. */
  bodies: string[]
  count: number
  /** Lines copied from another log: they keep their seq and ts, which must continue this one. */
  replica?: { firstSeq: number; firstTs: number; lastSeq: number; lastTs: number; base?: boolean }
  /** Part of an appendAtomic batch: built alone and held until the batch commits or aborts. */
  atomic?: number
  /** Compare-and-append: the last seq the workspace must have when this is committed. */
  expect?: number
  /** Files written beside the entries (AppendOptions.files). */
  files?: FileWrite[]
}

/** This owner's share of an appendAtomic batch. */
export interface Atomic {
  replyId: number
  /** Workspaces still to prepare. */
  expected: number
  prepared: Batch[]
  state: 'preparing' | 'prepared' | 'committing' | 'done' | 'failed'
  /** Parts applied here after another owner committed them, not yet durable in their logs. */
  syncing: number
  /** A part applied here could not be written or fdatasynced. */
  failed: boolean
}

/** An appendAtomic batch committed here: own prepared parts and other owners' parts, one frame. */
export interface AtomicGroup {
  batch: number
  replyId: number
  own: Batch[]
  foreign: FramePart[]
  /** Holds the frame in the journal until the other owners' logs are durable. */
  pin: FrameFile | null
}

export interface Batch {
  file: OwnedFile
  /** appendAtomic: the batch id it prepares. */
  atomic?: number
  reqs: Req[]
  /**
   * (id, firstSeq, firstTs, end) per request; `end`: the bytes of the batch up to the end of the
   * request's last line, made the file's size after it when the batch is written (finish).
   */
  acks: number[]
  data: Buffer
  lastSeq: number
  lastTs: number
  /** Its requests' files, written (not yet durable) before the batch goes into a round. */
  files: FileWrite[] | null
  /** Folders holding folders placeFiles made for them: their new entries are synced with the files. */
  parents?: string[]
  /** What placing its files wrote (absolute paths): its files, or the object log they went to. */
  written?: string[]
}

/**
 * The files a journal round wrote beside its entries: in the page cache once written, durable in
 * the journal's frame; a checkpoint syncs them (and their folders) before the frame is reused.
 */
export class WrittenFiles {
  syncedLsn = 0
  constructor(
    /** Absolute paths. */
    readonly paths: readonly string[],
    /** Folders to fsync besides each file's own: those that got a new folder for them. */
    readonly parents: readonly string[],
  ) {}
}

export interface Round {
  id: number
  batches: Batch[]
  groups: AtomicGroup[]
  frame: EncodedFrame
  offset: number
  /** A wrap marker was written at the old head (it used the lsn before the frame's). */
  wrapped: boolean
}

export type Job =
  | { kind: 'files'; batches: Batch[] }
  | { kind: 'round'; round: Round }
  | { kind: 'sync'; file: OwnedFile; lsn: number }
  | { kind: 'foreign'; file: OwnedFile; batch: number }
  | { kind: 'header'; tail: { lsn: number; offset: number; drop: number }; generation: number }
  | { kind: 'fileSync'; fd: number; path: string }
  | { kind: 'logSyncfs'; files: Array<[OwnedFile, number]> }

/**
 * The block of a workspace's log being summed for its checksum sidecar. A class, so that every
 * workspace's has the same shape, its five fields in the object (an object literal spread from
 * another took ~150 bytes per workspace: fields out of the object and a hidden class of its own).
 */
export class SumState {
  crc = 0
  entries = 0
  constructor(
    /** Whether the sidecar is to be started over (made, or cut to its header) with its next record. */
    public fresh: boolean,
    /** Where the block starts in the log, and the seq of its first entry. */
    public start: number,
    public firstSeq: number,
  ) {}
}

export class OwnedFile {
  fd = -1
  /** Bytes known durable (in the file or the journal): the file is cut back to this after a failed commit. */
  size = 0
  /**
   * Its journal record header (target name and inode): made when it is opened, dropped once it
   * is durable and quiet, made again by its next round (recordOf). `journaled`: it has one.
   */
  record: Buffer | null = null
  journaled = false
  ino = 0n
  /** The file system it is on (st_dev): a syncfs of the log folder's covers it when they match. */
  dev = -1n
  /** appendAtomic parts committed in another owner's journal that did not reach this file yet (null: none). */
  foreign: Array<{ offset: number; data: Buffer }> | null = null
  /**
   * A workspace's checksum sidecar and the block being summed (see engine/sidecar.ts). It holds
   * no descriptor: a record is appended once per ~64 KiB of log through a short-lived one, so an
   * open workspace costs one descriptor, its log's.
   */
  sum: SumState | null = null
  /** The newest journal frame with its bytes, and the newest one whose bytes are durable in the file. */
  lastLsn = 0
  syncedLsn = 0
  /** A checkpoint fdatasync of it is in flight (it must not be closed meanwhile). */
  syncing = false
  /** fdatasyncs in flight of appendAtomic parts written here for another owner's commit. */
  applying = 0
  /** Journaled bytes that did not reach the file (its write or fdatasync failed): written again when it is reopened. */
  unapplied = false
  lastSeq = 0
  lastTs = 0
  /** Requests not yet in a batch; NO_REQS when none. */
  queue: Req[] = NO_REQS
  inFlight: Batch | null = null
  poisoned: NoaError | null = null
  /**
   * What its last open found (OpenReport): kept as numbers, made into a report only when an open
   * request asks. An idle open workspace costs what these fields cost, a few hundred bytes.
   */
  openCreated = false
  openTruncated = 0
  openSize = 0
  openLastSeq = 0
  openLastTs = 0
  /** Calls waiting for the file to be idle (null: none). */
  idleWaiters: Array<() => void> | null = null

  /**
   * `dir`: a workspace's log folder (one string shared by all its files; the path is made when
   * asked, not kept: an idle workspace keeps its name only). A raw file's key is its path.
   */
  constructor(
    readonly kind: 'ws' | 'raw',
    readonly key: string,
    private readonly dir: string,
    readonly rawOptions: RawAppendOptions | null,
  ) {}

  get path(): string {
    return this.kind === 'ws' ? join(this.dir, `${this.key}.log`) : this.key
  }

  get idle(): boolean {
    return this.inFlight === null && this.queue.length === 0 && !this.syncing && this.applying === 0
  }

  /** Journaled bytes not yet durable in the file itself. */
  get dirty(): boolean {
    return this.lastLsn > this.syncedLsn
  }
}

export abstract class OwnerState {
  protected abstract completed(
    id: number,
    err: Error | null,
    logErrors: ReadonlyArray<number | Error> | null,
  ): void

  protected readonly ws = new Map<string, OwnedFile>()
  protected readonly raw = new Map<string, OwnedFile>()
  /** Open files in least-recently-used order (Map keeps insertion order). */
  protected readonly lru = new Map<OwnedFile, true>()
  protected readonly ready = new Set<OwnedFile>()
  /** Files with appends queued that could not be opened yet (open-file bound reached). */
  protected readonly waiting = new Set<OwnedFile>()
  protected readonly jobs = new Map<number, Job>()
  protected readonly journal: Journal | null
  /** Batches built (seq assigned) for the journal and not yet in a round. */
  protected pending: Array<Batch | AtomicGroup> = []
  protected readonly atomics = new Map<number, Atomic>()
  protected readonly pins = new Map<number, FrameFile>()
  protected round: Round | null = null
  protected checkpoint: { left: number } | null = null
  /** A round waits for a checkpoint to free journal space. */
  protected needSpace = false
  protected timer: NodeJS.Timeout | null = null
  protected nextJob = 1
  protected inFlight = 0
  protected pumpScheduled = false
  protected acks: number[] = []
  protected acksScheduled = false
  protected logDirReady = false
  /**
   * The log folder, held open from before the first log write: checkpoints and closes with many
   * logs to sync make them durable with one syncfs through it (LOG_SYNCFS_MIN, owner-files.ts). -1: none.
   */
  protected logDirFd = -1
  protected logDirDev = -2n
  /** Workspaces created whose entry in the log folder is not durable yet (syncCreated). */
  protected readonly dirUnsynced = new Set<string>()
  protected sumDirReady = false
  protected closing = false
  /** The ack slot (ACK_SLOT) and the lone append its caller waits for there (tag 0: none). */
  protected readonly slot: Int32Array | null
  protected readonly slotData: Float64Array | null
  protected slotId = -1
  protected slotTag = 0
  protected ackStamped = false
  protected stats = {
    commits: 0,
    entries: 0,
    inlineCommits: 0,
    slotAcks: 0,
    rounds: 0,
    checkpoints: 0,
    directCommits: 0,
    wraps: 0,
    spaceWaits: 0,
    filesWritten: 0,
    fileSyncfs: 0,
    /** fsyncs of the log folder for workspaces created (one covers all those of a pass). */
    dirSyncs: 0,
    /** syncfs calls that made a checkpoint's (or a close's) logs durable at once. */
    logSyncfs: 0,
    /** Logs opened (again, after they were closed to make room, included), and closed to make room. */
    opens: 0,
    evictions: 0,
  }
  /** A checkpoint's file and folder syncs still to start, and the groups they make durable. */
  protected fileSyncs: {
    queue: Array<{ path: string; dir: boolean }>
    inFlight: number
    groups: WrittenFiles[]
    failed: Error | null
    /** One syncfs of the root's file system instead of each file and folder. */
    syncfs: boolean
  } | null = null
  /** The last failure to make written files durable (they stay in the journal meanwhile). */
  protected fileSyncError: Error | null = null
  /** Folders below the root already checked or made for written files. */
  protected readonly fileDirs = new Set<string>()
  /** Batches whose files are being written (placeFiles). */
  protected placing = 0
  /** Folders that got a new folder for journaled files, not yet fsynced (see placeFiles). */
  protected readonly unsyncedParents = new Set<string>()
  /** Batches with files waiting for the journal being allocated. */
  protected held: Batch[] = []
  /** The object log this owner appends `packed` files to (engine/object-log.ts), once it has one. */
  protected objectLog: { fd: number; path: string; size: number } | null = null
  onClosed: (() => void) | undefined
  protected receiving = false
  protected allIdleWaiter: (() => void) | null = null

  constructor(
    protected readonly init: OwnerInit,
    protected readonly io: LogIo,
  ) {
    usePhaseStamps(init.phases)
    this.slot = init.ackSlot ? new Int32Array(init.ackSlot, 0, 1) : null
    this.slotData = init.ackSlot
      ? new Float64Array(init.ackSlot, ACK_SLOT.dataOffset, ACK_SLOT.dataWords)
      : null
    openFileLimit() // read now, while a descriptor is free to read it with: errors name it later
    io.setMaxThreads(init.syncThreads)
    io.setCompletionHandler((id, err, logErrors) => this.completed(id, err, logErrors ?? null))
    this.journal =
      init.durability === 'journal'
        ? new Journal(
            init.root,
            journalDir(init.root),
            `${init.journalName}-w${init.index}`,
            init.journalSize,
          )
        : null
  }
}

/** Bytes a batch's files take in a journal frame (record headers and data). */
export function filesBytes(batch: Batch): number {
  let n = 0
  if (batch.files) for (const f of batch.files) n += 32 + Buffer.byteLength(f.path) + f.data.length
  return n
}

/**
 * mkdir -p of `dir` below `base`, refusing a symlink or a file where a folder should be, then
 * fsync of the parent of each folder it created, so the new entries are durable.
 */
export function mkdirDurable(io: Pick<LogIo, 'fsyncDir'>, base: string, dir: string): void {
  for (const created of mkdirBelow(base, dir)) io.fsyncDir(dirname(created))
}

/** A workspace's journal record header, made again when it was dropped (OwnedFile.record). */
export function recordOf(file: OwnedFile): Buffer {
  file.record ??= recordHeader(file.key, file.ino)
  return file.record
}

/** Its record header's size, without making it (`none` when it has none: not in the journal). */
export function recordBytes(file: OwnedFile, none: number): number {
  return file.journaled ? RECORD_HEADER + Buffer.byteLength(file.key, 'utf8') : none
}
