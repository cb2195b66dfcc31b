/**
 * AgentLog: the facade on the caller's thread. It validates entries, routes each workspace to
 * its owner worker (one for the pool's life), coalesces everything appended in one event-loop
 * turn into one message per worker, and resolves each append when its ack comes back, which the
 * owner sends only after the fdatasync that covers the entry.
 */

import { randomBytes } from 'node:crypto'
import { realpathSync } from 'node:fs'
import { availableParallelism } from 'node:os'
import { dirname, isAbsolute, join } from 'node:path'
import { MessageChannel, type MessagePort } from 'node:worker_threads'
import { Piscina } from 'piscina'
import { type Ack, checkWorkspace, type Entry, type EntryInput, encodeBody, parseEntry } from './entry.js'
import { deserializeError, NoaError } from './errors.js'
import { checkRoot, isInside } from './files.js'
import { recoverJournals } from './journal-recovery.js'
import {
  existingLog,
  listWorkspaces,
  logDirOf,
  readWorkspace,
  readWorkspaceBatches,
  readWorkspaceBytes,
  resolveRoot,
  verifyWorkspace,
  type WorkspaceInfo,
} from './logs.js'
import { checkOptionKeys } from './options.js'
import type {
  AtomicPart,
  Durability,
  FromOwner,
  OpenReport,
  OwnerInit,
  OwnerStatus,
  RawAppendOptions,
  ToOwner,
} from './protocol.js'
import type { EntryReadOptions } from './reader.js'
import type { VerifyOptions, VerifyReport } from './recovery.js'

export interface AgentLogOptions {
  /** Root folder; logs go to `<root>/agent-logs/`. Default `$NOA_ROOT` or `./.noa`. */
  root?: string
  /** Owner worker threads. Default: 2, or 1 on a single core. */
  workers?: number
  /** Open log files kept across all workers before idle ones are closed. Default 4096. */
  maxOpenFiles?: number
  /** fdatasyncs each worker may have in flight (threads in the addon's pool). Default 64. */
  syncThreads?: number
  /** Run a lone commit on the worker thread when nothing else is in flight. Default true. */
  inlineCommit?: boolean
  /**
   * `journal` (default): each worker commits everything queued for all its files with one write
   * and one fdatasync of its preallocated journal, and makes the files themselves durable at
   * checkpoints. `fdatasync`: each commit flushes its own file (the seed's literal behaviour).
   * `syncfs`: each commit flushes the whole filesystem holding the log folder.
   */
  durability?: Durability
  /** Size of each worker's commit journal in bytes (a multiple of 4096). Default 16 MiB. */
  journalSize?: number
  /** Test seam: module URL whose default export wraps the I/O layer of each worker. */
  ioModule?: string
  ioOptions?: unknown
}

const OPTION_KEYS = new Set([
  'root',
  'workers',
  'maxOpenFiles',
  'syncThreads',
  'inlineCommit',
  'durability',
  'journalSize',
  'ioModule',
  'ioOptions',
])

interface Pending {
  resolve(value: unknown): void
  reject(err: Error): void
  /** -1: one entry (resolve an Ack); -2: raw bytes (resolve void); n ≥ 0: appendMany of n. */
  count: number
  owner: Owner
}

interface Outbox {
  ids: number[]
  ws: string[]
  counts: number[]
  bodies: string[]
}

interface Owner {
  port: MessagePort
  task: Promise<OwnerStatus>
  outbox: Outbox
  scheduled: boolean
  failed: Error | null
}

function optionError(name: string, rule: string, value: unknown): NoaError {
  return new NoaError('NOA_BAD_OPTION', `option ${name} ${rule}, got ${JSON.stringify(value)}`, {
    field: name,
  })
}

function positiveInt(
  options: AgentLogOptions,
  name: keyof AgentLogOptions,
  fallback: number,
  max: number,
): number {
  const v = options[name]
  if (v === undefined) return fallback
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > max) {
    throw optionError(name, `must be an integer from 1 to ${max}`, v)
  }
  return v
}

function checkOptions(options: AgentLogOptions) {
  checkOptionKeys(options, OPTION_KEYS)
  if (options.root !== undefined && (typeof options.root !== 'string' || options.root === '')) {
    throw optionError('root', 'must be a non-empty string', options.root)
  }
  const durability = options.durability ?? 'journal'
  if (durability !== 'journal' && durability !== 'fdatasync' && durability !== 'syncfs') {
    throw optionError('durability', "must be 'journal', 'fdatasync' or 'syncfs'", durability)
  }
  const journalSize = options.journalSize ?? DEFAULT_JOURNAL_SIZE
  if (
    typeof journalSize !== 'number' ||
    !Number.isSafeInteger(journalSize) ||
    journalSize < MIN_JOURNAL_SIZE ||
    journalSize % 4096 !== 0
  ) {
    throw optionError(
      'journalSize',
      `must be a multiple of 4096 of at least ${MIN_JOURNAL_SIZE}`,
      journalSize,
    )
  }
  if (options.inlineCommit !== undefined && typeof options.inlineCommit !== 'boolean') {
    throw optionError('inlineCommit', 'must be a boolean', options.inlineCommit)
  }
  if (options.ioModule !== undefined && typeof options.ioModule !== 'string') {
    throw optionError('ioModule', 'must be a module URL string', options.ioModule)
  }
  const workers = positiveInt(options, 'workers', Math.min(2, availableParallelism()), 256)
  return {
    root: resolveRoot(options.root),
    workers,
    maxOpenFiles: positiveInt(options, 'maxOpenFiles', 4096, 1 << 20),
    syncThreads: positiveInt(options, 'syncThreads', 64, 1024),
    inlineCommit: options.inlineCommit ?? true,
    durability: durability as Durability,
    journalSize,
  }
}

/**
 * How `AgentLog.open` reaches a daemon (`noa serve`) serving its root: resolves with an AgentLog
 * that talks to it, or null when none serves the root. Installed by the daemon's client, a layer
 * above this one, so that the engine does not import it.
 */
export type Forwarder = (root: string) => Promise<AgentLog | null>

let forwarder: Forwarder | null = null

/** Installs (or, with null, removes) the forwarder `AgentLog.open` asks first. */
export function setForwarder(f: Forwarder | null): void {
  forwarder = f
}

export const DEFAULT_JOURNAL_SIZE = 16 << 20
const MIN_JOURNAL_SIZE = 256 << 10

/** FNV-1a: a stable owner for a name, the same in every run. */
function ownerIndex(name: string, n: number): number {
  let h = 0x811c9dc5
  for (let i = 0; i < name.length; i++) {
    h ^= name.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return (h >>> 0) % n
}

export class AgentLog {
  readonly root: string
  readonly logDir: string
  private readonly pool: Piscina
  private readonly owners: Owner[]
  private readonly pending = new Map<number, Pending>()
  private nextId = 1
  private nextBatch = 1
  /** Atomic batches committed by one owner whose parts on other owners are not durable yet. */
  private readonly coordinators = new Map<number, { owner: Owner; left: number }>()
  private closing: Promise<OwnerStatus[]> | null = null

  /** Protected for the daemon's client (src/serve), which extends this class with no owners of its own. */
  protected constructor(root: string, pool: Piscina, owners: Owner[]) {
    this.root = root
    this.logDir = logDirOf(root)
    this.pool = pool
    this.owners = owners
    for (const owner of owners) {
      owner.port.on('message', (msg: FromOwner) => this.onMessage(msg))
      owner.task.catch((err: unknown) => this.ownerFailed(owner, err))
    }
  }

  /** Starts the owner workers. Workspaces are opened (locked, tail recovered) on first use. */
  static async open(options: AgentLogOptions = {}): Promise<AgentLog> {
    const o = checkOptions(options)
    checkRoot(o.root, false) // a root that is a file is refused here, not at the first append
    if (forwarder) {
      // A daemon serving this root owns its workspaces: talk to it instead of starting owners.
      const remote = await forwarder(o.root)
      if (remote) return remote
    }
    recoverJournals(o.root) // journals left by a process that died are replayed before anything
    const pool = new Piscina({
      filename: new URL('../workers/owner.js', import.meta.url).href,
      minThreads: o.workers,
      maxThreads: o.workers,
      concurrentTasksPerWorker: 1,
      idleTimeout: Number.POSITIVE_INFINITY,
    })
    const owners: Owner[] = []
    const journalName = `${process.pid}-${randomBytes(4).toString('hex')}`
    const perWorker = Math.max(1, Math.floor(o.maxOpenFiles / o.workers))
    for (let index = 0; index < o.workers; index++) {
      const { port1, port2 } = new MessageChannel()
      const init: OwnerInit = {
        port: port2,
        index,
        root: o.root,
        logDir: logDirOf(o.root),
        maxOpenFiles: perWorker,
        syncThreads: o.syncThreads,
        inlineCommit: o.inlineCommit,
        durability: o.durability,
        journalSize: o.journalSize,
        journalName,
        ioModule: options.ioModule,
        ioOptions: options.ioOptions,
      }
      // Each task runs for the pool's life, so with one task per worker each lands on its own thread.
      const task = pool.run(init, { transferList: [port2] }) as Promise<OwnerStatus>
      owners.push({
        port: port1,
        task,
        outbox: { ids: [], ws: [], counts: [], bodies: [] },
        scheduled: false,
        failed: null,
      })
    }
    const log = new AgentLog(o.root, pool, owners)
    try {
      await log.status() // every worker loaded the addon and answers
    } catch (err) {
      await pool.destroy()
      throw err
    }
    return log
  }

  /** Appends one entry; resolves with its seq and ts once it is durable. */
  append(workspace: string, entry: EntryInput): Promise<Ack> {
    try {
      checkWorkspace(workspace)
      return this.submit(workspace, encodeBody(entry), -1) as Promise<Ack>
    } catch (err) {
      return Promise.reject(err)
    }
  }

  /**
   * Appends entries together: all are validated before any is sent, they get consecutive seqs,
   * and the promise resolves once all are durable (they share one commit).
   */
  appendMany(workspace: string, entries: readonly EntryInput[]): Promise<Ack[]> {
    try {
      checkWorkspace(workspace)
      if (!Array.isArray(entries))
        throw new NoaError('NOA_BAD_ARGUMENT', 'appendMany takes an array of entries')
      if (entries.length === 0) return Promise.resolve([])
      const bodies = entries.map((e, i) => encodeBody(e, `entry ${i + 1}`))
      return this.submit(workspace, bodies, entries.length) as Promise<Ack[]>
    } catch (err) {
      return Promise.reject(err)
    }
  }

  /**
   * Appends entries to several workspaces as one: after any crash, all of them are in their logs
   * or none is. Each workspace's entries get consecutive seqs. The parts of every owner worker
   * involved are prepared (each workspace waits until it is idle, then gets its seqs and is held),
   * then committed in one journal frame of the first owner (one fdatasync), then written to their
   * logs; the promise resolves once every part is in its log. Needs `durability: 'journal'`.
   */
  async appendAtomic(batch: Readonly<Record<string, readonly EntryInput[]>>): Promise<Record<string, Ack[]>> {
    if (typeof batch !== 'object' || batch === null || Array.isArray(batch)) {
      throw new NoaError('NOA_BAD_ARGUMENT', 'appendAtomic takes an object: { workspace: [entries] }')
    }
    const groups = new Map<Owner, { ws: string[]; counts: number[]; bodies: string[] }>()
    for (const [workspace, entries] of Object.entries(batch)) {
      checkWorkspace(workspace)
      if (!Array.isArray(entries)) {
        throw new NoaError('NOA_BAD_ARGUMENT', `appendAtomic: ${workspace} must map to an array of entries`)
      }
      if (entries.length === 0) continue
      const bodies = entries.map((e, i) => encodeBody(e, `${workspace} entry ${i + 1}`))
      const owner = this.ownerOf(workspace)
      let g = groups.get(owner)
      if (!g) {
        g = { ws: [], counts: [], bodies: [] }
        groups.set(owner, g)
      }
      g.ws.push(workspace)
      g.counts.push(bodies.length)
      for (const b of bodies) g.bodies.push(b)
    }
    const owners = [...groups.keys()]
    const coordinator = owners[0]
    if (coordinator === undefined) return {}
    const id = this.nextBatch++
    const abortAll = () =>
      Promise.allSettled(owners.map((o) => this.request(o, (rid) => ({ t: 'abort', id: rid, batch: id }))))
    const prepared = await Promise.allSettled(
      owners.map((o) => {
        const g = groups.get(o) as { ws: string[]; counts: number[]; bodies: string[] }
        return this.request(o, (rid) => ({ t: 'prepare', id: rid, batch: id, ...g })) as Promise<AtomicPart[]>
      }),
    )
    const refused = prepared.find((r) => r.status === 'rejected')
    if (refused) {
      await abortAll()
      throw (refused as PromiseRejectedResult).reason
    }
    const parts = prepared.map((r) => (r as PromiseFulfilledResult<AtomicPart[]>).value)
    const others = owners.slice(1)
    if (others.length > 0) this.coordinators.set(id, { owner: coordinator, left: others.length })
    try {
      await this.request(coordinator, (rid) => ({
        t: 'atomicCommit',
        id: rid,
        batch: id,
        foreign: parts.slice(1).flat(),
      }))
    } catch (err) {
      this.coordinators.delete(id)
      await abortAll()
      throw err
    }
    await Promise.all(others.map((o) => this.request(o, (rid) => ({ t: 'apply', id: rid, batch: id }))))
    const out: Record<string, Ack[]> = {}
    for (const part of parts.flat()) {
      out[part.ws] = Array.from({ length: part.count }, (_, k) => ({
        seq: part.firstSeq + k,
        ts: part.firstTs + k,
      }))
    }
    return out
  }

  /**
   * Appends complete lines copied from another log (a replica), verbatim: they keep their seq
   * and ts, which must continue this log (seq = last + 1, ts increasing), or the request fails
   * with NOA_REPLICA_GAP and nothing is written. Each line is checked like any stored entry.
   */
  appendReplicated(workspace: string, lines: readonly string[]): Promise<Ack[]> {
    try {
      checkWorkspace(workspace)
      if (lines.length === 0) return Promise.resolve([])
      const out: string[] = []
      const acks: Ack[] = []
      let prev: Entry | null = null
      let first: Entry | null = null
      for (let i = 0; i < lines.length; i++) {
        const raw = lines[i] as string
        const text = raw.endsWith('\n') ? raw.slice(0, -1) : raw
        if (text.includes('\n'))
          throw new NoaError('NOA_BAD_ENTRY', `line ${i + 1}: holds more than one line`)
        let e: Entry
        try {
          e = parseEntry(text)
        } catch (err) {
          throw new NoaError('NOA_BAD_ENTRY', `line ${i + 1}: ${(err as Error).message}`)
        }
        if (prev && (e.seq !== prev.seq + 1 || e.ts <= prev.ts)) {
          throw new NoaError(
            'NOA_REPLICA_GAP',
            `line ${i + 1}: seq ${e.seq} ts ${e.ts} does not follow seq ${prev.seq} ts ${prev.ts}`,
          )
        }
        first ??= e
        prev = e
        out.push(`${text}\n`)
        acks.push({ seq: e.seq, ts: e.ts })
      }
      const f = first as Entry
      const l = prev as Entry
      if (this.closing) return Promise.reject(closedError())
      const owner = this.ownerOf(workspace)
      return this.request(owner, (id) => ({
        t: 'replica',
        id,
        ws: workspace,
        lines: out,
        firstSeq: f.seq,
        firstTs: f.ts,
        lastSeq: l.seq,
        lastTs: l.ts,
      })).then(() => acks)
    } catch (err) {
      return Promise.reject(err)
    }
  }

  /**
   * Durably appends bytes to a file outside the workspace logs (transcripts use this): the same
   * owner workers, group commit and fdatasync. `file` must be absolute.
   */
  appendToFile(file: string, data: string, options: Partial<RawAppendOptions> = {}): Promise<void> {
    if (typeof file !== 'string' || !isAbsolute(file)) {
      return Promise.reject(
        new NoaError('NOA_BAD_ARGUMENT', `appendToFile needs an absolute path, got ${file}`),
      )
    }
    try {
      this.checkOutsideLogs(file)
    } catch (err) {
      return Promise.reject(err)
    }
    const owner = this.owners[ownerIndex(file, this.owners.length)] as Owner
    return this.request(owner, (id) => ({
      t: 'raw',
      id,
      file,
      data,
      options: { lock: options.lock ?? true, repairTail: options.repairTail ?? true },
    })) as Promise<void>
  }

  /**
   * Workspace logs are written only through their owner (seq, ts, recovery): raw bytes aimed
   * into `agent-logs/` (by any path, symlinked folders included) are refused.
   */
  private checkOutsideLogs(file: string): void {
    let dir = dirname(file)
    try {
      dir = realpathSync(dir)
    } catch {
      // a folder that does not exist yet cannot be the log folder (which exists once used)
    }
    let logs = this.logDir
    try {
      logs = realpathSync(logs)
    } catch {
      // no log folder yet
    }
    if (isInside(logs, join(dir, 'x'))) {
      throw new NoaError(
        'NOA_BAD_ARGUMENT',
        `appendToFile refuses ${file}: it is inside the workspace logs folder ${this.logDir}, which only append (through the workspace's owner) may write`,
        { file },
      )
    }
  }

  /** Entries of a workspace in seq order, streamed (never the whole file in memory). */
  read(workspace: string, options: EntryReadOptions = {}): AsyncGenerator<Entry> {
    return readWorkspace(this.root, workspace, options)
  }

  /** The same, a chunk's worth of entries at a time (faster for replays). */
  readBatches(workspace: string, options: EntryReadOptions = {}): AsyncGenerator<Entry[]> {
    return readWorkspaceBatches(this.root, workspace, options)
  }

  /** The stored lines, as bytes exactly as on disk. */
  readBytes(workspace: string, fromSeq = 1): AsyncGenerator<Buffer> {
    return readWorkspaceBytes(this.root, workspace, fromSeq)
  }

  /**
   * Reopens a workspace in its owner: releases it once idle, then opens it again (lock, cut a
   * torn tail, read the last seq). This also clears a workspace poisoned by a failed fdatasync.
   */
  async recover(workspace: string): Promise<OpenReport> {
    existingLog(this.root, workspace) // recovering a workspace that does not exist would create it
    const owner = this.ownerOf(workspace)
    await this.request(owner, (id) => ({ t: 'release', id, target: workspace }))
    return (await this.request(owner, (id) => ({ t: 'open', id, ws: workspace }))) as OpenReport
  }

  /** Opens a workspace (creating its log) without appending: takes the lock, recovers the tail. */
  async openWorkspace(workspace: string): Promise<OpenReport> {
    checkWorkspace(workspace)
    return (await this.request(this.ownerOf(workspace), (id) => ({
      t: 'open',
      id,
      ws: workspace,
    }))) as OpenReport
  }

  /** Closes a workspace's fd (and so its lock) once its queue is drained. */
  async release(workspace: string): Promise<boolean> {
    checkWorkspace(workspace)
    return (await this.request(this.ownerOf(workspace), (id) => ({
      t: 'release',
      id,
      target: workspace,
    }))) as boolean
  }

  /** Closes a file written by `appendToFile` (and so its lock) once its queue is drained. */
  async releaseFile(file: string): Promise<boolean> {
    if (typeof file !== 'string' || !isAbsolute(file)) {
      throw new NoaError('NOA_BAD_ARGUMENT', `releaseFile needs an absolute path, got ${file}`)
    }
    return (await this.request(this.owners[ownerIndex(file, this.owners.length)] as Owner, (id) => ({
      t: 'release',
      id,
      target: file,
    }))) as boolean
  }

  /** Full scan: every line valid, seq strictly increasing, ts non-decreasing. */
  verify(workspace: string, options: VerifyOptions = {}): Promise<VerifyReport> {
    try {
      return verifyWorkspace(this.root, workspace, options)
    } catch (err) {
      return Promise.reject(err)
    }
  }

  workspaces(): Promise<WorkspaceInfo[]> {
    return listWorkspaces(this.root)
  }

  status(): Promise<OwnerStatus[]> {
    return Promise.all(this.owners.map((o) => this.request(o, (id) => ({ t: 'status', id })))) as Promise<
      OwnerStatus[]
    >
  }

  /** Drains every queued append, closes the files (releasing their locks) and ends the workers. */
  close(): Promise<OwnerStatus[]> {
    if (this.closing) return this.closing
    this.closing = (async () => {
      const live = this.owners.filter((o) => o.failed === null)
      const finals = await Promise.all(
        live.map((o) => this.request(o, (id) => ({ t: 'close', id }), true).catch(() => null)),
      )
      await Promise.allSettled(live.map((o) => o.task))
      await this.pool.destroy()
      for (const o of this.owners) o.port.close()
      // Nothing can answer any more: whatever is still waiting (it should be nothing) fails.
      for (const [id, p] of this.pending) {
        this.pending.delete(id)
        p.reject(closedError())
      }
      return finals.filter((s): s is OwnerStatus => s !== null)
    })()
    return this.closing
  }

  get closed(): boolean {
    return this.closing !== null
  }

  private ownerOf(workspace: string): Owner {
    return this.owners[ownerIndex(workspace, this.owners.length)] as Owner
  }

  /** Queues bodies (one, or an appendMany's array) for the owner; flushed at the end of the turn. */
  private submit(workspace: string, bodies: string | string[], count: number): Promise<unknown> {
    if (this.closing) return Promise.reject(closedError())
    const owner = this.ownerOf(workspace)
    if (owner.failed) return Promise.reject(owner.failed)
    const id = this.nextId++
    const out = owner.outbox
    out.ids.push(id)
    out.ws.push(workspace)
    if (typeof bodies === 'string') {
      out.counts.push(1)
      out.bodies.push(bodies)
    } else {
      out.counts.push(bodies.length)
      for (const b of bodies) out.bodies.push(b)
    }
    if (!owner.scheduled) {
      owner.scheduled = true
      queueMicrotask(() => this.flush(owner))
    }
    return new Promise((resolve, reject) => this.pending.set(id, { resolve, reject, count, owner }))
  }

  private flush(owner: Owner): void {
    owner.scheduled = false
    const out = owner.outbox
    if (out.ids.length === 0) return
    owner.outbox = { ids: [], ws: [], counts: [], bodies: [] }
    owner.port.postMessage({ t: 'append', ...out } satisfies ToOwner)
  }

  private request(owner: Owner, make: (id: number) => ToOwner, closing = false): Promise<unknown> {
    if (this.closing && !closing) return Promise.reject(closedError())
    if (owner.failed) return Promise.reject(owner.failed)
    this.flush(owner) // keep order: earlier appends go first
    const id = this.nextId++
    const p = new Promise((resolve, reject) => this.pending.set(id, { resolve, reject, count: -2, owner }))
    owner.port.postMessage(make(id))
    return p
  }

  private onMessage(msg: FromOwner): void {
    switch (msg.t) {
      case 'acks': {
        const d = msg.data
        for (let i = 0; i < d.length; i += 3) {
          const id = d[i] as number
          const p = this.pending.get(id)
          if (!p) continue
          this.pending.delete(id)
          const seq = d[i + 1] as number
          const ts = d[i + 2] as number
          if (p.count === -1) p.resolve({ seq, ts })
          else if (p.count === -2) p.resolve(undefined)
          else {
            const acks: Ack[] = new Array(p.count)
            for (let k = 0; k < p.count; k++) acks[k] = { seq: seq + k, ts: ts + k }
            p.resolve(acks)
          }
        }
        break
      }
      case 'fail': {
        for (const id of msg.ids) {
          const p = this.pending.get(id)
          if (!p) continue
          this.pending.delete(id)
          p.reject(deserializeError(msg.error))
        }
        break
      }
      case 'applied': {
        const c = this.coordinators.get(msg.batch)
        if (c && --c.left === 0) {
          this.coordinators.delete(msg.batch)
          c.owner.port.postMessage({ t: 'unpin', batch: msg.batch } satisfies ToOwner)
        }
        break
      }
      case 'reply': {
        const p = this.pending.get(msg.id)
        if (!p) break
        this.pending.delete(msg.id)
        if (msg.error) p.reject(deserializeError(msg.error))
        else p.resolve(msg.value)
        break
      }
    }
  }

  private ownerFailed(owner: Owner, err: unknown): void {
    owner.failed = new NoaError(
      'NOA_WORKER_FAILED',
      `owner worker failed: ${(err as Error)?.message ?? String(err)}; its workspaces refuse appends`,
      {},
      { cause: err },
    )
    for (const [id, p] of this.pending) {
      if (p.owner !== owner) continue
      this.pending.delete(id)
      p.reject(owner.failed)
    }
  }
}

function closedError(): NoaError {
  return new NoaError('NOA_CLOSED', 'the AgentLog is closed')
}
