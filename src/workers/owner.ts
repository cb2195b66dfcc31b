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
 *
 * This file is the message loop (handle, receive, pump) and the module AgentLog starts; the other
 * jobs are in the layers below it, listed in owner-state.ts.
 */
import { type MessagePort, receiveMessageOnPort } from 'node:worker_threads'
import { compactLogFile } from '../engine/compact.js'
import { isOutOfDescriptors } from '../engine/descriptors.js'
import { Errors, serializeError } from '../engine/errors.js'
import { FRAME_HEADER } from '../engine/journal-format.js'
import { quarantinedJournals, setFdHook } from '../engine/journal-recovery.js'
import { LocalPort } from '../engine/local-port.js'
import { PHASE, stamp } from '../engine/phases.js'
import type {
  FromOwner,
  OpenReport,
  OwnerInit,
  OwnerStatus,
  RawAppendOptions,
  ToOwner,
} from '../engine/protocol.js'
import { type LogIo, loadIo } from './io.js'
import { OwnerAtomic } from './owner-atomic.js'
import { type Batch, filesBytes, NO_REQS, OwnedFile, type Req, recordBytes } from './owner-state.js'

class Owner extends OwnerAtomic {
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
        this.post({ t: 'reply', id: msg.id, value: this.status(msg.held === true) })
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

  protected override post(msg: FromOwner): void {
    // Acks go out before anything posted after them (a close reply must not overtake them).
    if (msg.t !== 'acks' && this.acks.length > 0) this.flushAcks()
    this.init.port.postMessage(msg)
  }

  protected reply(id: number, fn: () => unknown): void {
    try {
      this.post({ t: 'reply', id, value: fn() })
    } catch (err) {
      this.post({ t: 'reply', id, error: serializeError(err) })
    }
  }

  protected override wsFile(name: string): OwnedFile {
    let file = this.ws.get(name)
    if (!file) {
      file = new OwnedFile('ws', name, this.init.logDir, null)
      this.ws.set(name, file)
    }
    return file
  }

  protected rawFile(path: string, options: RawAppendOptions): OwnedFile {
    let file = this.raw.get(path)
    if (!file) {
      file = new OwnedFile('raw', path, '', options)
      this.raw.set(path, file)
    }
    return file
  }

  protected override enqueue(file: OwnedFile, req: Req): void {
    if (file.poisoned) {
      this.fail([req], file.poisoned)
      return
    }
    if (file.queue.length === 0) file.queue = [req]
    else file.queue.push(req)
    if (file.inFlight === null) this.markReady(file)
  }

  protected override markReady(file: OwnedFile): void {
    this.ready.add(file)
    if (!this.pumpScheduled && !this.receiving) {
      this.pumpScheduled = true
      queueMicrotask(() => this.pump())
    }
  }

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
  protected spin(): ToOwner | undefined {
    const limit = this.init.spinMicros
    if (limit <= 0 || this.closing) return undefined
    const until = performance.now() + limit / 1000
    do {
      const m = takeMessage(this.init.port)
      if (m !== undefined) return m.message as ToOwner
    } while (performance.now() < until)
    return undefined
  }

  protected override pump(): void {
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
    const openFailed = toOpen.length > 0 ? this.openWorkspaces(toOpen, true) : null
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
        file.queue = NO_REQS
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
        file.queue = NO_REQS
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

  status(held = false): OwnerStatus {
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
      poisoned: [...this.ws.values()].flatMap((f) =>
        f.poisoned ? [{ workspace: f.key, code: f.poisoned.code, message: f.poisoned.message }] : [],
      ),
      held: held ? this.kept() : null,
    }
  }

  /** OwnerStatus.held: every idle file's fields (and its sum's) looked at, whatever they are. */
  protected kept(): OwnerStatus['held'] {
    let files = 0
    let idle = 0
    let holding = 0
    for (const map of [this.ws, this.raw]) {
      for (const file of map.values()) {
        files++
        if (!file.idle || file.dirty) continue
        idle++
        if (holdsSomething(file) || (file.sum !== null && holdsSomething(file.sum))) holding++
      }
    }
    return { files, idle, holding }
  }
}

/** Whether an object's own fields keep a buffer, a typed array, or a non-empty array, set or map. */
function holdsSomething(o: object): boolean {
  for (const v of Object.values(o)) {
    if (v === null || typeof v !== 'object') continue
    if (ArrayBuffer.isView(v) || v instanceof ArrayBuffer) return true
    if (Array.isArray(v) ? v.length > 0 : v instanceof Map || v instanceof Set ? v.size > 0 : false)
      return true
  }
  return false
}

/** The next message already waiting on the port, without waiting for one. */
function takeMessage(port: MessagePort | LocalPort): { message: unknown } | undefined {
  return port instanceof LocalPort ? port.take() : receiveMessageOnPort(port)
}

function frameBytes(batch: Batch): number {
  return FRAME_HEADER + recordBytes(batch.file, 32) + batch.data.length + filesBytes(batch)
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
