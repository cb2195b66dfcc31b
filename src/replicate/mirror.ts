/**
 * The mirror (`noa replicate pull`): reads the stream in order from its checkpoint and rebuilds
 * each workspace's log byte for byte through the engine (`AgentLog.appendReplicated`: the same
 * owner workers, locks and fdatasync as any append, with the origin's seq and ts kept).
 *
 * Per workspace, an entry whose seq the local log already has is skipped after checking that
 * the local line is the same bytes (a restart after a crash re-reads a little); the next seq is
 * appended; anything further is a gap and an error, never a silent hole. Objects are written
 * into the object store before the entries that follow them in the stream are appended. The
 * checkpoint (the stream sequence up to which everything is durable here) is saved after the
 * appends it covers have returned, so a crash replays a little and loses nothing.
 */
import { closeSync } from 'node:fs'
import { DeliverPolicy, type JsMsg } from '@nats-io/jetstream'
import { AgentLog } from '../engine/agent-log.js'
import { isBaseLine } from '../engine/base.js'
import { Errors, NoaError } from '../engine/errors.js'
import { checkRoot, openFileSync, READ } from '../engine/files.js'
import { logPath, resolveRoot } from '../engine/logs.js'
import { inspectTail } from '../engine/recovery.js'
import {
  ensureReplicationDir,
  loadCheckpoint,
  type PullCheckpoint,
  type PullPosition,
  saveCheckpoint,
} from './checkpoint.js'
import type { EventSink, ProgressSink } from './events.js'
import { asNoaError, Backoff, describeError, isTransient, replicationError, sleep } from './failures.js'
import { isRacer } from './history.js'
import { countersOf, SeqCursor, sameBytes } from './lines.js'
import { Aborted, checkKnownOptions, closeLink, type Link, type NatsTarget, openLink } from './link.js'
import { decodeMessage } from './message.js'
import { ObjectSink } from './objects.js'
import { resolveStream, type StreamRef } from './stream.js'
import {
  checkPrefix,
  DEFAULT_PREFIX,
  HDR_OBJECT_EXACT,
  HDR_OBJECT_OFFSET,
  HDR_OBJECT_SIZE,
  parseSubject,
  wildcardOf,
} from './subjects.js'
import { ownedOn } from './writers.js'

export interface PullOptions {
  /** Server URL(s), comma-separated, or an open connection (left open). */
  nats: NatsTarget
  /** Root folder to rebuild the logs in (default `$NOA_ROOT` or `./.noa`). */
  root?: string
  prefix?: string
  stream?: string
  /** Keep running, applying new messages as they arrive, until `signal` aborts. */
  follow?: boolean
  signal?: AbortSignal
  onEvent?: EventSink
  /** Called after each batch of messages is applied. */
  onProgress?: ProgressSink
  /** Messages fetched per request (default 1000). */
  batch?: number
  /** Owner workers of the mirror's AgentLog (default: AgentLog's). */
  workers?: number
}

export interface PulledWorkspace {
  workspace: string
  from: number
  to: number
  entries: number
}

export interface PullReport {
  stream: string
  prefix: string
  entries: number
  /** Entries received that the local logs already had (checked byte-equal). */
  skipped: number
  /**
   * Messages skipped as racers of a shared workspace (a second publish nats-server 2.9 stored
   * with an expectation another message had answered; not part of the order, see Shared
   * workspaces in docs/replication.md).
   */
  racers: number
  objects: number
  /** Every message up to this stream sequence is applied. */
  streamSeq: number
  workspaces: PulledWorkspace[]
  durationMs: number
}

const OPTION_KEYS = new Set([
  'nats',
  'root',
  'prefix',
  'stream',
  'follow',
  'signal',
  'onEvent',
  'onProgress',
  'batch',
  'workers',
])

/** Applies the stream to a root's logs; with `follow`, keeps doing so. */
export function replicatePull(options: PullOptions): Promise<PullReport> {
  return asNoaError('pull', () => pullNow(options))
}

async function pullNow(options: PullOptions): Promise<PullReport> {
  checkKnownOptions(options, OPTION_KEYS, 'pull')
  const prefix = checkPrefix(options.prefix ?? DEFAULT_PREFIX)
  const root = resolveRoot(options.root)
  const batch = options.batch ?? 1000
  if (!Number.isInteger(batch) || batch < 1 || batch > 100_000) {
    throw Errors.BAD_OPTION(`option batch must be an integer from 1 to 100000, got ${batch}`, {
      field: 'batch',
    })
  }
  const follow = options.follow ?? false
  // A mirror may start from nothing, but not from a root that is a file.
  checkRoot(root, false)
  const link = await openLink(options.nats, {
    name: `noa pull ${root}`,
    waitForServer: follow,
    signal: options.signal,
    onEvent: options.onEvent,
  })
  try {
    return await new Mirror(link, { ...options, root, prefix, batch, follow }).run()
  } finally {
    await closeLink(link)
  }
}

interface Settings {
  root: string
  prefix: string
  stream?: string
  follow: boolean
  signal?: AbortSignal
  onEvent?: EventSink
  onProgress?: ProgressSink
  batch: number
  workers?: number
}

interface WorkspaceState {
  ws: string
  file: string
  /** Last seq in the local log (applied or found there). */
  last: number
  lastTs: number
  /** Stream sequence of the message that carried `last`, when known. */
  streamSeq: number
  /** This run has appended to it: the engine holds its lock, so `last` is authoritative. */
  owned: boolean
  cursor: SeqCursor | null
  pulled: { from: number; to: number; entries: number } | null
  /** The last fence this run read for it (a writer that took it over). */
  fence: { writer: string; after: number; streamSeq: number } | null
}

class Mirror {
  private readonly states = new Map<string, WorkspaceState>()
  private readonly sink: ObjectSink
  private log: AgentLog | null = null
  private ref!: StreamRef
  private checkpoint!: PullCheckpoint
  private applied = 0
  private skipped = 0
  /** Messages skipped as racers (racerOf). */
  private racers = 0
  /** Everything up to here is applied. */
  private done = 0
  private pending = 0
  private announced = false
  /** Workspaces this root took over (promote): their messages are not applied here. */
  private owned: ReadonlySet<string> = new Set()
  /** Stops the consumer in use (a checkpoint that cannot be saved ends the run). */
  private halt: (() => void) | null = null

  constructor(
    private readonly link: Link,
    private readonly s: Settings,
  ) {
    this.sink = new ObjectSink(s.root)
  }

  async run(): Promise<PullReport> {
    const started = performance.now()
    try {
      this.ref = await this.retry('look up the stream', () =>
        resolveStream(this.link, this.s.prefix, this.s.stream),
      )
    } catch (err) {
      if (err instanceof Aborted) throw replicationError('pull was stopped before it could read the stream')
      throw err
    }
    const saved = loadCheckpoint(this.s.root, 'pull', this.s.prefix, (message) =>
      this.s.onEvent?.({ type: 'warning', message }),
    )
    const same = saved !== null && saved.stream === this.ref.name && saved.streamCreated === this.ref.created
    this.checkpoint = {
      version: 1,
      kind: 'pull',
      prefix: this.s.prefix,
      stream: this.ref.name,
      streamCreated: this.ref.created,
      savedAt: '',
      streamSeq: same ? saved.streamSeq : 0,
      pending: 0,
      workspaces: same ? saved.workspaces : {},
    }
    this.done = this.checkpoint.streamSeq
    this.owned = new Set(ownedOn(this.s.root, this.s.prefix, this.ref).keys())
    // Where the checkpoint and the parts of large objects go is checked before anything is written.
    ensureReplicationDir(this.s.root)
    await this.sink.start()
    try {
      await this.consume()
    } catch (err) {
      if (!(err instanceof Aborted && this.stopped)) throw err
    } finally {
      await this.sink.close()
      for (const st of this.states.values()) await st.cursor?.close()
      if (this.log) await this.log.close()
      this.save()
    }
    const workspaces: PulledWorkspace[] = []
    for (const st of [...this.states.values()].sort((a, b) => (a.ws < b.ws ? -1 : 1))) {
      if (st.pulled) workspaces.push({ workspace: st.ws, ...st.pulled })
    }
    return {
      stream: this.ref.name,
      prefix: this.s.prefix,
      entries: this.applied,
      skipped: this.skipped,
      racers: this.racers,
      objects: this.sink.written,
      streamSeq: this.done,
      workspaces,
      durationMs: performance.now() - started,
    }
  }

  private get stopped(): boolean {
    return this.s.signal?.aborted ?? false
  }

  private async consume(): Promise<void> {
    // Without --follow: what the stream holds now, i.e. up to its last sequence at the start.
    const target = this.s.follow ? Number.POSITIVE_INFINITY : this.ref.lastSeq
    const backoff = new Backoff()
    let saveFailed: unknown = null
    const timer = setInterval(() => {
      try {
        this.save()
      } catch (err) {
        saveFailed ??= err
        this.halt?.()
      }
    }, 1000)
    try {
      for (;;) {
        if (saveFailed !== null) throw saveFailed
        if (this.stopped) return
        if (!this.s.follow && !(await this.moreToRead(target))) return
        const outcome = await this.consumeFrom(target)
        if (saveFailed !== null) throw saveFailed
        if (outcome === 'done') return
        // The connection came back or the consumer was lost: start again after what is applied.
        if (outcome === 'failed') {
          const delayMs = backoff.next()
          await sleep(delayMs, this.s.signal)
          // Refuses (NOA_STREAM_CONFIG) if the stream was deleted or changed meanwhile.
          await this.retry('look up the stream', () => resolveStream(this.link, this.s.prefix, this.ref.name))
        } else backoff.reset()
      }
    } finally {
      clearInterval(timer)
    }
  }

  /** Whether the stream holds a message for this prefix after what is applied, up to `target`. */
  private async moreToRead(target: number): Promise<boolean> {
    if (this.done >= target) return false
    const next = await this.retry('look for new messages', () =>
      this.link.jsm.streams.getMessage(this.ref.name, {
        seq: this.done + 1,
        next_by_subj: wildcardOf(this.s.prefix),
      } as unknown as { seq: number }),
    )
    return next !== null && next.seq <= target
  }

  /**
   * Reads the stream from after `done` with an ordered consumer (the client recreates it at
   * the right sequence when it misses a message, so what arrives is the stream's order, with
   * no hole), applying what arrives in batches.
   */
  private async consumeFrom(target: number): Promise<'done' | 'restart' | 'failed'> {
    const consumer = await this.retry('create a consumer', () =>
      this.link.js.consumers.get(this.ref.name, {
        filter_subjects: wildcardOf(this.s.prefix),
        deliver_policy: DeliverPolicy.StartSequence,
        opt_start_seq: this.done + 1,
      }),
    )
    const messages = await this.retry('start consuming', () =>
      // Heartbeats every 5 s: a consumer that went silent without a disconnect is noticed.
      consumer.consume({ max_messages: this.s.batch, idle_heartbeat: 5_000 }),
    )
    let outcome: 'done' | 'restart' | 'failed' = 'done'
    if (this.s.follow && !this.announced) {
      this.announced = true
      this.s.onEvent?.({
        type: 'following',
        message: `following stream ${this.ref.name} (${this.s.prefix}.>) into ${this.s.root} from stream seq ${this.done + 1}`,
      })
    }
    const stop = () => messages.stop()
    this.halt = stop
    this.s.signal?.addEventListener('abort', stop, { once: true })
    if (this.s.signal?.aborted) stop()
    // After a reconnect the server may have lost the (memory) consumer: the client would only
    // notice after missed heartbeats, so start again at once instead.
    const offReconnect = this.link.onReconnect(() => {
      outcome = 'restart'
      messages.stop()
    })
    void (async () => {
      for await (const s of messages.status()) {
        if (
          s.type === 'heartbeats_missed' ||
          s.type === 'consumer_not_found' ||
          s.type === 'stream_not_found'
        ) {
          this.s.onEvent?.({ type: 'connection', status: s.type.replace(/_/g, ' ') })
          if (s.type === 'stream_not_found') {
            outcome = 'failed'
            messages.stop()
          }
        }
      }
    })().catch(() => {})
    let batch: JsMsg[] = []
    try {
      for await (const m of messages) {
        if (m.seq <= this.done) continue // delivered again after the consumer was recreated
        batch.push(m)
        this.pending = m.info.pending
        // Apply what has arrived once nothing more is waiting (or the batch is full); messages
        // that arrive meanwhile wait in the consumer's buffer.
        if (m.info.pending > 0 && batch.length < this.s.batch && m.seq < target) continue
        await this.apply(batch)
        batch = []
        if (this.done >= target || (!this.s.follow && m.info.pending === 0)) break
      }
    } catch (err) {
      if (err instanceof NoaError) throw err
      this.s.onEvent?.({
        type: 'retry',
        what: `read ${this.ref.name}`,
        error: describeError(err),
        delayMs: 0,
      })
      outcome = 'failed'
    } finally {
      offReconnect()
      this.halt = null
      this.s.signal?.removeEventListener('abort', stop)
      messages.stop()
    }
    if (batch.length > 0) await this.apply(batch)
    if (this.stopped) return 'done'
    return outcome
  }

  /**
   * Applies one fetched batch: objects as they come, then each workspace's new lines in one
   * append. A message that cannot be applied stops the batch there: what came before it is
   * still applied (and checkpointed), then the error is thrown.
   */
  private async apply(batch: JsMsg[]): Promise<void> {
    const lines = new Map<WorkspaceState, string[]>()
    // A promote on this root (another process) takes effect from the next batch.
    this.owned = new Set(ownedOn(this.s.root, this.s.prefix, this.ref).keys())
    let failure: unknown = null
    let applied = 0
    for (const m of batch) {
      try {
        await this.take(m, lines)
      } catch (err) {
        failure = err
        break
      }
      applied++
    }
    if (lines.size > 0) {
      this.log ??= await AgentLog.open({ root: this.s.root, workers: this.s.workers })
      const log = this.log
      await Promise.all(
        [...lines].map(async ([st, ls]) => {
          await log.appendReplicated(st.ws, ls)
          st.owned = true
          st.last += ls.length
          this.applied += ls.length
        }),
      )
    }
    if (applied > 0) {
      const lastSeq = (batch[applied - 1] as JsMsg).seq
      this.done = Math.max(this.done, Math.min(lastSeq, this.sink.oldestPending() - 1))
    }
    this.s.onProgress?.({
      entries: this.applied,
      objects: this.sink.written,
      streamSeq: this.done,
      ...(this.s.follow ? {} : { lastStreamSeq: this.ref.lastSeq }),
    })
    if (failure !== null) throw failure
  }

  /** One message: an object part is written, an entry is queued for its workspace (or checked). */
  private async take(m: JsMsg, lines: Map<WorkspaceState, string[]>): Promise<void> {
    const kind = parseSubject(this.s.prefix, m.subject)
    if (kind === null) {
      this.s.onEvent?.({
        type: 'warning',
        message: `stream seq ${m.seq}: subject ${m.subject} is not one noa writes; ignored`,
      })
      return
    }
    if (kind.kind === 'object') {
      const size = Number(m.headers?.get(HDR_OBJECT_SIZE))
      const offset = Number(m.headers?.get(HDR_OBJECT_OFFSET))
      const exact = m.headers?.get(HDR_OBJECT_EXACT) !== '0'
      await this.sink.put(kind.id, size, offset, m.data, m.seq, exact)
      return
    }
    // A workspace this root took over (promote) is written here, not mirrored.
    if (this.owned.has(kind.workspace)) return
    const st = this.state(kind.workspace)
    const d = decodeMessage(st.ws, m.seq, m.data, m.headers)
    if (d.kind === 'fence') {
      // A fence that lost its race with its old writer's publish is not part of the order.
      if (await this.racerOf(m)) {
        this.racers++
        return
      }
      // Carries no entry: the entries after it go on from its `after + 1`.
      st.fence = { writer: d.writer, after: d.after, streamSeq: m.seq }
      return
    }
    const queued = lines.get(st)
    const expected = st.last + (queued?.length ?? 0) + 1
    if (d.first < expected && (d.last >= expected || !(await this.holds(st, d, queued)))) {
      // It overlaps what this log holds: either a message re-read (a restart, a torn apply), or
      // a racer of a shared workspace (racerOf), which every reader skips alike.
      if (await this.racerOf(m)) {
        this.racers++
        return
      }
    }
    for (let i = 0; i < d.lines.length; i++)
      await this.takeEntry(st, d.first + i, d.lines[i] as Buffer, m, lines)
  }

  /** Whether every entry of `d` is already here (in the log or queued), byte for byte. */
  private async holds(
    st: WorkspaceState,
    d: { first: number; lines: Buffer[] },
    queued: string[] | undefined,
  ): Promise<boolean> {
    for (let i = 0; i < d.lines.length; i++) {
      const seq = d.first + i
      const line = d.lines[i] as Buffer
      if (seq > st.last) {
        const q = queued?.[seq - st.last - 1]
        if (q === undefined || q !== line.toString('utf8')) return false
        continue
      }
      st.cursor ??= new SeqCursor(st.file)
      const local = await st.cursor.lineAt(seq)
      if (local === null || !sameBytes(local, line)) return false
    }
    return true
  }

  /**
   * Whether a message is a racer: nats-server 2.9 can store two publishes made with the same
   * Nats-Expected-Last-Subject-Sequence on a clustered stream (nats-io/nats-server#4320), which
   * hosts appending to one shared workspace make (shared.ts). The first stored is the order's;
   * a later one, whose expectation another message answered before it, is skipped, as every
   * host of the shared workspace skips it (its writer published its entries again). Asked only
   * of a message that overlaps this log and is not what the log holds there: one request.
   */
  private racerOf(m: JsMsg): Promise<boolean> {
    return isRacer(
      this.link,
      this.ref.name,
      { seq: m.seq, subject: m.subject, header: m.headers },
      (what, fn) => this.retry(what, fn),
    )
  }

  /** One entry of a message: queued for its workspace, or checked against the local line. */
  private async takeEntry(
    st: WorkspaceState,
    seq: number,
    line: Buffer,
    m: JsMsg,
    lines: Map<WorkspaceState, string[]>,
  ): Promise<void> {
    const { ts } = countersOf(line)
    const queued = lines.get(st)
    let expected = st.last + (queued?.length ?? 0) + 1
    if (seq >= expected && !st.owned && !queued) {
      // Until this mirror appends to a workspace, someone else may (its origin, when this root
      // also pushes it): look at the log's tail again before taking the entry as new.
      this.readTail(st)
      expected = st.last + 1
    }
    if (seq > expected && st.last === 0 && !queued && isBaseLine(line.toString('utf8'))) {
      // A compacted origin: its log starts with a base record at its seq, and so does this one.
      this.readTail(st)
      if (st.last === 0) {
        st.last = seq - 1
        expected = seq
      }
    }
    if (seq < expected) {
      await this.checkHave(st, seq, line, m.seq)
      if (seq === st.last) st.streamSeq = m.seq
      this.skipped++
      return
    }
    if (seq > expected) {
      throw Errors.REPLICA_GAP(
        `workspace ${st.ws}: the stream's next entry is seq ${seq} (stream seq ${m.seq}), but this log is at seq ${expected - 1}: entries ${expected}..${seq - 1} are not in the stream, nothing after seq ${expected - 1} was applied`,
        { workspace: st.ws, seq, streamSeq: m.seq },
      )
    }
    const text = line.toString('utf8')
    if (queued) queued.push(text)
    else lines.set(st, [text])
    st.pulled = st.pulled
      ? { from: st.pulled.from, to: seq, entries: st.pulled.entries + 1 }
      : { from: seq, to: seq, entries: 1 }
    st.lastTs = ts
    st.streamSeq = m.seq
  }

  /** An entry the local log has already: it must be the same bytes. */
  private async checkHave(st: WorkspaceState, seq: number, line: Buffer, streamSeq: number): Promise<void> {
    st.cursor ??= new SeqCursor(st.file)
    const local = await st.cursor.lineAt(seq)
    if (local === null || !sameBytes(local, line)) {
      if (st.fence !== null && st.fence.after < seq) {
        // A writer took the workspace over after this log's entries: they are a fenced writer's.
        const seqs: number[] = []
        for (let s = st.fence.after + 1; s <= st.last; s++) seqs.push(s)
        throw Errors.REPLICA_DIVERGED(
          `workspace ${st.ws}: writer ${st.fence.writer} took it over (fence at stream seq ${st.fence.streamSeq}, after seq ${st.fence.after}), and ${st.file} holds other entries from seq ${st.fence.after + 1}: they are not in the stream; nothing was applied to it. \`noa replicate resync ${st.ws}\` moves them aside and makes the log the stream's`,
          { workspace: st.ws, seqs, streamSeq },
        )
      }
      throw replicationError(
        `workspace ${st.ws}: the stream's entry seq ${seq} (stream seq ${streamSeq}) ${local === null ? 'is not in' : 'differs from the line in'} ${st.file}: this log has diverged from its origin (written here, or from another origin)`,
        { workspace: st.ws, seq, streamSeq },
      )
    }
  }

  private state(ws: string): WorkspaceState {
    let st = this.states.get(ws)
    if (st) return st
    st = {
      ws,
      file: logPath(this.s.root, ws),
      last: 0,
      lastTs: 0,
      streamSeq: 0,
      owned: false,
      cursor: null,
      pulled: null,
      fence: null,
    }
    this.readTail(st)
    const saved = this.checkpoint.workspaces[ws]
    if (saved && saved.seq === st.last) st.streamSeq = saved.streamSeq
    this.states.set(ws, st)
    return st
  }

  /** The last seq and ts of the local log, from its tail. */
  private readTail(st: WorkspaceState): void {
    let fd: number
    try {
      fd = openFileSync(st.file, READ, { what: 'workspace log' })
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return
      throw err
    }
    try {
      const tail = inspectTail(fd)
      if (tail.lastLine !== null) {
        const c = countersOf(Buffer.from(tail.lastLine, 'utf8'))
        if (c.seq !== st.last) st.streamSeq = 0 // no longer known
        st.last = c.seq
        st.lastTs = c.ts
      }
    } finally {
      closeSync(fd)
    }
  }

  private save(): void {
    if (!this.checkpoint) return
    for (const st of this.states.values()) {
      const p: PullPosition = { seq: st.last, ts: st.lastTs, streamSeq: st.streamSeq }
      this.checkpoint.workspaces[st.ws] = p
    }
    this.checkpoint.streamSeq = this.done
    this.checkpoint.pending = this.pending
    saveCheckpoint(this.s.root, this.checkpoint)
  }

  private async retry<T>(what: string, fn: () => Promise<T>): Promise<T> {
    const backoff = new Backoff()
    for (;;) {
      try {
        return await this.link.guard(fn(), this.s.signal)
      } catch (err) {
        if (err instanceof NoaError || !isTransient(err) || this.stopped) throw err
        const delayMs = backoff.next()
        this.s.onEvent?.({ type: 'retry', what, error: describeError(err), delayMs })
        await sleep(delayMs, this.s.signal)
      }
    }
  }
}
