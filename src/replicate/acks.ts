/**
 * Replicated acks (issue 34, docs/replication.md "Replicated acks"): an AgentLog opened with
 * `replicate: { nats, … }` publishes each workspace's committed entries to the stream itself,
 * and with `durability: 'replicated'` an append resolves only once JetStream acknowledged the
 * message holding it (on an R3 stream: a majority of the servers stored it).
 *
 * Per workspace, one publish is in flight at a time; whatever commits meanwhile goes into the
 * next message (message.ts: several consecutive entries, within the server's max payload), with
 * Nats-Expected-Last-Subject-Sequence the previous acknowledgement's stream sequence: group
 * commit, as the owners do for fdatasync. Before a workspace's first replicated append (and for
 * every existing workspace at open) the subject's last message is read and the log continues
 * after it: entries a crash left committed but unpublished go first; a stream holding entries
 * the log has not, or another entry at the seq where they meet, is refused (NOA_REPLICATION),
 * and a fence there (another host took the workspace over) with local entries after it is
 * NOA_REPLICA_DIVERGED. Such a workspace refuses further appends until the log is opened again.
 * Transient failures (no server, a leader election) are retried with backoff; the append waits.
 */
import { setMaxListeners } from 'node:events'
import { existsSync } from 'node:fs'
import { open as openFile } from 'node:fs/promises'
import type { StoredMsg } from '@nats-io/jetstream'
import type { Ack } from '../engine/entry.js'
import { formatLine } from '../engine/entry.js'
import { Errors, NoaError } from '../engine/errors.js'
import { READ } from '../engine/files.js'
import { logDirOf, logPath, workspaceNames } from '../engine/logs.js'
import { checkOptionKeys } from '../engine/options.js'
import { installReplication, type Replication, type ReplicationLayer } from '../engine/replicating.js'
import {
  Backoff,
  describeError,
  isTransient,
  isWrongLastSequence,
  replicationError,
  sleep,
} from './failures.js'
import { SeqCursor, sameBytes } from './lines.js'
import { Aborted, closeLink, type Link, type NatsTarget, openLink } from './link.js'
import { decodeMessage, encodeEntries } from './message.js'
import { baseOf, lastSeqOfLog } from './publisher-exact.js'
import { lastOnSubject, messageAt, resolveStream, type StreamRef } from './stream.js'
import { checkPrefix, checkStreamName, DEFAULT_PREFIX, isSubjectSafe, workspaceSubject } from './subjects.js'
import { fencedOn, ownedOn } from './writers.js'

export type AckDurability = 'replicated' | 'local'

export interface ReplicatedAcksOptions {
  nats: NatsTarget
  prefix: string
  stream?: string
  durability: AckDurability
}

/** Tuning the benchmark compares (bench/replicate.ts): entries per message at most. */
export const ackTuning = { maxEntriesPerMessage: Number.POSITIVE_INFINITY }

/** Room left in a message for its headers (Nats-Msg-Id names the workspace). */
const HEADER_ROOM = 4096
/** Workspaces whose place on the stream is read at once when the log opens. */
const OPEN_CONCURRENCY = 32

const KEYS = new Set(['nats', 'prefix', 'stream', 'durability'])
const SCHEMES = new Set(['nats:', 'tls:'])

function bad(field: string, rule: string, value: unknown): NoaError {
  const shown = typeof value === 'string' ? JSON.stringify(value) : typeof value
  return Errors.BAD_OPTION(`option replicate.${field} ${rule}, got ${shown}`, { field: `replicate.${field}` })
}

/** A server as nats.js takes it: `host[:port]` or `nats://` / `tls://` URL, port 1 to 65535. */
function serverProblem(server: string): string | null {
  const url = /^[a-z][a-z0-9+.-]*:\/\//i.test(server) ? server : `nats://${server}`
  let u: URL
  try {
    u = new URL(url)
  } catch {
    return 'is not a server URL'
  }
  if (!SCHEMES.has(u.protocol)) return `has scheme ${u.protocol.slice(0, -1)} (use nats:// or tls://)`
  if (u.hostname === '') return 'names no host'
  if (u.pathname !== '' && u.pathname !== '/') return 'has a path'
  return null
}

/** Checks the AgentLog option `replicate`; NOA_BAD_OPTION names `replicate.<field>`. */
export function checkReplicateOption(value: unknown): ReplicatedAcksOptions {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw Errors.BAD_OPTION('option replicate must be an object { nats, prefix?, stream?, durability? }', {
      field: 'replicate',
    })
  }
  try {
    checkOptionKeys(value, KEYS, 'replicate')
  } catch (err) {
    const key = (err as NoaError).details.field
    throw Errors.BAD_OPTION((err as Error).message, { field: `replicate.${String(key)}` })
  }
  const v = value as Record<string, unknown>
  const nats = v.nats
  if (typeof nats === 'string') {
    const servers = nats
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s !== '')
    if (servers.length === 0) throw bad('nats', 'must name at least one server URL', nats)
    for (const s of servers) {
      const problem = serverProblem(s)
      if (problem) throw bad('nats', `${JSON.stringify(s)} ${problem}`, nats)
    }
  } else if (
    typeof nats !== 'object' ||
    nats === null ||
    typeof (nats as { publish?: unknown }).publish !== 'function' ||
    typeof (nats as { subscribe?: unknown }).subscribe !== 'function'
  ) {
    throw bad('nats', 'must be a server URL (several comma-separated) or an open NatsConnection', nats)
  }
  const rename = (field: string, fn: () => string): string => {
    try {
      return fn()
    } catch (err) {
      throw Errors.BAD_OPTION(`option replicate.${(err as Error).message}`, { field: `replicate.${field}` })
    }
  }
  const prefix = v.prefix === undefined ? DEFAULT_PREFIX : rename('prefix', () => checkPrefix(v.prefix))
  const stream = v.stream === undefined ? undefined : rename('stream', () => checkStreamName(v.stream))
  const durability = v.durability ?? 'replicated'
  if (durability !== 'replicated' && durability !== 'local') {
    throw bad('durability', "must be 'replicated' or 'local'", durability)
  }
  return {
    nats: nats as NatsTarget,
    prefix,
    ...(stream === undefined ? {} : { stream }),
    durability,
  }
}

interface Waiter {
  seq: number
  resolve(): void
  reject(err: Error): void
}

/** One workspace as its publisher sees it. */
class WorkspaceAcks {
  readonly subject: string
  readonly file: string
  /** Why it takes no more appends (until the log is opened again). */
  refused: NoaError | null = null
  /** Its place on the stream has been read (reconcile). */
  reconciled = false
  ready: Promise<void> | null = null
  /** Last entry seq the stream holds, and the stream sequence of the subject's last message. */
  published = 0
  streamSeq = 0
  /** Highest seq committed locally that this publisher knows of. */
  committed = 0
  /** Committed lines not yet published, when the append gave their bodies. */
  readonly lines = new Map<number, Buffer>()
  waiters: Waiter[] = []
  pumping = false
  pumpDone: Promise<void> = Promise.resolve()

  constructor(
    readonly ws: string,
    prefix: string,
    root: string,
  ) {
    this.subject = workspaceSubject(prefix, ws)
    this.file = logPath(root, ws)
  }
}

const RESOLVED = Promise.resolve()

function range(from: number, to: number): number[] {
  const out: number[] = []
  for (let s = from; s <= to; s++) out.push(s)
  return out
}

/** Makes what a crash left in a log durable before it is published (any descriptor will do). */
async function datasync(file: string): Promise<void> {
  const h = await openFile(file, READ)
  try {
    await h.datasync()
  } finally {
    await h.close()
  }
}

export class ReplicatedAcks implements Replication {
  private readonly states = new Map<string, WorkspaceAcks>()
  private readonly stop = new AbortController()
  private closing: Promise<void> | null = null
  private readonly maxBytes: number

  private constructor(
    private readonly root: string,
    private readonly o: ReplicatedAcksOptions,
    private readonly link: Link,
    private readonly ref: StreamRef,
  ) {
    // Every workspace's request in flight listens for the close.
    setMaxListeners(0, this.stop.signal)
    const maxPayload = link.nc.info?.max_payload ?? 1024 * 1024
    const maxMsg = ref.config.max_msg_size > 0 ? ref.config.max_msg_size : maxPayload
    this.maxBytes = Math.max(1024, Math.min(maxPayload, maxMsg) - HEADER_ROOM)
  }

  /** Connects, checks the stream, and publishes what each existing log holds that the stream does not. */
  static async open(root: string, o: ReplicatedAcksOptions): Promise<ReplicatedAcks> {
    const link = await openLink(o.nats, { name: `noa replicated acks ${root}` })
    let acks: ReplicatedAcks
    let names: string[]
    try {
      const ref = await resolveStream(link, o.prefix, o.stream)
      acks = new ReplicatedAcks(root, o, link, ref)
      // A root not made yet (its first append makes it) has no workspace to look at.
      names = existsSync(logDirOf(root)) ? workspaceNames(root).filter(isSubjectSafe) : []
    } catch (err) {
      await closeLink(link)
      throw err
    }
    let next = 0
    const worker = async () => {
      while (next < names.length) {
        const w = acks.state(names[next++] as string)
        // A workspace refused here refuses its appends (before); the others open as usual.
        await acks.ready(w).catch(() => {})
        if (w.refused || w.committed <= w.published) continue
        await new Promise<void>((resolve) => {
          w.waiters.push({ seq: w.committed, resolve, reject: () => resolve() })
          acks.kick(w)
        })
      }
    }
    await Promise.all(Array.from({ length: Math.min(OPEN_CONCURRENCY, names.length) }, worker))
    return acks
  }

  private state(ws: string): WorkspaceAcks {
    let w = this.states.get(ws)
    if (!w) {
      w = new WorkspaceAcks(ws, this.o.prefix, this.root)
      if (!isSubjectSafe(ws)) {
        w.refused = replicationError(
          `workspace ${ws} cannot be replicated: its name makes an empty subject token in ${w.subject} (.. or a trailing .)`,
          { workspace: ws },
        )
      }
      this.states.set(ws, w)
    }
    return w
  }

  before(workspace: string): Promise<void> | undefined {
    const w = this.state(workspace)
    if (w.refused) throw w.refused
    if (this.closing) throw Errors.CLOSED('the AgentLog is closed')
    if (w.reconciled) return undefined
    return this.ready(w)
  }

  private ready(w: WorkspaceAcks): Promise<void> {
    w.ready ??= this.reconcile(w, undefined, true).then(
      () => {
        w.reconciled = true
      },
      (err: unknown) => {
        this.refuse(w, err)
        throw w.refused
      },
    )
    return w.ready
  }

  after(workspace: string, acks: readonly Ack[], bodies: readonly string[] | null): Promise<void> {
    const w = this.state(workspace)
    if (acks.length === 0) return RESOLVED
    if (bodies) {
      for (let i = 0; i < acks.length; i++) {
        const a = acks[i] as Ack
        if (a.seq <= w.published) continue
        const text = formatLine(a.seq, bodies[i] as string, a.ts)
        w.lines.set(a.seq, Buffer.from(text.slice(0, -1), 'utf8'))
      }
    }
    const last = (acks[acks.length - 1] as Ack).seq
    if (last > w.committed) w.committed = last
    // With local durability the commit is the ack; a refusal stops the workspace's next append.
    if (w.refused) return this.o.durability === 'local' ? RESOLVED : Promise.reject(w.refused)
    this.kick(w)
    if (this.o.durability === 'local' || w.published >= last) return RESOLVED
    return new Promise<void>((resolve, reject) => {
      w.waiters.push({ seq: last, resolve, reject })
    })
  }

  private kick(w: WorkspaceAcks): void {
    if (w.pumping || w.refused) return
    w.pumping = true
    w.pumpDone = this.pump(w)
  }

  /** Publishes what is committed and not on the stream yet, one message at a time. */
  private async pump(w: WorkspaceAcks): Promise<void> {
    try {
      // The acks of one commit round resolve their appends together, each then calling after():
      // let them all land before the first message is cut (else it would hold only the first).
      await null
      let misses = 0
      while (w.refused === null && w.committed > w.published) {
        const lines = await this.nextLines(w)
        if (lines === null) {
          // Committed, but its line is not readable in the log yet: look again shortly.
          if (++misses > 200) {
            throw replicationError(
              `workspace ${w.ws}: committed seq ${w.published + 1} cannot be read from ${w.file}`,
              { workspace: w.ws, seq: w.published + 1 },
            )
          }
          await sleep(5, this.stop.signal)
          if (this.stop.signal.aborted) throw new Aborted('closed')
          continue
        }
        misses = 0
        await this.publish(w, lines)
        this.settle(w)
      }
    } catch (err) {
      if (err instanceof Aborted || this.stop.signal.aborted) this.abandon(w)
      else this.refuse(w, err)
    } finally {
      w.pumping = false
    }
  }

  /** The next message's lines: from the first unpublished seq on, as many as fit. */
  private async nextLines(w: WorkspaceAcks): Promise<Buffer[] | null> {
    const out: Buffer[] = []
    let bytes = 0
    let cursor: SeqCursor | null = null
    try {
      for (let s = w.published + 1; s <= w.committed && out.length < ackTuning.maxEntriesPerMessage; s++) {
        let line = w.lines.get(s)
        if (line === undefined) {
          cursor ??= new SeqCursor(w.file)
          const read = await cursor.lineAt(s)
          if (read === null) {
            const base = baseOf(w.file)
            if (base !== null && s <= base.seq) {
              throw replicationError(
                `workspace ${w.ws}: ${w.file} was compacted up to seq ${base.seq}, but the stream ends at seq ${w.published}: seqs ${s}..${base.seq} can no longer be published`,
                { workspace: w.ws, seq: s },
              )
            }
            break
          }
          line = read
        }
        if (line.length > this.maxBytes) {
          throw replicationError(
            `workspace ${w.ws}: entry seq ${s} is ${line.length} bytes, more than a message on ${this.link.where} may carry (${this.maxBytes})`,
            { workspace: w.ws, seq: s },
          )
        }
        if (out.length > 0 && bytes + 1 + line.length > this.maxBytes) break
        bytes += (out.length > 0 ? 1 : 0) + line.length
        out.push(line)
      }
    } finally {
      await cursor?.close()
    }
    return out.length > 0 ? out : null
  }

  /** Publishes one message until the stream holds it (or refuses it for good). */
  private async publish(w: WorkspaceAcks, lines: Buffer[]): Promise<void> {
    const m = encodeEntries(w.ws, lines)
    const backoff = new Backoff()
    let failures = 0
    for (;;) {
      try {
        const ack = await this.link.guard(
          this.link.publish(w.subject, m.data, m.msgId, w.streamSeq, m.headers),
          this.stop.signal,
        )
        if (ack.duplicate) {
          // Taken as a duplicate before the expectation was looked at: the stored message must
          // be this one; if not, see what the stream holds (another publisher's copy of the
          // same entries, e.g. `noa replicate push`, is fine; anything else is refused).
          const stored = await this.retry(`read stream seq ${ack.seq}`, () =>
            messageAt(this.link, this.ref.name, ack.seq),
          )
          if (!stored || stored.subject !== w.subject || !sameBytes(stored.data, m.data)) {
            await this.afterRefusal(w, m.first, m.last)
            return
          }
        }
        w.published = m.last
        w.streamSeq = ack.seq
        return
      } catch (err) {
        if (err instanceof NoaError || err instanceof Aborted || this.stop.signal.aborted) throw err
        if (isWrongLastSequence(err)) {
          await this.afterRefusal(w, m.first, m.last)
          return
        }
        if (!isTransient(err)) {
          throw replicationError(
            `workspace ${w.ws}: the stream refused seqs ${m.first}..${m.last} on ${w.subject}: ${describeError(err)}`,
            { workspace: w.ws, seq: m.first },
            err,
          )
        }
        if (++failures % 8 === 0)
          await resolveStream(this.link, this.o.prefix, this.ref.name).catch(rethrowNoa)
        await sleep(backoff.next(), this.stop.signal)
      }
    }
  }

  /**
   * The server refused a publish because the subject moved: a fence (another host took the
   * workspace over: NOA_REPLICA_DIVERGED), or entries the stream already has (continue after
   * them), or someone else's (NOA_REPLICATION).
   */
  private async afterRefusal(w: WorkspaceAcks, first: number, last: number): Promise<void> {
    const msg = await this.retry(`read the last message of ${w.subject}`, () =>
      lastOnSubject(this.link, this.ref.name, w.subject),
    )
    if (msg) {
      const d = decodeMessage(w.ws, msg.seq, msg.data, msg.header)
      if (d.kind === 'fence') {
        const seqs = range(d.after + 1, Math.max(w.committed, last))
        throw Errors.REPLICA_DIVERGED(
          `workspace ${w.ws}: the stream refused seqs ${first}..${last}: writer ${d.writer} fenced ${w.subject} after seq ${d.after} (it took the workspace over); this host's seqs ${seqs[0]}..${seqs[seqs.length - 1]} are not on the stream, and the workspace takes no more replicated appends here (noa replicate resync)`,
          { workspace: w.ws, seqs },
        )
      }
    }
    await this.reconcile(w, msg, false)
  }

  /**
   * Continues after what the stream holds for the workspace: `fromFile` (before its first
   * append, nothing of it in flight) counts the log's own last line, which a crash may have
   * left committed but unpublished; otherwise only what this process saw committed.
   */
  private async reconcile(w: WorkspaceAcks, known: StoredMsg | null | undefined, fromFile: boolean) {
    const msg =
      known !== undefined
        ? known
        : await this.retry(`read the last message of ${w.subject}`, () =>
            lastOnSubject(this.link, this.ref.name, w.subject),
          )
    let localLast = fromFile ? Math.max(w.committed, lastSeqOfLog(w.file)) : w.committed
    let streamLast = 0
    if (fromFile) {
      // Failover's records (writers.ts): a workspace another writer fenced here and resync made a
      // mirror is written by that writer, not by this root, until this root promotes it again.
      const fenced = fencedOn(this.root, this.o.prefix, this.ref).get(w.ws)
      if (fenced) {
        throw replicationError(
          `workspace ${w.ws}: writer ${fenced.writer} took it over after seq ${fenced.after} and this root mirrors it since (resync): \`noa replicate promote\` it to write here`,
          { workspace: w.ws, seq: fenced.after + 1 },
        )
      }
    }
    if (msg) {
      const d = decodeMessage(w.ws, msg.seq, msg.data, msg.header)
      // Only a fence this root wrote (promote, recorded in writers.ts) lets it go on after it.
      const own =
        d.kind === 'fence' &&
        ownedOn(this.root, this.o.prefix, this.ref).get(w.ws)?.fenceStreamSeq === msg.seq
      if (d.kind === 'fence' && !own) {
        if (localLast > d.after) {
          const seqs = range(d.after + 1, localLast)
          throw Errors.REPLICA_DIVERGED(
            `workspace ${w.ws}: writer ${d.writer} fenced ${w.subject} after seq ${d.after} (it took the workspace over), but this log has seqs ${d.after + 1}..${localLast} that are not on the stream; the workspace takes no replicated appends here (noa replicate resync)`,
            { workspace: w.ws, seqs },
          )
        }
        throw replicationError(
          `workspace ${w.ws}: writer ${d.writer} took it over after seq ${d.after} (a fence this root did not write): \`noa replicate promote\` it to write here`,
          { workspace: w.ws, seq: d.after + 1 },
        )
      }
      if (d.kind === 'fence') streamLast = d.after
      else streamLast = d.last
      // Another publisher of this root (noa replicate push) may have sent lines this process
      // committed but has not heard of yet: it publishes only what is durable in the log.
      if (streamLast > localLast && !fromFile) localLast = Math.max(localLast, lastSeqOfLog(w.file))
      if (streamLast > localLast) {
        throw replicationError(
          `workspace ${w.ws}: the stream holds seqs up to ${streamLast} on ${w.subject}, but this log ends at seq ${localLast}: another host writes it, or this log lost entries; nothing is published for it`,
          { workspace: w.ws, seq: localLast + 1 },
        )
      }
      if (d.kind === 'entries') {
        const base = baseOf(w.file)
        if (base === null || base.seq !== streamLast) {
          const mine = w.lines.get(streamLast) ?? (await new SeqCursorOnce(w.file).lineAt(streamLast))
          if (mine === null || !sameBytes(mine, d.lines[d.lines.length - 1] as Buffer)) {
            throw replicationError(
              `workspace ${w.ws}: the stream's entry seq ${streamLast} (stream seq ${msg.seq}) ${mine === null ? 'is not in this log' : 'differs from this log'}: another host writes it, or the log was rewritten; nothing is published for it`,
              { workspace: w.ws, seq: streamLast },
            )
          }
        }
      }
    }
    if (fromFile && localLast > streamLast && localLast > w.committed) await datasync(w.file)
    w.published = streamLast
    w.streamSeq = msg ? msg.seq : 0
    // What is past the stream is published from the log only when it is known committed.
    const committed = fromFile ? localLast : streamLast
    if (committed > w.committed) w.committed = committed
    this.settle(w)
  }

  /** Resolves the appends the stream now holds, and forgets their lines. */
  private settle(w: WorkspaceAcks): void {
    for (const s of w.lines.keys()) if (s <= w.published) w.lines.delete(s)
    if (w.waiters.length === 0) return
    const left: Waiter[] = []
    const done: Waiter[] = []
    for (const x of w.waiters) (x.seq <= w.published ? done : left).push(x)
    w.waiters = left
    for (const x of done) x.resolve()
  }

  private refuse(w: WorkspaceAcks, err: unknown): void {
    w.refused ??=
      err instanceof NoaError
        ? err
        : replicationError(`workspace ${w.ws}: ${describeError(err)}`, { workspace: w.ws }, err)
    const waiters = w.waiters
    w.waiters = []
    w.lines.clear()
    for (const x of waiters) x.reject(w.refused)
  }

  /** Closing while the servers are away: what waits is committed locally, published at the next open. */
  private abandon(w: WorkspaceAcks): void {
    const waiters = w.waiters
    w.waiters = []
    for (const x of waiters) {
      x.reject(
        Errors.CLOSED(
          `the AgentLog was closed before the stream acknowledged workspace ${w.ws} seq ${x.seq}: it is committed locally and is published when the log is next opened with replicate`,
        ),
      )
    }
  }

  private async retry<T>(what: string, fn: () => Promise<T>): Promise<T> {
    const backoff = new Backoff()
    for (;;) {
      try {
        return await this.link.guard(fn(), this.stop.signal)
      } catch (err) {
        if (err instanceof NoaError || err instanceof Aborted || this.stop.signal.aborted) throw err
        if (!isTransient(err)) {
          throw replicationError(`${what} on ${this.link.where} failed: ${describeError(err)}`, {}, err)
        }
        await sleep(backoff.next(), this.stop.signal)
      }
    }
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      // What is committed goes out unless the servers are away: a publish that fails while
      // closing (rather than being retried) gives up and leaves it to the next open.
      const draining = [...this.states.values()].map((w) => w.pumpDone)
      const gaveUp = setTimeout(() => this.stop.abort(), 5_000)
      gaveUp.unref()
      try {
        await Promise.all(draining)
      } finally {
        clearTimeout(gaveUp)
        this.stop.abort()
      }
      await Promise.all([...this.states.values()].map((w) => w.pumpDone))
      for (const w of this.states.values()) this.abandon(w)
      await closeLink(this.link)
    })()
    return this.closing
  }
}

/** A stream deleted or changed meanwhile stops the workspace; failing to ask is only transient. */
function rethrowNoa(err: unknown): void {
  if (err instanceof NoaError && err.code === 'NOA_STREAM_CONFIG') throw err
}

/** One line of a log by seq (a cursor opened and closed for it). */
class SeqCursorOnce {
  constructor(private readonly file: string) {}
  async lineAt(seq: number): Promise<Buffer | null> {
    const c = new SeqCursor(this.file)
    try {
      return await c.lineAt(seq)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
      throw err
    } finally {
      await c.close()
    }
  }
}

/** What AgentLog.open asks for the option `replicate` (engine/replicating.ts). */
export const replicationLayer: ReplicationLayer = {
  check: (value) => checkReplicateOption(value),
  open: (root, checked) => ReplicatedAcks.open(root, checked as ReplicatedAcksOptions),
}

installReplication(replicationLayer)
