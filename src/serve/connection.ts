/**
 * One connection to `noa serve`, helloed (DaemonConnection): requests of one event-loop turn go
 * out in one write, answers and stream chunks are matched to their waiters by id, and when the
 * connection is lost every waiter fails with a named error (never a hang). client.ts builds the
 * AgentLog API on it.
 */
import { connect, type Socket } from 'node:net'
import { deserializeError, Errors, NoaError, rewrap, type SerializedError } from '../engine/errors.js'
import { LineReader } from './lines.js'
import { socketAddress } from './paths.js'
import { type Limits, PROTOCOL_VERSION, tooLarge, utf8Bytes } from './protocol.js'

/** What the daemon said in hello. */
export interface DaemonInfo {
  v: number
  server: string
  pid: number
  root: string
  /** Replicated acks (noa serve --replicate-nats): their durability; null or absent without. */
  replication?: 'replicated' | 'local' | null
  transport: 'unix' | 'tcp'
  limits: Limits
  ops: string[]
}

/** Connection errors the daemon may send after it took requests (the others come before any is run). */
const CLOSED_MID_WAY: ReadonlySet<string> = new Set(['NOA_SLOW_CONSUMER', 'NOA_BUSY'])

/** Longest answer line this side takes (a workspaces() listing of a very large root). */
const MAX_ANSWER_LINE = 1 << 30

interface Waiter {
  resolve(value: unknown): void
  reject(err: Error): void
  onChunk?: (chunk: unknown) => void
  what: string
  workspace?: string
}

export type Target =
  | { kind: 'unix'; root: string | null; path: string }
  | { kind: 'tcp'; host: string; port: number; token: string }

export function describe(t: Target): string {
  return t.kind === 'unix'
    ? t.root
      ? `the daemon serving ${t.root}`
      : `the daemon at ${t.path}`
    : `the daemon at ${t.host}:${t.port}`
}

/** One connection, helloed. */
export class DaemonConnection {
  private readonly reader = new LineReader(MAX_ANSWER_LINE)
  private readonly waiters = new Map<number, Waiter>()
  private nextId = 1
  private out: string[] = []
  private flushing = false
  lost: Error | null = null
  info!: DaemonInfo

  private constructor(
    private readonly socket: Socket,
    private readonly target: Target,
  ) {
    socket.on('data', (chunk: Buffer) => {
      try {
        this.reader.push(chunk, (line) => this.onLine(line))
      } catch (err) {
        this.fail(err as Error)
        socket.destroy()
      }
    })
    socket.on('error', (err) => this.fail(err))
    socket.on('close', () => this.fail(null))
  }

  static open(target: Target, timeoutMs: number): Promise<DaemonConnection> {
    return new Promise<DaemonConnection>((resolve, reject) => {
      let address: { address: string; release(): void } | null = null
      let socket: Socket
      if (target.kind === 'unix') {
        address = target.root ? socketAddress(target.root) : { address: target.path, release() {} }
        socket = connect(address.address)
      } else {
        socket = connect(target.port, target.host)
        socket.setNoDelay(true)
      }
      const timer = setTimeout(() => {
        socket.destroy()
        reject(
          Errors.DAEMON_UNAVAILABLE(
            `${describe(target)} did not answer within ${timeoutMs} ms (is it stopped?)`,
          ),
        )
      }, timeoutMs)
      const onError = (err: Error) => {
        clearTimeout(timer)
        address?.release()
        reject(err)
      }
      socket.once('error', onError)
      socket.once('connect', () => {
        address?.release()
        socket.off('error', onError)
        const conn = new DaemonConnection(socket, target)
        const hello: Record<string, unknown> = { op: 'hello', v: PROTOCOL_VERSION }
        if (target.kind === 'tcp') hello.token = target.token
        conn.request(hello, 'hello').then(
          (info) => {
            clearTimeout(timer)
            conn.info = info as DaemonInfo
            resolve(conn)
          },
          (err) => {
            clearTimeout(timer)
            socket.destroy()
            reject(err)
          },
        )
      })
    })
  }

  get inFlight(): number {
    return this.waiters.size
  }

  /** Sends a request; resolves with its result. `onChunk` receives a stream's chunks. */
  request(
    msg: Record<string, unknown>,
    what: string,
    onChunk?: (chunk: unknown) => void,
    workspace?: string,
  ): Promise<unknown> & { id: number } {
    const id = this.nextId++
    let line: string
    try {
      if (this.lost) throw this.lost
      line = `${JSON.stringify({ id, ...msg })}\n`
      const max = this.info?.limits.maxLineBytes
      if (max !== undefined && line.length > max / 3 && utf8Bytes(line) - 1 > max) {
        throw tooLarge(`the ${what} request`, utf8Bytes(line) - 1, max, '--max-line-bytes')
      }
    } catch (err) {
      return Object.assign(Promise.reject(err), { id })
    }
    const p = new Promise<unknown>((resolve, reject) => {
      const w: Waiter = { resolve, reject, what }
      if (onChunk) w.onChunk = onChunk
      if (workspace !== undefined) w.workspace = workspace
      this.waiters.set(id, w)
    })
    this.write(line)
    return Object.assign(p, { id })
  }

  /** A control message (more, cancel): no answer. */
  control(msg: Record<string, unknown>): void {
    if (this.lost) return
    this.write(`${JSON.stringify(msg)}\n`)
  }

  /** Drops a request's waiter: its remaining messages are ignored. */
  forget(id: number): void {
    this.waiters.delete(id)
  }

  private write(line: string): void {
    this.out.push(line)
    if (!this.flushing) {
      this.flushing = true
      queueMicrotask(() => {
        this.flushing = false
        const data = this.out.length === 1 ? (this.out[0] as string) : this.out.join('')
        this.out = []
        if (!this.lost) this.socket.write(data)
      })
    }
  }

  private onLine(line: string): void {
    const msg = JSON.parse(line) as {
      id: number | null
      ok?: boolean
      result?: unknown
      error?: SerializedError
      chunk?: unknown
    }
    if (msg.id === null) {
      // The daemon closes the connection after this (a protocol error, too many connections…).
      this.fail(deserializeError(msg.error as SerializedError))
      return
    }
    const w = this.waiters.get(msg.id)
    if (!w) return // a cancelled stream's late messages
    if (msg.chunk !== undefined) {
      w.onChunk?.(msg.chunk)
      return
    }
    this.waiters.delete(msg.id)
    if (msg.ok) w.resolve(msg.result)
    else w.reject(deserializeError(msg.error as SerializedError))
    if (this.waiters.size === 0) this.idle?.()
  }

  /** The connection is gone: everything waiting fails with a named error (never a hang). */
  private fail(cause: Error | null): void {
    if (this.lost) return
    const named = cause instanceof NoaError ? cause : null
    this.lost =
      named ??
      Errors.DAEMON_LOST(
        `the connection to ${describe(this.target)} was lost${cause ? ` (${cause.message})` : ''}`,
        {},
        cause ? { cause } : undefined,
      )
    const lost = this.lost
    this.idle?.()
    for (const [id, w] of this.waiters) {
      this.waiters.delete(id)
      if (named && w.what.startsWith('append') && CLOSED_MID_WAY.has(named.code)) {
        // The daemon took it before it closed the connection: it may have committed.
        w.reject(
          rewrap(
            named,
            `${w.what}${w.workspace ? ` to workspace ${w.workspace}` : ''}: ${named.message}; the append may or may not have been committed (retry it with ifLastSeq to know)`,
          ),
        )
        continue
      }
      if (named || w.what === 'hello') {
        w.reject(lost)
        continue
      }
      // An append whose answer was lost may or may not have been committed: the message says how to find out.
      const maybe = w.what.startsWith('append')
      w.reject(
        Errors.DAEMON_LOST(
          `${w.what}${w.workspace ? ` to workspace ${w.workspace}` : ''}: the connection to ${describe(this.target)} was lost before it answered${
            maybe ? '; the append may or may not have been committed (retry it with ifLastSeq to know)' : ''
          }`,
          w.workspace === undefined ? { op: w.what } : { op: w.what, workspace: w.workspace },
          cause ? { cause } : undefined,
        ),
      )
    }
  }

  /**
   * Cancels the streams, waits for every other request to be answered (or the connection to be
   * lost), then ends the connection.
   */
  async close(): Promise<void> {
    for (const [id, w] of this.waiters) {
      if (!w.onChunk) continue
      this.control({ op: 'cancel', ref: id })
      this.waiters.delete(id)
      w.reject(Errors.CLOSED('the AgentLog is closed'))
    }
    while (this.waiters.size > 0 && !this.lost) {
      await new Promise<void>((resolve) => {
        this.idle = resolve
      })
    }
    this.idle = null
    this.socket.end()
  }

  private idle: (() => void) | null = null
}
