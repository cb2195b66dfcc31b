/**
 * The connection to NATS that replication runs on (Link): opened with reconnects that never give
 * up, publishes acknowledged through one inbox (Acks), requests in flight given up when the
 * connection came back meanwhile (Interrupted) or the run stops (Aborted), and closed without
 * waiting forever for a server that is away.
 */
import {
  type JetStreamClient,
  type JetStreamManager,
  jetstream,
  jetstreamManager,
  type PubAck,
  PubHeaders,
} from '@nats-io/jetstream'
import {
  connect,
  createInbox,
  headers,
  type Msg,
  type MsgHdrs,
  type NatsConnection,
} from '@nats-io/transport-node'
import { Errors } from '../engine/errors.js'
import { checkOptionKeys } from '../engine/options.js'
import type { EventSink } from './events.js'
import { Backoff, describe, replicationError, sleep } from './failures.js'

/** A server URL (several may be given, comma-separated) or a connection the caller owns. */
export type NatsTarget = string | NatsConnection

/** How long a request waits for its reply before it is retried (replies lost to a reconnect are retried at once). */
const REQUEST_TIMEOUT_MS = 5_000

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

export interface OpenLinkOptions {
  /** Connection name the server shows (monitoring). */
  name: string
  /** Keep trying the first connection (follow mode) instead of failing at once. */
  waitForServer?: boolean
  signal?: AbortSignal
  onEvent?: EventSink
  /**
   * How often to ping the server (default: the client's, 2 minutes). A server that stops
   * answering without closing the connection (a cut network) is noticed after two missed pings,
   * and the client moves to another server of the cluster.
   */
  pingIntervalMs?: number
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
        ...(options.pingIntervalMs ? { pingInterval: options.pingIntervalMs, maxPingOut: 2 } : {}),
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
