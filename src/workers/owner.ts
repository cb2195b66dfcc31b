/**
 * The owner worker. For the life of the pool it is the only writer of the workspaces routed to
 * it: it holds their fds (O_APPEND, flocked) and assigns seq and ts.
 *
 * Journal durability (the default): a commit round takes everything queued for every file the
 * worker owns and writes it to the worker's journal as one frame, one pwritev + one fdatasync of
 * blocks written before (no size to commit), then appends the same bytes to each file and acks.
 * One round is in flight at a time; whatever arrives meanwhile goes in the next (group commit
 * across files). Checkpoints fdatasync the files off the ack path and free journal space. Until
 * the journal is allocated (in the background, at the first append), and for a batch too large
 * for a frame, a commit is one write + one fdatasync of the file itself, as in `fdatasync` mode,
 * where commits of different files run on the addon's thread pool, many fdatasyncs in flight.
 * A lone commit on an otherwise idle worker runs on this thread: two thread hops fewer on the
 * serial path.
 */
import { randomBytes } from 'node:crypto'
import { fstatSync, mkdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { type MessagePort, receiveMessageOnPort } from 'node:worker_threads'
import { tempPath } from '../engine/atomic.js'
import { nextTs, nowMicros } from '../engine/clock.js'
import { compactLogFile } from '../engine/compact.js'
import { crc32c } from '../engine/crc.js'
import { isOutOfDescriptors, openFileLimit } from '../engine/descriptors.js'
import { formatLine } from '../engine/entry.js'
import { Errors, type NoaError, serializeError, withPath } from '../engine/errors.js'
import { mkdirBelow, openError } from '../engine/files.js'
import {
  type EncodedFrame,
  encodeFrame,
  encodeHeader,
  FLAG_END,
  FRAME_HEADER,
  type FramePart,
  fileRecordHeader,
  HEADER_SLOTS,
  RECORD_HEADER,
  recordHeader,
  SECTOR,
  setRecord,
  wrapFrame,
} from '../engine/journal-format.js'
import {
  deadJournalsIn,
  journalDir,
  quarantinedError,
  quarantinedJournals,
  recoverJournalsLocked,
  scanJournal,
  setFdHook,
  withRootLock,
} from '../engine/journal-recovery.js'
import { LocalPort } from '../engine/local-port.js'
import { describeHolder } from '../engine/locks.js'
import { SYNC_FDATASYNC, SYNC_FSYNC, SYNC_SYNCFS, type SyncMode } from '../engine/native.js'
import {
  encodeObjectRecords,
  OBJECT_LOG_DIR,
  OBJECT_LOG_HEADER,
  OBJECT_LOG_ROTATE,
  OBJECT_LOG_SUFFIX,
} from '../engine/object-log.js'
import { PHASE, stamp, usePhaseStamps } from '../engine/phases.js'
import {
  type AbortMsg,
  ACK_SLOT,
  type ApplyMsg,
  type AtomicCommitMsg,
  type AtomicPart,
  type FileWrite,
  type FromOwner,
  type OpenReport,
  type OwnerInit,
  type OwnerStatus,
  type PrepareMsg,
  type RawAppendOptions,
  type ToOwner,
} from '../engine/protocol.js'
import { countersOf, inspectTail } from '../engine/recovery.js'
import {
  BLOCK_BYTES,
  encodeSumHeader,
  encodeSumRecord,
  readSidecar,
  SIDECAR_DIR,
  sidecarPath,
} from '../engine/sidecar.js'
import { type LogIo, loadIo, type PlacedFile } from './io.js'
import { type FrameFile, Journal } from './journal.js'

const EMPTY = Buffer.alloc(0)
/** A checkpoint starts when this share of the journal is live, or its oldest frame is this old. */
const CHECKPOINT_FILL = 0.25
const CHECKPOINT_AGE_MS = 1000
/**
 * A checkpoint makes the files appends wrote (AppendOptions.files) durable one by one (fdatasync
 * each, fsync each folder, on the addon's pool) up to this many; beyond, with one syncfs of the
 * root's file system. Measured here: 1,000 small files cost about 150 ms fdatasynced four at a
 * time (each a device flush), 20 ms with one syncfs. A checkpoint is off the ack path, so
 * flushing other programs' pages with ours costs them nothing they wait for.
 */
const FILE_SYNC_LIMIT = 64
/** File and folder syncs of a checkpoint in flight at once (each holds a descriptor). */
const FILE_SYNCS_IN_FLIGHT = 16
/**
 * A checkpoint with at least this many logs to make durable (and a close with as many) does it
 * with one syncfs of their file system instead of an fdatasync of each: with thousands of live
 * workspaces, every checkpoint found about as many logs written since the last, and their
 * fdatasyncs (each a journal commit and a device flush, on the addon's pool) were most of what
 * an owner did. The syncfs goes through a descriptor of the log folder opened before any log was
 * written, so that the kernel (5.8 and later) reports through it any writeback error of the file
 * system since (errseq); when it reports one, each log is fdatasynced on its own after all, so
 * that the error lands on the log it belongs to and no other.
 */
const LOG_SYNCFS_MIN = Math.max(1, Number(process.env.NOA_LOG_SYNCFS_MIN) || 16) // env: a test seam (the crash explorer's few workspaces)

interface Req {
  id: number
  /** Entry bodies (workspace), whole lines (replica), or one chunk of bytes (raw file). */
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
interface Atomic {
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
interface AtomicGroup {
  batch: number
  replyId: number
  own: Batch[]
  foreign: FramePart[]
  /** Holds the frame in the journal until the other owners' logs are durable. */
  pin: FrameFile | null
}

interface Batch {
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
class WrittenFiles {
  syncedLsn = 0
  constructor(
    /** Absolute paths. */
    readonly paths: readonly string[],
    /** Folders to fsync besides each file's own: those that got a new folder for them. */
    readonly parents: readonly string[],
  ) {}
}

interface Round {
  id: number
  batches: Batch[]
  groups: AtomicGroup[]
  frame: EncodedFrame
  offset: number
  /** A wrap marker was written at the old head (it used the lsn before the frame's). */
  wrapped: boolean
}

type Job =
  | { kind: 'files'; batches: Batch[] }
  | { kind: 'round'; round: Round }
  | { kind: 'sync'; file: OwnedFile; lsn: number }
  | { kind: 'foreign'; file: OwnedFile; batch: number }
  | { kind: 'header'; tail: { lsn: number; offset: number; drop: number }; generation: number }
  | { kind: 'fileSync'; fd: number; path: string }
  | { kind: 'logSyncfs'; files: Array<[OwnedFile, number]> }

class OwnedFile {
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
  sum: {
    /** Whether the sidecar is to be started over (made, or cut to its header) with its next record. */
    fresh: boolean
    start: number
    crc: number
    firstSeq: number
    entries: number
  } | null = null
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
  queue: Req[] = []
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

class Owner {
  private readonly ws = new Map<string, OwnedFile>()
  private readonly raw = new Map<string, OwnedFile>()
  /** Open files in least-recently-used order (Map keeps insertion order). */
  private readonly lru = new Map<OwnedFile, true>()
  private readonly ready = new Set<OwnedFile>()
  /** Files with appends queued that could not be opened yet (open-file bound reached). */
  private readonly waiting = new Set<OwnedFile>()
  private readonly jobs = new Map<number, Job>()
  private readonly journal: Journal | null
  /** Batches built (seq assigned) for the journal and not yet in a round. */
  private pending: Array<Batch | AtomicGroup> = []
  private readonly atomics = new Map<number, Atomic>()
  private readonly pins = new Map<number, FrameFile>()
  private round: Round | null = null
  private checkpoint: { left: number } | null = null
  /** A round waits for a checkpoint to free journal space. */
  private needSpace = false
  private timer: NodeJS.Timeout | null = null
  private nextJob = 1
  private inFlight = 0
  private pumpScheduled = false
  private acks: number[] = []
  private acksScheduled = false
  private logDirReady = false
  /**
   * The log folder, held open from before the first log write: checkpoints and closes with many
   * logs to sync make them durable with one syncfs through it (LOG_SYNCFS_MIN). -1: none.
   */
  private logDirFd = -1
  private logDirDev = -2n
  /** Workspaces created whose entry in the log folder is not durable yet (syncCreated). */
  private readonly dirUnsynced = new Set<string>()
  private sumDirReady = false
  private closing = false
  /** The ack slot (ACK_SLOT) and the lone append its caller waits for there (tag 0: none). */
  private readonly slot: Int32Array | null
  private readonly slotData: Float64Array | null
  private slotId = -1
  private slotTag = 0
  private ackStamped = false
  private stats = {
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
  private fileSyncs: {
    queue: Array<{ path: string; dir: boolean }>
    inFlight: number
    groups: WrittenFiles[]
    failed: Error | null
    /** One syncfs of the root's file system instead of each file and folder. */
    syncfs: boolean
  } | null = null
  /** The last failure to make written files durable (they stay in the journal meanwhile). */
  private fileSyncError: Error | null = null
  /** Folders below the root already checked or made for written files. */
  private readonly fileDirs = new Set<string>()
  /** Batches whose files are being written (placeFiles). */
  private placing = 0
  /** Folders that got a new folder for journaled files, not yet fsynced (see placeFiles). */
  private readonly unsyncedParents = new Set<string>()
  /** Batches with files waiting for the journal being allocated. */
  private held: Batch[] = []
  /** The object log this owner appends `packed` files to (engine/object-log.ts), once it has one. */
  private objectLog: { fd: number; path: string; size: number } | null = null

  constructor(
    private readonly init: OwnerInit,
    private readonly io: LogIo,
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

  handle(msg: ToOwner): void {
    switch (msg.t) {
      case 'append': {
        stamp(PHASE.received)
        if (msg.slot !== undefined) {
          this.slotId = msg.ids[0] as number
          this.slotTag = msg.slot
        }
        let b = 0
        for (let i = 0; i < msg.ids.length; i++) {
          const count = msg.counts[i] as number
          const req: Req = { id: msg.ids[i] as number, bodies: msg.bodies.slice(b, b + count), count }
          const expect = msg.expects?.[i] ?? -1
          if (expect >= 0) req.expect = expect
          const files = msg.files?.[i]
          if (files) req.files = files
          b += count
          this.enqueue(this.wsFile(msg.ws[i] as string), req)
        }
        break
      }
      case 'raw':
        this.enqueue(this.rawFile(msg.file, msg.options), { id: msg.id, bodies: [msg.data], count: 1 })
        break
      case 'replica': {
        const { firstSeq, firstTs, lastSeq, lastTs } = msg
        const req: Req = {
          id: msg.id,
          bodies: msg.lines,
          count: msg.lines.length,
          replica: { firstSeq, firstTs, lastSeq, lastTs, ...(msg.base ? { base: true } : {}) },
        }
        this.enqueue(this.wsFile(msg.ws), req)
        break
      }
      case 'open':
        this.reply(msg.id, () => {
          const file = this.wsFile(msg.ws)
          // Within the open-file bound as an append's open is (when every open file is busy,
          // this one opens anyway: an open request does not wait).
          if (file.fd < 0) this.roomToOpen()
          this.ensureOpen(file)
          const failed = this.syncCreated()
          if (failed !== null) throw failed
          return {
            workspace: file.key,
            file: file.path,
            created: file.openCreated,
            truncatedBytes: file.openTruncated,
            size: file.openSize,
            lastSeq: file.openLastSeq,
            lastTs: file.openLastTs,
          } satisfies OpenReport
        })
        break
      case 'release': {
        const file = this.ws.get(msg.target) ?? this.raw.get(msg.target)
        if (!file) {
          this.post({ t: 'reply', id: msg.id, value: false })
          break
        }
        this.whenIdle(file, () => {
          const err = this.closeFile(file)
          if (err) this.post({ t: 'reply', id: msg.id, error: serializeError(err) })
          else this.post({ t: 'reply', id: msg.id, value: true })
        })
        break
      }
      case 'compact': {
        // Opened first (dead journals replayed, a torn tail cut, the lock taken: another
        // process appending is refused here), then, once idle, made complete and closed, and
        // replaced under a lock of the compaction's own (engine/compact.ts).
        const file = this.wsFile(msg.plan.workspace)
        try {
          if (file.fd < 0) this.roomToOpen()
          this.ensureOpen(file)
          const failed = this.syncCreated()
          if (failed !== null) throw failed
        } catch (err) {
          this.post({ t: 'reply', id: msg.id, error: serializeError(err) })
          break
        }
        this.whenIdle(file, () =>
          this.reply(msg.id, () => {
            const err = this.closeFile(file)
            if (err) throw err
            return compactLogFile(this.io, this.init.root, msg.plan)
          }),
        )
        break
      }
      case 'status':
        this.post({ t: 'reply', id: msg.id, value: this.status() })
        break
      case 'prepare':
        this.prepare(msg)
        break
      case 'atomicCommit':
        this.atomicCommit(msg)
        break
      case 'apply':
        this.apply(msg)
        break
      case 'abort':
        this.abort(msg)
        break
      case 'cancel': {
        // Still queued (not taken into a commit): dropped; otherwise it commits as usual.
        const file = this.ws.get(msg.ws)
        const i = file ? file.queue.findIndex((r) => r.id === msg.id) : -1
        if (file && i >= 0) {
          const [req] = file.queue.splice(i, 1)
          this.post({
            t: 'fail',
            ids: [msg.id],
            error: serializeError(
              Errors.ABORTED(`append to workspace ${msg.ws} was cancelled before it was committed`, {
                workspace: msg.ws,
              }),
            ),
          })
          if (req && file.idle) this.settled(file)
        }
        break
      }
      case 'unpin': {
        const pin = this.pins.get(msg.batch)
        if (pin) pin.syncedLsn = Number.POSITIVE_INFINITY
        this.pins.delete(msg.batch)
        if (this.needSpace && this.checkpoint === null) this.startCheckpoint()
        break
      }
      case 'close':
        this.closing = true
        this.whenAllIdle(() => {
          let kept = false
          this.syncLogsTogether()
          for (const file of [...this.lru.keys()]) if (this.closeFile(file) !== null) kept = true
          if (this.syncWrittenFilesNow() !== null) kept = true
          this.closeObjectLog()
          this.closeLogDir()
          if (this.timer) clearInterval(this.timer)
          const j = this.journal
          // Clean: every file durable, the journal removed. Otherwise it stays for the next
          // opener, and so it does while it still pins an atomic batch's part another owner
          // could not make durable (the caller waits for the others' answers before closing).
          if (j && j.state === 'ready') {
            if (kept || this.pins.size > 0) j.abandon()
            else j.remove()
          }
          this.post({ t: 'reply', id: msg.id, value: this.status() })
          this.onClosed?.()
        })
        break
    }
  }

  onClosed: (() => void) | undefined

  private post(msg: FromOwner): void {
    // Acks go out before anything posted after them (a close reply must not overtake them).
    if (msg.t !== 'acks' && this.acks.length > 0) this.flushAcks()
    this.init.port.postMessage(msg)
  }

  private reply(id: number, fn: () => unknown): void {
    try {
      this.post({ t: 'reply', id, value: fn() })
    } catch (err) {
      this.post({ t: 'reply', id, error: serializeError(err) })
    }
  }

  private wsFile(name: string): OwnedFile {
    let file = this.ws.get(name)
    if (!file) {
      file = new OwnedFile('ws', name, this.init.logDir, null)
      this.ws.set(name, file)
    }
    return file
  }

  private rawFile(path: string, options: RawAppendOptions): OwnedFile {
    let file = this.raw.get(path)
    if (!file) {
      file = new OwnedFile('raw', path, '', options)
      this.raw.set(path, file)
    }
    return file
  }

  private enqueue(file: OwnedFile, req: Req): void {
    if (file.poisoned) {
      this.fail([req], file.poisoned)
      return
    }
    file.queue.push(req)
    if (file.inFlight === null) this.markReady(file)
  }

  private markReady(file: OwnedFile): void {
    this.ready.add(file)
    if (!this.pumpScheduled && !this.receiving) {
      this.pumpScheduled = true
      queueMicrotask(() => this.pump())
    }
  }

  private receiving = false

  /**
   * Takes a message and then every message already waiting on the port, and only then commits:
   * a commit takes everything queued so far, and the inline/pool choice sees the whole picture.
   */
  receive(first: ToOwner): void {
    let next: ToOwner | undefined = first
    while (next !== undefined) {
      this.receiving = true
      try {
        this.handle(next)
        for (let m = takeMessage(this.init.port); m !== undefined; m = takeMessage(this.init.port)) {
          this.handle(m.message as ToOwner)
        }
      } finally {
        this.receiving = false
      }
      const inline = this.stats.inlineCommits
      if (this.ready.size > 0) this.pump()
      next = this.stats.inlineCommits !== inline && this.inFlight === 0 ? this.spin() : undefined
    }
  }

  /** Polls the port for up to `spinMicros` after an inline commit (see SPIN_MICROS). */
  private spin(): ToOwner | undefined {
    const limit = this.init.spinMicros
    if (limit <= 0 || this.closing) return undefined
    const until = performance.now() + limit / 1000
    do {
      const m = takeMessage(this.init.port)
      if (m !== undefined) return m.message as ToOwner
    } while (performance.now() < until)
    return undefined
  }

  private pump(): void {
    this.pumpScheduled = false
    let batches: Batch[] = []
    const opened: OwnedFile[] = []
    // The workspaces to open in this pass are opened together (openWorkspaces).
    let toOpen: OwnedFile[] = []
    for (const file of this.ready) {
      if (file.inFlight !== null || file.queue.length === 0 || file.fd >= 0 || file.kind !== 'ws') continue
      toOpen.push(file)
    }
    if (toOpen.length > 0) toOpen = toOpen.slice(0, this.makeRoom(toOpen.length))
    const openFailed = toOpen.length > 0 ? this.openWorkspaces(toOpen) : null
    for (const file of this.ready) {
      if (file.inFlight !== null || file.queue.length === 0) continue
      const failed = openFailed?.get(file)
      if (file.fd < 0 && !(failed !== undefined && isOutOfDescriptors(failed)) && !this.roomToOpen()) {
        // At the open-file bound with every open file busy: wait for one to settle.
        this.waiting.add(file)
        continue
      }
      try {
        // One that failed for want of descriptors tries again alone (ensureOpen closes idle
        // files first); any other failure is its answer.
        if (failed !== undefined && !isOutOfDescriptors(failed)) throw failed
        this.ensureOpen(file)
      } catch (err) {
        const reqs = file.queue
        file.queue = []
        this.fail(reqs, err)
        this.forget(file)
        continue
      }
      opened.push(file)
    }
    // Workspaces created in this pass share one fsync of the log folder (group commit of
    // directory entries), before anything is committed to them.
    const entriesFailed = this.syncCreated()
    for (const file of opened) {
      if (entriesFailed !== null && this.dirUnsynced.has(file.key)) {
        const reqs = file.queue
        file.queue = []
        this.fail(reqs, entriesFailed)
        continue
      }
      const batch = this.build(file)
      if (batch?.atomic !== undefined) this.prepared(batch)
      else if (batch) batches.push(batch)
    }
    stamp(PHASE.built)
    this.ready.clear()
    const j = this.journal
    if (j !== null && j.state === 'ready') {
      const alone =
        this.init.inlineCommit && this.inFlight === 0 && batches.length === 1 && this.round === null
      for (const batch of batches) {
        // Straight to its file (write + fdatasync): a batch too large for a frame, and every
        // file appended through appendToFile. Those live outside the root, and their readers (a
        // transcript loader, say) cannot know which root's journal would have to be replayed
        // before they read; so they never depend on one.
        const direct = batch.file.kind === 'raw' || frameBytes(batch) + 512 > j.maxFrame
        this.placeThen(
          batch,
          direct,
          () => {
            if (direct) this.commitOne(batch, false)
            else if (batch.files === null) this.pending.push(batch)
            else {
              this.pending.push(batch)
              this.startRound()
            }
          },
          alone,
        )
      }
      this.startRound()
      return
    }
    if (batches.length === 0) return
    // The journal pays for itself from the second commit on: a process that commits once (a
    // one-shot `noa append`) never allocates one, nor does one that only appends to files. A
    // first commit of several workspaces at once, or with files, is no one-shot: it starts now.
    const workspaces = batches.some((b) => b.file.kind === 'ws')
    const files = batches.some((b) => b.files !== null)
    const busy = this.stats.commits > 0 || batches.length > 1 || files
    if (j !== null && j.state === 'none' && workspaces && busy && !this.closing) this.createJournal(j)
    if (j !== null && j.state === 'creating' && files) {
      // Files without the journal cost an fsync each and one per folder: batches that carry
      // some wait for it (tens of ms, once), the others go on file by file.
      const rest: Batch[] = []
      for (const batch of batches) {
        if (batch.files === null || batch.file.kind === 'raw') rest.push(batch)
        else this.held.push(batch)
      }
      batches = rest
      if (batches.length === 0) return
    }
    const inline = this.init.inlineCommit && this.inFlight === 0 && batches.length === 1
    for (const batch of batches)
      this.placeThen(batch, true, () => this.commitOne(batch, inline && batch.files === null))
  }

  /**
   * Writes a batch's files (AppendOptions.files) before its entries go anywhere: each to a temp
   * file in its folder, renamed into place. `durable` (the batch is committed straight to its
   * file, not through the journal): each fdatasynced before its rename and its folder fsynced
   * after, so the files are durable before the entries naming them are. Otherwise the journal
   * frame carries their bytes, and a checkpoint syncs them before the frame is reused. On a
   * failure the batch fails untouched (files already renamed stay: nothing names them yet).
   */
  private async placeFiles(batch: Batch, durable: boolean): Promise<boolean> {
    try {
      const { places, dirs } = this.placesOf(batch, durable)
      // Off this thread: a create can wait for the file system's journal, and this thread has
      // rounds to run meanwhile.
      await this.io.placeFiles(places, durable)
      this.placed(batch, durable, dirs)
    } catch (err) {
      this.finish(batch, err, true)
      return false
    }
    return true
  }

  /** placeFiles on this thread: for a batch alone with nothing in flight (the serial path). */
  private placeFilesNow(batch: Batch, durable: boolean): boolean {
    try {
      const { places, dirs } = this.placesOf(batch, durable)
      this.io.placeFilesSync(places, durable)
      this.placed(batch, durable, dirs)
    } catch (err) {
      this.finish(batch, err, true)
      return false
    }
    return true
  }

  /** Where each of a batch's files goes (its folders made), and the folders they go to. */
  private placesOf(batch: Batch, durable: boolean): { places: PlacedFile[]; dirs: Set<string> } {
    const root = this.init.root
    const dirs = new Set<string>()
    const places: PlacedFile[] = []
    const written: string[] = []
    const all = batch.files as FileWrite[]
    const packed = all.filter((f) => f.packed === true)
    if (packed.length > 0) written.push(this.appendPacked(batch, packed, durable))
    batch.written = written
    for (const f of all) {
      if (f.packed === true) continue
      const target = join(root, f.path)
      const dir = dirname(target)
      if (!this.fileDirs.has(dir)) {
        // Through the journal, a new folder's entry is synced with the files, at the
        // checkpoint (recovery makes the folder again if a crash lost it).
        for (const made of mkdirBelow(root, dir)) {
          if (durable) this.io.fsyncDir(dirname(made))
          else {
            batch.parents ??= []
            batch.parents.push(dirname(made))
            this.unsyncedParents.add(dirname(made))
          }
        }
        this.fileDirs.add(dir)
      }
      dirs.add(dir)
      // Read-only from its creation (the descriptor that made it may still write it).
      places.push({ temp: tempPath(dir, '.tmp-'), target, data: f.data, mode: f.readOnly ? 0o444 : 0o666 })
      written.push(target)
    }
    return { places, dirs }
  }

  /**
   * Appends `files` to this owner's object log (one write), made first when there is none or the
   * one there is full; returns the log's path. `durable`: fdatasynced now (with its folder when
   * new), as placed files are; otherwise the checkpoint syncs it with the other written files.
   * A failed write is cut back off, so the log stays a run of whole records; when even that
   * fails the log is given up (a new one is made next time) and the error goes to the batch.
   */
  private appendPacked(batch: Batch, files: FileWrite[], durable: boolean): string {
    let log = this.objectLog
    if (log === null || log.size >= OBJECT_LOG_ROTATE) {
      if (log !== null) this.closeObjectLog()
      log = this.newObjectLog(batch, durable)
    }
    const data = encodeObjectRecords(files)
    try {
      this.io.pwrite(log.fd, [data], log.size)
      if (durable) this.io.fdatasync(log.fd)
    } catch (err) {
      try {
        this.io.ftruncate(log.fd, log.size)
      } catch {
        this.closeObjectLog()
      }
      throw withPath(err, log.path)
    }
    log.size += data.length
    return log.path
  }

  private newObjectLog(batch: Batch, durable: boolean): { fd: number; path: string; size: number } {
    const root = this.init.root
    const dir = join(root, OBJECT_LOG_DIR)
    const parents: string[] = []
    for (const made of mkdirBelow(root, dir)) parents.push(dirname(made))
    // Its own entry in the folder must be durable too before any frame naming its records is reclaimed.
    parents.push(dir)
    const path = join(dir, `${randomBytes(8).toString('hex')}${OBJECT_LOG_SUFFIX}`)
    const fd = this.io.createFile(path, 0o444)
    try {
      // Held while this owner lives: gc removes only logs whose writer is gone.
      this.io.flock(fd, true, true)
      this.io.pwrite(fd, [OBJECT_LOG_HEADER], 0)
    } catch (err) {
      this.io.close(fd)
      throw withPath(err, path)
    }
    for (const d of parents) {
      if (durable) this.io.fsyncDir(d)
      else {
        batch.parents ??= []
        batch.parents.push(d)
        this.unsyncedParents.add(d)
      }
    }
    this.objectLog = { fd, path, size: OBJECT_LOG_HEADER.length }
    return this.objectLog
  }

  /** Stops appending to the object log (its bytes are synced by the checkpoints that name it). */
  private closeObjectLog(): void {
    const log = this.objectLog
    this.objectLog = null
    if (log === null) return
    try {
      this.io.close(log.fd)
    } catch {
      // the descriptor is released either way
    }
  }

  private placed(batch: Batch, durable: boolean, dirs: Set<string>): void {
    this.stats.filesWritten += (batch.files as FileWrite[]).length
    if (durable) {
      // A folder made earlier for files that went through the journal may not be durable in
      // its parent yet (its checkpoint has not come): these files need it now.
      for (const d of this.unsyncedParents) this.io.fsyncDir(d)
      this.unsyncedParents.clear()
      for (const d of dirs) this.io.fsyncDir(d)
    }
  }

  /**
   * Runs `then` once the batch's files are in place (at once when it has none). `inline`: a
   * batch alone with nothing in flight places them on this thread, saving two hand-offs to the
   * pool and back on the path a lone waiting submitter is on.
   */
  private placeThen(batch: Batch, durable: boolean, then: () => void, inline = false): void {
    if (batch.files === null) {
      then()
      return
    }
    if (inline && this.placing === 0) {
      if (this.placeFilesNow(batch, durable)) then()
      return
    }
    this.placing++
    void this.placeFiles(batch, durable).then((ok) => {
      this.placing--
      if (ok) then()
      else if (this.closing) this.checkAllIdle()
    })
  }

  /** Allocates the journal in the background; commits go to the files directly meanwhile. */
  private createJournal(j: Journal): void {
    j.create(this.io).then(() => {
      if (this.closing && this.held.length === 0) {
        this.checkAllIdle()
        return
      }
      const held = this.held
      this.held = []
      if (j.state !== 'ready') {
        // Held batches go file by file after all, their files fsynced first.
        for (const batch of held) this.placeThen(batch, true, () => this.commitOne(batch, false))
        // Atomic groups waiting for it cannot be committed file by file.
        for (const item of this.pending) {
          if (!('own' in item)) continue
          for (const b of item.own) this.finish(b, j.error, true)
          this.post({ t: 'reply', id: item.replyId, error: serializeError(j.error) })
        }
        this.pending = this.pending.filter((item) => !('own' in item))
        return
      }
      this.timer = setInterval(() => this.maybeCheckpoint(), CHECKPOINT_AGE_MS / 4)
      this.timer.unref()
      for (const batch of held) {
        this.placeThen(batch, false, () => {
          this.pending.push(batch)
          this.startRound()
        })
      }
      this.pump()
      this.startRound()
    })
  }

  /** A commit straight to its file: one write + one fdatasync (the `fdatasync` mode's commit). */
  private commitOne(batch: Batch, inline: boolean): void {
    this.stats.commits++
    if (this.journal) this.stats.directCommits++
    if (!inline) {
      this.submit({ kind: 'files', batches: [batch] }, batch.file.fd, batch.data, SYNC_FDATASYNC)
      return
    }
    this.stats.inlineCommits++
    let error: unknown = null
    try {
      this.io.write(batch.file.fd, batch.data)
      this.io.fdatasync(batch.file.fd)
    } catch (err) {
      error = err
    }
    this.finish(batch, error)
    this.flushAcks() // the serial path: the submitter is waiting for exactly this ack
  }

  private submit(job: Job, fd: number, data: Buffer, mode: SyncMode): void {
    const id = this.nextJob++
    this.jobs.set(id, job)
    this.inFlight++
    this.io.commit(id, fd, data, mode)
  }

  /**
   * One journal round: as many pending batches as fit in a frame, written to the journal at its
   * head with one pwritev and one fdatasync; then each batch's bytes are appended to its file,
   * and only then are they acknowledged. One round at a time: what arrives meanwhile waits for
   * the next, which is how many appends share one sync.
   */
  private startRound(): void {
    const j = this.journal as Journal
    if (this.round !== null || this.pending.length === 0 || this.needSpace || j.state !== 'ready') return
    const parts: FramePart[] = []
    const taken: Batch[] = []
    const groups: AtomicGroup[] = []
    let items = 0
    let length = FRAME_HEADER
    for (const item of this.pending) {
      const own = 'own' in item ? item.own : [item]
      let size = 0
      for (const b of own) size += recordOf(b.file).length + b.data.length + filesBytes(b)
      if ('own' in item) for (const f of item.foreign) size += f.header.length + (f.data?.length ?? 0)
      if (items > 0 && length + size > j.maxFrame) break
      items++
      length += size
      for (const b of own) {
        if (b.files) {
          for (const f of b.files) {
            parts.push({
              header: fileRecordHeader(f.path, f.data.length, f.readOnly === true),
              data: asBuffer(f.data),
            })
          }
        }
        parts.push({ header: setRecord(recordOf(b.file), b.file.size, b.data.length), data: b.data })
        taken.push(b)
      }
      if ('own' in item) {
        for (const f of item.foreign) parts.push(f)
        groups.push(item)
      }
    }
    const padded = Math.ceil(length / SECTOR) * SECTOR
    if (padded > j.maxFrame && groups.length > 0 && items === 1) {
      // An atomic batch is one frame, or nothing.
      this.pending = this.pending.slice(1)
      const err = Errors.BAD_ARGUMENT(
        `an atomic batch of ${length} bytes does not fit in one journal frame (${j.maxFrame} bytes): split it, or give the log a larger journalSize`,
      )
      const g = groups[0] as AtomicGroup
      for (const b of g.own) this.finish(b, err, true)
      this.post({ t: 'reply', id: g.replyId, error: serializeError(err) })
      this.startRound()
      return
    }
    const place = j.place(padded)
    if (place === null) {
      // The live part of the journal reaches the head: a checkpoint must free space first.
      this.needSpace = true
      this.stats.spaceWaits++
      this.startCheckpoint()
      return
    }
    this.pending = this.pending.slice(items)
    const wrapped = place.wrapAt !== null
    if (wrapped || place.offset < j.head) this.stats.wraps++
    const frame = encodeFrame(j.id, j.nextLsn + (wrapped ? 1 : 0), FLAG_END, parts)
    stamp(PHASE.framed)
    const round: Round = { id: this.nextJob++, batches: taken, groups, frame, offset: place.offset, wrapped }
    this.round = round
    this.stats.rounds++
    this.stats.commits++
    try {
      // The marker that sends replay back to the start: page cache only, the round's fdatasync covers it.
      if (place.wrapAt !== null) this.io.pwrite(j.fd, wrapFrame(j.id, j.nextLsn).pieces, place.wrapAt)
    } catch (err) {
      this.roundDone(round, err, null)
      return
    }
    // Not while files are being written for other batches: those join the next round, which
    // an inline round (this thread blocked in the fdatasync) would keep from forming.
    const alone = taken.length === 1 && groups.length === 0 && this.placing === 0
    if (this.init.inlineCommit && this.inFlight === 0 && alone) {
      this.stats.inlineCommits++
      this.inlineRound(j, round)
      return
    }
    this.jobs.set(round.id, { kind: 'round', round })
    this.inFlight++
    this.io.commitRound(
      round.id,
      j.fd,
      frame.pieces,
      place.offset,
      SYNC_FDATASYNC,
      taken.map((b) => b.file.fd),
      taken.map((b) => b.data),
    )
  }

  /** The serial path: the lone round written and synced on this thread, no hop to the pool. */
  private inlineRound(j: Journal, round: Round): void {
    let error: unknown = null
    let logErrors: Array<number | Error> | null = null
    try {
      this.io.pwrite(j.fd, round.frame.pieces, round.offset)
      stamp(PHASE.pwritten)
      this.io.fdatasync(j.fd)
      stamp(PHASE.synced)
    } catch (err) {
      error = err
    }
    if (error === null) {
      round.batches.forEach((batch, i) => {
        try {
          this.io.write(batch.file.fd, batch.data)
        } catch (err) {
          logErrors ??= []
          logErrors.push(i, err as Error)
        }
      })
      stamp(PHASE.logged)
    }
    this.roundDone(round, error, logErrors)
    if (!this.ackStamped) stamp(PHASE.finished)
    this.ackStamped = false
    this.flushAcks()
  }

  private roundDone(round: Round, err: unknown, logErrors: ReadonlyArray<number | Error> | null): void {
    const j = this.journal as Journal
    this.round = null
    if (err !== null) {
      // Nothing reached the files. The frame's space is reused by the next round (same lsn),
      // so no invalid frame is ever left between valid ones.
      withPath(err, j.path)
      for (const batch of round.batches) this.finish(batch, err)
      for (const g of round.groups) {
        this.atomics.delete(g.batch)
        this.post({ t: 'reply', id: g.replyId, error: serializeError(err) })
      }
    } else {
      const files: FrameFile[] = round.batches.map((b) => b.file)
      for (const g of round.groups) if (g.pin) files.push(g.pin)
      const written: string[] = []
      const parents: string[] = []
      for (const b of round.batches) {
        if (b.written) for (const f of b.written) written.push(f)
        if (b.parents) for (const d of b.parents) parents.push(d)
      }
      if (written.length > 0) files.push(new WrittenFiles(written, parents))
      j.written(round.frame, round.offset, files, round.wrapped)
      const failed = new Map<number, Error>()
      if (logErrors)
        for (let i = 0; i < logErrors.length; i += 2)
          failed.set(logErrors[i] as number, logErrors[i + 1] as Error)
      round.batches.forEach((batch, i) => {
        batch.file.lastLsn = round.frame.lsn
        const logErr = failed.get(i)
        if (logErr) this.committedUnwritten(batch, logErr)
        else this.finish(batch, null)
      })
      for (const g of round.groups) {
        this.atomics.delete(g.batch)
        if (g.pin) this.pins.set(g.batch, g.pin)
        this.post({ t: 'reply', id: g.replyId, value: true })
      }
      this.maybeCheckpoint()
    }
    this.startRound()
    if (this.ready.size > 0 && !this.pumpScheduled) {
      this.pumpScheduled = true
      queueMicrotask(() => this.pump())
    }
  }

  /**
   * The round is durable in the journal, but its bytes did not reach this file (ENOSPC, EIO):
   * the entries are committed (a crash replays them from the journal), so they are
   * acknowledged; the file refuses further appends until it is reopened, which writes them again.
   */
  private committedUnwritten(batch: Batch, err: Error): void {
    const file = batch.file
    withPath(err, file.path)
    try {
      this.io.ftruncate(file.fd, file.size) // no partial line left for readers
    } catch {
      // the journal holds the bytes either way
    }
    this.finish(batch, null)
    file.unapplied = true
    file.poisoned = Errors.WORKSPACE_POISONED(
      `${this.describe(file)} refuses appends: its last commit is durable in the journal but could not be written to ${file.path} (${err.message}); reopen it (recover) to write it there and continue`,
      { workspace: file.kind === 'ws' ? file.key : undefined, file: file.path },
    )
    const queued = file.queue
    file.queue = []
    this.fail(queued, file.poisoned)
  }

  private describe(file: OwnedFile): string {
    return file.kind === 'ws' ? `workspace ${file.key}` : `file ${file.path}`
  }

  /** Starts a checkpoint when enough of the journal is live or its oldest frame is old enough. */
  private maybeCheckpoint(): void {
    const j = this.journal
    if (j === null || j.state !== 'ready' || this.checkpoint !== null) return
    const oldest = j.frames[0]
    if (oldest === undefined) return
    if (j.used() > j.size * CHECKPOINT_FILL || performance.now() - oldest.at > CHECKPOINT_AGE_MS) {
      this.startCheckpoint()
    }
  }

  /**
   * A checkpoint: fdatasync every open file with journaled bytes not yet durable in it (many at
   * once, on the addon's pool, while rounds go on), then write the header naming the new tail.
   */
  private startCheckpoint(): void {
    const j = this.journal as Journal
    if (this.checkpoint !== null) return
    this.stats.checkpoints++
    const targets = new Set<OwnedFile>()
    const written = new Set<WrittenFiles>()
    for (const frame of j.frames) {
      for (const f of frame.files) {
        if (f instanceof OwnedFile && f.dirty && f.fd >= 0 && !f.unapplied && !f.syncing) targets.add(f)
        else if (f instanceof WrittenFiles && f.syncedLsn < frame.lsn) written.add(f)
      }
    }
    const files = written.size > 0 && this.fileSyncs === null
    const together = this.onLogDirFs(targets)
    this.checkpoint = {
      left: targets.size - together.length + (together.length > 0 ? 1 : 0) + (files ? 1 : 0),
    }
    if (this.checkpoint.left === 0) {
      this.writeHeader()
      return
    }
    if (together.length > 0) {
      this.stats.logSyncfs++
      for (const file of together) {
        file.syncing = true
        targets.delete(file)
      }
      const job: Job = { kind: 'logSyncfs', files: together.map((f): [OwnedFile, number] => [f, f.lastLsn]) }
      this.submit(job, this.logDirFd, EMPTY, SYNC_SYNCFS)
    }
    for (const file of targets) this.syncOne(file)
    if (files) this.syncWrittenFiles([...written])
  }

  private syncOne(file: OwnedFile): void {
    file.syncing = true
    this.submit({ kind: 'sync', file, lsn: file.lastLsn }, file.fd, EMPTY, SYNC_FDATASYNC)
  }

  /**
   * Of `files`, those one syncfs of the log folder's file system makes durable, when there are
   * enough of them for it to pay (LOG_SYNCFS_MIN); none otherwise.
   */
  private onLogDirFs(files: Iterable<OwnedFile>): OwnedFile[] {
    if (this.logDirFd < 0) return []
    const same: OwnedFile[] = []
    for (const f of files) if (f.dev === this.logDirDev) same.push(f)
    return same.length >= LOG_SYNCFS_MIN ? same : []
  }

  /**
   * Before files are closed (the owner's close: every open one; making room: the idle ones let
   * go): those not yet durable, made so by one syncfs when there are enough of them
   * (LOG_SYNCFS_MIN), on this thread, with their sidecars' last records. On an error nothing is
   * marked: closing fdatasyncs each of them, and the one the error belongs to reports it.
   */
  private syncLogsTogether(closing: Iterable<OwnedFile> = this.lru.keys()): void {
    const files = [...closing]
    const dirty: OwnedFile[] = []
    for (const f of files) if (f.dirty && !f.unapplied && f.fd >= 0) dirty.push(f)
    const together = this.onLogDirFs(dirty)
    if (together.length === 0) return
    // The sidecars' last records first, so that the same syncfs makes them durable too.
    for (const f of files) {
      if (f.sum === null || f.fd < 0) continue
      this.summed(f, EMPTY, 0, true)
      f.sum = null
    }
    try {
      this.io.syncfs(this.logDirFd)
    } catch {
      return
    }
    this.stats.logSyncfs++
    for (const f of together) f.syncedLsn = f.lastLsn
  }

  private closeLogDir(): void {
    if (this.logDirFd < 0) return
    try {
      this.io.close(this.logDirFd)
    } catch {
      // the descriptor is released either way
    }
    this.logDirFd = -1
  }

  /** Opens the log folder to sync its file system through (see LOG_SYNCFS_MIN); without it, logs are synced one by one. */
  private openLogDir(): void {
    if (this.logDirFd >= 0) return
    try {
      const fd = this.io.openDir(this.init.logDir)
      this.logDirFd = fd
      this.logDirDev = fstatSync(fd, { bigint: true }).dev
    } catch {
      this.logDirFd = -1
    }
  }

  /**
   * A checkpoint's syncfs returned: every log it covered is durable up to the frame it had then.
   * On an error, which a syncfs cannot tie to a file, each is fdatasynced on its own instead,
   * still counted in the checkpoint, so the error reaches the log it belongs to.
   */
  private logsSynced(files: Array<[OwnedFile, number]>, err: Error | null): void {
    const c = this.checkpoint as { left: number }
    if (err !== null) {
      c.left += files.length - 1
      for (const [file] of files) {
        file.syncing = false
        this.syncOne(file)
      }
      return
    }
    for (const [file, lsn] of files) {
      file.syncing = false
      if (lsn > file.syncedLsn) file.syncedLsn = lsn
      if (!file.dirty && file.inFlight === null && file.queue.length === 0) file.record = null
      this.settled(file)
    }
    if (--c.left === 0) this.writeHeader()
  }

  /** Makes written files and their folders durable (see FILE_SYNC_LIMIT), then counts as one checkpoint target. */
  private syncWrittenFiles(groups: WrittenFiles[]): void {
    const paths = new Set<string>()
    const parents = new Set<string>()
    for (const g of groups) {
      for (const p of g.paths) paths.add(p)
      for (const d of g.parents) parents.add(d)
    }
    const queue: Array<{ path: string; dir: boolean }> = []
    if (paths.size > FILE_SYNC_LIMIT) {
      this.stats.fileSyncfs++
      queue.push({ path: this.init.root, dir: true })
    } else {
      const dirs = new Set<string>()
      for (const p of paths) {
        queue.push({ path: p, dir: false })
        dirs.add(dirname(p))
      }
      for (const d of parents) dirs.add(d)
      for (const d of dirs) queue.push({ path: d, dir: true })
    }
    this.fileSyncs = { queue, inFlight: 0, groups, failed: null, syncfs: paths.size > FILE_SYNC_LIMIT }
    this.startFileSyncs()
  }

  private startFileSyncs(): void {
    const fs = this.fileSyncs
    if (fs === null) return
    while (fs.inFlight < FILE_SYNCS_IN_FLIGHT && fs.queue.length > 0) {
      const { path, dir } = fs.queue.shift() as { path: string; dir: boolean }
      let fd: number
      try {
        fd = dir ? this.io.openDir(path) : this.io.openRead(path)
      } catch (err) {
        // Gone since (nothing of it left to make durable); anything else keeps it in the journal.
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') fs.failed ??= withPath(err, path) as Error
        continue
      }
      fs.inFlight++
      const mode = !dir ? SYNC_FDATASYNC : fs.syncfs ? SYNC_SYNCFS : SYNC_FSYNC
      this.submit({ kind: 'fileSync', fd, path }, fd, EMPTY, mode)
    }
    if (fs.inFlight === 0 && fs.queue.length === 0) {
      this.fileSyncs = null
      if (fs.failed === null) {
        for (const g of fs.groups) g.syncedLsn = Number.POSITIVE_INFINITY
        this.fileSyncError = null
      } else {
        this.fileSyncError = fs.failed
      }
      const c = this.checkpoint as { left: number }
      if (--c.left === 0) this.writeHeader()
    }
  }

  private fileSynced(fd: number, path: string, err: Error | null): void {
    const fs = this.fileSyncs as NonNullable<Owner['fileSyncs']>
    try {
      this.io.close(fd)
    } catch {
      // the descriptor is released either way
    }
    if (err !== null) fs.failed ??= withPath(err, path) as Error
    fs.inFlight--
    this.startFileSyncs()
  }

  /** At a clean close: written files not yet synced by a checkpoint, synced here and now. */
  private syncWrittenFilesNow(): Error | null {
    const j = this.journal
    if (j === null) return null
    const dirs = new Set<string>()
    const done = new Set<string>()
    try {
      for (const frame of j.frames) {
        for (const f of frame.files) {
          if (!(f instanceof WrittenFiles) || f.syncedLsn >= frame.lsn) continue
          for (const p of f.paths) {
            if (done.has(p)) continue // an object log holds many batches' files
            done.add(p)
            let fd: number
            try {
              fd = this.io.openRead(p)
            } catch (err) {
              if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue
              throw err
            }
            try {
              this.io.fdatasync(fd)
            } finally {
              this.io.close(fd)
            }
            dirs.add(dirname(p))
          }
          for (const d of f.parents) dirs.add(d)
          f.syncedLsn = Number.POSITIVE_INFINITY
        }
      }
      for (const d of dirs) this.io.fsyncDir(d)
    } catch (err) {
      return err as Error
    }
    return null
  }

  private syncDone(file: OwnedFile, lsn: number, err: Error | null): void {
    file.syncing = false
    if (err === null) {
      if (lsn > file.syncedLsn) file.syncedLsn = lsn
      // Durable and quiet: its record header goes until its next round (recordOf), so that an
      // idle workspace keeps no buffer.
      if (!file.dirty && file.inFlight === null && file.queue.length === 0) file.record = null
    } else {
      // Its bytes stay in the journal (the tail cannot pass them) until it is reopened.
      withPath(err, file.path)
      file.unapplied = true
      file.poisoned = Errors.WORKSPACE_POISONED(
        `${this.describe(file)} refuses appends after a failed checkpoint fdatasync (${err.message}); its entries are kept in the journal; reopen it (recover) to write them again`,
        { workspace: file.kind === 'ws' ? file.key : undefined, file: file.path },
      )
    }
    this.settled(file)
    const c = this.checkpoint as { left: number }
    if (--c.left === 0) this.writeHeader()
  }

  /** The header naming the new tail, written and fdatasynced before the space before it is reused. */
  private writeHeader(): void {
    const j = this.journal as Journal
    const tail = j.reclaimable()
    if (tail === null) {
      this.checkpointDone()
      return
    }
    const generation = j.generation + 1
    const bytes = encodeHeader({
      journalId: j.id,
      size: j.size,
      generation,
      tailLsn: tail.lsn,
      tailOffset: tail.offset >= j.size ? 4096 : tail.offset,
    })
    const id = this.nextJob++
    this.jobs.set(id, { kind: 'header', tail, generation })
    this.inFlight++
    this.io.commitRound(id, j.fd, [bytes], HEADER_SLOTS[generation % 2] as number, SYNC_FDATASYNC, [], [])
  }

  private headerDone(
    tail: { lsn: number; offset: number; drop: number },
    generation: number,
    err: Error | null,
  ): void {
    const j = this.journal as Journal
    if (err === null) {
      j.generation = generation
      j.reclaimed(tail)
    }
    // A failed header write leaves the other slot, with the older tail, as the valid one.
    this.checkpointDone()
  }

  private checkpointDone(): void {
    this.checkpoint = null
    if (this.needSpace) {
      const j = this.journal as Journal
      const first = this.pending[0]
      if (first === undefined || j.place(this.frameSize(first)) !== null) {
        this.needSpace = false
      } else {
        // Still no room. An atomic batch's other owner will unpin its frame soon (it is making
        // its parts durable): wait for that. Files whose writes failed pin it until recovered.
        const blocking = j.frames[0]?.files ?? []
        const lsn = j.frames[0]?.lsn ?? 0
        const waitingForPin = blocking.some(
          (f) => !(f instanceof OwnedFile) && !(f instanceof WrittenFiles) && f.syncedLsn < lsn,
        )
        const dirty = blocking.some(
          (f) =>
            (f instanceof OwnedFile && f.dirty && !f.unapplied) ||
            (f instanceof WrittenFiles && f.syncedLsn < lsn && this.fileSyncError === null),
        )
        if (dirty) this.startCheckpoint()
        else if (!waitingForPin) {
          this.needSpace = false
          this.journalFull(j)
        }
      }
    }
    this.startRound()
    if (this.closing) this.checkAllIdle()
  }

  /** Bytes a pending batch or atomic group takes in a frame, padded. */
  private frameSize(item: Batch | AtomicGroup): number {
    let size = FRAME_HEADER
    const own = 'own' in item ? item.own : [item]
    for (const b of own) size += recordBytes(b.file, 0) + b.data.length + filesBytes(b)
    if ('own' in item) for (const f of item.foreign) size += f.header.length + (f.data?.length ?? 0)
    return Math.ceil(size / SECTOR) * SECTOR
  }

  /**
   * No space, and none can be freed: the oldest frames belong to files whose bytes did not reach
   * them (failed write or fdatasync). Pending appends fail, naming those files, rather than wait.
   */
  private journalFull(j: Journal): void {
    const pinned = new Set<string>()
    for (const f of j.frames[0]?.files ?? []) {
      if (f instanceof OwnedFile && f.dirty) pinned.add(f.path)
      else if (f instanceof WrittenFiles && f.syncedLsn < (j.frames[0]?.lsn ?? 0))
        pinned.add(
          `files written beside entries (${f.paths[0]}…: ${this.fileSyncError?.message ?? 'not yet durable'})`,
        )
      else if (!(f instanceof OwnedFile) && f.syncedLsn < (j.frames[0]?.lsn ?? 0))
        pinned.add('an atomic batch another worker is still writing')
    }
    const err = Errors.JOURNAL(
      `the commit journal ${j.path} is full: its oldest entries are for ${[...pinned].join(', ')}, whose writes failed; reopen (recover) them to free it`,
      { journal: j.path },
    )
    const items = this.pending
    this.pending = []
    for (const item of items) {
      if ('own' in item) {
        for (const b of item.own) this.finish(b, err, true)
        this.atomics.delete(item.batch)
        this.post({ t: 'reply', id: item.replyId, error: serializeError(err) })
      } else {
        this.finish(item, err, true)
      }
    }
  }

  private build(file: OwnedFile): Batch | null {
    // An atomic part is built alone (it waits for its batch); what is queued before it goes first.
    const cut = file.queue.findIndex((r) => r.atomic !== undefined)
    let reqs = cut === 0 ? file.queue.slice(0, 1) : cut > 0 ? file.queue.slice(0, cut) : file.queue
    file.queue = cut >= 0 ? file.queue.slice(reqs.length) : []
    const atomic = reqs[0]?.atomic
    if (atomic !== undefined && this.atomics.get(atomic)?.state !== 'preparing') {
      // Its batch failed or was aborted meanwhile: nothing to build.
      if (file.queue.length > 0) queueMicrotask(() => this.markReady(file))
      else this.settled(file)
      return null
    }
    const acks: number[] = []
    let text = ''
    let seq = file.lastSeq
    let ts = file.lastTs
    if (file.kind === 'ws') {
      const now = nowMicros()
      let refused: Req[] | null = null
      for (const req of reqs) {
        if (req.replica) {
          const r = req.replica
          // A compacted origin's base record starts an empty log at its seq (engine/base.ts).
          const follows = r.base ? seq === 0 && file.size === 0 : r.firstSeq === seq + 1 && r.firstTs > ts
          if (!follows) {
            refused ??= []
            refused.push(req)
            this.fail(
              [req],
              Errors.REPLICA_GAP(
                `workspace ${file.key}: copied lines start at seq ${r.firstSeq} ts ${r.firstTs}, but the log is at seq ${seq} ts ${ts}`,
                { workspace: file.key, seq: r.firstSeq },
              ),
            )
            continue
          }
          acks.push(req.id, r.firstSeq, r.firstTs, 0)
          for (const line of req.bodies) text += line
          acks[acks.length - 1] = text.length
          seq = r.lastSeq
          ts = r.lastTs
          continue
        }
        if (req.expect !== undefined && req.expect !== seq) {
          refused ??= []
          refused.push(req)
          this.fail(
            [req],
            Errors.SEQ_MISMATCH(
              `workspace ${file.key}: the append expected last seq ${req.expect}, but it is ${seq}; nothing was written`,
              { workspace: file.key, lastSeq: seq, expected: req.expect },
            ),
          )
          continue
        }
        acks.push(req.id, seq + 1, nextTs(ts, now), 0)
        for (const body of req.bodies) {
          seq++
          ts = nextTs(ts, now)
          text += formatLine(seq, body, ts)
        }
        acks[acks.length - 1] = text.length
      }
      if (refused) reqs = reqs.filter((r) => !refused.includes(r))
      if (reqs.length === 0) {
        this.settled(file)
        return null
      }
    } else {
      for (const req of reqs) {
        text += req.bodies[0]
        acks.push(req.id, 0, 0, text.length)
      }
    }
    const all: FileWrite[] = []
    for (const req of reqs) if (req.files) for (const f of req.files) all.push(f)
    const files = all.length > 0 ? all : null
    const data = Buffer.from(text, 'utf8')
    if (data.length !== text.length) {
      // Not all ASCII: the ends counted UTF-16 units, the file counts bytes.
      for (let i = 3; i < acks.length; i += 4) acks[i] = Buffer.byteLength(text.slice(0, acks[i]), 'utf8')
    }
    const batch: Batch = {
      file,
      reqs,
      acks,
      data,
      lastSeq: seq,
      lastTs: ts,
      files,
    }
    if (atomic !== undefined) batch.atomic = atomic
    file.inFlight = batch
    return batch
  }

  private completed(id: number, err: Error | null, logErrors: ReadonlyArray<number | Error> | null): void {
    const job = this.jobs.get(id)
    if (!job) return
    this.jobs.delete(id)
    this.inFlight--
    switch (job.kind) {
      case 'files':
        for (const batch of job.batches) this.finish(batch, err)
        break
      case 'round':
        this.roundDone(job.round, err, logErrors)
        break
      case 'sync':
        this.syncDone(job.file, job.lsn, err)
        break
      case 'foreign':
        this.foreignSynced(job.file, job.batch, err)
        break
      case 'header':
        this.headerDone(job.tail, job.generation, err)
        break
      case 'fileSync':
        this.fileSynced(job.fd, job.path, err)
        break
      case 'logSyncfs':
        this.logsSynced(job.files, err)
        break
    }
  }

  /** `untouched`: the batch was refused before anything was written (nothing to cut back). */
  private finish(batch: Batch, err: unknown, untouched = false): void {
    const file = batch.file
    file.inFlight = null
    if (untouched) {
      this.fail(batch.reqs, err)
    } else if (err === null) {
      file.size += batch.data.length
      file.lastSeq = batch.lastSeq
      file.lastTs = batch.lastTs
      if (file.sum !== null)
        this.summed(
          file,
          batch.data,
          batch.reqs.reduce((n, r) => n + r.count, 0),
          false,
        )
      this.stats.entries += batch.reqs.reduce((n, r) => n + r.count, 0)
      const start = file.size - batch.data.length
      // Read while the file is open and locked: a close after this adds to it first.
      const closes = Atomics.load(this.init.closes, 0)
      for (let i = 0; i < batch.acks.length; i += 4) {
        if (this.slotTag !== 0 && batch.acks[i] === this.slotId) {
          const d = this.slotData as Float64Array
          d[0] = batch.acks[i] as number
          d[1] = batch.acks[i + 1] as number
          d[2] = batch.acks[i + 2] as number
          d[3] = start + (batch.acks[i + 3] as number)
          d[4] = closes
          if (this.answerSlot(ACK_SLOT.ack)) {
            this.stats.slotAcks++
            continue
          }
        }
        this.acks.push(
          batch.acks[i] as number,
          batch.acks[i + 1] as number,
          batch.acks[i + 2] as number,
          start + (batch.acks[i + 3] as number),
          closes,
        )
      }
      if (!this.acksScheduled) {
        this.acksScheduled = true
        queueMicrotask(() => this.flushAcks())
      }
    } else {
      withPath(err, file.path)
      const failedSync = (err as NodeJS.ErrnoException).syscall !== 'write'
      const syncCall = (err as NodeJS.ErrnoException).syscall ?? 'sync'
      let cutFailed: unknown = null
      try {
        // Cut the file back to what was acknowledged, so no unacknowledged bytes stay behind.
        this.io.ftruncate(file.fd, file.size)
        this.io.fdatasync(file.fd)
      } catch (e) {
        cutFailed = e
      }
      this.fail(batch.reqs, err)
      if (failedSync || cutFailed !== null) {
        // After a failed fdatasync the kernel may have dropped the dirty pages and a retry can
        // report success: refuse appends until the workspace is reopened.
        const what = file.kind === 'ws' ? `workspace ${file.key}` : `file ${file.path}`
        file.poisoned = Errors.WORKSPACE_POISONED(
          `${what} refuses appends after a failed ${failedSync ? syncCall : 'truncate'} (${(err as Error).message}); reopen it (recover) to continue`,
          { workspace: file.kind === 'ws' ? file.key : undefined, file: file.path },
        )
        const queued = file.queue
        file.queue = []
        this.fail(queued, file.poisoned)
      }
    }
    if (file.queue.length > 0) this.markReady(file)
    else this.settled(file)
  }

  private flushAcks(): void {
    this.acksScheduled = false
    if (this.acks.length === 0) return
    const data = Float64Array.from(this.acks)
    this.acks = []
    this.post({ t: 'acks', data })
    stamp(PHASE.ackPosted)
  }

  private fail(reqs: Req[], err: unknown): void {
    const ids: number[] = []
    for (const r of reqs) {
      if (r.atomic !== undefined) this.atomicFailed(r.atomic, err)
      else ids.push(r.id)
    }
    if (ids.length > 0) this.post({ t: 'fail', ids, error: serializeError(err) })
    if (this.slotTag !== 0 && ids.includes(this.slotId)) this.answerSlot(ACK_SLOT.port)
  }

  /**
   * Answers the caller waiting in the ack slot: the ack is there (SLOT_ACK, data written first)
   * or comes by the port (SLOT_PORT). False when the caller stopped waiting first: then the ack
   * goes by the port as any other.
   */
  private answerSlot(answer: number): boolean {
    const slot = this.slot as Int32Array
    const tag = this.slotTag
    this.slotTag = 0
    if (Atomics.compareExchange(slot, 0, tag, answer) !== tag) return false
    Atomics.notify(slot, 0)
    if (answer === ACK_SLOT.ack) {
      // The round is settled as far as the caller can tell (npm run bench's breakdown).
      stamp(PHASE.finished)
      stamp(PHASE.ackPosted)
      this.ackStamped = true
    }
    return true
  }

  // appendAtomic. The caller's thread drives the steps (prepare everywhere, commit on one
  // owner, apply on the others); see AgentLog.appendAtomic.

  private prepare(msg: PrepareMsg): void {
    const a: Atomic = {
      replyId: msg.id,
      expected: msg.ws.length,
      prepared: [],
      state: 'preparing',
      syncing: 0,
      failed: false,
    }
    this.atomics.set(msg.batch, a)
    let b = 0
    for (let i = 0; i < msg.ws.length; i++) {
      const count = msg.counts[i] as number
      const bodies = msg.bodies.slice(b, b + count)
      b += count
      this.enqueue(this.wsFile(msg.ws[i] as string), { id: 0, bodies, count, atomic: msg.batch })
    }
  }

  /** A workspace's part is built and held: once all of this owner's are, the caller hears of them. */
  private prepared(batch: Batch): void {
    const a = this.atomics.get(batch.atomic as number)
    if (a?.state !== 'preparing') {
      this.release(batch)
      return
    }
    a.prepared.push(batch)
    if (a.prepared.length < a.expected) return
    a.state = 'prepared'
    const parts: AtomicPart[] = a.prepared.map((p) => ({
      ws: p.file.key,
      ino: p.file.ino,
      offset: p.file.size,
      data: p.data,
      firstSeq: p.acks[1] as number,
      firstTs: p.acks[2] as number,
      count: p.reqs[0]?.count ?? 0,
    }))
    this.post({ t: 'reply', id: a.replyId, value: parts })
  }

  /** Gives a held part up: nothing was written, its seqs are free again. */
  private release(batch: Batch): void {
    const file = batch.file
    if (file.inFlight === batch) file.inFlight = null
    if (file.queue.length > 0) this.markReady(file)
    else this.settled(file)
  }

  private atomicFailed(batch: number, err: unknown): void {
    const a = this.atomics.get(batch)
    if (!a || a.state === 'done' || a.state === 'failed') return
    const replying = a.state === 'preparing'
    // Dropped: parts of it still queued are skipped when built (their batch is unknown).
    this.atomics.delete(batch)
    a.state = 'failed'
    for (const p of a.prepared) this.release(p)
    a.prepared = []
    if (replying) this.post({ t: 'reply', id: a.replyId, error: serializeError(err) })
  }

  private atomicCommit(msg: AtomicCommitMsg): void {
    const a = this.atomics.get(msg.batch)
    const j = this.journal
    if (a?.state !== 'prepared' || j === null || j.state === 'failed') {
      const err =
        a?.state !== 'prepared'
          ? Errors.JOURNAL(`atomic batch ${msg.batch} is not prepared here`)
          : j === null
            ? Errors.BAD_OPTION("appendAtomic needs the commit journal (durability: 'journal')", {
                field: 'durability',
              })
            : (j.error as Error)
      if (a) this.atomicFailed(msg.batch, err)
      this.post({ t: 'reply', id: msg.id, error: serializeError(err) })
      return
    }
    if (j.state === 'none') this.createJournal(j) // the group waits in pending until it is ready
    a.state = 'committing'
    const foreign: FramePart[] = msg.foreign.map((p) => ({
      header: setRecord(recordHeader(p.ws, p.ino), p.offset, p.data.length),
      data: Buffer.from(p.data.buffer, p.data.byteOffset, p.data.length),
    }))
    const group: AtomicGroup = {
      batch: msg.batch,
      replyId: msg.id,
      own: a.prepared,
      foreign,
      pin: foreign.length > 0 ? { syncedLsn: 0 } : null,
    }
    this.pending.push(group)
    this.startRound()
  }

  /** Another owner committed the batch: write the held parts, and make them durable after. */
  private apply(msg: ApplyMsg): void {
    const a = this.atomics.get(msg.batch)
    if (a?.state !== 'prepared') {
      this.post({
        t: 'reply',
        id: msg.id,
        error: serializeError(Errors.JOURNAL(`atomic batch ${msg.batch} is not prepared here`)),
      })
      return
    }
    a.state = 'done'
    for (const batch of a.prepared) {
      const file = batch.file
      try {
        this.io.write(file.fd, batch.data)
      } catch (err) {
        // Committed in the other owner's journal: acknowledged, written again when reopened.
        file.foreign ??= []
        file.foreign.push({ offset: file.size, data: batch.data })
        a.failed = true
        this.committedUnwritten(batch, err as Error)
        continue
      }
      // The fdatasync is submitted before finish() settles the file: settling runs a release
      // waiting for it, which would close the descriptor first, and `applying` keeps the file
      // from counting as idle (released, evicted) until the sync is done.
      a.syncing++
      file.applying++
      this.submit({ kind: 'foreign', file, batch: msg.batch }, file.fd, EMPTY, SYNC_FDATASYNC)
      this.finish(batch, null)
    }
    this.post({ t: 'reply', id: msg.id, value: true })
    if (a.syncing === 0) {
      this.atomics.delete(msg.batch)
      this.post({ t: 'applied', batch: msg.batch, ok: false })
    }
  }

  private foreignSynced(file: OwnedFile, batch: number, err: Error | null): void {
    file.applying--
    const a = this.atomics.get(batch)
    if (err !== null) {
      withPath(err, file.path)
      file.unapplied = true
      file.poisoned = Errors.WORKSPACE_POISONED(
        `${this.describe(file)} refuses appends after a failed fdatasync (${err.message}); reopen it (recover) to continue`,
        { workspace: file.key, file: file.path },
      )
      if (a) a.failed = true
    }
    if (a && --a.syncing === 0) {
      this.atomics.delete(batch)
      // Only when every part (not just this file's) is durable in its log may the committing
      // owner reuse the frame.
      this.post({ t: 'applied', batch, ok: !a.failed })
    }
    // Last: a close waiting for this owner to be idle looks again (the batch is gone now).
    this.settled(file)
  }

  private abort(msg: AbortMsg): void {
    const a = this.atomics.get(msg.batch)
    if (a && (a.state === 'preparing' || a.state === 'prepared')) {
      a.state = 'failed'
      for (const p of a.prepared) this.release(p)
      this.atomics.delete(msg.batch)
    }
    this.post({ t: 'reply', id: msg.id, value: true })
  }

  private ensureOpen(file: OwnedFile): void {
    if (file.fd >= 0) {
      this.lru.delete(file)
      this.lru.set(file, true)
      return
    }
    try {
      this.openNow(file)
    } catch (err) {
      if (!isOutOfDescriptors(err)) throw err
      // The process is out of descriptors (what else it opens counts too): idle files are
      // closed and the open is tried once more; then this append fails by name, and the next
      // one tries again.
      const closed = this.closeIdle(Math.max(8, this.lru.size >> 2))
      try {
        this.openNow(file)
      } catch (again) {
        if (!isOutOfDescriptors(again)) throw again
        throw this.outOfDescriptors(`open ${file.path}`, file.path, again, closed)
      }
    }
  }

  /** The named error of an append that found the process out of descriptors (NOA_BUSY). */
  private outOfDescriptors(what: string, path: string, err: unknown, closed: number): NoaError {
    const limit = openFileLimit()
    return Errors.BUSY(
      `cannot ${what}: the process is out of file descriptors (${(err as NodeJS.ErrnoException).code}${limit === null ? '' : `, ulimit -n ${limit}`}) with ${this.lru.size} files open by this owner after closing ${closed} idle ones; raise the limit or lower maxOpenFiles`,
      { file: path, resource: 'file descriptors' },
    )
  }

  /** Closes up to `n` idle open files, least recently used first; returns how many it closed. */
  private closeIdle(n: number): number {
    let closed = 0
    for (const f of [...this.lru.keys()]) {
      if (closed >= n) break
      if (f.idle && f.idleWaiters === null && this.closeFile(f) === null) closed++
    }
    this.stats.evictions += closed
    return closed
  }

  private openNow(file: OwnedFile): void {
    if (file.kind === 'raw') {
      this.openRaw(file) // never journaled: no journal to replay before it is used
      this.lru.set(file, true)
      return
    }
    const err = this.openWorkspaces([file]).get(file)
    if (err !== undefined) throw err
  }

  /**
   * Opens workspaces' logs together, with one look for dead journals: a pass that opens many (a
   * host with more live workspaces than open files, or a burst of new ones) lists the journal
   * folder and reads the quarantine once, not once a workspace. Each log is opened and locked
   * first, then the dead journals are looked for: whoever wrote entries of a log into a journal
   * held the log's lock, so once this owner holds it, every journal that may hold such entries
   * is one of a dead process, and is found; only then is the root lock taken, to replay them.
   * A log that does not exist yet is made after that, and only if no quarantined journal names
   * it. Returns the workspaces that could not be opened, with why.
   */
  private openWorkspaces(files: readonly OwnedFile[]): Map<OwnedFile, unknown> {
    const failed = new Map<OwnedFile, unknown>()
    const root = this.init.root
    const closeFd = (file: OwnedFile) => {
      if (file.fd < 0) return
      this.io.close(file.fd)
      file.fd = -1
    }
    const failAll = (err: unknown) => {
      for (const file of files) {
        if (failed.has(file) || this.lru.has(file)) continue
        closeFd(file)
        failed.set(file, err)
      }
      return failed
    }
    try {
      if (!this.logDirReady) {
        mkdirAnyDurable(this.io, root) // as the user named it
        withRootLock(root, () => mkdirDurable(this.io, root, this.init.logDir))
        this.logDirReady = true
        this.openLogDir()
      }
    } catch (err) {
      return failAll(err)
    }
    const missing = new Set<OwnedFile>()
    for (const file of files) {
      try {
        if (!this.openExisting(file)) missing.add(file)
      } catch (err) {
        failed.set(file, err)
      }
    }
    try {
      // The root lock only when there is something to replay: two owners (or processes)
      // opening workspaces at once do not wait for each other.
      if (deadJournalsIn(root)) withRootLock(root, () => recoverJournalsLocked(root))
    } catch (err) {
      return failAll(err)
    }
    const quarantined = quarantinedJournals(root)
    for (const file of files) {
      if (failed.has(file)) continue
      try {
        const q = quarantined.find((j) => j.workspaces.includes(file.key))
        if (q) throw quarantinedError(file.key, q)
        const created = missing.has(file) && this.openLocked(file, true)
        this.openedWorkspace(file, created)
      } catch (err) {
        closeFd(file)
        failed.set(file, err)
      }
    }
    return failed
  }

  /** Opens and locks an existing log; false when there is none (made later: openWorkspaces). */
  private openExisting(file: OwnedFile): boolean {
    try {
      file.fd = this.io.openAppend(file.path, false, true)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false
      throw this.lockError(file, openError(err, file.path, 'workspace log'))
    }
    return true
  }

  /** Makes room for one more open file by closing the least recently used idle ones. */
  private roomToOpen(): boolean {
    return this.makeRoom(1) === 1
  }

  /**
   * Makes room for `n` more open files, as far as it can, by closing the least recently used
   * idle ones (the logs among them not yet durable made so together, see syncLogsTogether);
   * returns how many may be opened now.
   */
  private makeRoom(n: number): number {
    const max = this.init.maxOpenFiles
    const over = this.lru.size + n - max
    if (over > 0) {
      // Least recently used first, those a checkpoint already made durable before the others:
      // closing one of those costs no sync.
      const victims: OwnedFile[] = []
      const dirty: OwnedFile[] = []
      let looked = 0
      for (const file of this.lru.keys()) {
        if (victims.length >= over || looked++ > over * 8 + 256) break
        if (!file.idle || file.idleWaiters !== null) continue
        if (file.dirty || file.unapplied) dirty.push(file)
        else victims.push(file)
      }
      for (const file of dirty) {
        if (victims.length >= over) break
        victims.push(file)
      }
      this.syncLogsTogether(victims)
      for (const file of victims) if (this.closeFile(file) === null) this.stats.evictions++
    }
    return Math.max(0, Math.min(n, max - this.lru.size))
  }

  /**
   * Opens (creating when missing) and locks; returns whether the file was created. The addon
   * refuses a symlink or a non-regular file planted where the file should be.
   */
  private openLocked(file: OwnedFile, lock: boolean): boolean {
    const what = file.kind === 'ws' ? 'workspace log' : 'file'
    let created = false
    try {
      try {
        file.fd = this.io.openAppend(file.path, false, lock)
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
        file.fd = this.io.openAppend(file.path, true, lock)
        created = true
      }
    } catch (err) {
      throw this.lockError(file, openError(err, file.path, what))
    }
    return created
  }

  private lockError(file: OwnedFile, err: unknown): unknown {
    const e = err as NodeJS.ErrnoException
    if (e.syscall === 'flock' && (e.code === 'EAGAIN' || e.code === 'EWOULDBLOCK')) {
      const what = file.kind === 'ws' ? `workspace ${file.key}` : `file ${file.path}`
      return Errors.WORKSPACE_LOCKED(
        `${what} is locked by ${describeHolder(file.path)} (${file.path}); one writer at a time may hold it`,
        { workspace: file.kind === 'ws' ? file.key : undefined, file: file.path },
      )
    }
    return err
  }

  /** A workspace's log, opened and locked: its torn tail cut, its counters and sidecar read. */
  private openedWorkspace(file: OwnedFile, created: boolean): void {
    // Its folder entry is made durable with those of the other workspaces created in the same
    // pass (syncCreated), before anything is committed to it.
    if (created) this.dirUnsynced.add(file.key)
    try {
      const st = fstatSync(file.fd, { bigint: true })
      file.ino = st.ino
      file.dev = st.dev
      const { truncatedBytes, size, lastSeq, lastTs } = this.recoverTail(file, true, Number(st.size))
      file.size = size
      file.lastSeq = lastSeq
      file.lastTs = lastTs
      this.openSidecar(file, created)
      file.openCreated = created
      file.openTruncated = truncatedBytes
      file.openSize = size
      file.openLastSeq = lastSeq
      file.openLastTs = lastTs
    } catch (err) {
      this.io.close(file.fd)
      file.fd = -1
      throw err
    }
    if (this.journal !== null) {
      file.record = recordHeader(file.key, file.ino)
      file.journaled = true
    }
    this.lru.set(file, true)
    this.stats.opens++
  }

  /**
   * fsyncs the log folder when workspaces were created since the last time it was: one fsync for
   * all of them. Returns the error if it failed (those workspaces stay to be synced: nothing is
   * committed to them until a later fsync succeeds), null otherwise.
   */
  private syncCreated(): Error | null {
    if (this.dirUnsynced.size === 0) return null
    const dir = this.init.logDir
    try {
      try {
        this.io.fsyncDir(dir)
      } catch (err) {
        if (!isOutOfDescriptors(err)) throw err
        // Out of descriptors, as an open can be (ensureOpen): idle files closed, tried again.
        const closed = this.closeIdle(Math.max(8, this.lru.size >> 2))
        try {
          this.io.fsyncDir(dir)
        } catch (again) {
          if (!isOutOfDescriptors(again)) throw again
          return this.outOfDescriptors(`fsync ${dir} for the workspaces created`, dir, again, closed)
        }
      }
    } catch (err) {
      return withPath(err, dir) as Error
    }
    this.stats.dirSyncs++
    this.dirUnsynced.clear()
    return null
  }

  private openRaw(file: OwnedFile): void {
    const options = file.rawOptions as RawAppendOptions
    // The caller named this folder (a transcript folder, say) and checks what is below it.
    mkdirAnyDurable(this.io, dirname(file.path))
    const created = this.openLocked(file, options.lock)
    try {
      if (created) this.io.fsyncDir(dirname(file.path))
      file.size = options.repairTail ? this.recoverTail(file, false).size : inspectTail(file.fd).size
    } catch (err) {
      this.io.close(file.fd)
      file.fd = -1
      throw err
    }
  }

  /**
   * Opens (or starts) the workspace's checksum sidecar. Records past its first invalid one, or
   * reaching past the log's size, are cut; a sidecar of another log (inode) starts over. The
   * next block starts at the log's end: what the sidecar did not cover stays unverified. A
   * sidecar that cannot be used never fails the workspace: it only goes without checksums.
   */
  private openSidecar(file: OwnedFile, created: boolean): void {
    const path = sidecarPath(this.init.root, file.key)
    let fd = -1
    try {
      if (!this.sumDirReady) {
        mkdirDurable(this.io, this.init.root, join(this.init.root, SIDECAR_DIR))
        this.sumDirReady = true
      }
      const start = { start: file.size, crc: 0, firstSeq: file.lastSeq + 1, entries: 0 }
      if (created) {
        // A new log: its sidecar is made with its first record (appendSum), so that creating a
        // workspace makes one file, not two (a file creation costs this disk 0.25-0.7 ms).
        file.sum = { fresh: true, ...start }
        return
      }
      const found = readSidecar(path, file.ino, file.size)
      if (found !== null && found.size > found.validBytes) {
        fd = this.io.openAppend(path, false, false)
        this.io.ftruncate(fd, found.validBytes)
        this.io.close(fd)
        fd = -1
      }
      // None, or one of another log (inode): started over with the next record.
      file.sum = { fresh: found === null, ...start }
    } catch {
      if (fd >= 0) this.io.close(fd)
      file.sum = null
    }
  }

  /** Adds committed bytes to the block being summed; a full block gets its record. */
  private summed(file: OwnedFile, data: Buffer, entries: number, end: boolean): void {
    const sum = file.sum
    if (sum === null) return
    if (data.length > 0) {
      sum.crc = crc32c(data, sum.crc)
      sum.entries += entries
    }
    const length = file.size - sum.start
    if (length < BLOCK_BYTES && !end) return
    if (length === 0) return
    const record = encodeSumRecord({
      offset: sum.start,
      firstSeq: sum.firstSeq,
      length,
      entries: sum.entries,
      crc: sum.crc,
    })
    try {
      this.appendSum(file, sum, record)
    } catch {
      file.sum = null // the checksums are advisory: the log goes on without them
      return
    }
    sum.start = file.size
    sum.crc = 0
    sum.firstSeq = file.lastSeq + 1
    sum.entries = 0
  }

  /**
   * Appends a record to the sidecar through a descriptor of its own, started over first (made,
   * or cut to a new header) when it is fresh. Never synced on its own, the last (partial) one at
   * a close included: a sidecar is advisory (a record lost to a power cut leaves its block
   * unverified, one reaching past its log's durable end is cut when the log is next opened), and
   * an fdatasync per record cost every close of an idle workspace a device flush (the cliff of a
   * host with more live workspaces than open files). The syncfs of a checkpoint or of the
   * owner's close makes them durable with everything else.
   */
  private appendSum(file: OwnedFile, sum: NonNullable<OwnedFile['sum']>, record: Buffer): void {
    const fd = this.io.openAppend(sidecarPath(this.init.root, file.key), sum.fresh, false)
    try {
      if (sum.fresh) {
        this.io.ftruncate(fd, 0) // a sidecar left by a removed log of the same name
        this.io.write(fd, encodeSumHeader(file.ino))
        sum.fresh = false
      }
      if (record.length > 0) this.io.write(fd, record)
    } finally {
      this.io.close(fd)
    }
  }

  /** Cuts a partial last line (ftruncate + fdatasync) and reads the last seq and ts. */
  private recoverTail(file: OwnedFile, counters = true, size?: number) {
    // Read through the locked descriptor itself: no second open that a swapped file could divert.
    const tail = inspectTail(file.fd, size)
    const { lastSeq, lastTs } = counters ? countersOf(file.path, tail) : { lastSeq: 0, lastTs: 0 }
    let truncatedBytes = 0
    if (tail.validLength < tail.size) {
      truncatedBytes = tail.size - tail.validLength
      try {
        this.io.ftruncate(file.fd, tail.validLength)
        this.io.fdatasync(file.fd)
      } catch (err) {
        throw withPath(err, file.path)
      }
    }
    return { truncatedBytes, size: tail.validLength, lastSeq, lastTs }
  }

  /**
   * Closes a file (releasing its lock) once its journaled bytes are durable in it: fdatasync, or
   * for bytes that never reached it, written again from the journal first. If that fails the
   * file stays open and locked (the journal holds its only copy; no other writer may take it)
   * and the error is returned.
   */
  private closeFile(file: OwnedFile): Error | null {
    if (file.fd >= 0) {
      const err = this.makeDurable(file)
      if (err !== null) return err
      if (file.sum !== null) {
        this.summed(file, EMPTY, 0, true) // the last, partial block (written, not synced: see appendSum)
        file.sum = null
      }
      try {
        this.io.close(file.fd)
      } catch {
        // close releases the descriptor (and its flock) even when it reports an error
      }
      file.fd = -1
    }
    this.lru.delete(file)
    this.forget(file)
    return null
  }

  private makeDurable(file: OwnedFile): Error | null {
    if (!file.dirty && !file.unapplied) return null
    try {
      if (file.unapplied) this.reapply(file)
      else this.io.fdatasync(file.fd)
    } catch (err) {
      return withPath(err, file.path) as Error
    }
    file.syncedLsn = file.lastLsn
    file.unapplied = false
    return null
  }

  /** Writes a file's records again from the live journal at their offsets, then fdatasyncs it. */
  private reapply(file: OwnedFile): void {
    const j = this.journal as Journal
    let scanned: ReturnType<typeof scanJournal>
    try {
      scanned = scanJournal(j.fd)
    } catch (err) {
      throw Errors.JOURNAL(`${j.path}: ${(err as Error).message}`, { journal: j.path })
    }
    const target = file.kind === 'ws' ? file.key : file.path
    // A second descriptor without O_APPEND (pwrite on an O_APPEND one appends on Linux); the
    // owner's descriptor keeps the lock.
    const fd = this.io.openPositional(file.path)
    try {
      for (const r of scanned.records) if (r.target === target) this.io.pwrite(fd, r.data, r.offset)
      for (const part of file.foreign ?? []) this.io.pwrite(fd, part.data, part.offset)
      this.io.fdatasync(fd)
    } finally {
      this.io.close(fd)
    }
    file.foreign = null
  }

  /** Drops all state: the next use reopens the file and recovers its tail again. */
  private forget(file: OwnedFile): void {
    if (file.fd >= 0 || !file.idle) return
    if (file.kind === 'ws') this.ws.delete(file.key)
    else this.raw.delete(file.key)
  }

  private whenIdle(file: OwnedFile, fn: () => void): void {
    if (file.idle) fn()
    else {
      file.idleWaiters ??= []
      file.idleWaiters.push(fn)
    }
  }

  private settled(file: OwnedFile): void {
    // One thing of the file ended; another (a checkpoint's or an atomic part's fdatasync) may
    // still be running on its descriptor, which a waiting release must not close under it.
    if (file.idle && file.idleWaiters !== null) {
      const waiters = file.idleWaiters
      file.idleWaiters = null
      for (const fn of waiters) fn()
    }
    if (this.waiting.size > 0) {
      for (const f of this.waiting) this.markReady(f)
      this.waiting.clear()
    }
    if (this.closing) this.checkAllIdle()
  }

  private allIdleWaiter: (() => void) | null = null

  private whenAllIdle(fn: () => void): void {
    this.allIdleWaiter = fn
    this.checkAllIdle()
  }

  private checkAllIdle(): void {
    if (this.allIdleWaiter === null) return
    // A round, a checkpoint or the journal's allocation still running: its completion calls back.
    if (this.round !== null || this.pending.length > 0 || this.checkpoint !== null) return
    if (this.journal?.state === 'creating') {
      this.journal.abort() // not needed any more: closing does not wait for its zero-fill
      return
    }
    if (this.atomics.size > 0 || this.fileSyncs !== null || this.placing > 0) return
    for (const file of [...this.ws.values(), ...this.raw.values()]) if (!file.idle) return
    const fn = this.allIdleWaiter
    this.allIdleWaiter = null
    fn()
  }

  status(): OwnerStatus {
    return {
      index: this.init.index,
      open: this.lru.size,
      maxOpenFiles: this.init.maxOpenFiles,
      workspaces: [...this.ws.values()].filter((f) => f.fd >= 0).map((f) => f.key),
      rawFiles: [...this.raw.values()].filter((f) => f.fd >= 0).map((f) => f.key),
      ...this.stats,
      journal: this.journal && {
        state: this.journal.state,
        path: this.journal.path,
        size: this.journal.size,
        used: this.journal.state === 'ready' ? this.journal.used() : 0,
        frames: this.journal.frames.length,
        error: this.journal.error?.message ?? null,
      },
      pool: this.io.poolStats(),
      quarantined: quarantinedJournals(this.init.root),
    }
  }
}

/** The next message already waiting on the port, without waiting for one. */
function takeMessage(port: MessagePort | LocalPort): { message: unknown } | undefined {
  return port instanceof LocalPort ? port.take() : receiveMessageOnPort(port)
}

/** Bytes a batch's files take in a journal frame (record headers and data). */
function filesBytes(batch: Batch): number {
  let n = 0
  if (batch.files) for (const f of batch.files) n += 32 + Buffer.byteLength(f.path) + f.data.length
  return n
}

function frameBytes(batch: Batch): number {
  return FRAME_HEADER + recordBytes(batch.file, 32) + batch.data.length + filesBytes(batch)
}

function asBuffer(data: Uint8Array): Buffer {
  return Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength)
}

/**
 * mkdir -p of `dir` below `base`, refusing a symlink or a file where a folder should be, then
 * fsync of the parent of each folder it created, so the new entries are durable.
 */
export function mkdirDurable(io: Pick<LogIo, 'fsyncDir'>, base: string, dir: string): void {
  for (const created of mkdirBelow(base, dir)) io.fsyncDir(dirname(created))
}

/** mkdir -p of a folder the caller chose, then fsync of the parent of each folder it created. */
function mkdirAnyDurable(io: Pick<LogIo, 'fsyncDir'>, dir: string): void {
  const first = mkdirSync(dir, { recursive: true, mode: 0o777 })
  if (first === undefined) return
  let d = dir
  for (;;) {
    const parent = dirname(d)
    io.fsyncDir(parent)
    if (d === first || parent === d) break
    d = parent
  }
}

/**
 * The io layer, registering every descriptor it opens in the shared table and clearing it when
 * closed: if this thread dies, the caller's thread closes what is left (releasing the locks).
 */
function registering(io: LogIo, table: Int32Array): LogIo {
  // This thread is the table's only writer while it lives (the caller's thread empties it only
  // once the thread is gone), so it keeps the free slots and each descriptor's slot itself: a
  // scan of the table for each open and close cost a host with thousands of logs open more
  // than the opens themselves (~580 ms of a 5 s run at 100,000 workspaces, --cpu-prof).
  const free: number[] = []
  for (let i = table.length - 1; i >= 0; i--) if (Atomics.load(table, i) === -1) free.push(i)
  const slotOf = new Map<number, number>()
  const add = (fd: number) => {
    const i = slotOf.get(fd) ?? free.pop() // a number closed behind this layer's back: its slot again
    if (i === undefined) return
    Atomics.store(table, i, fd)
    slotOf.set(fd, i)
  }
  const remove = (fd: number) => {
    const i = slotOf.get(fd)
    if (i === undefined) return
    slotOf.delete(fd)
    Atomics.store(table, i, -1)
    free.push(i)
  }
  setFdHook((fd, open) => (open ? add(fd) : remove(fd)))
  const opened = (fd: number) => {
    add(fd)
    return fd
  }
  return {
    ...io,
    openAppend: (path, create, lock) => opened(io.openAppend(path, create, lock)),
    createFile: (path, mode) => opened(io.createFile(path, mode)),
    openPositional: (path) => opened(io.openPositional(path)),
    // The log folder an owner holds open for its syncfs, and a checkpoint's folder syncs.
    openDir: (path) => opened(io.openDir(path)),
    close: (fd) => {
      remove(fd)
      io.close(fd)
    },
  }
}

/**
 * The io layer, adding 1 to the shared close counter before each close: an ack's counter value
 * then vouches that the file it names was not closed (its lock not let go) since (LOG_HELD).
 */
/** A workspace's journal record header, made again when it was dropped (OwnedFile.record). */
function recordOf(file: OwnedFile): Buffer {
  file.record ??= recordHeader(file.key, file.ino)
  return file.record
}

/** Its record header's size, without making it (`none` when it has none: not in the journal). */
function recordBytes(file: OwnedFile, none: number): number {
  return file.journaled ? RECORD_HEADER + Buffer.byteLength(file.key, 'utf8') : none
}

function countingCloses(io: LogIo, closes: Int32Array): LogIo {
  return {
    ...io,
    close: (fd) => {
      Atomics.add(closes, 0, 1)
      io.close(fd)
    },
  }
}

export default async function owner(init: OwnerInit): Promise<OwnerStatus> {
  const loaded = countingCloses(await loadIo(init.ioModule, init.ioOptions), init.closes)
  const io = init.fds ? registering(loaded, init.fds) : loaded
  const o = new Owner(init, io)
  return new Promise<OwnerStatus>((resolve) => {
    o.onClosed = () => {
      init.port.close()
      resolve(o.status())
    }
    init.port.on('message', (msg: unknown) => o.receive(msg as ToOwner))
  })
}
