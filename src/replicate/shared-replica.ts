/**
 * One shared workspace's local replica (see shared.ts): the `.log` on this host holds exactly the
 * stream's order for the workspace's subject, written only through `AgentLog.appendReplicated`.
 *
 * Messages reach it from three places, all through one inbox applied in order: the follower (an
 * ordered consumer on the subject), a catch-up that reads the subject directly after a refused
 * publish, and this host's own publishes once acknowledged. A message whose stream sequence is
 * already applied is skipped, so the same message may come by two ways. Everything queued when a
 * write starts goes in one `appendReplicated` (one fdatasync).
 *
 * `last`, `lastTs` and `subjSeq` (the stream sequence of the last message applied) move together
 * after each write; a publish expects `subjSeq` and renders from `last` and `lastTs`.
 */
import { closeSync, statSync } from 'node:fs'
import { DeliverPolicy, type StoredMsg } from '@nats-io/jetstream'
import type { AgentLog } from '../engine/agent-log.js'
import { Errors, isNoaError, NoaError } from '../engine/errors.js'
import { openFileSync, READ } from '../engine/files.js'
import { inspectTail } from '../engine/recovery.js'
import type { EventSink } from './events.js'
import { Backoff, describeError, isTransient, replicationError, sleep } from './failures.js'
import { countersOf, lineAtSeq, sameBytes } from './lines.js'
import type { Link } from './link.js'
import { decodeMessage, type HeaderSource } from './message.js'
import { listedObjects } from './shared-objects.js'
import { lastOnSubject, nextOnSubject } from './stream.js'
import { HDR_OBJECTS } from './subjects.js'

export interface ReplicaContext {
  link: Link
  stream: string
  log: AgentLog
  /** Aborts when the SharedWorkspaces closes. */
  signal: AbortSignal
  onEvent?: EventSink
  /** Writes into the root the objects a message lists (`Noa-Objects`) that it lacks (shared-objects.ts). */
  fetchObjects(ids: readonly string[]): Promise<void>
}

interface Incoming {
  streamSeq: number
  data: Uint8Array
  headers: HeaderSource | undefined
  resolve?: () => void
  reject?: (err: unknown) => void
}

/** Follower messages queued beyond this wait for the inbox to drain before more are read. */
const MAX_INBOX = 4096

/** How long an acknowledged publisher waits for the follower before reading the subject itself. */
const FOLLOWER_GRACE_MS = 250

/** Messages whose outcome is remembered (a publisher asks about its own right after applying it). */
const MAX_OUTCOMES = 4096

/** The most seqs a divergence error lists (its message gives the range). */
const MAX_LISTED = 1000

export function divergedError(ws: string, from: number, to: number, why: string): NoaError {
  const seqs: number[] = []
  for (let s = from; s <= to && seqs.length < MAX_LISTED; s++) seqs.push(s)
  return Errors.REPLICA_DIVERGED(
    `shared workspace ${ws}: ${why} (seq ${from === to ? from : `${from}..${to}`}); a shared workspace is written only through SharedWorkspaces, ordered by the stream. Nothing more is applied or published for it here (noa replicate resync brings the log back to the stream's history)`,
    { workspace: ws, seqs },
  )
}

export class Replica {
  last = 0
  lastTs = 0
  /** Stream sequence of the last message of the subject applied here (0: none). */
  subjSeq = 0
  /** Bytes of the log as this replica last wrote or found it. */
  size = 0
  failed: unknown = null
  private inbox: Incoming[] = []
  private draining: Promise<void> | null = null
  private following: Promise<void> | null = null
  /** Publishers waiting for the follower to apply up to a stream seq (see reach). */
  private waiters: { seq: number; resolve: () => void }[] = []
  /** What became of the latest messages applied: in the order, or racers skipped. */
  private readonly outcomes = new Map<number, boolean>()

  constructor(
    readonly ws: string,
    readonly subject: string,
    readonly file: string,
    private readonly ctx: ReplicaContext,
  ) {}

  /**
   * Takes the workspace (its owner holds the log's lock from here), checks that the log is a
   * prefix of the stream's history, and catches up to the stream.
   */
  async start(): Promise<void> {
    // Its report is of the open that made the owner take the log (maybe earlier): read the tail.
    await this.ctx.log.openWorkspace(this.ws)
    const tail = this.tail()
    this.last = tail.seq
    this.lastTs = tail.ts
    this.size = tail.size
    if (this.last > 0) await this.locate()
    await this.catchUp()
  }

  /**
   * Finds the message of the order holding the log's last entry L and checks it is the same
   * bytes; the rest of that message (a write cut short by a crash) is applied at once. The
   * subject's messages have non-decreasing first seqs (a racer has its winner's first), so a
   * binary search finds the first message starting after L, and a few probes back reach one
   * starting at or before it; the messages between are compared with the log.
   */
  private async locate(): Promise<void> {
    const L = this.last
    const top = await this.retry('read the last message', () =>
      lastOnSubject(this.ctx.link, this.ctx.stream, this.subject),
    )
    if (top === null)
      throw divergedError(
        this.ws,
        1,
        L,
        `the local log has entries and the stream has none for ${this.subject}`,
      )
    const next = (from: number) =>
      this.retry('search the subject', () =>
        nextOnSubject(this.ctx.link, this.ctx.stream, this.subject, from),
      )
    const firstOf = (m: StoredMsg) => {
      const d = decodeMessage(this.ws, m.seq, m.data, m.header)
      return d.kind === 'entries' ? d.first : d.after + 1
    }
    // The lowest stream seq from which every message starts after L (top.seq + 1 if none does).
    let lo = 1
    let hi = top.seq + 1
    while (lo < hi) {
      const mid = Math.floor((lo + hi) / 2)
      const m = await next(mid)
      if (m === null || m.seq >= hi || firstOf(m) > L) hi = mid
      else lo = m.seq + 1
    }
    const end = lo
    let start = Math.max(1, end - 1)
    for (let k = 1; ; k *= 2) {
      start = Math.max(1, end - k)
      const m = await next(start)
      if (start === 1 || (m !== null && m.seq < end && firstOf(m) <= L)) break
    }
    const local = await lineAtSeq(this.file, L)
    const scan = async (first: number, stop: number): Promise<boolean> => {
      for (let from = first; from < stop; ) {
        const m = await next(from)
        if (m === null || m.seq >= stop) return false
        from = m.seq + 1
        const d = decodeMessage(this.ws, m.seq, m.data, m.header)
        if (d.kind !== 'entries' || d.first > L || d.last < L) continue
        if (local === null || !sameBytes(local, d.lines[L - d.first] as Buffer)) continue
        if (d.last > L) {
          await this.ctx.fetchObjects(listedObjects(m.header?.get(HDR_OBJECTS)))
          await this.write(d.lines.slice(L - d.first + 1).map((l) => l.toString('utf8')))
          this.last = d.last
          this.lastTs = d.lastTs
          this.size = this.tail().size
        }
        this.subjSeq = m.seq
        return true
      }
      return false
    }
    // A racer rendered on a stale view (a new leader that had not applied everything yet) can
    // break the firsts' order: then the whole subject is read before the log is called diverged.
    if ((await scan(start, end)) || (await scan(1, top.seq + 1))) return
    const topD = decodeMessage(this.ws, top.seq, top.data, top.header)
    const topLast = topD.kind === 'entries' ? topD.last : topD.after
    if (topLast < L)
      throw divergedError(this.ws, topLast + 1, L, 'the local log has entries that the stream does not')
    throw divergedError(this.ws, L, L, `the local log's entry differs from the stream's`)
  }

  /** Applies everything the subject holds after what is applied here; returns the new subjSeq. */
  async catchUp(target?: number): Promise<void> {
    await this.idle()
    let until = target
    if (until === undefined) {
      const top = await this.retry('read the last message', () =>
        lastOnSubject(this.ctx.link, this.ctx.stream, this.subject),
      )
      until = top?.seq ?? 0
    }
    while (this.subjSeq < until) {
      if (this.failed) throw this.failed
      const from = this.subjSeq + 1
      const m = await this.retry('catch up', () =>
        nextOnSubject(this.ctx.link, this.ctx.stream, this.subject, from),
      )
      if (m === null || m.seq <= this.subjSeq) {
        if (m === null) break
        continue // the follower applied it meanwhile
      }
      await this.push(m.seq, m.data, m.header)
    }
  }

  /**
   * Resolves once every message of the subject up to `streamSeq` is applied here. A message is
   * never applied straight from its publisher's acknowledgement: nats-server 2.9 may have stored
   * a racer between the expected sequence and it, so the subject is read in order, by the
   * follower, or directly when the follower has not got there soon.
   */
  async reach(streamSeq: number): Promise<void> {
    if (this.subjSeq >= streamSeq) return
    if (this.following && !this.failed) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          this.waiters = this.waiters.filter((x) => x !== w)
          resolve()
        }, FOLLOWER_GRACE_MS)
        const w = {
          seq: streamSeq,
          resolve: () => {
            clearTimeout(timer)
            resolve()
          },
        }
        this.waiters.push(w)
      })
    }
    if (this.subjSeq < streamSeq) await this.catchUp(streamSeq)
    if (this.failed) throw this.failed
  }

  /** Queues a message of the subject; resolves once it is applied (or was already). */
  push(streamSeq: number, data: Uint8Array, headers: HeaderSource | undefined): Promise<void> {
    if (this.failed) return Promise.reject(this.failed)
    return new Promise<void>((resolve, reject) => {
      this.inbox.push({ streamSeq, data, headers, resolve, reject })
      this.kick()
    })
  }

  /** Resolves when nothing is queued or being written. */
  async idle(): Promise<void> {
    while (this.draining) await this.draining
    if (this.failed) throw this.failed
  }

  private kick(): void {
    if (this.draining) return
    this.draining = this.drain().finally(() => {
      this.draining = null
      // Queued after the loop saw an empty inbox, before this ran.
      if (this.inbox.length > 0) this.kick()
    })
  }

  private async drain(): Promise<void> {
    while (this.inbox.length > 0) {
      const items = this.inbox.splice(0)
      try {
        await this.apply(items)
      } catch (err) {
        this.fail(err)
        for (const it of items) it.reject?.(err)
        continue
      }
      for (const it of items) it.resolve?.()
    }
  }

  /** Stops the replica: what is queued and what comes later fails with `err`. */
  fail(err: unknown): void {
    this.failed ??= err
    for (const it of this.inbox.splice(0)) it.reject?.(this.failed)
    if (!(err instanceof NoaError && err.code === 'NOA_CLOSED'))
      this.ctx.onEvent?.({ type: 'warning', message: `shared workspace ${this.ws}: ${describeError(err)}` })
  }

  private async apply(items: Incoming[]): Promise<void> {
    const lines: string[] = []
    let bytes = 0
    let last = this.last
    let lastTs = this.lastTs
    let subjSeq = this.subjSeq
    const outcomes: (number | boolean)[] = []
    const objects: string[] = []
    const take = async (streamSeq: number, data: Uint8Array, headers: HeaderSource | undefined) => {
      if (streamSeq <= subjSeq) return
      const d = decodeMessage(this.ws, streamSeq, data, headers)
      if (d.kind === 'fence') {
        outcomes.push(streamSeq, true)
        if (d.after !== last)
          throw replicationError(
            `shared workspace ${this.ws}: a fence at stream seq ${streamSeq} follows seq ${d.after}, but the stream's entries before it end at seq ${last}`,
            { workspace: this.ws, streamSeq },
          )
        subjSeq = streamSeq
        return
      }
      if (d.first > last + 1) {
        // Messages between are not here yet (a follower that started again): read them first.
        for (;;) {
          const from = subjSeq + 1
          const m = await this.retry('read a missing message', () =>
            nextOnSubject(this.ctx.link, this.ctx.stream, this.subject, from),
          )
          if (m === null || m.seq >= streamSeq) break
          await take(m.seq, m.data, m.header)
        }
        if (d.first > last + 1)
          throw Errors.REPLICA_GAP(
            `shared workspace ${this.ws}: stream seq ${streamSeq} starts at entry seq ${d.first}, but the entries before it end at seq ${last}`,
            { workspace: this.ws, seq: d.first, streamSeq },
          )
      }
      if (d.first <= last) {
        // A racer: published with the same expectation as the message that holds seq d.first
        // here, and stored too (nats-server 2.9 does not serialize the expectation in a
        // clustered stream, nats-io/nats-server#4320). It is not part of the order; every host
        // skips it alike, and its writer, told so, publishes its entries again.
        subjSeq = streamSeq
        outcomes.push(streamSeq, false)
        return
      }
      for (const id of listedObjects(headers?.get(HDR_OBJECTS))) objects.push(id)
      for (const line of d.lines) {
        lines.push(line.toString('utf8'))
        bytes += line.length + 1
      }
      last = d.last
      lastTs = d.lastTs
      subjSeq = streamSeq
      outcomes.push(streamSeq, true)
    }
    for (const it of items) await take(it.streamSeq, it.data, it.headers)
    // The objects the entries name are in the root before the entries are in the log.
    if (objects.length > 0) await this.ctx.fetchObjects(objects)
    if (lines.length > 0) await this.write(lines)
    this.last = last
    this.lastTs = lastTs
    this.subjSeq = subjSeq
    this.size += bytes
    if (this.waiters.length > 0) {
      const ready = this.waiters.filter((w) => w.seq <= subjSeq)
      this.waiters = this.waiters.filter((w) => w.seq > subjSeq)
      for (const w of ready) w.resolve()
    }
    for (let i = 0; i < outcomes.length; i += 2)
      this.outcomes.set(outcomes[i] as number, outcomes[i + 1] as boolean)
    while (this.outcomes.size > MAX_OUTCOMES)
      this.outcomes.delete(this.outcomes.keys().next().value as number)
  }

  /**
   * Whether the message at this stream seq is part of the order (true) or a racer skipped
   * (false); undefined when it is not applied yet or too long ago.
   */
  outcome(streamSeq: number): boolean | undefined {
    return this.outcomes.get(streamSeq)
  }

  private async write(lines: string[]): Promise<void> {
    try {
      await this.ctx.log.appendReplicated(this.ws, lines)
    } catch (err) {
      if (isNoaError(err, 'NOA_REPLICA_GAP')) {
        const tail = this.tail()
        if (tail.seq > this.last)
          throw divergedError(
            this.ws,
            this.last + 1,
            tail.seq,
            'the local log has entries that the stream does not',
          )
      }
      throw err
    }
  }

  /**
   * Before a publish: the log must hold nothing this replica did not write (an append through
   * the plain AgentLog, or another process while the lock was released).
   */
  checkLocal(): void {
    // A write of ours in flight grows the file before `size` counts it; it checks for itself
    // (appendReplicated refuses lines that do not follow the log).
    if (this.draining) return
    let size: number
    try {
      size = statSync(this.file).size
    } catch {
      size = -1
    }
    if (size === this.size) return
    const tail = this.tail()
    if (tail.seq > this.last)
      throw divergedError(
        this.ws,
        this.last + 1,
        tail.seq,
        'the local log has entries that the stream does not',
      )
    this.size = size
  }

  private tail(): { seq: number; ts: number; size: number } {
    const fd = openFileSync(this.file, READ, { what: 'workspace log' })
    try {
      const t = inspectTail(fd)
      const c = t.lastLine === null ? { seq: 0, ts: 0 } : countersOf(Buffer.from(t.lastLine, 'utf8'))
      return { ...c, size: t.validLength }
    } finally {
      closeSync(fd)
    }
  }

  /** Starts the follower: an ordered consumer on the subject, from after what is applied. */
  follow(): void {
    this.following ??= (async () => {
      const backoff = new Backoff()
      while (!this.ctx.signal.aborted && !this.failed) {
        const outcome = await this.followOnce().catch((err: unknown) => {
          if (isNoaError(err)) this.fail(err)
          else
            this.ctx.onEvent?.({
              type: 'retry',
              what: `follow ${this.subject}`,
              error: describeError(err),
              delayMs: 0,
            })
          return 'failed' as const
        })
        if (outcome === 'failed') await sleep(backoff.next(), this.ctx.signal)
        else backoff.reset()
      }
    })()
  }

  async stopFollowing(): Promise<void> {
    await this.following
  }

  private async followOnce(): Promise<'restart' | 'failed'> {
    const { link, stream, signal } = this.ctx
    const consumer = await this.retry('create a consumer', () =>
      link.js.consumers.get(stream, {
        filter_subjects: this.subject,
        deliver_policy: DeliverPolicy.StartSequence,
        opt_start_seq: this.subjSeq + 1,
      }),
    )
    const messages = await this.retry('start consuming', () =>
      consumer.consume({ max_messages: 512, idle_heartbeat: 5_000 }),
    )
    let outcome: 'restart' | 'failed' = 'restart'
    const stop = () => messages.stop()
    signal.addEventListener('abort', stop, { once: true })
    if (signal.aborted) stop()
    const offReconnect = link.onReconnect(() => messages.stop())
    void (async () => {
      for await (const s of messages.status()) {
        if (s.type === 'heartbeats_missed' || s.type === 'stream_not_found') {
          outcome = 'failed'
          messages.stop()
        }
      }
    })().catch(() => {})
    try {
      for await (const m of messages) {
        if (this.failed) break
        if (m.seq <= this.subjSeq) continue
        const applied = this.push(m.seq, m.data, m.headers)
        applied.catch(() => {}) // a failure is the replica's (fail) and stops this loop
        if (this.inbox.length >= MAX_INBOX) await applied.catch(() => {})
      }
    } catch (err) {
      if (err instanceof NoaError) throw err
      outcome = 'failed'
    } finally {
      offReconnect()
      signal.removeEventListener('abort', stop)
      messages.stop()
    }
    return outcome
  }

  async retry<T>(what: string, fn: () => Promise<T>): Promise<T> {
    const backoff = new Backoff()
    for (;;) {
      if (this.ctx.signal.aborted) throw Errors.CLOSED(`shared workspaces closed while trying to ${what}`)
      try {
        return await this.ctx.link.guard(fn(), this.ctx.signal)
      } catch (err) {
        if (err instanceof NoaError || !isTransient(err) || this.ctx.signal.aborted) {
          if (this.ctx.signal.aborted) throw Errors.CLOSED(`shared workspaces closed while trying to ${what}`)
          throw err
        }
        const delayMs = backoff.next()
        this.ctx.onEvent?.({
          type: 'retry',
          what: `${what} (${this.subject})`,
          error: describeError(err),
          delayMs,
        })
        await sleep(delayMs, this.ctx.signal)
      }
    }
  }
}
