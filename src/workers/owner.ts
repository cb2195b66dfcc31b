/**
 * The owner worker. For the life of the pool it is the only writer of the workspaces routed to
 * it: it holds their fds (O_APPEND, flocked), assigns seq and ts, and group-commits whatever is
 * queued for a file into one write + one fdatasync. Commits of different files go to the addon's
 * thread pool, so many fdatasyncs are in flight at once; a lone commit on an otherwise idle
 * worker runs on this thread, which saves two thread hops on the serial path.
 */
import { mkdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { receiveMessageOnPort } from 'node:worker_threads'
import { nextTs, nowMicros } from '../engine/clock.js'
import { formatLine } from '../engine/entry.js'
import { NoaError, serializeError, withPath } from '../engine/errors.js'
import { checkOpened, mkdirBelow, openError } from '../engine/files.js'
import { describeHolder } from '../engine/locks.js'
import { SYNC_FDATASYNC, SYNC_SYNCFS, type SyncMode } from '../engine/native.js'
import type {
  FromOwner,
  OpenReport,
  OwnerInit,
  OwnerStatus,
  RawAppendOptions,
  ToOwner,
} from '../engine/protocol.js'
import { countersOf, inspectTail } from '../engine/recovery.js'
import { type LogIo, loadIo } from './io.js'

const EMPTY = Buffer.alloc(0)

interface Req {
  id: number
  /** Entry bodies (workspace), whole lines (replica), or one chunk of bytes (raw file). */
  bodies: string[]
  count: number
  /** Lines copied from another log: they keep their seq and ts, which must continue this one. */
  replica?: { firstSeq: number; firstTs: number; lastSeq: number; lastTs: number }
}

interface Batch {
  file: OwnedFile
  reqs: Req[]
  /** (id, firstSeq, firstTs) per request. */
  acks: number[]
  data: Buffer
  lastSeq: number
  lastTs: number
}

class OwnedFile {
  fd = -1
  /** Bytes known durable: the file is cut back to this after a failed commit. */
  size = 0
  lastSeq = 0
  lastTs = 0
  queue: Req[] = []
  inFlight: Batch | null = null
  poisoned: NoaError | null = null
  report: OpenReport | null = null
  idleWaiters: Array<() => void> = []

  constructor(
    readonly kind: 'ws' | 'raw',
    readonly key: string,
    readonly path: string,
    readonly rawOptions: RawAppendOptions | null,
  ) {}

  get idle(): boolean {
    return this.inFlight === null && this.queue.length === 0
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
  private readonly jobs = new Map<number, Batch[]>()
  private nextJob = 1
  private inFlight = 0
  private pumpScheduled = false
  private acks: number[] = []
  private acksScheduled = false
  private logDirReady = false
  private closing = false
  private stats = { commits: 0, entries: 0, inlineCommits: 0 }

  constructor(
    private readonly init: OwnerInit,
    private readonly io: LogIo,
  ) {
    io.setMaxThreads(init.syncThreads)
    io.setCompletionHandler((id, err) => this.completed(id, err))
  }

  handle(msg: ToOwner): void {
    switch (msg.t) {
      case 'append': {
        let b = 0
        for (let i = 0; i < msg.ids.length; i++) {
          const count = msg.counts[i] as number
          const req: Req = { id: msg.ids[i] as number, bodies: msg.bodies.slice(b, b + count), count }
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
          replica: { firstSeq, firstTs, lastSeq, lastTs },
        }
        this.enqueue(this.wsFile(msg.ws), req)
        break
      }
      case 'open':
        this.reply(msg.id, () => {
          const file = this.wsFile(msg.ws)
          this.ensureOpen(file)
          return file.report
        })
        break
      case 'release': {
        const file = this.ws.get(msg.target) ?? this.raw.get(msg.target)
        if (!file) {
          this.post({ t: 'reply', id: msg.id, value: false })
          break
        }
        this.whenIdle(file, () => {
          this.closeFile(file)
          this.post({ t: 'reply', id: msg.id, value: true })
        })
        break
      }
      case 'status':
        this.post({ t: 'reply', id: msg.id, value: this.status() })
        break
      case 'close':
        this.closing = true
        this.whenAllIdle(() => {
          for (const file of [...this.lru.keys()]) this.closeFile(file)
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
      file = new OwnedFile('ws', name, join(this.init.logDir, `${name}.log`), null)
      this.ws.set(name, file)
    }
    return file
  }

  private rawFile(path: string, options: RawAppendOptions): OwnedFile {
    let file = this.raw.get(path)
    if (!file) {
      file = new OwnedFile('raw', path, path, options)
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
    this.receiving = true
    try {
      this.handle(first)
      for (
        let m = receiveMessageOnPort(this.init.port);
        m !== undefined;
        m = receiveMessageOnPort(this.init.port)
      ) {
        this.handle(m.message as ToOwner)
      }
    } finally {
      this.receiving = false
    }
    if (this.ready.size > 0) this.pump()
  }

  private pump(): void {
    this.pumpScheduled = false
    const batches: Batch[] = []
    for (const file of this.ready) {
      if (file.inFlight !== null || file.queue.length === 0) continue
      if (file.fd < 0 && !this.roomToOpen()) {
        // At the open-file bound with every open file busy: wait for one to settle.
        this.waiting.add(file)
        continue
      }
      try {
        this.ensureOpen(file)
      } catch (err) {
        const reqs = file.queue
        file.queue = []
        this.fail(reqs, err)
        this.forget(file)
        continue
      }
      const batch = this.build(file)
      if (batch) batches.push(batch)
    }
    this.ready.clear()
    if (batches.length === 0) return
    const inline = this.init.inlineCommit && this.inFlight === 0 && batches.length === 1
    if (this.init.durability === 'syncfs') this.commitRound(batches, inline)
    else for (const batch of batches) this.commitOne(batch, inline)
  }

  /** fdatasync mode: each file's batch is written and flushed on its own. */
  private commitOne(batch: Batch, inline: boolean): void {
    this.stats.commits++
    if (!inline) {
      this.submit([batch], batch.file.fd, batch.data, SYNC_FDATASYNC)
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

  /**
   * syncfs mode: every ready file's batch is written here (page cache only), then one syncfs
   * makes the whole round durable: one flush for many workspaces instead of one each.
   */
  private commitRound(batches: Batch[], inline: boolean): void {
    const written: Batch[] = []
    for (const batch of batches) {
      try {
        this.io.write(batch.file.fd, batch.data)
        written.push(batch)
      } catch (err) {
        this.finish(batch, err)
      }
    }
    const first = written[0]
    if (first === undefined) return
    this.stats.commits++
    if (!inline) {
      this.submit(written, first.file.fd, EMPTY, SYNC_SYNCFS)
      return
    }
    this.stats.inlineCommits++
    let error: unknown = null
    try {
      this.io.syncfs(first.file.fd)
    } catch (err) {
      error = err
    }
    for (const batch of written) this.finish(batch, error)
    this.flushAcks()
  }

  private submit(batches: Batch[], fd: number, data: Buffer, mode: SyncMode): void {
    const id = this.nextJob++
    this.jobs.set(id, batches)
    this.inFlight++
    this.io.commit(id, fd, data, mode)
  }

  private build(file: OwnedFile): Batch | null {
    let reqs = file.queue
    file.queue = []
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
          if (r.firstSeq !== seq + 1 || r.firstTs <= ts) {
            refused ??= []
            refused.push(req)
            this.fail(
              [req],
              new NoaError(
                'NOA_REPLICA_GAP',
                `workspace ${file.key}: copied lines start at seq ${r.firstSeq} ts ${r.firstTs}, but the log is at seq ${seq} ts ${ts}`,
                { workspace: file.key, seq: r.firstSeq },
              ),
            )
            continue
          }
          acks.push(req.id, r.firstSeq, r.firstTs)
          for (const line of req.bodies) text += line
          seq = r.lastSeq
          ts = r.lastTs
          continue
        }
        acks.push(req.id, seq + 1, nextTs(ts, now))
        for (const body of req.bodies) {
          seq++
          ts = nextTs(ts, now)
          text += formatLine(seq, body, ts)
        }
      }
      if (refused) reqs = reqs.filter((r) => !refused.includes(r))
      if (reqs.length === 0) {
        this.settled(file)
        return null
      }
    } else {
      for (const req of reqs) {
        acks.push(req.id, 0, 0)
        text += req.bodies[0]
      }
    }
    const batch: Batch = { file, reqs, acks, data: Buffer.from(text, 'utf8'), lastSeq: seq, lastTs: ts }
    file.inFlight = batch
    return batch
  }

  private completed(id: number, err: Error | null): void {
    const batches = this.jobs.get(id)
    if (!batches) return
    this.jobs.delete(id)
    this.inFlight--
    for (const batch of batches) this.finish(batch, err)
  }

  private finish(batch: Batch, err: unknown): void {
    const file = batch.file
    file.inFlight = null
    if (err === null) {
      file.size += batch.data.length
      file.lastSeq = batch.lastSeq
      file.lastTs = batch.lastTs
      this.stats.entries += batch.reqs.reduce((n, r) => n + r.count, 0)
      for (const a of batch.acks) this.acks.push(a)
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
        file.poisoned = new NoaError(
          'NOA_WORKSPACE_POISONED',
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
  }

  private fail(reqs: Req[], err: unknown): void {
    if (reqs.length === 0) return
    this.post({ t: 'fail', ids: reqs.map((r) => r.id), error: serializeError(err) })
  }

  private ensureOpen(file: OwnedFile): void {
    if (file.fd >= 0) {
      this.lru.delete(file)
      this.lru.set(file, true)
      return
    }
    if (file.kind === 'ws') this.openWorkspace(file)
    else this.openRaw(file)
    this.lru.set(file, true)
  }

  /** Makes room for one more open file by closing the least recently used idle ones. */
  private roomToOpen(): boolean {
    if (this.lru.size < this.init.maxOpenFiles) return true
    for (const file of this.lru.keys()) {
      if (file.idle && file.idleWaiters.length === 0) {
        this.closeFile(file)
        if (this.lru.size < this.init.maxOpenFiles) return true
      }
    }
    return false
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
    checkOpened(file.fd, file.path, what)
    return created
  }

  private lockError(file: OwnedFile, err: unknown): unknown {
    const e = err as NodeJS.ErrnoException
    if (e.syscall === 'flock' && (e.code === 'EAGAIN' || e.code === 'EWOULDBLOCK')) {
      const what = file.kind === 'ws' ? `workspace ${file.key}` : `file ${file.path}`
      return new NoaError(
        'NOA_WORKSPACE_LOCKED',
        `${what} is locked by ${describeHolder(file.path)} (${file.path}); one writer at a time may hold it`,
        { workspace: file.kind === 'ws' ? file.key : undefined, file: file.path },
      )
    }
    return err
  }

  private openWorkspace(file: OwnedFile): void {
    if (!this.logDirReady) {
      mkdirAnyDurable(this.io, this.init.root) // the root the user named: created as named
      mkdirDurable(this.io, this.init.root, this.init.logDir)
      this.logDirReady = true
    }
    const created = this.openLocked(file, true)
    try {
      if (created) this.io.fsyncDir(this.init.logDir)
      const { truncatedBytes, size, lastSeq, lastTs } = this.recoverTail(file)
      file.size = size
      file.lastSeq = lastSeq
      file.lastTs = lastTs
      file.report = { workspace: file.key, file: file.path, created, truncatedBytes, size, lastSeq, lastTs }
    } catch (err) {
      this.io.close(file.fd)
      file.fd = -1
      throw err
    }
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

  /** Cuts a partial last line (ftruncate + fdatasync) and reads the last seq and ts. */
  private recoverTail(file: OwnedFile, counters = true) {
    // Read through the locked descriptor itself: no second open that a swapped file could divert.
    const tail = inspectTail(file.fd)
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

  private closeFile(file: OwnedFile): void {
    if (file.fd >= 0) {
      try {
        this.io.close(file.fd)
      } catch {
        // close releases the descriptor (and its flock) even when it reports an error
      }
      file.fd = -1
    }
    this.lru.delete(file)
    this.forget(file)
  }

  /** Drops all state: the next use reopens the file and recovers its tail again. */
  private forget(file: OwnedFile): void {
    if (file.fd >= 0 || !file.idle) return
    if (file.kind === 'ws') this.ws.delete(file.key)
    else this.raw.delete(file.key)
  }

  private whenIdle(file: OwnedFile, fn: () => void): void {
    if (file.idle) fn()
    else file.idleWaiters.push(fn)
  }

  private settled(file: OwnedFile): void {
    const waiters = file.idleWaiters
    file.idleWaiters = []
    for (const fn of waiters) fn()
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
    for (const file of [...this.ws.values(), ...this.raw.values()]) if (!file.idle) return
    const fn = this.allIdleWaiter
    this.allIdleWaiter = null
    fn()
  }

  status(): OwnerStatus {
    return {
      index: this.init.index,
      open: this.lru.size,
      workspaces: [...this.ws.values()].filter((f) => f.fd >= 0).map((f) => f.key),
      rawFiles: [...this.raw.values()].filter((f) => f.fd >= 0).map((f) => f.key),
      ...this.stats,
      pool: this.io.poolStats(),
    }
  }
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

export default async function owner(init: OwnerInit): Promise<OwnerStatus> {
  const io = await loadIo(init.ioModule, init.ioOptions)
  const o = new Owner(init, io)
  return new Promise<OwnerStatus>((resolve) => {
    o.onClosed = () => {
      init.port.close()
      resolve(o.status())
    }
    init.port.on('message', (msg: ToOwner) => o.receive(msg))
  })
}
