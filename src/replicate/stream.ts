/**
 * The NATS side of replication: connecting (with reconnects that never give up), finding the
 * JetStream stream that holds `<prefix>.>`, refusing a stream whose configuration would break
 * the guarantees, creating or fixing one (`noa replicate init`), and telling transient failures
 * (retry with backoff) from refusals (stop and say why).
 */

import {
  DiscardPolicy,
  type JetStreamClient,
  type JetStreamManager,
  jetstream,
  jetstreamManager,
  type PubAck,
  PubHeaders,
  RetentionPolicy,
  StorageType,
  type StoredMsg,
  type StreamConfig,
  type StreamInfo,
} from '@nats-io/jetstream'
import {
  connect,
  createInbox,
  headers,
  type Msg,
  type MsgHdrs,
  type NatsConnection,
} from '@nats-io/transport-node'
import { Errors, NoaError } from '../engine/errors.js'
import { checkOptionKeys } from '../engine/options.js'
import { checkStreamName, defaultStreamName, patternCoversPrefix, wildcardOf } from './subjects.js'

/** A server URL (several may be given, comma-separated) or a connection the caller owns. */
export type NatsTarget = string | NatsConnection

export interface Link {
  nc: NatsConnection
  js: JetStreamClient
  jsm: JetStreamManager
  /** Where we connected, for messages. */
  where: string
  /** Whether we opened the connection (and so close it). */
  owned: boolean
  /**
   * Waits for a request's reply, but gives up on it when the connection was lost and made
   * again while it was in flight (its reply will not come: retry at once rather than wait for
   * the timeout), or when `signal` aborts.
   */
  guard<T>(request: Promise<T>, signal?: AbortSignal): Promise<T>
  /** Calls `fn` after each reconnect; returns the unsubscribe function. */
  onReconnect(fn: () => void): () => void
  /**
   * Publishes to JetStream and resolves with the server's acknowledgement, or rejects with its
   * refusal (a JetStreamApiError-like error with the server's `code`), a timeout, or no
   * responders. `msgId` and `lastSubjectSequence` become Nats-Msg-Id and
   * Nats-Expected-Last-Subject-Sequence.
   */
  publish(
    subject: string,
    data: Uint8Array,
    msgId: string,
    lastSubjectSequence: number,
    extra?: Record<string, string>,
  ): Promise<PubAck>
  /** Stops the acknowledgement timer (the connection itself is closed by closeLink). */
  dispose(): void
}

/**
 * Acknowledgements of JetStream publishes, through one inbox subscription for all of them.
 * The client's own `js.publish` makes a request per message, with its own timer, promise
 * plumbing and two Error objects (created to reject a request already resolved): measured at
 * 2 to 2.5 times the CPU per message of this.
 */
class Acks {
  private readonly inbox = createInbox()
  private next = 1
  private readonly waiting = new Map<
    number,
    { resolve(ack: PubAck): void; reject(err: Error): void; deadline: number }
  >()
  private readonly timer: NodeJS.Timeout

  constructor(private readonly nc: NatsConnection) {
    nc.subscribe(`${this.inbox}.*`, { callback: (_err, m) => this.onReply(m) })
    this.timer = setInterval(() => this.expire(), 250)
    this.timer.unref()
  }

  publish(subject: string, data: Uint8Array, hdrs: MsgHdrs): Promise<PubAck> {
    const id = this.next++
    return new Promise<PubAck>((resolve, reject) => {
      this.waiting.set(id, { resolve, reject, deadline: Date.now() + REQUEST_TIMEOUT_MS })
      try {
        this.nc.publish(subject, data, { headers: hdrs, reply: `${this.inbox}.${id}` })
      } catch (err) {
        this.waiting.delete(id)
        reject(err as Error)
      }
    })
  }

  private onReply(m: Msg): void {
    const id = Number(m.subject.slice(this.inbox.length + 1))
    const w = this.waiting.get(id)
    if (!w) return
    this.waiting.delete(id)
    if (m.data.length === 0 && m.headers?.code === 503) {
      const err = new Error('no responders: JetStream is not answering for this subject')
      err.name = 'NoRespondersError'
      w.reject(err)
      return
    }
    let reply: {
      stream?: string
      seq?: number
      duplicate?: boolean
      error?: { code?: number; err_code?: number; description?: string }
    }
    try {
      reply = JSON.parse(new TextDecoder().decode(m.data))
    } catch {
      w.reject(
        new Error(`unreadable publish acknowledgement: ${new TextDecoder().decode(m.data).slice(0, 200)}`),
      )
      return
    }
    if (reply.error) {
      const err = new Error(reply.error.description ?? 'refused') as Error & {
        code?: number
        status?: number
      }
      err.name = 'JetStreamApiError'
      err.code = reply.error.err_code
      err.status = reply.error.code
      w.reject(err)
      return
    }
    if (typeof reply.seq !== 'number' || typeof reply.stream !== 'string') {
      w.reject(new Error('invalid publish acknowledgement'))
      return
    }
    w.resolve({ stream: reply.stream, seq: reply.seq, duplicate: reply.duplicate === true })
  }

  private expire(): void {
    const now = Date.now()
    for (const [id, w] of this.waiting) {
      if (w.deadline > now) continue
      this.waiting.delete(id)
      const err = new Error('timeout waiting for a publish acknowledgement')
      err.name = 'TimeoutError'
      w.reject(err)
    }
  }

  dispose(): void {
    clearInterval(this.timer)
  }
}

/** The connection dropped and came back while a request was in flight (retrying is safe). */
export class Interrupted extends Error {
  override name = 'Interrupted'
}

/** Requests given up because the run was asked to stop. */
export class Aborted extends Error {
  override name = 'AbortError'
}

/** Tracks requests in flight across reconnects (see Link.guard). */
class InFlight {
  private readonly waiting = new Set<(err: Error) => void>()
  readonly reconnectListeners = new Set<() => void>()

  constructor(nc: NatsConnection) {
    void (async () => {
      for await (const s of nc.status()) {
        if (s.type !== 'reconnect') continue
        for (const fn of this.reconnectListeners) fn()
        // Requests sent before the reconnect, or buffered while the server was away (it may not
        // have had JetStream ready to answer them), are given up and sent again: retrying a
        // publish is safe, Nats-Msg-Id and the expected sequence see to that.
        const failing = [...this.waiting]
        this.waiting.clear()
        for (const fail of failing)
          fail(new Interrupted('the connection to NATS was lost while waiting for a reply'))
      }
    })().catch(() => {})
  }

  guard<T>(request: Promise<T>, signal?: AbortSignal): Promise<T> {
    // An abandoned request still settles later: keep its rejection from going unhandled.
    request.catch(() => {})
    if (signal?.aborted) return Promise.reject(new Aborted('stopped'))
    let fail: ((err: Error) => void) | null = null
    let onAbort: (() => void) | null = null
    const interrupted = new Promise<never>((_, reject) => {
      fail = reject
      this.waiting.add(reject)
      if (signal) {
        onAbort = () => reject(new Aborted('stopped'))
        signal.addEventListener('abort', onAbort, { once: true })
      }
    })
    interrupted.catch(() => {})
    return Promise.race([request, interrupted]).finally(() => {
      if (fail) this.waiting.delete(fail)
      if (signal && onAbort) signal.removeEventListener('abort', onAbort)
    })
  }
}

function makeLink(
  nc: NatsConnection,
  js: JetStreamClient,
  jsm: JetStreamManager,
  where: string,
  owned: boolean,
): Link {
  const inFlight = new InFlight(nc)
  const acks = new Acks(nc)
  return {
    nc,
    js,
    jsm,
    where,
    owned,
    guard: (request, signal) => inFlight.guard(request, signal),
    publish(subject, data, msgId, lastSubjectSequence, extra) {
      const h = headers()
      h.set(PubHeaders.MsgIdHdr, msgId)
      h.set(PubHeaders.ExpectedLastSubjectSequenceHdr, String(lastSubjectSequence))
      if (extra) for (const [k, v] of Object.entries(extra)) h.set(k, v)
      return acks.publish(subject, data, h)
    },
    dispose: () => acks.dispose(),
    onReconnect(fn) {
      inFlight.reconnectListeners.add(fn)
      return () => inFlight.reconnectListeners.delete(fn)
    },
  }
}

/** Progress and trouble that a long-running push or pull reports (the CLI prints them on stderr). */
export type ReplicationEvent =
  | { type: 'retry'; what: string; error: string; delayMs: number }
  | { type: 'connection'; status: string; detail?: string }
  | { type: 'skipped'; workspace: string; reason: string }
  | { type: 'warning'; message: string }
  /** Follow mode is set up: from here on new entries are picked up as they come. */
  | { type: 'following'; message: string }

export type EventSink = (event: ReplicationEvent) => void

/** How far a push or pull has got, for a progress line (called often: keep it cheap). */
export interface ReplicationProgress {
  /** Entries published (push) or appended (pull) by this run. */
  entries: number
  /** Objects published or written by this run. */
  objects: number
  /** Pull: every message up to this stream sequence is applied. */
  streamSeq?: number
  /** Pull without follow: the stream sequence it runs up to. */
  lastStreamSeq?: number
}

export type ProgressSink = (progress: ReplicationProgress) => void

/** How long a request waits for its reply before it is retried (replies lost to a reconnect are retried at once). */
const REQUEST_TIMEOUT_MS = 5_000

/** 2 minutes, the server's own default: long enough to cover a publisher's retries. */
export const DEFAULT_DUPLICATE_WINDOW_MS = 120_000
const NS_PER_MS = 1_000_000

export function replicationError(message: string, details: Record<string, unknown> = {}, cause?: unknown) {
  return Errors.REPLICATION(message, details, cause === undefined ? undefined : { cause })
}

export function streamConfigError(message: string, details: Record<string, unknown> = {}) {
  return Errors.STREAM_CONFIG(message, details)
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message || err.name : String(err)
}

export interface OpenLinkOptions {
  /** Connection name the server shows (monitoring). */
  name: string
  /** Keep trying the first connection (follow mode) instead of failing at once. */
  waitForServer?: boolean
  signal?: AbortSignal
  onEvent?: EventSink
}

export async function openLink(target: NatsTarget, options: OpenLinkOptions): Promise<Link> {
  if (typeof target !== 'string') {
    return makeLink(
      target,
      jetstream(target, { timeout: REQUEST_TIMEOUT_MS }),
      await jetstreamManager(target, { checkAPI: false, timeout: REQUEST_TIMEOUT_MS }),
      target.getServer(),
      false,
    )
  }
  const servers = target
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '')
  if (servers.length === 0) {
    throw Errors.BAD_OPTION('nats must name at least one server URL', { field: 'nats' })
  }
  const backoff = new Backoff()
  for (;;) {
    try {
      const nc = await connect({
        servers,
        name: options.name,
        // Once connected, never give up: a server restart or a network cut is waited out, and
        // every unacknowledged publish is retried (de-duplication makes the retry safe).
        maxReconnectAttempts: -1,
        reconnectTimeWait: 250,
        reconnectJitter: 100,
        timeout: 5_000,
        // Otherwise every request builds two Error objects up front to keep the caller's
        // stack: measured at 15% of a publisher's CPU.
        noAsyncTraces: true,
      })
      watchStatus(nc, options.onEvent)
      return makeLink(
        nc,
        jetstream(nc, { timeout: REQUEST_TIMEOUT_MS }),
        await jetstreamManager(nc, { checkAPI: false, timeout: REQUEST_TIMEOUT_MS }),
        servers.join(','),
        true,
      )
    } catch (err) {
      if (!options.waitForServer || options.signal?.aborted) {
        throw replicationError(`cannot connect to NATS at ${servers.join(',')}: ${describe(err)}`, {
          nats: target,
        })
      }
      const delayMs = backoff.next()
      options.onEvent?.({
        type: 'retry',
        what: `connect to ${servers.join(',')}`,
        error: describe(err),
        delayMs,
      })
      await sleep(delayMs, options.signal)
    }
  }
}

function watchStatus(nc: NatsConnection, onEvent: EventSink | undefined): void {
  if (!onEvent) return
  void (async () => {
    for await (const s of nc.status()) {
      if (s.type === 'disconnect' || s.type === 'reconnect') {
        onEvent({ type: 'connection', status: s.type, detail: 'server' in s ? String(s.server) : undefined })
      }
    }
  })().catch(() => {})
}

export async function closeLink(link: Link): Promise<void> {
  link.dispose()
  if (!link.owned || link.nc.isClosed()) return
  // drain() flushes and waits for the server; while the server is away it would wait forever.
  let timer: NodeJS.Timeout | undefined
  const gaveUp = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, 2_000)
  })
  try {
    await Promise.race([link.nc.drain(), gaveUp])
  } catch {
    // closed below
  } finally {
    clearTimeout(timer)
  }
  if (!link.nc.isClosed()) await link.nc.close().catch(() => {})
}

/** Why a stream cannot hold noa's replicated logs; empty when it can. */
export function streamProblems(config: StreamConfig, prefix: string): string[] {
  const out: string[] = []
  const wildcard = wildcardOf(prefix)
  const subjects = config.subjects ?? []
  if (!subjects.some((p) => patternCoversPrefix(p, prefix))) {
    out.push(
      `its subjects (${subjects.join(', ') || 'none'}) do not capture ${wildcard}, so some workspaces would not be stored`,
    )
  }
  if (!(config.duplicate_window > 0)) {
    out.push(
      'it has no de-duplication window (duplicate_window 0): a publish retried after a lost ack could be stored twice',
    )
  }
  if (config.retention !== RetentionPolicy.Limits) {
    out.push(
      `its retention is ${config.retention}: such streams delete entries once consumed, but a mirror rebuilds logs from the whole history (use limits)`,
    )
  }
  if (config.storage !== StorageType.File) {
    out.push(`its storage is ${config.storage}: a server restart would lose replicated entries (use file)`)
  }
  const dropping: string[] = []
  if (config.max_msgs_per_subject > 0) dropping.push(`max_msgs_per_subject ${config.max_msgs_per_subject}`)
  if (config.max_msgs > 0) dropping.push(`max_msgs ${config.max_msgs}`)
  if (config.max_bytes > 0) dropping.push(`max_bytes ${config.max_bytes}`)
  if (config.max_age > 0) dropping.push(`max_age ${config.max_age / NS_PER_MS / 1000}s`)
  if (dropping.length > 0) {
    out.push(
      `its limits (${dropping.join(', ')}) would delete old entries, and a mirror needs every entry from seq 1 to rebuild a log`,
    )
  }
  if (config.mirror) out.push(`it is a mirror of ${config.mirror.name}: noa publishes to the origin stream`)
  if (config.sealed) out.push('it is sealed: it accepts no more messages')
  return out
}

function isStreamNotFound(err: unknown): boolean {
  return (
    err instanceof Error &&
    (err.name === 'StreamNotFoundError' ||
      /no stream matches subject|stream not found/i.test(err.message) ||
      apiCode(err) === 10059)
  )
}

export function apiCode(err: unknown): number | undefined {
  if (err instanceof Error && err.name.endsWith('ApiError')) return (err as { code?: number }).code
  if (err instanceof Error && 'code' in err && typeof (err as { code: unknown }).code === 'number') {
    return (err as { code: number }).code
  }
  return undefined
}

/** The server refused a publish because the subject's last sequence is not the one expected. */
export function isWrongLastSequence(err: unknown): boolean {
  const code = apiCode(err)
  return code === 10071 || (err instanceof Error && /wrong last sequence/i.test(err.message))
}

/**
 * Failures that a retry can cure: the connection is down or coming back, the request timed
 * out, JetStream is not answering yet after a server restart.
 */
export function isTransient(err: unknown): boolean {
  if (!(err instanceof Error)) return false
  switch (err.name) {
    case 'TimeoutError':
    case 'ConnectionError':
    case 'RequestError':
    case 'NoRespondersError':
    case 'JetStreamNotEnabled':
    case 'Interrupted':
      return true
  }
  const status = (err as { status?: unknown }).status
  if (status === 503 || status === 408) return true
  return /timeout|disconnect|no responders|temporarily unavailable|not enabled/i.test(err.message)
}

export interface StreamRef {
  name: string
  /** When the stream was created: a different value means it was deleted and made again. */
  created: string
  config: StreamConfig
  lastSeq: number
  firstSeq: number
}

function refOf(info: StreamInfo): StreamRef {
  return {
    name: info.config.name,
    created: String(info.created),
    config: info.config,
    lastSeq: info.state.last_seq,
    firstSeq: info.state.first_seq,
  }
}

/** Finds the stream (by name, or as the one capturing `<prefix>.>`) and checks its configuration. */
export async function resolveStream(link: Link, prefix: string, stream?: string): Promise<StreamRef> {
  const wildcard = wildcardOf(prefix)
  let name = stream === undefined ? undefined : checkStreamName(stream)
  const hint = `create it with \`noa replicate init --nats ${link.where}${prefix === 'noa' ? '' : ` --prefix ${prefix}`}\``
  if (name === undefined) {
    try {
      name = await link.jsm.streams.find(wildcard)
    } catch (err) {
      if (isStreamNotFound(err)) {
        throw streamConfigError(
          `no JetStream stream on ${link.where} captures ${wildcard}: ${hint} (subjects ${wildcard}, file storage, limits retention, a de-duplication window)`,
          { prefix },
        )
      }
      throw replicationError(`cannot look up the stream for ${wildcard} on ${link.where}: ${describe(err)}`)
    }
  }
  let info: StreamInfo
  try {
    info = await link.jsm.streams.info(name)
  } catch (err) {
    if (isStreamNotFound(err)) {
      throw streamConfigError(`JetStream stream ${name} does not exist on ${link.where}: ${hint}`, {
        stream: name,
      })
    }
    throw replicationError(`cannot read stream ${name} on ${link.where}: ${describe(err)}`)
  }
  const problems = streamProblems(info.config, prefix)
  if (problems.length > 0) {
    throw streamConfigError(
      `JetStream stream ${name} cannot hold noa's replicated logs: ${problems.join('; ')}. \`noa replicate init\` fixes what can be changed in place`,
      { stream: name, problems },
    )
  }
  return refOf(info)
}

export interface InitOptions {
  nats: NatsTarget
  prefix: string
  stream?: string
  /** Copies of each message in a JetStream cluster (1 on a single server, 3 for a cluster of 3). */
  replicas?: number
  duplicateWindowMs?: number
}

export interface InitReport {
  stream: string
  created: boolean
  /** What was changed on an existing stream. */
  changed: string[]
  config: StreamConfig
}

/** Creates the stream noa needs, or fixes an existing one where the server allows it. */
export function initStream(options: InitOptions): Promise<InitReport> {
  return asNoaError('init', () => initStreamNow(options))
}

async function initStreamNow(options: InitOptions): Promise<InitReport> {
  const link = await openLink(options.nats, { name: 'noa replicate init' })
  try {
    const prefix = options.prefix
    const wildcard = wildcardOf(prefix)
    const windowNs = (options.duplicateWindowMs ?? DEFAULT_DUPLICATE_WINDOW_MS) * NS_PER_MS
    let name = options.stream === undefined ? undefined : checkStreamName(options.stream)
    if (name === undefined) {
      name = await link.jsm.streams.find(wildcard).catch((err: unknown) => {
        if (isStreamNotFound(err)) return defaultStreamName(prefix)
        throw err
      })
    }
    checkReplicas(link, options.replicas)
    let existing: StreamInfo | null = null
    try {
      existing = await link.jsm.streams.info(name)
    } catch (err) {
      if (!isStreamNotFound(err)) throw err
    }
    if (existing === null) {
      const info = await link.jsm.streams.add({
        name,
        subjects: [wildcard],
        retention: RetentionPolicy.Limits,
        storage: StorageType.File,
        discard: DiscardPolicy.Old,
        num_replicas: options.replicas ?? 1,
        duplicate_window: windowNs,
        max_msgs: -1,
        max_bytes: -1,
        max_age: 0,
        max_msgs_per_subject: -1,
      })
      return { stream: name, created: true, changed: [], config: info.config }
    }
    const c = existing.config
    const fatal: string[] = []
    if (c.retention !== RetentionPolicy.Limits) fatal.push(`retention is ${c.retention} (needs limits)`)
    if (c.storage !== StorageType.File) fatal.push(`storage is ${c.storage} (needs file)`)
    if (c.mirror) fatal.push(`it is a mirror of ${c.mirror.name}`)
    if (c.sealed) fatal.push('it is sealed')
    if (fatal.length > 0) {
      throw streamConfigError(
        `JetStream stream ${name} cannot be fixed in place: ${fatal.join('; ')}. Use another stream name (--stream) or recreate it`,
        { stream: name, problems: fatal },
      )
    }
    const update: Partial<StreamConfig> = {}
    const changed: string[] = []
    const subjects = c.subjects ?? []
    if (!subjects.some((p) => patternCoversPrefix(p, prefix))) {
      // Subjects under the prefix are covered by the wildcard (and the server refuses overlaps).
      const under = subjects.filter((p) => p.startsWith(`${prefix}.`))
      update.subjects = [...subjects.filter((p) => !under.includes(p)), wildcard]
      changed.push(`subjects += ${wildcard}${under.length > 0 ? ` (replacing ${under.join(', ')})` : ''}`)
    }
    if (!(c.duplicate_window > 0)) {
      update.duplicate_window = windowNs
      changed.push(`duplicate_window = ${windowNs / NS_PER_MS} ms`)
    }
    for (const key of ['max_msgs', 'max_bytes', 'max_msgs_per_subject'] as const) {
      if (c[key] > 0) {
        update[key] = -1
        changed.push(`${key} = -1 (unlimited)`)
      }
    }
    if (c.max_age > 0) {
      update.max_age = 0
      changed.push('max_age = 0 (unlimited)')
    }
    if (options.replicas !== undefined && c.num_replicas !== options.replicas) {
      update.num_replicas = options.replicas
      changed.push(`num_replicas = ${options.replicas}`)
    }
    if (changed.length === 0) return { stream: name, created: false, changed, config: c }
    const info = await link.jsm.streams.update(name, update)
    return { stream: name, created: false, changed, config: info.config }
  } finally {
    await closeLink(link)
  }
}

/**
 * More than one replica needs a JetStream cluster. A server that is not in one has no `cluster`
 * in its INFO; depending on its version it refuses such a stream ("replicas > 1 not supported
 * in non-clustered mode") or makes it with one replica and reports success, so the request is
 * refused here first, before anything is created or changed.
 */
function checkReplicas(link: Link, replicas: number | undefined): void {
  if (replicas === undefined || replicas <= 1 || link.nc.info?.cluster) return
  throw streamConfigError(
    `replicas ${replicas} needs a JetStream cluster of at least ${replicas} servers, but ${link.where} is a single server (not in a cluster), which keeps one copy of each message: use replicas 1 there, or connect to a cluster`,
    { replicas },
  )
}

/** The stored message with this stream sequence, or null. */
export function messageAt(link: Link, stream: string, seq: number): Promise<StoredMsg | null> {
  return link.jsm.streams.getMessage(stream, { seq })
}

export function lastOnSubject(link: Link, stream: string, subject: string): Promise<StoredMsg | null> {
  return link.jsm.streams.getMessage(stream, { last_by_subj: subject })
}

/** First message on `subject` whose stream sequence is ≥ `fromSeq` (server ≥ 2.9), or null. */
export function nextOnSubject(
  link: Link,
  stream: string,
  subject: string,
  fromSeq: number,
): Promise<StoredMsg | null> {
  // The request type lists only seq and last_by_subj; the server also takes next_by_subj.
  return link.jsm.streams.getMessage(stream, { seq: fromSeq, next_by_subj: subject } as unknown as {
    seq: number
  })
}

/**
 * The message carrying entry `seq` on a workspace subject, found by binary search over stream
 * sequences (entries of one subject are stored in seq order), or null. O(log n) requests.
 */
export async function findEntryOnSubject(
  link: Link,
  stream: string,
  subject: string,
  seq: number,
  hiStreamSeq: number,
  seqOf: (data: Uint8Array) => number,
  retry: <T>(what: string, fn: () => Promise<T>) => Promise<T> = (_what, fn) => fn(),
): Promise<StoredMsg | null> {
  let lo = 1
  let hi = hiStreamSeq
  while (lo <= hi) {
    const mid = Math.floor((lo + hi) / 2)
    const m = await retry(`search ${subject}`, () => nextOnSubject(link, stream, subject, mid))
    if (m === null || m.seq > hi) {
      hi = mid - 1
      continue
    }
    const at = seqOf(m.data)
    if (at === seq) return m
    if (at < seq) lo = m.seq + 1
    else hi = mid - 1
  }
  return null
}

/**
 * Runs `fn`, turning a failure that is neither a NoaError nor a system error (those keep their
 * shape) into a NOA_REPLICATION error that names the operation and the server's reason.
 */
export async function asNoaError<T>(what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn()
  } catch (err) {
    if (err instanceof NoaError) throw err
    if (err instanceof Error && typeof (err as NodeJS.ErrnoException).code === 'string') throw err
    throw replicationError(`${what} failed: ${describe(err)}`, {}, err)
  }
}

/** Refuses options that are not in `known` (a misspelt option is an error, not ignored) and a missing `nats`. */
export function checkKnownOptions(options: object, known: Set<string>, what: string): void {
  checkOptionKeys(options, known, what)
  const nats = (options as { nats?: unknown }).nats
  if (nats === undefined || nats === '' || (typeof nats !== 'string' && typeof nats !== 'object')) {
    throw Errors.BAD_OPTION(`${what} needs nats: a server URL or a connection`, {
      field: 'nats',
    })
  }
}

/** Exponential backoff with jitter: 100 ms doubling to 2 s. */
export class Backoff {
  private attempt = 0
  constructor(
    private readonly minMs = 100,
    private readonly maxMs = 2_000,
  ) {}
  next(): number {
    const base = Math.min(this.maxMs, this.minMs * 2 ** this.attempt)
    this.attempt++
    return Math.round(base / 2 + (Math.random() * base) / 2)
  }
  reset(): void {
    this.attempt = 0
  }
}

/** Resolves after `ms`, or at once when the signal aborts (never rejects). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve()
    const done = () => {
      clearTimeout(timer)
      signal?.removeEventListener('abort', done)
      resolve()
    }
    const timer = setTimeout(done, ms)
    signal?.addEventListener('abort', done, { once: true })
  })
}

export { describe as describeError }
