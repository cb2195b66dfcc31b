/**
 * `noa serve`: one process owns a root and serves every other process on the machine through a
 * unix socket inside the root (mode 0600: this user only), and optionally a TCP listener that
 * needs a token. It holds the root's serve lock for its whole life (see paths.ts), opens one
 * AgentLog on the root, and answers the wire protocol (protocol.ts) on every connection.
 *
 * Lifecycle: `drain()` (SIGTERM, SIGINT) refuses new requests with NOA_SHUTTING_DOWN, ends
 * streams, lets every append already taken commit and be answered, closes the AgentLog, removes
 * the socket and releases the lock. A daemon killed outright loses nothing acknowledged: an
 * answer is sent only after the engine acknowledged, and the next daemon (or any AgentLog) that
 * opens the root replays the dead one's commit journal first.
 */
import { createHash } from 'node:crypto'
import { chmodSync, closeSync, fstatSync, mkdirSync, openSync, readSync } from 'node:fs'
import { createServer, isIP, type Server, type Socket } from 'node:net'
import { AgentLog, type AgentLogOptions } from '../engine/agent-log.js'
import { Errors } from '../engine/errors.js'
import { checkRoot, DIR_MODE } from '../engine/files.js'
import { resolveRoot } from '../engine/logs.js'
import { checkOptionKeys } from '../engine/options.js'
import { ObjectStore } from '../store/objects.js'
import { Budget, READER_BYTES } from './budget.js'
import { markServed, unmarkServed } from './forward.js'
import {
  alreadyServed,
  removeStaleSocket,
  type ServeLock,
  socketAddress,
  socketPath,
  tryServeLock,
} from './paths.js'
import { DEFAULT_LIMITS, type Limits } from './protocol.js'
import { Session, type SessionHost } from './session.js'

export interface ServeOptions {
  /** The root to serve. Default `$NOA_ROOT` or `./.noa`; created when missing. */
  root?: string
  /** A TCP listener as well: `PORT` or `HOST:PORT` (HOST defaults to 127.0.0.1). Needs `tokenFile`. */
  listen?: string
  /** File holding the token TCP clients must send in hello (at least 16 characters, mode 0600). */
  tokenFile?: string
  limits?: Partial<Limits>
  /** Options of the AgentLog the daemon opens (workers, durability, …). */
  log?: Omit<AgentLogOptions, 'root'>
}

const OPTION_KEYS = new Set(['root', 'listen', 'tokenFile', 'limits', 'log'])
const LIMIT_KEYS = new Set(Object.keys(DEFAULT_LIMITS))

export interface DaemonStats {
  pid: number
  root: string
  connections: number
  requests: number
  streams: number
  pendingBytes: number
  /**
   * What counts against maxBufferedBytes: answer bytes queued for clients that have not taken
   * them, request lines still arriving, and a share for each open stream reader.
   */
  bufferedBytes: number
  /** Stream readers open now (a parked stream has none). */
  readers: number
  /**
   * Connections the daemon is not reading now: they have --max-in-flight requests in flight, all
   * connections together have more than --max-pending-bytes, or their unread answers pile up.
   */
  paused: number
  /** Connections refused before hello since the daemon started: over --max-connections, or draining. */
  refused: number
  /** Connections closed with NOA_SLOW_CONSUMER since the daemon started. */
  slowConsumers: number
  /** Requests refused with NOA_BUSY since the daemon started. */
  busy: number
  draining: boolean
}

/**
 * Unless told otherwise, the daemon's owner runs on its own thread (`workers: 0`) and every round
 * is written and fdatasynced on the addon's threads (`inlineCommit: false`: an inline round would
 * stop the daemon reading every client during the fdatasync). A round's request and its ack then
 * cross no thread but the addon's: with one owner worker, each also woke the worker, and on two
 * cores shared with 8 client processes those wake-ups set the pace. Measured 2026-12-08, 2 × 3 s
 * trials each, `node dist/bench/peers/cases.js write 8proc[-shared] noa`: 8 processes on own
 * workspaces 4,915–5,856 entries/s against 2,372–2,832 with one worker (better-sqlite3 5,086–6,368
 * in the same spell); one shared workspace 4,640–4,756 against 2,589–2,722 (better-sqlite3
 * 4,848–4,958). What a worker gave, and `--workers N` still gives: an owner that dies (out of
 * memory in the worker) is respawned while the daemon serves on.
 */
function daemonLogDefaults(log: ServeOptions['log']): Omit<AgentLogOptions, 'root'> {
  if (log?.workers === undefined) return { workers: 0, inlineCommit: false }
  if (log.workers === 0) return { inlineCommit: false }
  return {}
}

/** Time a drained connection gets to close its side before it is cut. */
const CLOSE_GRACE_MS = 1000

export class Daemon implements SessionHost {
  readonly root: string
  readonly replication: 'replicated' | 'local' | null
  readonly socketPath: string
  readonly limits: Limits
  readonly tokenDigest: Buffer | null
  /** The TCP listener's address, when there is one. */
  tcp: { host: string; port: number } | null = null
  pendingBytes = 0
  readonly budget: Budget
  private slowConsumers = 0
  private refused = 0
  readonly budgetWaiters = new Set<Session>()
  private readonly sessions = new Set<Session>()
  private readonly servers: Server[] = []
  private readonly lock: ServeLock
  private logValue: AgentLog | null = null
  private drainStarted = false
  private draining_: Promise<void> | null = null
  private resolveDone!: () => void
  /** Resolves once the daemon has stopped (after drain, or a failed start). */
  readonly done: Promise<void>
  private readonly early: Array<{ socket: Socket; transport: 'unix' | 'tcp' }> = []

  private constructor(
    root: string,
    limits: Limits,
    tokenDigest: Buffer | null,
    lock: ServeLock,
    replication: 'replicated' | 'local' | null,
  ) {
    this.root = root
    this.replication = replication
    this.socketPath = socketPath(root)
    this.limits = limits
    this.budget = new Budget(limits.maxBufferedBytes)
    this.tokenDigest = tokenDigest
    this.lock = lock
    this.done = new Promise((resolve) => {
      this.resolveDone = resolve
    })
  }

  get log(): AgentLog {
    if (!this.logValue) throw Errors.CLOSED('the daemon has no AgentLog open')
    return this.logValue
  }

  get draining(): boolean {
    return this.drainStarted
  }

  /** Takes the root, listens, opens the AgentLog. Refuses a root another daemon serves. */
  static async start(options: ServeOptions = {}): Promise<Daemon> {
    checkOptionKeys(options, OPTION_KEYS, 'serve')
    const limits = checkLimits(options.limits ?? {})
    const tcp = options.listen === undefined ? null : parseListen(options.listen)
    if (options.tokenFile !== undefined && tcp === null) {
      throw Errors.BAD_OPTION('a token file is for the TCP listener: give --listen too', {
        field: 'tokenFile',
      })
    }
    if (tcp && options.tokenFile === undefined) {
      throw Errors.BAD_OPTION(
        'a TCP listener needs a token: --token-file FILE (a secret of at least 16 characters, mode 0600)',
        { field: 'tokenFile' },
      )
    }
    const digest = options.tokenFile === undefined ? null : readToken(options.tokenFile)
    const root = resolveRoot(options.root)
    checkRoot(root, false)
    mkdirSync(root, { recursive: true, mode: DIR_MODE })
    const lock = await takeServeLock(root)
    const replicate = options.log?.replicate
    const daemon = new Daemon(
      root,
      limits,
      digest,
      lock,
      replicate === undefined ? null : (replicate.durability ?? 'replicated'),
    )
    try {
      removeStaleSocket(root)
      // This process's own AgentLog on the root must not be forwarded to the socket it is binding.
      markServed(root)
      await daemon.listenUnix()
      if (tcp) await daemon.listenTcp(tcp.host, tcp.port)
      // With the root's object store, the daemon checks records and blobs as `noa append` does.
      daemon.logValue = await AgentLog.open({
        objects: new ObjectStore(root),
        ...daemonLogDefaults(options.log),
        ...options.log,
        root,
      })
    } catch (err) {
      await daemon.stop()
      throw err
    }
    for (const { socket, transport } of daemon.early.splice(0)) daemon.accept(socket, transport)
    return daemon
  }

  private listenUnix(): Promise<void> {
    const server = createServer((socket) => this.accept(socket, 'unix'))
    this.servers.push(server)
    const { address, release } = socketAddress(this.root)
    return new Promise<void>((resolve, reject) => {
      server.once('error', (err) => {
        release()
        reject(err)
      })
      // The socket is created with the mode the umask leaves: 0600 from its first instant, so no
      // other user can connect in a window before a chmod. bind(2) happens inside listen().
      const umask = process.umask(0o177)
      try {
        server.listen(address, () => {
          release()
          resolve()
        })
      } finally {
        process.umask(umask)
      }
    }).then(() => chmodSync(this.socketPath, 0o600))
  }

  private listenTcp(host: string, port: number): Promise<void> {
    const server = createServer((socket) => this.accept(socket, 'tcp'))
    this.servers.push(server)
    return new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(port, host, () => {
        const a = server.address()
        if (a && typeof a === 'object') this.tcp = { host: a.address, port: a.port }
        resolve()
      })
    })
  }

  private accept(socket: Socket, transport: 'unix' | 'tcp'): void {
    if (transport === 'tcp') socket.setNoDelay(true)
    if (!this.logValue) {
      // The AgentLog is still opening: the connection waits (its hello is read once it is open).
      socket.pause()
      this.early.push({ socket, transport })
      return
    }
    const session = new Session(this, socket, transport)
    if (this.drainStarted) {
      this.refused++
      session.refuse(Errors.SHUTTING_DOWN('the daemon is shutting down: nothing new is taken'))
      return
    }
    if (this.sessions.size >= this.limits.maxConnections) {
      this.refused++
      session.refuse(
        Errors.TOO_MANY_CONNECTIONS(
          `the daemon has ${this.sessions.size} connections, its limit (noa serve --max-connections)`,
          { limit: this.limits.maxConnections },
        ),
      )
      return
    }
    this.sessions.add(session)
    socket.resume()
  }

  ended(session: Session): void {
    this.sessions.delete(session)
    this.budgetWaiters.delete(session)
    this.wakeDrain?.()
  }

  slowConsumer(_session: Session): void {
    this.slowConsumers++
  }

  released(): void {
    if (this.budgetWaiters.size > 0 && this.pendingBytes <= this.limits.maxPendingBytes / 2) {
      const waiting = [...this.budgetWaiters]
      this.budgetWaiters.clear()
      for (const s of waiting) s.budgetFreed()
    }
    this.wakeDrain?.()
  }

  /** The last seq of each workspace appended through this daemon (it holds their locks: no one else writes them). */
  private readonly lastSeqs = new Map<string, number>()

  noteSeq(workspace: string, seq: number): void {
    if (seq > (this.lastSeqs.get(workspace) ?? 0)) this.lastSeqs.set(workspace, seq)
  }

  /**
   * A workspace's last seq: opening it reads its tail (and takes its lock); after that every
   * append to it goes through this daemon, which keeps the highest seq acknowledged.
   */
  async lastSeq(workspace: string): Promise<number> {
    const opened = await this.log.openWorkspace(workspace)
    return Math.max(opened.lastSeq, this.lastSeqs.get(workspace) ?? 0)
  }

  stats(): DaemonStats {
    let requests = 0
    let streams = 0
    let paused = 0
    for (const s of this.sessions) {
      requests += s.requests
      streams += s.openStreams
      if (s.readPaused) paused++
    }
    return {
      pid: process.pid,
      root: this.root,
      connections: this.sessions.size,
      requests,
      streams,
      pendingBytes: this.pendingBytes,
      bufferedBytes: this.budget.used,
      readers: this.budget.readers,
      paused,
      refused: this.refused,
      slowConsumers: this.slowConsumers,
      busy: this.budget.refusals,
      draining: this.drainStarted,
    }
  }

  private wakeDrain: (() => void) | null = null

  /**
   * Stops taking work, waits for what is in flight to be committed and answered, then closes
   * the AgentLog, the listeners and the socket, and releases the root. Idempotent.
   */
  drain(): Promise<void> {
    this.draining_ ??= (async () => {
      this.drainStarted = true
      for (const s of this.sessions) s.drain()
      while (this.stats().requests > 0) {
        await new Promise<void>((wake) => {
          this.wakeDrain = wake
        })
        this.wakeDrain = null
      }
      await this.stop()
    })()
    return this.draining_
  }

  /** Closes everything this daemon holds, in order; the lock goes last. */
  private async stop(): Promise<void> {
    this.drainStarted = true
    for (const { socket } of this.early.splice(0)) socket.destroy()
    const closed = Promise.all(
      this.servers.map(
        (s) => new Promise<void>((resolve) => (s.listening ? s.close(() => resolve()) : resolve())),
      ),
    )
    if (this.logValue) await this.logValue.close()
    for (const s of this.sessions) s.finish()
    // Clients that did not close their side after the daemon ended its own are cut.
    const cut = setTimeout(() => {
      for (const s of this.sessions) s.destroy()
    }, CLOSE_GRACE_MS)
    await closed
    clearTimeout(cut)
    try {
      removeStaleSocket(this.root) // a long root's socket is not removed by close (bound through /proc)
    } catch {
      // planted after we left: not ours to remove
    }
    unmarkServed(this.root)
    this.lock.release()
    this.resolveDone()
  }
}

/** How long a starting daemon waits for the serve lock: a client checking a stale socket holds it for a moment. */
const LOCK_WAIT_MS = 2000

/**
 * The serve lock, for the daemon's life. A client that found a dead daemon's socket holds it
 * just long enough to remove that socket, so a busy lock is tried again for a moment; a live
 * daemon holds it for good, and then this daemon is refused.
 */
async function takeServeLock(root: string): Promise<ServeLock> {
  const until = Date.now() + LOCK_WAIT_MS
  for (;;) {
    const lock = tryServeLock(root, true)
    if (lock) return lock
    if (Date.now() > until) throw alreadyServed(root)
    await new Promise((r) => setTimeout(r, 10))
  }
}

function checkLimits(given: Partial<Limits>): Limits {
  checkOptionKeys(given, LIMIT_KEYS, 'serve limits')
  const out = { ...DEFAULT_LIMITS }
  for (const [k, v] of Object.entries(given)) {
    if (v === undefined) continue
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) {
      throw Errors.BAD_OPTION(`limit ${k} must be a positive integer, got ${JSON.stringify(v)}`, {
        field: k,
      })
    }
    out[k as keyof Limits] = v
  }
  if (out.maxBufferedBytes < Math.max(out.maxLineBytes, READER_BYTES)) {
    throw Errors.BAD_OPTION(
      `maxBufferedBytes (${out.maxBufferedBytes}) must hold a request line (maxLineBytes, ${out.maxLineBytes}) and a stream reader (${READER_BYTES})`,
      { field: 'maxBufferedBytes' },
    )
  }
  if (out.maxEntryBytes > out.maxLineBytes) {
    throw Errors.BAD_OPTION(
      `maxEntryBytes (${out.maxEntryBytes}) cannot exceed maxLineBytes (${out.maxLineBytes}): an entry travels in one line`,
      { field: 'maxEntryBytes' },
    )
  }
  return out
}

/** `PORT` or `HOST:PORT` (`[v6]:PORT`); the host defaults to loopback. */
export function parseListen(value: string): { host: string; port: number } {
  const m = /^(?:(\[[0-9a-fA-F:.]+\]|[^:[\]]+):)?(\d{1,5})$/.exec(value)
  const port = m ? Number(m[2]) : Number.NaN
  if (!m || port < 0 || port > 65535) {
    throw Errors.BAD_OPTION(`--listen takes PORT or HOST:PORT, got ${JSON.stringify(value)}`, {
      field: 'listen',
    })
  }
  let host = m[1] ?? '127.0.0.1'
  if (host.startsWith('[')) host = host.slice(1, -1)
  if (host !== 'localhost' && isIP(host) === 0 && !/^[A-Za-z0-9.-]+$/.test(host)) {
    throw Errors.BAD_OPTION(`--listen: ${JSON.stringify(host)} is not a host name or address`, {
      field: 'listen',
    })
  }
  return { host, port }
}

/**
 * The TCP token: the file's first line, at least 16 characters. Refused when others can read the
 * file (as ssh refuses a private key they can): a token anyone on the machine can read is none.
 */
export function readToken(file: string): Buffer {
  let fd: number
  try {
    fd = openSync(file, 'r')
  } catch (err) {
    throw Errors.BAD_OPTION(`cannot read the token file ${file}: ${(err as Error).message}`, {
      field: 'tokenFile',
      file,
    })
  }
  try {
    const st = fstatSync(fd)
    if (!st.isFile())
      throw Errors.BAD_OPTION(`token file ${file} is not a regular file`, { field: 'tokenFile', file })
    if ((st.mode & 0o077) !== 0) {
      throw Errors.BAD_OPTION(
        `token file ${file} has mode ${(st.mode & 0o777).toString(8).padStart(4, '0')}: others can read it; chmod 600 it`,
        { field: 'tokenFile', file },
      )
    }
    const buf = Buffer.alloc(4096)
    const n = readSync(fd, buf, 0, buf.length, 0)
    const token = buf.toString('utf8', 0, n).split('\n')[0]?.replace(/\r$/, '') ?? ''
    if (token.length < 16) {
      throw Errors.BAD_OPTION(`the token in ${file} is ${token.length} characters: at least 16 are needed`, {
        field: 'tokenFile',
        file,
      })
    }
    return createHash('sha256').update(token).digest()
  } finally {
    closeSync(fd)
  }
}
