/**
 * One client connection of the daemon: reads request lines, runs each against the AgentLog the
 * daemon owns (requests.ts; a stream's chunks are pumped by stream-pump.ts), and writes one
 * answer per request (and the chunks of streams) as they complete.
 *
 * Memory stays bounded whatever a client does: a line is at most `maxLineBytes` (64 KiB before
 * `hello`); a connection stops being read while it has `maxInFlight` requests in flight, while its
 * answers are not being taken off the socket, or while all connections together have more than
 * `maxPendingBytes` of requests in flight. Answers wait in the session's Outbox, which a client
 * that takes none of them for `slowConsumerMs` loses with the connection (NOA_SLOW_CONSUMER). A
 * stream reads its next chunk only when its client granted one and takes what it is sent;
 * otherwise it is parked, its reader closed, its position kept (stream-pump.ts, streams.ts), so
 * what a slow reader has not read yet waits in the log file, never in the daemon's memory. What
 * the daemon does hold for its clients (answers, unfinished lines, open readers) counts against
 * one budget, `maxBufferedBytes` (budget.ts); what would go past it is refused with NOA_BUSY.
 */
import { createHash, timingSafeEqual } from 'node:crypto'
import type { Socket } from 'node:net'
import { Errors, type NoaError, serializeError } from '../engine/errors.js'
import type { Budget } from './budget.js'
import { LineReader } from './lines.js'
import { Outbox } from './outbox.js'
import {
  badArgument,
  checkFields,
  DEFAULT_WINDOW,
  HELLO_MAX_LINE,
  MAX_WINDOW,
  OPS,
  PROTOCOL_VERSION,
  parseRequest,
  protocolError,
  type Request,
  STREAM_OPS,
} from './protocol.js'
import { callRequest, type InFlight, type RequestHost } from './requests.js'
import { pumpStream, type StreamOutlet } from './stream-pump.js'
import { STREAM_READ_BYTES, type StreamSource, streamSource } from './streams.js'

/** What a session needs from its daemon. */
export interface SessionHost extends RequestHost {
  readonly root: string
  /** The AgentLog's replicated acks (option replicate): its durability, or null without. */
  readonly replication: 'replicated' | 'local' | null
  /** sha256 of the token a TCP client must present; null without a TCP listener. */
  readonly tokenDigest: Buffer | null
  readonly draining: boolean
  /** Request bytes in flight across all sessions (the daemon's budget). */
  pendingBytes: number
  /** What the daemon holds for its clients: answers, request lines, stream readers (maxBufferedBytes). */
  readonly budget: Budget
  /** A session was closed because its client read none of its answers for slowConsumerMs. */
  slowConsumer(session: Session): void
  /** Sessions waiting for the budget to go down. */
  readonly budgetWaiters: Set<Session>
  ended(session: Session): void
  /** A request settled: may let sessions waiting for the budget read again. */
  released(): void
}

/** Why a session's socket is not being read. */
const PAUSE_OUTPUT = 1
const PAUSE_IN_FLIGHT = 2
const PAUSE_BUDGET = 4

/** Answers held for a client past which its requests are read no further. */
const OUTPUT_HIGH = 1 << 20
/** Answers not taken by a client past which its streams read no further (they park until it takes them). */
const STREAM_OUTPUT_HIGH = 64 << 10
/** Requests whose answers only report: a large one that would not fit the budget is answered NOA_BUSY instead. */
const READ_ONLY_OPS: ReadonlySet<string> = new Set(['verify', 'workspaces', 'status', 'serverStatus'])
/** An answer this small is sent whatever the budget: a refusal would be about as large. */
const SMALL_ANSWER = 4096

/**
 * What a request in flight costs beyond its line, counted against maxPendingBytes with it: a
 * 71-byte append held 161 bytes of heap here (its parsed fields, its record, its promise) and
 * 452 in the engine's queue, so 64 MiB of small appends, counted by their lines alone, held
 * about 550 MB.
 */
const REQUEST_OVERHEAD = 512

/** Time a closed connection's peer gets to take the refusal before the socket is cut. */
const CLOSE_GRACE_MS = 1000
/**
 * Time a slow consumer's connection stays half-open after it was closed (at least its
 * slowConsumerMs), for a client that wakes up to read what the socket held and the refusal. It
 * holds one batch at most, counted in the budget, and its connection slot (as an idle one would).
 */
const SLOW_LINGER_MS = 60_000

export class Session {
  private readonly reader = new LineReader(HELLO_MAX_LINE)
  private state: 'hello' | 'open' | 'closed' = 'hello'
  private readonly inFlight = new Map<number, InFlight>()
  /** The streams open on this connection (each also in inFlight): what a freed socket or chunk wakes. */
  private readonly streamSet = new Set<InFlight>()
  /** Streams of this connection reading a chunk now (not watches waiting for a commit): each will queue one. */
  private reading = 0
  private paused = 0
  /** Bytes of a request line not yet complete, as counted against the budget. */
  private lineBytes = 0
  private readonly outbox: Outbox
  /** What this connection's stream pumps use of it (stream-pump.ts). */
  private readonly outlet: StreamOutlet
  private helloTimer: NodeJS.Timeout | null
  /** Set once the daemon drains: new requests are refused. */
  private ending = false

  constructor(
    private readonly host: SessionHost,
    private readonly socket: Socket,
    readonly transport: 'unix' | 'tcp',
  ) {
    this.outbox = new Outbox(
      socket,
      {
        changed: (delta) => {
          if (delta > 0) host.budget.add(delta)
          else host.budget.free(-delta)
        },
        taken: () => this.taken(),
        stuck: () => this.slow(),
      },
      host.limits.slowConsumerMs,
    )
    this.outlet = {
      budget: host.budget,
      mayPull: (r) => this.mayPull(r),
      startedReading: () => {
        this.reading++
      },
      doneReading: () => this.doneReading(),
      push: (line, bytes) => this.push(line, bytes),
      send: (msg) => this.send(msg),
    }
    socket.on('data', (chunk: Buffer) => this.onData(chunk))
    socket.on('error', () => {}) // a peer that vanished: 'close' follows
    socket.on('close', () => this.onClose())
    const helloMs = host.limits.helloTimeoutMs
    this.helloTimer = setTimeout(
      () =>
        this.fatal(
          Errors.PROTOCOL(`no hello within ${helloMs} ms (noa serve --hello-timeout-ms)`, {
            limit: helloMs,
          }),
        ),
      helloMs,
    )
    this.helloTimer.unref()
  }

  get requests(): number {
    return this.inFlight.size
  }

  /** The connection is done with (a request may close it: read no further). */
  private get closed(): boolean {
    return this.state === 'closed'
  }

  get openStreams(): number {
    return this.streamSet.size
  }

  /** The daemon is not reading this connection now: its requests, the pending bytes or its unread answers hold it. */
  get readPaused(): boolean {
    return this.state === 'open' && this.socket.isPaused()
  }

  /** Answer bytes held for this client: queued, or written and not yet taken by the kernel. */
  get buffered(): number {
    return this.outbox.bytes
  }

  /** Answered before the connection is closed: too many connections, shutting down. */
  refuse(err: NoaError): void {
    this.fatal(err)
  }

  /**
   * The daemon drains: streams end, new requests are refused with NOA_SHUTTING_DOWN; requests
   * already taken go on. The connection stays open (answering refusals) until `finish`.
   */
  drain(): void {
    this.ending = true
    for (const r of this.inFlight.values()) {
      if (r.credits !== undefined) r.abort?.abort(shuttingDown())
    }
  }

  /** Sends what is left and ends the connection (the daemon is done with it). */
  finish(): void {
    if (this.state === 'closed') return
    this.outbox.end(null, true)
    this.state = 'closed'
    this.socket.end()
  }

  /**
   * Takes the chunk's requests while the connection is not paused. Once a request pauses it (the
   * in-flight, pending-bytes or answer bound), the rest of the chunk goes back to the socket,
   * unread, and comes again when it is resumed: a bound holds at the request that reached it,
   * not at the end of whatever one read brought (up to 64 KiB of requests).
   */
  private onData(chunk: Buffer): void {
    if (this.state === 'closed') return
    let used: number
    try {
      used = this.reader.push(
        chunk,
        (line) => this.onLine(line),
        () => this.paused === 0 && !this.closed,
      )
    } catch (err) {
      this.fatal(err)
      return
    }
    if (used < chunk.length && !this.closed) this.socket.unshift(chunk.subarray(used))
    this.countLine()
  }

  /** The part of a request line still arriving counts against the budget; past it, the connection is refused. */
  private countLine(): void {
    const now = this.reader.pending
    const delta = now - this.lineBytes
    if (delta === 0) return
    this.lineBytes = now
    const budget = this.host.budget
    if (delta < 0) {
      budget.free(-delta)
      return
    }
    budget.add(delta)
    if (budget.over(0)) this.fatal(budget.busy(`a request line of ${now} bytes so far is refused`))
  }

  private onLine(line: string): void {
    if (this.state === 'closed') return
    if (line.endsWith('\r')) line = line.slice(0, -1)
    if (line.trim() === '') return
    const req = parseRequest(line) // a malformed line is fatal: the caller closes the connection
    if (this.state === 'hello') {
      this.hello(req)
      return
    }
    if (req.op === 'more') {
      this.more(req)
      return
    }
    if (req.op === 'cancel') {
      this.cancel(req)
      return
    }
    if (req.op === 'hello') throw protocolError('hello was sent twice')
    if (this.inFlight.has(req.id)) throw protocolError(`id ${req.id} is already in flight on this connection`)
    const bytes = line.length + REQUEST_OVERHEAD
    const cancellable = STREAM_OPS.has(req.op) || req.cancellable === true
    const r: InFlight = { op: req.op, bytes, abort: cancellable ? new AbortController() : null }
    this.inFlight.set(req.id, r)
    this.host.pendingBytes += bytes
    if (this.inFlight.size >= this.host.limits.maxInFlight) this.pause(PAUSE_IN_FLIGHT)
    if (this.host.pendingBytes > this.host.limits.maxPendingBytes) {
      this.host.budgetWaiters.add(this)
      this.pause(PAUSE_BUDGET)
    }
    if (this.host.draining || this.ending) {
      this.settle(req.id, r, null, shuttingDown())
      return
    }
    if (STREAM_OPS.has(req.op)) this.startStream(req, r)
    else this.run(req, r)
  }

  private hello(req: Request): void {
    if (req.op !== 'hello') {
      const message = `the first request must be hello, got ${req.op}`
      throw this.transport === 'tcp' ? Errors.UNAUTHORIZED(message) : Errors.PROTOCOL(message)
    }
    checkFields(req, ['v', 'token', 'client'])
    if (req.v !== PROTOCOL_VERSION) {
      throw Errors.PROTOCOL(
        `protocol version ${JSON.stringify(req.v)} is not supported (this daemon speaks ${PROTOCOL_VERSION})`,
        { supported: [PROTOCOL_VERSION] },
      )
    }
    // The unix socket is this user's alone (0600): the token guards only the TCP listener.
    const digest = this.transport === 'tcp' ? this.host.tokenDigest : null
    if (digest) {
      const given = typeof req.token === 'string' ? req.token : ''
      // Digests of both sides: equal lengths, so the comparison takes the same time for any token.
      const ok = timingSafeEqual(createHash('sha256').update(given).digest(), digest)
      if (!ok || given === '') {
        throw Errors.UNAUTHORIZED(given === '' ? 'this listener needs a token (hello.token)' : 'wrong token')
      }
    }
    if (this.helloTimer) clearTimeout(this.helloTimer)
    this.helloTimer = null
    this.state = 'open'
    this.reader.max = this.host.limits.maxLineBytes
    this.send({
      id: req.id,
      ok: true,
      result: {
        v: PROTOCOL_VERSION,
        server: 'noa',
        pid: process.pid,
        root: this.host.root,
        replication: this.host.replication,
        transport: this.transport,
        limits: this.host.limits,
        ops: OPS,
      },
    })
  }

  private more(req: Request): void {
    const r = this.inFlight.get(req.ref as number)
    if (!r || r.credits === undefined) return // the stream ended meanwhile
    const n = req.n ?? 1
    if (!Number.isSafeInteger(n) || (n as number) < 1 || (n as number) > MAX_WINDOW) {
      throw protocolError(`more.n must be an integer from 1 to ${MAX_WINDOW}, got ${JSON.stringify(n)}`)
    }
    r.credits = Math.min(r.credits + (n as number), MAX_WINDOW)
    r.wake?.()
  }

  private cancel(req: Request): void {
    const r = this.inFlight.get(req.ref as number)
    r?.abort?.abort(Errors.ABORTED(`request ${req.ref} was cancelled by the client`))
  }

  private run(req: Request, r: InFlight): void {
    let p: Promise<unknown>
    try {
      p = callRequest(this.host, this.transport, req, r.abort?.signal)
    } catch (err) {
      this.settle(req.id, r, null, err)
      return
    }
    p.then(
      (value) => this.settle(req.id, r, value ?? null, null),
      (err) => this.settle(req.id, r, null, err),
    )
  }

  private startStream(req: Request, r: InFlight): void {
    if (this.streamSet.size >= this.host.limits.maxStreams) {
      this.settle(
        req.id,
        r,
        null,
        Errors.TOO_MANY_CONNECTIONS(
          `this connection has ${this.streamSet.size} streams open, the daemon's limit (noa serve --max-streams)`,
          { limit: this.host.limits.maxStreams },
        ),
      )
      return
    }
    let source: StreamSource
    try {
      const window = req.window ?? DEFAULT_WINDOW
      if (!Number.isSafeInteger(window) || (window as number) < 1 || (window as number) > MAX_WINDOW) {
        throw badArgument(
          `${req.op}.window must be an integer from 1 to ${MAX_WINDOW}, got ${JSON.stringify(window)}`,
        )
      }
      r.credits = window as number
      source = streamSource(req, this.host.log, this.host.root)
    } catch (err) {
      this.settle(req.id, r, null, err)
      return
    }
    this.streamSet.add(r)
    pumpStream(this.outlet, req.id, r, source).then(
      (result) => {
        this.streamSet.delete(r)
        this.settle(req.id, r, result, null)
      },
      (err) => {
        this.streamSet.delete(r)
        this.settle(req.id, r, null, err)
      },
    )
  }

  /**
   * Whether a stream may read its next chunk now: its client granted one and takes what it is
   * sent. It counts the chunks its connection's other streams are reading already, so all of
   * a connection's streams together queue about one chunk past the mark, not one each.
   */
  private mayPull(r: InFlight): boolean {
    return (
      (r.credits as number) > 0 && this.outbox.waiting + this.reading * STREAM_READ_BYTES < STREAM_OUTPUT_HIGH
    )
  }

  /** A stream stopped reading: the ones parked behind its chunk may go on. */
  private doneReading(): void {
    this.reading--
    this.wakeStreams()
  }

  private wakeStreams(): void {
    for (const r of this.streamSet) r.wake?.()
  }

  private settle(id: number, r: InFlight, result: unknown, err: unknown): void {
    if (this.inFlight.get(id) !== r) return
    this.inFlight.delete(id)
    this.host.pendingBytes -= r.bytes
    if (this.state !== 'closed') {
      if (err) this.sendError(id, err)
      else this.sendResult(id, r.op, result)
    }
    if (this.inFlight.size < this.host.limits.maxInFlight) this.unpause(PAUSE_IN_FLIGHT)
    this.host.released()
  }

  private sendError(id: number | null, err: unknown): void {
    this.send({ id, ok: false, error: wireError(err) })
  }

  /**
   * A result, or NOA_BUSY in its place when it is a large read-only answer that would take the
   * daemon past its budget (a listing of every workspace, say, asked for again and again by a
   * client that reads none); an answer to a write is always sent: the write happened.
   */
  private sendResult(id: number, op: string, result: unknown): void {
    let line = answerLine({ id, ok: true, result })
    let bytes = Buffer.byteLength(line)
    const budget = this.host.budget
    if (bytes > SMALL_ANSWER && READ_ONLY_OPS.has(op) && budget.over(bytes)) {
      line = answerLine({
        id,
        ok: false,
        error: wireError(budget.busy(`the ${op} answer of ${bytes} bytes is refused`)),
      })
      bytes = Buffer.byteLength(line)
    }
    this.push(line, bytes)
  }

  private send(msg: object): void {
    const line = answerLine(msg)
    this.push(line, Buffer.byteLength(line))
  }

  private push(line: string, bytes: number): void {
    if (this.state === 'closed') return
    this.outbox.push(line, bytes)
    if (this.outbox.bytes > OUTPUT_HIGH) this.pause(PAUSE_OUTPUT)
  }

  /** The client took a batch of its answers: read its requests again, let its streams go on. */
  private taken(): void {
    if (this.outbox.bytes <= OUTPUT_HIGH) this.unpause(PAUSE_OUTPUT)
    if (this.outbox.waiting < STREAM_OUTPUT_HIGH) this.wakeStreams()
  }

  /** Budget freed by the daemon: read again if nothing else holds this session. */
  budgetFreed(): void {
    this.unpause(PAUSE_BUDGET)
  }

  private pause(reason: number): void {
    if (this.paused === 0) this.socket.pause()
    this.paused |= reason
  }

  private unpause(reason: number): void {
    if ((this.paused & reason) === 0) return
    this.paused &= ~reason
    if (this.paused === 0 && this.state !== 'closed') this.socket.resume()
  }

  /**
   * A protocol violation: answered with id null, after the answers queued (unless the client
   * has not been taking them), then the connection is closed.
   */
  private fatal(err: unknown): void {
    if (this.state === 'closed') return
    this.close(err, this.outbox.waiting <= STREAM_OUTPUT_HIGH, CLOSE_GRACE_MS)
  }

  /**
   * The client has taken none of its answers for slowConsumerMs: what is queued for it is
   * dropped, the error follows what the socket already holds, and the connection is closed. The
   * client gets the error once it reads; one that never does is cut after SLOW_LINGER_MS.
   */
  private slow(): void {
    if (this.state === 'closed') return
    const ms = this.host.limits.slowConsumerMs
    const err = Errors.SLOW_CONSUMER(
      `the client took none of its answers for ${ms} ms (${this.outbox.waiting} bytes waiting): the daemon closed the connection (noa serve --slow-consumer-ms)`,
      { waitingBytes: this.outbox.waiting, limit: ms },
    )
    this.close(err, false, Math.max(ms, SLOW_LINGER_MS))
    this.host.slowConsumer(this)
  }

  /** Answers `err` with id null after what is queued (or instead of it), then ends the connection. */
  private close(err: unknown, keep: boolean, graceMs: number): void {
    this.outbox.end(answerLine({ id: null, ok: false, error: wireError(err) }), keep)
    this.state = 'closed'
    for (const r of this.inFlight.values()) {
      if (r.credits !== undefined) r.abort?.abort(err)
    }
    this.socket.end()
    // A peer that never reads its socket cannot keep this one open.
    setTimeout(() => this.socket.destroy(), graceMs).unref()
  }

  /** Cuts the connection (a client that did not close its side after the daemon ended its own). */
  destroy(): void {
    this.socket.destroy()
  }

  private onClose(): void {
    if (this.helloTimer) clearTimeout(this.helloTimer)
    this.state = 'closed'
    this.outbox.release()
    this.host.budget.free(this.lineBytes)
    this.lineBytes = 0
    // Appends in flight still commit (they are with the owners); their answers have nowhere to go.
    for (const r of this.inFlight.values()) {
      if (r.credits !== undefined) r.abort?.abort(Errors.ABORTED('the client went away'))
    }
    this.host.budgetWaiters.delete(this)
    this.host.ended(this)
  }
}

/** An error as it crosses the wire: the engine's own serialization, so clients rebuild it exactly. */
export function wireError(err: unknown): Record<string, unknown> {
  const s = serializeError(err) as unknown as Record<string, unknown>
  try {
    JSON.stringify(s.details)
  } catch {
    s.details = {}
  }
  return s
}

/** One answer line; an answer that cannot be serialized is answered by why. */
function answerLine(msg: object): string {
  try {
    return `${JSON.stringify(msg)}\n`
  } catch (err) {
    return `${JSON.stringify({ id: (msg as { id?: unknown }).id ?? null, ok: false, error: wireError(err) })}\n`
  }
}

function shuttingDown(): NoaError {
  return Errors.SHUTTING_DOWN('the daemon is shutting down: nothing new is taken')
}
