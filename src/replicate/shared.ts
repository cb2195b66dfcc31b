/**
 * Shared workspaces: one workspace appended to from several hosts, ordered by the JetStream
 * stream rather than by a local owner.
 *
 * To append, a host renders the entries as log lines after the last entry it knows (seq = last
 * + 1 …, ts strictly rising over the last ts and never behind its clock), exactly as an owner
 * would, and publishes them as one message (message.ts) expecting the subject's last stream
 * sequence it knows. Appends queued while a publish is in flight go together in the next one
 * (group commit). When the server refuses the expectation, another host got there first: the
 * host reads what it missed, applies it to its log, renders its queued entries again after it,
 * and retries (bounded, with backoff and jitter). An append resolves once the server
 * acknowledged its message (a majority of an R3 stream stored it) and the local log holds
 * everything up to it (shared-replica.ts), so every host's `.log` is a replica of the stream's
 * order, byte for byte, and readers, `watch`, snapshots and forks work on it as on any log.
 *
 * The objects the entries name (a write's blob; the records, trees and blobs of the store's
 * snapshot, fork and merge entries, which come through `storeAppend`, the store's path given to
 * a SnapshotEngine as its `append`) are published on their own subjects before the message, and
 * listed on it; every host writes them into its root before it applies the message
 * (shared-objects.ts).
 */
import type { AgentLog } from '../engine/agent-log.js'
import { checkAppendOptions } from '../engine/agent-log-options.js'
import { STORE_APPEND } from '../engine/checks.js'
import { nextTs, nowMicros } from '../engine/clock.js'
import { type Ack, checkWorkspace, type EntryInput, encodeBody, formatLine } from '../engine/entry.js'
import { Errors, NoaError } from '../engine/errors.js'
import { logPath } from '../engine/logs.js'
import { checkOptionKeys } from '../engine/options.js'
import { SnapshotEngine, type StoreAppender } from '../store/snapshot.js'
import type { EventSink } from './events.js'
import {
  asNoaError,
  Backoff,
  describeError,
  isTransient,
  isWrongLastSequence,
  replicationError,
  sleep,
  streamConfigError,
} from './failures.js'
import { countersOf, lineAtSeq, sameBytes } from './lines.js'
import { closeLink, type Link, type NatsTarget, openLink } from './link.js'
import { type EncodedMessage, encodeEntries } from './message.js'
import {
  fetchObjects,
  KnownObjects,
  type ObjectContext,
  objectsOfEntries,
  publishObjects,
} from './shared-objects.js'
import { Replica } from './shared-replica.js'
import { messageAt, resolveStream, type StreamRef } from './stream.js'
import { checkPrefix, DEFAULT_PREFIX, HDR_OBJECTS, isSubjectSafe, workspaceSubject } from './subjects.js'

export interface SharedOptions {
  /** The local root's log: shared workspaces are materialized in it. Left open by close(). */
  log: AgentLog
  /** Server URL(s), comma-separated, or an open connection (left open). */
  nats: NatsTarget
  /** The workspaces shared through the stream (each a valid subject token sequence). */
  workspaces: readonly string[]
  prefix?: string
  stream?: string
  /** This host's name, for the connection the server shows. */
  writer?: string
  /** Publishes of one batch refused because another host got there first, before giving up (default 64). */
  maxTries?: number
  /** How long one batch keeps retrying a server that does not answer (default 60 s, under the stream's 2 min de-duplication window). */
  timeoutMs?: number
  /** Replicas the stream must have (default 3: an ack means a majority of three stored it). */
  minReplicas?: number
  /** Follow the subjects so that other hosts' entries reach the log as they come (default true). */
  follow?: boolean
  onEvent?: EventSink
}

export interface SharedAppendOptions {
  /** Append only if the workspace's last seq, in the stream's order, is this (else NOA_SEQ_MISMATCH). */
  ifLastSeq?: number
}

const OPTION_KEYS = new Set([
  'log',
  'nats',
  'workspaces',
  'prefix',
  'stream',
  'writer',
  'maxTries',
  'timeoutMs',
  'minReplicas',
  'follow',
  'onEvent',
])
const APPEND_KEYS = new Set(['ifLastSeq'])

/** What a rendered line adds to its body: `{"seq":N,` and `,"ts":T}` and the newline between lines. */
const LINE_OVERHEAD = 48
/** Room left in a message for headers. */
const HEADER_ROOM = 4096
/** What an object id adds to the `Noa-Objects` header. */
const OBJECT_ID_BYTES = 65
/** Room an object's part leaves for its headers (as push). */
const PART_HEADROOM = 8 * 1024

interface Pending {
  bodies: string[]
  bytes: number
  /** The objects its entries need on the other hosts (published once `ready` resolves). */
  objects: string[]
  /** Until its objects are published; null once they are (or when it names none). */
  ready: Promise<void> | null
  ifLastSeq: number
  single: boolean
  resolve(acks: Ack[] | Ack): void
  reject(err: unknown): void
}

interface Lane {
  replica: Replica
  queue: Pending[]
  pumping: Promise<void> | null
}

function intOption(value: unknown, field: string, min: number, max: number, fallback: number): number {
  if (value === undefined) return fallback
  if (!Number.isSafeInteger(value) || (value as number) < min || (value as number) > max)
    throw Errors.BAD_OPTION(
      `option ${field} must be an integer from ${min} to ${max}, got ${String(value)}`,
      {
        field,
      },
    )
  return value as number
}

export class SharedWorkspaces {
  private readonly lanes = new Map<string, Lane>()
  private readonly abort = new AbortController()
  private closing: Promise<void> | null = null
  private readonly counts = { messages: 0, entries: 0, conflicts: 0, objects: 0 }
  /** Objects known to be in the stream (published or fetched by this instance). */
  private readonly published = new KnownObjects()
  /** Reads the store's records, to find the objects entries need (shared-objects.ts). */
  private readonly reader: SnapshotEngine

  private constructor(
    private readonly link: Link,
    private readonly log: AgentLog,
    readonly stream: string,
    readonly prefix: string,
    private readonly maxTries: number,
    private readonly timeoutMs: number,
    private readonly maxBytes: number,
    private readonly partSize: number,
    private readonly onEvent: EventSink | undefined,
  ) {
    this.reader = new SnapshotEngine({ root: log.root })
  }

  /**
   * Connects, checks the stream (noa's settings, at least `minReplicas` replicas) and each
   * workspace name, then takes each workspace: its log must be a prefix of the stream's history
   * for it (else NOA_REPLICA_DIVERGED), and is caught up to the stream before this resolves.
   * Nothing is written when an option, a name or the stream is refused.
   */
  static open(options: SharedOptions): Promise<SharedWorkspaces> {
    return asNoaError('shared workspaces', () => SharedWorkspaces.openNow(options))
  }

  private static async openNow(options: SharedOptions): Promise<SharedWorkspaces> {
    if (typeof options !== 'object' || options === null)
      throw Errors.BAD_OPTION('SharedWorkspaces.open takes an options object', { field: 'options' })
    checkOptionKeys(options, OPTION_KEYS, 'SharedWorkspaces.open')
    const log = options.log
    if (typeof log !== 'object' || log === null || typeof log.appendReplicated !== 'function')
      throw Errors.BAD_OPTION('SharedWorkspaces.open needs log: an open AgentLog', { field: 'log' })
    if (log.closed) throw Errors.CLOSED('the AgentLog is closed')
    const nats = options.nats
    if (nats === undefined || nats === '' || (typeof nats !== 'string' && typeof nats !== 'object'))
      throw Errors.BAD_OPTION('SharedWorkspaces.open needs nats: a server URL or a connection', {
        field: 'nats',
      })
    if (!Array.isArray(options.workspaces) || options.workspaces.length === 0)
      throw Errors.BAD_OPTION(
        'SharedWorkspaces.open needs workspaces: a non-empty array of workspace names',
        {
          field: 'workspaces',
        },
      )
    const names = [...new Set(options.workspaces.map((ws) => checkWorkspace(ws)))]
    for (const ws of names) {
      if (!isSubjectSafe(ws))
        throw Errors.BAD_WORKSPACE(
          `workspace name ${JSON.stringify(ws)} cannot be shared: it makes an empty token in the subject (\`..\` or a trailing \`.\`), and a shared workspace is a NATS subject`,
          { workspace: ws },
        )
    }
    const prefix = checkPrefix(options.prefix ?? DEFAULT_PREFIX)
    const maxTries = intOption(options.maxTries, 'maxTries', 1, 100_000, 64)
    const timeoutMs = intOption(options.timeoutMs, 'timeoutMs', 100, 110_000, 60_000)
    const minReplicas = intOption(options.minReplicas, 'minReplicas', 1, 5, 3)
    const follow = options.follow ?? true
    if (typeof follow !== 'boolean')
      throw Errors.BAD_OPTION(`option follow must be a boolean, got ${String(follow)}`, { field: 'follow' })
    const writer = options.writer ?? 'noa'
    if (typeof writer !== 'string')
      throw Errors.BAD_OPTION('option writer must be a string', { field: 'writer' })
    // Pings every 2 s: a server that stops answering (a cut network) is left for another in
    // about 4 to 6 s instead of the client's default of minutes, while appends wait on it.
    const link = await openLink(nats, {
      name: `noa shared ${writer}`,
      onEvent: options.onEvent,
      pingIntervalMs: 2_000,
    })
    let shared: SharedWorkspaces | null = null
    try {
      const ref = await resolveWithRetry(link, prefix, options.stream, timeoutMs, options.onEvent)
      if ((ref.config.num_replicas ?? 1) < minReplicas) {
        throw streamConfigError(
          `JetStream stream ${ref.name} has ${ref.config.num_replicas ?? 1} replica(s), and shared workspaces need ${minReplicas} (an acknowledgement must mean a majority of ${minReplicas} servers stored the entries): \`noa replicate init --replicas ${minReplicas}\` on a cluster, or minReplicas to accept fewer`,
          { stream: ref.name, problems: [`num_replicas ${ref.config.num_replicas ?? 1} < ${minReplicas}`] },
        )
      }
      const maxPayload = link.nc.info?.max_payload ?? 1024 * 1024
      const maxBytes = Math.max(4096, maxPayload - HEADER_ROOM)
      const maxMsg = ref.config.max_msg_size > 0 ? ref.config.max_msg_size : maxPayload
      const partSize = Math.max(1024, Math.min(maxPayload, maxMsg) - PART_HEADROOM)
      shared = new SharedWorkspaces(
        link,
        log,
        ref.name,
        prefix,
        maxTries,
        timeoutMs,
        maxBytes,
        partSize,
        options.onEvent,
      )
      const self = shared
      for (const ws of names) {
        const replica: Replica = new Replica(ws, workspaceSubject(prefix, ws), logPath(log.root, ws), {
          link,
          stream: ref.name,
          log,
          signal: shared.abort.signal,
          onEvent: options.onEvent,
          fetchObjects: (ids) => self.fetch(replica, ids),
        })
        shared.lanes.set(ws, { replica, queue: [], pumping: null })
      }
      for (const lane of shared.lanes.values()) await lane.replica.start()
      if (follow) for (const lane of shared.lanes.values()) lane.replica.follow()
      return shared
    } catch (err) {
      if (shared) {
        shared.abort.abort()
        for (const lane of shared.lanes.values()) await lane.replica.stopFollowing()
      }
      await closeLink(link)
      throw err
    }
  }

  /** The shared workspaces' names. */
  get workspaces(): string[] {
    return [...this.lanes.keys()]
  }

  /**
   * What this host published: messages and entries that went in, publishes that found another
   * host first (refused, a duplicate id, or a racer) and went again, and objects it published
   * ahead of its entries (each once).
   */
  stats(): { messages: number; entries: number; conflicts: number; objects: number } {
    return { ...this.counts }
  }

  /** The last seq applied to the local log of a shared workspace (the stream may be further). */
  lastSeq(workspace: string): number {
    return this.lane(workspace).replica.last
  }

  /** Applies what the stream holds for the workspace (all of them by default) now. */
  async sync(workspace?: string): Promise<void> {
    const lanes = workspace === undefined ? [...this.lanes.values()] : [this.lane(workspace)]
    for (const lane of lanes) await lane.replica.catchUp()
  }

  append(workspace: string, entry: EntryInput, options?: SharedAppendOptions): Promise<Ack> {
    try {
      const lane = this.lane(workspace)
      const body = this.body(entry, undefined, false)
      return this.enqueue(lane, [entry], [body], options, true) as Promise<Ack>
    } catch (err) {
      return Promise.reject(err)
    }
  }

  appendMany(
    workspace: string,
    entries: readonly EntryInput[],
    options?: SharedAppendOptions,
  ): Promise<Ack[]> {
    return this.appendAll(workspace, entries, options, false)
  }

  /**
   * The store's path (as AgentLog's STORE_APPEND): entries that may be the store's records,
   * `snapshot` and `merge`, each naming a record the root holds (else NOA_NOT_FOUND, nothing
   * published). The records' objects are published before the entries (shared-objects.ts).
   * Give it to the store as `new SnapshotEngine({ log, append: shared.storeAppender() })`, or
   * take `shared.snapshotEngine()`.
   */
  storeAppend(workspace: string, entries: readonly EntryInput[]): Promise<Ack[]> {
    return this.appendAll(workspace, entries, undefined, true)
  }

  /**
   * The store's appends for a SnapshotEngine (its `append` option): the shared workspaces' go
   * through `storeAppend`, in the stream's order; any other workspace's (a merge's source, a
   * fork's new workspace) to the local log, as the store appends them without this.
   */
  storeAppender(): StoreAppender {
    return (workspace, entries) =>
      this.lanes.has(workspace)
        ? this.storeAppend(workspace, entries)
        : this.log[STORE_APPEND](workspace, entries)
  }

  /** A SnapshotEngine on the log whose snapshots, merges and forks into shared workspaces go through the stream. */
  snapshotEngine(): SnapshotEngine {
    return new SnapshotEngine({ log: this.log, append: this.storeAppender() })
  }

  private appendAll(
    workspace: string,
    entries: readonly EntryInput[],
    options: SharedAppendOptions | undefined,
    records: boolean,
  ): Promise<Ack[]> {
    try {
      const lane = this.lane(workspace)
      if (!Array.isArray(entries)) throw Errors.BAD_ARGUMENT('appendMany takes an array of entries')
      const bodies = entries.map((e, i) => this.body(e, `entry ${i + 1}`, records))
      if (bodies.length === 0) {
        if (options !== undefined) this.ifLastSeqOf(options)
        return Promise.resolve([])
      }
      return this.enqueue(lane, entries, bodies, options, false) as Promise<Ack[]>
    } catch (err) {
      return Promise.reject(err)
    }
  }

  /** Waits for every queued append, stops the followers and the connection. The AgentLog stays open. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      for (;;) {
        const busy = [...this.lanes.values()].map((l) => l.pumping).filter((p) => p !== null)
        if (busy.length === 0) break
        await Promise.allSettled(busy)
      }
      this.abort.abort()
      for (const lane of this.lanes.values()) {
        await lane.replica.stopFollowing()
        await lane.replica.idle().catch(() => {})
      }
      await closeLink(this.link)
    })()
    return this.closing
  }

  private lane(workspace: string): Lane {
    if (this.closing) throw Errors.CLOSED('the shared workspaces are closed')
    const lane = this.lanes.get(workspace)
    if (!lane) {
      checkWorkspace(workspace)
      throw Errors.BAD_WORKSPACE(
        `workspace ${JSON.stringify(workspace)} is not one of the shared workspaces (${this.workspaces.join(', ')})`,
        { workspace },
      )
    }
    return lane
  }

  private body(entry: EntryInput, where: string | undefined, records: boolean): string {
    const body = encodeBody(entry, where)
    const op = (entry as { op: string }).op
    if (!records && (op === 'snapshot' || op === 'merge'))
      throw Errors.BAD_ENTRY(
        `${where ? `${where}: ` : ''}${op} entries are the store's records: take a snapshot or merge through a SnapshotEngine given shared.storeAppender() (or shared.snapshotEngine()), which publishes the objects they name first`,
        { field: 'op' },
      )
    return body
  }

  private ifLastSeqOf(options: SharedAppendOptions): number {
    if (typeof options !== 'object' || options === null)
      throw Errors.BAD_OPTION('append options must be an object', { field: 'options' })
    checkOptionKeys(options, APPEND_KEYS, 'shared append')
    return checkAppendOptions(options)
  }

  private enqueue(
    lane: Lane,
    entries: readonly EntryInput[],
    bodies: string[],
    options: SharedAppendOptions | undefined,
    single: boolean,
  ): Promise<Ack | Ack[]> {
    const ifLastSeq = options === undefined ? -1 : this.ifLastSeqOf(options)
    let bytes = 0
    for (const b of bodies) bytes += Buffer.byteLength(b) + LINE_OVERHEAD
    if (bytes > this.maxBytes)
      throw Errors.TOO_LARGE(
        `shared append of ${bodies.length} entries is about ${bytes} bytes, more than one message may carry (${this.maxBytes}): split it`,
        { workspace: lane.replica.ws },
      )
    if (lane.replica.failed) throw lane.replica.failed
    const named = entries.some((e) => e.op === 'write' || e.op === 'snapshot' || e.op === 'merge')
    return new Promise<Ack | Ack[]>((resolve, reject) => {
      const p: Pending = {
        bodies,
        bytes,
        objects: [],
        ready: null,
        ifLastSeq,
        single,
        resolve: resolve as (a: Ack | Ack[]) => void,
        reject,
      }
      // Queued at once, so that appends keep the order they were made in; the pump waits for
      // the objects of each before it publishes it.
      if (named) {
        const ready = this.prepare(lane, entries, p).then(() => {
          p.ready = null
        })
        ready.catch(() => {}) // the pump rejects the append with it
        p.ready = ready
      }
      lane.queue.push(p)
      this.kick(lane)
    })
  }

  /** Finds the objects an append's entries need and publishes those the stream may lack. */
  private async prepare(lane: Lane, entries: readonly EntryInput[], p: Pending): Promise<void> {
    const ws = lane.replica.ws
    const ids = await objectsOfEntries(this.reader, ws, entries)
    const bytes = p.bytes + ids.length * OBJECT_ID_BYTES
    if (bytes > this.maxBytes)
      throw Errors.TOO_LARGE(
        `shared append of ${p.bodies.length} entries naming ${ids.length} objects is about ${bytes} bytes with their list, more than one message may carry (${this.maxBytes}); nothing was published`,
        { workspace: ws },
      )
    this.counts.objects += await publishObjects(this.objectContext(lane.replica), ids, this.published)
    p.objects = ids
    p.bytes = bytes
  }

  /** A follower's side: the objects a message lists, written into the root before its entries. */
  private async fetch(replica: Replica, ids: readonly string[]): Promise<void> {
    const absent = await fetchObjects(this.objectContext(replica), ids, this.published)
    if (absent.length > 0)
      this.onEvent?.({
        type: 'warning',
        message: `shared workspace ${replica.ws}: ${absent.length} object(s) its entries name are not in the stream (${absent.slice(0, 3).join(', ')}${absent.length > 3 ? ', …' : ''}); the entries are applied without them`,
      })
  }

  private objectContext(replica: Replica): ObjectContext {
    return {
      link: this.link,
      stream: this.stream,
      prefix: this.prefix,
      root: this.log.root,
      partSize: this.partSize,
      retry: (what, fn) => replica.retry(what, fn),
    }
  }

  private kick(lane: Lane): void {
    if (lane.pumping) return
    lane.pumping = this.pump(lane).finally(() => {
      lane.pumping = null
      // Queued after the pump saw an empty queue, before this ran.
      if (lane.queue.length > 0) this.kick(lane)
    })
  }

  /** Publishes what is queued, a batch at a time (group commit). */
  private async pump(lane: Lane): Promise<void> {
    // Appends made in the same turn go in the first message.
    await new Promise<void>((resolve) => setImmediate(resolve))
    while (lane.queue.length > 0) {
      const head = lane.queue[0] as Pending
      if (head.ready) {
        try {
          await head.ready
        } catch (err) {
          lane.queue.shift()
          head.reject(err)
          continue
        }
      }
      let bytes = 0
      let n = 0
      while (n < lane.queue.length) {
        const q = lane.queue[n] as Pending
        // One whose objects are still being published goes in the next message.
        if (n > 0 && q.ready) break
        const b = q.bytes
        if (n > 0 && bytes + b > this.maxBytes) break
        bytes += b
        n++
      }
      const batch = lane.queue.splice(0, n)
      try {
        await this.publish(lane.replica, batch)
      } catch (err) {
        for (const p of batch) p.reject(err)
      }
    }
  }

  /**
   * One batch: render after what is applied, publish expecting the subject's last sequence,
   * and on a refusal catch up and start again; resolves each append of the batch (or rejects
   * the ones whose ifLastSeq no longer holds).
   */
  private async publish(replica: Replica, batch: Pending[]): Promise<void> {
    const conflicts = new Backoff(2, 200)
    let tries = 0
    const deadline = Date.now() + this.timeoutMs
    // A message the server may have stored though no acknowledgement came (its lines, as rendered).
    let uncertain: { first: number; lines: Buffer[] } | null = null
    for (;;) {
      await replica.idle()
      if (uncertain && (await this.landed(replica, uncertain))) {
        this.settle(batch, uncertain.lines)
        return
      }
      uncertain = null
      replica.checkLocal()
      // ifLastSeq is checked against the stream's order as known here; the publish's expectation
      // makes it hold at the server.
      let at = replica.last
      for (let i = 0; i < batch.length; i++) {
        const p = batch[i] as Pending
        if (p.ifLastSeq >= 0 && p.ifLastSeq !== at) {
          p.reject(
            Errors.SEQ_MISMATCH(
              `workspace ${replica.ws}: the append expected last seq ${p.ifLastSeq}, but it is ${at} in the stream's order; nothing was written`,
              { workspace: replica.ws, lastSeq: at, expected: p.ifLastSeq },
            ),
          )
          batch.splice(i--, 1)
          continue
        }
        at += p.bodies.length
      }
      if (batch.length === 0) return
      const lines = this.render(replica, batch)
      const msg = encodeEntries(replica.ws, lines)
      const extra = headersBesidesId(msg, objectsOf(batch))
      const expected = replica.subjSeq
      let wrongLast: number | null | undefined
      for (;;) {
        try {
          const ack = await this.link.guard(
            this.link.publish(replica.subject, msg.data, msg.msgId, expected, extra),
          )
          if (ack.duplicate && !(await this.ours(replica, ack.seq, msg))) {
            // Another host's message under the same id (the same seq): it got there first.
            wrongLast = null
            break
          }
          await replica.reach(ack.seq)
          if (replica.outcome(ack.seq) ?? (await this.landed(replica, { first: msg.first, lines }))) {
            this.counts.messages++
            this.counts.entries += lines.length
            this.settle(batch, lines)
            return
          }
          // Stored, but as a racer of a message the server took with the same expectation:
          // not in the order (shared-replica.ts). Its entries go again after the winner's.
          wrongLast = null
          break
        } catch (err) {
          if (err instanceof NoaError) throw err
          if (isWrongLastSequence(err)) {
            wrongLast = lastSequenceIn(err)
            break
          }
          if (!isTransient(err) || Date.now() > deadline) {
            throw replicationError(
              `shared workspace ${replica.ws}: publishing seq ${msg.first}..${msg.last} failed: ${describeError(err)}${isTransient(err) ? ` (no answer for ${this.timeoutMs} ms; the server may have stored it, and then every host's log will have it)` : ''}`,
              { workspace: replica.ws },
              err,
            )
          }
          // Sent again as it is: Nats-Msg-Id and the expectation make that safe.
          uncertain = { first: msg.first, lines }
          const delayMs = new Backoff().next()
          this.onEvent?.({
            type: 'retry',
            what: `publish to ${replica.subject}`,
            error: describeError(err),
            delayMs,
          })
          await sleep(delayMs)
        }
      }
      tries++
      this.counts.conflicts++
      if (tries >= this.maxTries) {
        throw Errors.CONFLICT(
          `shared workspace ${replica.ws}: other hosts appended first ${tries} times in a row; gave up (nothing of this batch was written)`,
          { workspace: replica.ws, tries },
        )
      }
      // The follower usually has what was missed already (the server delivers it as it stores it).
      if (wrongLast) await replica.reach(wrongLast)
      else await replica.catchUp()
      if (tries > 1) await sleep(conflicts.next())
    }
  }

  /** The lines of a batch, after what is applied, as the owner would write them. */
  private render(replica: Replica, batch: Pending[]): Buffer[] {
    const lines: Buffer[] = []
    let seq = replica.last
    let ts = replica.lastTs
    const now = nowMicros()
    for (const p of batch) {
      for (const body of p.bodies) {
        seq++
        ts = nextTs(ts, now)
        const line = formatLine(seq, body, ts)
        lines.push(Buffer.from(line.slice(0, -1), 'utf8'))
      }
    }
    return lines
  }

  private settle(batch: Pending[], lines: Buffer[]): void {
    let i = 0
    for (const p of batch) {
      const acks: Ack[] = []
      for (let k = 0; k < p.bodies.length; k++) {
        const line = lines[i++] as Buffer
        acks.push(countersOf(line))
      }
      p.resolve(p.single ? (acks[0] as Ack) : acks)
    }
  }

  /** Whether the stored message at `streamSeq` is this one (a duplicate acknowledgement). */
  private async ours(replica: Replica, streamSeq: number, msg: EncodedMessage): Promise<boolean> {
    const stored = await replica.retry('read a duplicate', () => messageAt(this.link, this.stream, streamSeq))
    return stored !== null && stored.subject === replica.subject && Buffer.from(stored.data).equals(msg.data)
  }

  /** After a publish whose outcome was unknown: whether its lines are in the log, as the stream ordered them. */
  private async landed(replica: Replica, m: { first: number; lines: Buffer[] }): Promise<boolean> {
    const last = m.first + m.lines.length - 1
    if (replica.last < last) return false
    for (const seq of [m.first, last]) {
      const local = await lineAtSeq(replica.file, seq)
      if (local === null || !sameBytes(local, m.lines[seq - m.first] as Buffer)) return false
    }
    return true
  }
}

/** The stream, looked up again while the cluster does not answer (a leader being elected), up to `timeoutMs`. */
async function resolveWithRetry(
  link: Link,
  prefix: string,
  stream: string | undefined,
  timeoutMs: number,
  onEvent: EventSink | undefined,
): Promise<StreamRef> {
  const deadline = Date.now() + timeoutMs
  const backoff = new Backoff()
  for (;;) {
    try {
      return await resolveStream(link, prefix, stream)
    } catch (err) {
      // NOA_STREAM_CONFIG (missing or unusable) is an answer; NOA_REPLICATION here is no answer.
      if (!(err instanceof NoaError && err.code === 'NOA_REPLICATION') || Date.now() > deadline) throw err
      const delayMs = backoff.next()
      onEvent?.({ type: 'retry', what: 'look up the stream', error: err.message, delayMs })
      await sleep(delayMs)
    }
  }
}

/** The objects a batch's entries need, each once, in the order named. */
function objectsOf(batch: readonly Pending[]): string[] {
  const ids = new Set<string>()
  for (const p of batch) for (const id of p.objects) ids.add(id)
  return [...ids]
}

function headersBesidesId(
  msg: EncodedMessage,
  objects: readonly string[],
): Record<string, string> | undefined {
  const extra: Record<string, string> = {}
  let any = false
  if (objects.length > 0) {
    extra[HDR_OBJECTS] = objects.join(',')
    any = true
  }
  for (const [k, v] of Object.entries(msg.headers)) {
    if (k === 'Nats-Msg-Id') continue
    extra[k] = v
    any = true
  }
  return any ? extra : undefined
}

/** The subject's actual last sequence, as the server's refusal names it ("wrong last sequence: N"). */
function lastSequenceIn(err: unknown): number | null {
  const m = /wrong last sequence:\s*(\d+)/i.exec(err instanceof Error ? err.message : '')
  return m ? Number(m[1]) : null
}
