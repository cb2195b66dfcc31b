/**
 * The TypeScript client of `noa serve`: an AgentLog whose every method is a request to the
 * daemon. `AgentLog.open` returns one when a daemon serves the root (forward.ts);
 * `connectDaemon` reaches one directly, over its socket or over TCP with a token.
 *
 * Entries and options are checked here first, with the engine's own checks, so a bad entry fails
 * with the same error as in process without a round trip; the daemon checks everything again
 * (it trusts no client). Requests go out on one connection (connection.ts); answers come back
 * as they complete. Streams (read, readBytes, watch) are flow-controlled per stream: the daemon
 * sends a window of chunks ahead and more only as this side consumes them, so a consumer that
 * stops reading one stream never holds up the answers of the others on the same connection.
 */
import { readFileSync } from 'node:fs'
import { isAbsolute } from 'node:path'
import {
  AgentLog,
  type AgentLogOptions,
  type AppendOptions,
  abortedError,
  type CompactOptions,
  type CompactResult,
  checkAppendOptions,
  checkFiles,
} from '../engine/agent-log.js'
import { writeFilesDurably } from '../engine/atomic.js'
import { STORE_APPEND } from '../engine/checks.js'
import { type Ack, checkWorkspace, type Entry, type EntryInput, encodeBody } from '../engine/entry.js'
import { Errors, NoaError } from '../engine/errors.js'
import { logPath, type WorkspaceInfo } from '../engine/logs.js'
import type { OpenReport, OwnerStatus, RawAppendOptions } from '../engine/protocol.js'
import type { EntryReadOptions } from '../engine/reader.js'
import type { VerifyOptions, VerifyReport } from '../engine/recovery.js'
import { checkWatchOptions, type WatchOptions } from '../engine/watch.js'
import { DaemonConnection, type DaemonInfo, describe, type Target } from './connection.js'
import { removeStaleSocket, socketPath, tryServeLock } from './paths.js'
import { DEFAULT_WINDOW, tooLarge, utf8Bytes } from './protocol.js'

/** The AgentLog options a client keeps: entries are checked with them before they are sent. */
type EntryChecks = Pick<AgentLogOptions, 'objects' | 'checkBlobs'>

function entryChecks(options: EntryChecks): EntryChecks {
  const out: EntryChecks = {}
  if (options.objects !== undefined) out.objects = options.objects
  if (options.checkBlobs !== undefined) out.checkBlobs = options.checkBlobs
  return out
}

export interface ConnectOptions extends EntryChecks {
  /** The root whose daemon to reach through `<root>/noa.sock`. */
  root?: string
  /** A socket path instead of a root. */
  socket?: string
  /** TCP instead: host (default 127.0.0.1) and port, with the daemon's token. */
  host?: string
  port?: number
  token?: string
  /** Reads the token from this file (its first line). */
  tokenFile?: string
  /** Time to connect and get hello answered. Default 10 s. */
  timeoutMs?: number
}

const RESUMABLE: ReadonlySet<string> = new Set(['NOA_DAEMON_LOST', 'NOA_SHUTTING_DOWN', 'NOA_SLOW_CONSUMER'])

export class RemoteAgentLog extends AgentLog {
  private conn: DaemonConnection
  private reconnecting: Promise<DaemonConnection> | null = null
  private closingRemote: Promise<OwnerStatus[]> | null = null
  private readonly target: Target
  private readonly timeoutMs: number

  private constructor(
    root: string,
    conn: DaemonConnection,
    target: Target,
    timeoutMs: number,
    checks: EntryChecks,
  ) {
    // No owner of its own is ever started: every method below goes to the daemon. `objects` and
    // `checkBlobs` are kept: entries are checked here with them, as in process.
    super(RemoteAgentLog.checkedOptions({ root, workers: 1, ...checks }), { root })
    this.conn = conn
    this.target = target
    this.timeoutMs = timeoutMs
  }

  /** Connects to a daemon (see ConnectOptions); refuses with a named error when none answers. */
  static async connect(options: ConnectOptions): Promise<RemoteAgentLog> {
    const target = targetOf(options)
    const timeoutMs = options.timeoutMs ?? 10_000
    let conn: DaemonConnection
    try {
      conn = await DaemonConnection.open(target, timeoutMs)
    } catch (err) {
      throw unavailable(target, err)
    }
    return new RemoteAgentLog(
      target.kind === 'unix' && target.root ? target.root : conn.info.root,
      conn,
      target,
      timeoutMs,
      entryChecks(options),
    )
  }

  /** @internal the forwarder's constructor, given a connection it opened itself. */
  static fromConnection(
    root: string,
    conn: DaemonConnection,
    timeoutMs: number,
    checks: EntryChecks,
  ): RemoteAgentLog {
    return new RemoteAgentLog(root, conn, { kind: 'unix', root, path: socketPath(root) }, timeoutMs, checks)
  }

  /** What the daemon said when this connection was made: pid, limits, transport. */
  get daemon(): DaemonInfo {
    return this.conn.info
  }

  /** A connection that works: the current one, or a new one after the daemon restarted. */
  private connection(): Promise<DaemonConnection> {
    if (this.closingRemote) return Promise.reject(Errors.CLOSED('the AgentLog is closed'))
    if (!this.conn.lost) return Promise.resolve(this.conn)
    this.reconnecting ??= DaemonConnection.open(this.target, this.timeoutMs).then(
      (c) => {
        this.conn = c
        this.reconnecting = null
        return c
      },
      (err) => {
        this.reconnecting = null
        throw Errors.DAEMON_LOST(
          `${describe(this.target)} is gone and no daemon answers there now (${(err as Error).message})`,
          {},
          { cause: err },
        )
      },
    )
    return this.reconnecting
  }

  private async call(msg: Record<string, unknown>, workspace?: string): Promise<unknown> {
    const conn = await this.connection()
    return conn.request(msg, msg.op as string, undefined, workspace)
  }

  override append(workspace: string, entry: EntryInput, options?: AppendOptions): Promise<Ack> {
    try {
      checkWorkspace(workspace)
      this.checkEntry(encodeBody(entry), 'the entry')
      this.checkEntries(workspace, [entry], options, () => 'entry')
      return this.afterFiles(
        options,
        () => this.appendRequest({ op: 'append', ws: workspace, entry }, workspace, options) as Promise<Ack>,
      )
    } catch (err) {
      return Promise.reject(err)
    }
  }

  override appendMany(
    workspace: string,
    entries: readonly EntryInput[],
    options?: AppendOptions,
  ): Promise<Ack[]> {
    try {
      checkWorkspace(workspace)
      if (!Array.isArray(entries)) throw Errors.BAD_ARGUMENT('appendMany takes an array of entries')
      if (entries.length === 0) return Promise.resolve([])
      entries.forEach((e, i) => {
        this.checkEntry(encodeBody(e, `entry ${i + 1}`), `entry ${i + 1}`)
      })
      this.checkEntries(workspace, entries, options, (i) => `entry ${i + 1}`)
      return this.afterFiles(
        options,
        () =>
          this.appendRequest({ op: 'appendMany', ws: workspace, entries }, workspace, options) as Promise<
            Ack[]
          >,
      )
    } catch (err) {
      return Promise.reject(err)
    }
  }

  /**
   * Sends an append once its files (AppendOptions.files) are durable on the root's file system,
   * which this client shares with the daemon: the daemon's journal never carries them.
   */
  private afterFiles<T>(
    options: Pick<AppendOptions, 'files'> | undefined,
    send: () => Promise<T>,
  ): Promise<T> {
    const files = checkFiles(options?.files)
    return files ? writeFilesDurably(this.root, files).then(send) : send()
  }

  private checkEntry(body: string, what: string): void {
    const max = this.conn.info.limits.maxEntryBytes
    const size = utf8Bytes(body)
    if (size > max) throw tooLarge(what, size, max, '--max-entry-bytes')
  }

  private async appendRequest(
    msg: Record<string, unknown>,
    workspace: string,
    options: AppendOptions | undefined,
  ): Promise<unknown> {
    const signal = options?.signal
    const ifLastSeq = checkAppendOptions(options)
    if (ifLastSeq >= 0) msg.ifLastSeq = ifLastSeq
    if (signal?.aborted) throw abortedError(workspace, signal)
    const conn = await this.connection()
    if (signal?.aborted) throw abortedError(workspace, signal)
    if (signal) msg.cancellable = true
    const p = conn.request(msg, msg.op as string, undefined, workspace)
    if (!signal) return p
    // Asked back on abort: the daemon cancels it unless a commit already took it.
    const onAbort = () => conn.control({ op: 'cancel', ref: p.id })
    signal.addEventListener('abort', onAbort, { once: true })
    try {
      return await p
    } finally {
      signal.removeEventListener('abort', onAbort)
    }
  }

  override async appendAtomic(
    batch: Readonly<Record<string, readonly EntryInput[]>>,
  ): Promise<Record<string, Ack[]>> {
    if (typeof batch !== 'object' || batch === null || Array.isArray(batch)) {
      throw Errors.BAD_ARGUMENT('appendAtomic takes an object: { workspace: [entries] }')
    }
    for (const [workspace, entries] of Object.entries(batch)) {
      checkWorkspace(workspace)
      if (!Array.isArray(entries)) {
        throw Errors.BAD_ARGUMENT(`appendAtomic: ${workspace} must map to an array of entries`)
      }
      entries.forEach((e, i) => {
        this.checkEntry(encodeBody(e, `${workspace} entry ${i + 1}`), `${workspace} entry ${i + 1}`)
      })
      this.checkEntries(workspace, entries, undefined, (i) => `${workspace} entry ${i + 1}`)
    }
    return (await this.call({ op: 'appendAtomic', batch })) as Record<string, Ack[]>
  }

  /**
   * The store's own appends (snapshot, fork, merge records), as the engine's same path: unix
   * socket only (files as for any append: see afterFiles).
   */
  override [STORE_APPEND](
    workspace: string,
    entries: readonly EntryInput[],
    options?: Pick<AppendOptions, 'files'>,
  ): Promise<Ack[]> {
    try {
      checkWorkspace(workspace)
      entries.forEach((e, i) => {
        this.checkEntry(encodeBody(e, `entry ${i + 1}`), `entry ${i + 1}`)
      })
      return this.afterFiles(
        options,
        () => this.call({ op: 'storeAppend', ws: workspace, entries }, workspace) as Promise<Ack[]>,
      )
    } catch (err) {
      return Promise.reject(err)
    }
  }

  override appendReplicated(workspace: string, lines: readonly string[]): Promise<Ack[]> {
    try {
      checkWorkspace(workspace)
      if (lines.length === 0) return Promise.resolve([])
      return this.call({ op: 'appendReplicated', ws: workspace, lines }, workspace) as Promise<Ack[]>
    } catch (err) {
      return Promise.reject(err)
    }
  }

  override async appendToFile(
    file: string,
    data: string,
    options: Partial<RawAppendOptions> = {},
  ): Promise<void> {
    if (typeof file !== 'string' || !isAbsolute(file)) {
      throw Errors.BAD_ARGUMENT(`appendToFile needs an absolute path, got ${file}`)
    }
    const msg: Record<string, unknown> = { op: 'appendToFile', file, data }
    if (options.lock !== undefined) msg.lock = options.lock
    if (options.repairTail !== undefined) msg.repairTail = options.repairTail
    await this.call(msg)
  }

  override async releaseFile(file: string): Promise<boolean> {
    if (typeof file !== 'string' || !isAbsolute(file)) {
      throw Errors.BAD_ARGUMENT(`releaseFile needs an absolute path, got ${file}`)
    }
    return (await this.call({ op: 'releaseFile', file })) as boolean
  }

  override async *read(workspace: string, options: EntryReadOptions = {}): AsyncGenerator<Entry> {
    for await (const batch of this.readBatches(workspace, options)) yield* batch
  }

  override async *readBatches(workspace: string, options: EntryReadOptions = {}): AsyncGenerator<Entry[]> {
    const msg: Record<string, unknown> = { op: 'read', ws: workspace }
    if (options.fromSeq !== undefined) msg.fromSeq = options.fromSeq
    if (options.validate !== undefined) msg.validate = options.validate
    if (options.end !== undefined) msg.end = options.end
    yield* this.entryStream(msg, workspace, options.fromSeq ?? 1)
  }

  override async *readBytes(workspace: string, fromSeq = 1): AsyncGenerator<Buffer> {
    for await (const chunk of this.stream({ op: 'readBytes', ws: workspace, fromSeq }, workspace)) {
      yield Buffer.from(chunk as string, 'base64')
    }
  }

  /**
   * Every acknowledged entry of a workspace from `fromSeq` on, in order, as the daemon commits
   * them, until the signal aborts or the iterator is returned. On NOA_DAEMON_LOST, NOA_SLOW_CONSUMER or
   * NOA_SHUTTING_DOWN the error's `details.resumeFrom` is the seq to watch again from: nothing
   * is missed or repeated.
   */
  override async *watch(workspace: string, options: WatchOptions = {}): AsyncGenerator<Entry> {
    checkWatchOptions(options)
    checkWorkspace(workspace)
    const msg: Record<string, unknown> = { op: 'watch', ws: workspace }
    if (options.fromSeq !== undefined) msg.fromSeq = options.fromSeq
    if (options.pollMs !== undefined) msg.pollMs = options.pollMs
    if (options.signal?.aborted) return
    for await (const batch of this.entryStream(msg, workspace, options.fromSeq ?? 1, options.signal))
      yield* batch
  }

  /** A stream of entry batches; an error carries `details.resumeFrom`, the next seq not delivered. */
  private async *entryStream(
    msg: Record<string, unknown>,
    workspace: string,
    fromSeq: number,
    signal?: AbortSignal,
  ): AsyncGenerator<Entry[]> {
    let next = fromSeq
    try {
      for await (const chunk of this.stream(msg, workspace, signal)) {
        const batch = chunk as Entry[]
        const last = batch[batch.length - 1]
        if (last) next = last.seq + 1
        yield batch
      }
    } catch (err) {
      // Errors that end a stream without anything being wrong with the log say where to go on.
      if (err instanceof NoaError && RESUMABLE.has(err.code) && err.details.resumeFrom === undefined) {
        err.details.resumeFrom = next
      }
      throw err
    }
  }

  /**
   * The chunks of one stream request, granting the daemon more as they are consumed. An abort
   * of `signal` ends it as if the daemon had ended it.
   */
  private async *stream(
    msg: Record<string, unknown>,
    workspace: string,
    signal?: AbortSignal,
  ): AsyncGenerator<unknown> {
    const conn = await this.connection()
    const window = DEFAULT_WINDOW
    const queue: unknown[] = []
    const state: { wake: (() => void) | null; finished: boolean; failure: Error | null } = {
      wake: null,
      finished: false,
      failure: null,
    }
    const p = conn.request(
      { ...msg, window },
      msg.op as string,
      (chunk) => {
        queue.push(chunk)
        state.wake?.()
      },
      workspace,
    )
    p.then(
      () => {
        state.finished = true
        state.wake?.()
      },
      (err: Error) => {
        state.finished = true
        state.failure = err
        state.wake?.()
      },
    )
    const onAbort = () => {
      if (state.finished) return
      state.finished = true
      conn.control({ op: 'cancel', ref: p.id })
      conn.forget(p.id)
      queue.length = 0
      state.wake?.()
    }
    signal?.addEventListener('abort', onAbort, { once: true })
    let consumed = 0
    try {
      for (;;) {
        if (queue.length > 0) {
          const chunk = queue.shift()
          if (++consumed >= window / 2) {
            conn.control({ op: 'more', ref: p.id, n: consumed })
            consumed = 0
          }
          yield chunk
          continue
        }
        if (state.finished) {
          if (state.failure) throw state.failure
          return
        }
        await new Promise<void>((resolve) => {
          state.wake = resolve
        })
        state.wake = null
      }
    } finally {
      signal?.removeEventListener('abort', onAbort)
      if (!state.finished) {
        // The consumer stopped early: the daemon ends the stream, its last messages are ignored.
        conn.control({ op: 'cancel', ref: p.id })
        conn.forget(p.id)
      }
    }
  }

  override async recover(workspace: string): Promise<OpenReport> {
    return (await this.call({ op: 'recover', ws: workspace }, workspace)) as OpenReport
  }

  override async openWorkspace(workspace: string): Promise<OpenReport> {
    checkWorkspace(workspace)
    return (await this.call({ op: 'openWorkspace', ws: workspace }, workspace)) as OpenReport
  }

  override async release(workspace: string): Promise<boolean> {
    checkWorkspace(workspace)
    return (await this.call({ op: 'release', ws: workspace }, workspace)) as boolean
  }

  /**
   * Not through the daemon (yet): it owns the root's workspaces, so compacting one from here
   * would be a second writer. Refused by name; `noa compact` runs where the root is not served.
   */
  override async compact(workspace: string, _options: CompactOptions = {}): Promise<CompactResult> {
    checkWorkspace(workspace)
    throw Errors.WORKSPACE_LOCKED(
      `workspace ${workspace} is served by the daemon (noa serve) at ${this.root}, which appends to it: compaction does not go through the daemon; stop it (or compact in its process) first`,
      { workspace, file: logPath(this.root, workspace) },
    )
  }

  /** The daemon's full scan; `onProgress` is called once, when it is done (progress does not cross the wire). */
  override async verify(workspace: string, options: VerifyOptions = {}): Promise<VerifyReport> {
    const report = (await this.call({ op: 'verify', ws: workspace }, workspace)) as VerifyReport
    options.onProgress?.(report.bytes, report.bytes)
    return report
  }

  override async workspaces(): Promise<WorkspaceInfo[]> {
    return (await this.call({ op: 'workspaces' })) as WorkspaceInfo[]
  }

  override async status(): Promise<OwnerStatus[]> {
    return (await this.call({ op: 'status' })) as OwnerStatus[]
  }

  /**
   * A workspace's current last seq, as the daemon knows it (it opens the workspace, creating an
   * empty log if there is none): where a compare-and-append starts.
   */
  async lastSeq(workspace: string): Promise<number> {
    checkWorkspace(workspace)
    return ((await this.call({ op: 'lastSeq', ws: workspace }, workspace)) as { lastSeq: number }).lastSeq
  }

  /** The daemon's own counters: connections, requests in flight, request bytes held. */
  async serverStatus(): Promise<Record<string, unknown>> {
    return (await this.call({ op: 'serverStatus' })) as Record<string, unknown>
  }

  /** Waits for every request in flight to be answered, then closes the connection (the daemon runs on). */
  override close(): Promise<OwnerStatus[]> {
    this.closingRemote ??= this.conn.close().then(() => [])
    return this.closingRemote
  }

  override get closed(): boolean {
    return this.closingRemote !== null
  }
}

function targetOf(options: ConnectOptions): Target {
  if (options.port !== undefined || options.host !== undefined) {
    if (options.port === undefined)
      throw Errors.BAD_OPTION('connectDaemon: host needs a port', { field: 'port' })
    let token = options.token
    if (token === undefined && options.tokenFile !== undefined) {
      token = readFileSync(options.tokenFile, 'utf8').split('\n')[0]?.replace(/\r$/, '')
    }
    if (!token)
      throw Errors.BAD_OPTION('connectDaemon over TCP needs token or tokenFile', {
        field: 'token',
      })
    return { kind: 'tcp', host: options.host ?? '127.0.0.1', port: options.port, token }
  }
  if (options.socket !== undefined) return { kind: 'unix', root: null, path: options.socket }
  if (options.root !== undefined) return { kind: 'unix', root: options.root, path: socketPath(options.root) }
  throw Errors.BAD_OPTION('connectDaemon needs root, socket, or host and port', {
    field: 'root',
  })
}

function unavailable(target: Target, err: unknown): Error {
  if (err instanceof NoaError) return err
  const code = (err as NodeJS.ErrnoException).code
  return Errors.DAEMON_UNAVAILABLE(
    `cannot reach ${describe(target)}: ${code === 'EACCES' ? "permission denied (the socket is its owner's only)" : (err as Error).message}`,
    code ? { code } : {},
    { cause: err },
  )
}

/**
 * Answers to a connection attempt that mean no daemon will serve it now, though one may have a
 * moment ago: refused, reset or cut during the hello (the daemon was killed), or refused by a
 * daemon that is draining. The serve lock then tells a dead daemon from a stopping one.
 */
const GONE_AT_HELLO: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'NOA_DAEMON_LOST',
  'NOA_SHUTTING_DOWN',
])

/** How long a client waits for a daemon that holds the root but does not answer yet (starting, stopping). */
const BUSY_WAIT_MS = 3000

/**
 * The forwarder's half: a RemoteAgentLog on the root's daemon, or null when the socket is
 * stale (its daemon died; the socket is removed, under the serve lock) or vanished meanwhile.
 */
/**
 * The daemon's AgentLog decides whether appends are replicated (noa serve --replicate-nats): a
 * client that asks for replicated acks from one that does not give them is refused, never
 * silently given less.
 */
function checkReplication(root: string, conn: DaemonConnection, options: AgentLogOptions): void {
  const want = options.replicate
  if (want === undefined || want === null || typeof want !== 'object') return
  const wanted = (want as { durability?: unknown }).durability ?? 'replicated'
  const has = conn.info.replication ?? null
  if (wanted === 'replicated' ? has === 'replicated' : has !== null) return
  void conn.close()
  throw Errors.BAD_OPTION(
    `option replicate asks for ${String(wanted)} acks, but the noa serve daemon serving ${root} (pid ${conn.info.pid}) ${has === null ? 'does not replicate' : `gives ${has} acks`}: start it with --replicate-nats URL${wanted === 'replicated' ? ' --durability replicated' : ''}`,
    { field: 'replicate' },
  )
}

export async function connectRoot(
  root: string,
  options: AgentLogOptions = {},
): Promise<RemoteAgentLog | null> {
  const target: Target = { kind: 'unix', root, path: socketPath(root) }
  const started = Date.now()
  for (let attempt = 0; ; attempt++) {
    let conn: DaemonConnection | null = null
    try {
      conn = await DaemonConnection.open(target, 10_000)
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code === 'ENOENT') return null
      if (!(typeof code === 'string' && GONE_AT_HELLO.has(code))) throw unavailable(target, err)
    }
    if (conn) {
      checkReplication(root, conn, options)
      return RemoteAgentLog.fromConnection(root, conn, 10_000, entryChecks(options))
    }
    // Nobody listens on the socket, or its daemon went away or began to stop while this one
    // connected. Whoever can take the serve lock knows no daemon is alive.
    const lock = tryServeLock(root, false)
    if (lock) {
      try {
        removeStaleSocket(root)
      } finally {
        lock.release()
      }
      return null
    }
    // A daemon holds the root but is not listening: starting up or shutting down. Wait a little.
    if (Date.now() - started > BUSY_WAIT_MS) {
      throw Errors.DAEMON_UNAVAILABLE(
        `a daemon holds root ${root} but does not accept connections on ${socketPath(root)} (starting or stopping); try again`,
        { root },
      )
    }
    await new Promise((r) => setTimeout(r, Math.min(200, 10 * 2 ** attempt)))
  }
}

/** A client of the daemon at a root, socket or TCP address, with the AgentLog API. */
export function connectDaemon(options: ConnectOptions): Promise<RemoteAgentLog> {
  return RemoteAgentLog.connect(options)
}
