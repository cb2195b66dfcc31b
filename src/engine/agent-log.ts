/**
 * AgentLog: the facade on the caller's thread. It validates entries, routes each workspace to
 * its owner worker (one for the pool's life), coalesces everything appended in one event-loop
 * turn into one message per worker, and resolves each append when its ack comes back, which the
 * owner sends only after the fdatasync that covers the entry.
 *
 * This file holds AgentLog itself (open, append, appendMany, appendReplicated, appendToFile,
 * reads, watch, the per-workspace requests, close), the top of a class built in layers, one
 * file each: see agent-log-state.ts. What other modules import from here is exported here.
 */
import { realpathSync } from 'node:fs'
import { dirname, isAbsolute, join } from 'node:path'
import { AgentLogCompact } from './agent-log-compact.js'
import {
  type AgentLogOptions,
  APPEND_OPTION_KEYS,
  type AppendOptions,
  type CheckedOptions,
  checkOptions,
  closedError,
  optionError,
} from './agent-log-options.js'
import { ownerIndex } from './agent-log-owners.js'
import type { Owner } from './agent-log-state.js'
import { parseBase } from './base.js'
import { isRecordEntry, LOG_END, LOG_HELD, type ObjectChecks, STORE_APPEND } from './checks.js'
import { type Ack, checkWorkspace, type Entry, type EntryInput, encodeBody, parseEntry } from './entry.js'
import { Errors } from './errors.js'
import { checkRoot, isInside } from './files.js'
import { type ForwarderOf, installedForwarder, installForwarder } from './forwarding.js'
import { recoverJournals } from './journal-recovery.js'
import {
  existingLog,
  listWorkspaces,
  readWorkspace,
  readWorkspaceBatches,
  readWorkspaceBytes,
  recoverLog,
  verifyWorkspace,
  type WorkspaceInfo,
} from './logs.js'
import { loadNative } from './native.js'
import { checkOptionKeys } from './options.js'
import type { OpenReport, OwnerStatus, RawAppendOptions } from './protocol.js'
import type { EntryReadOptions } from './reader.js'
import type { VerifyOptions, VerifyReport } from './recovery.js'
import { installedReplication, type Replication } from './replicating.js'
import { checkWatchOptions, followLog, type WatchOptions } from './watch.js'

export type { CompactOptions, CompactResult } from './agent-log-compact.js'
export {
  type AgentLogOptions,
  type AppendOptions,
  abortedError,
  checkAppendOptions,
  checkFiles,
  DEFAULT_JOURNAL_SIZE,
} from './agent-log-options.js'

/**
 * How `AgentLog.open` reaches a daemon (`noa serve`) serving its root: resolves with an AgentLog
 * that talks to it, or null when none serves the root. Installed by the daemon's client, a layer
 * above this one, so that the engine does not import it.
 */
export type Forwarder = ForwarderOf<AgentLog, AgentLogOptions>

/** Installs (or, with null, removes) the forwarder `AgentLog.open` asks first. */
export function setForwarder(f: Forwarder | null): void {
  installForwarder(f)
}

export class AgentLog extends AgentLogCompact {
  /** Set when opened with the option `replicate` (replicating.ts): appends go through it. */
  private replication: Replication | null = null

  /** For the daemon's client (src/serve): the checked options its constructor passes on. */
  protected static checkedOptions(options: AgentLogOptions): CheckedOptions {
    return checkOptions(options)
  }

  /**
   * Opens a root: replays the journals of processes that died, checks the root; starts nothing.
   * Owner workers start when a workspace routed to them is first written (`workers: 0`: one
   * owner runs in this thread instead, for processes that commit little, such as a CLI).
   */
  static async open(options: AgentLogOptions = {}): Promise<AgentLog> {
    const o = checkOptions(options)
    let replicate: { layer: NonNullable<ReturnType<typeof installedReplication>>; checked: unknown } | null =
      null
    if (options.replicate !== undefined) {
      const layer = installedReplication()
      if (!layer) {
        throw Errors.BAD_OPTION(
          "option replicate needs noa's replicate layer: import AgentLog from 'noa' (or load 'noa/replicate')",
          { field: 'replicate' },
        )
      }
      replicate = { layer, checked: layer.check(options.replicate) }
    }
    checkRoot(o.root, false) // a root that is a file is refused here, not at the first append
    const forwarder = installedForwarder<AgentLog, AgentLogOptions>()
    if (forwarder) {
      // A daemon serving this root owns its workspaces: talk to it instead of starting owners.
      const remote = await forwarder(o.root, options)
      if (remote) return remote
    }
    loadNative() // a missing addon is an error now, not at the first append
    recoverJournals(o.root) // journals left by a process that died are replayed before anything
    const log = new AgentLog(o, options)
    if (replicate) {
      try {
        // Connects, checks the stream, publishes what a crash left unpublished.
        log.replication = await replicate.layer.open(o.root, replicate.checked)
      } catch (err) {
        await log.close()
        throw err
      }
    }
    return log
  }

  /**
   * An append through the replication (option `replicate`): refused at once when its workspace
   * diverged from the stream; after its local commit, resolves once its message is acknowledged.
   */
  private replicated<T extends Ack | Ack[]>(
    workspace: string,
    bodies: readonly string[] | null,
    submit: () => Promise<T>,
  ): Promise<T> {
    const r = this.replication as Replication
    const go = (): Promise<T> =>
      submit().then((acks) =>
        r.after(workspace, Array.isArray(acks) ? acks : [acks as Ack], bodies).then(() => acks),
      )
    const ready = r.before(workspace)
    return ready ? ready.then(go) : go()
  }

  /** Appends one entry; resolves with its seq and ts once it is durable. */
  append(workspace: string, entry: EntryInput, options?: AppendOptions): Promise<Ack> {
    try {
      checkWorkspace(workspace)
      const body = encodeBody(entry)
      if (options !== undefined || this.checkBlobs || isRecordEntry(entry)) {
        this.checkEntries(workspace, [entry], options, () => 'entry')
      }
      if (this.replication) {
        return this.replicated(
          workspace,
          [body],
          () => this.submit(workspace, body, -1, options) as Promise<Ack>,
        )
      }
      return this.submit(workspace, body, -1, options) as Promise<Ack>
    } catch (err) {
      return Promise.reject(err)
    }
  }

  /**
   * Appends entries together: all are validated before any is sent, they get consecutive seqs,
   * and the promise resolves once all are durable (they share one commit).
   */
  appendMany(workspace: string, entries: readonly EntryInput[], options?: AppendOptions): Promise<Ack[]> {
    try {
      checkWorkspace(workspace)
      if (!Array.isArray(entries)) throw Errors.BAD_ARGUMENT('appendMany takes an array of entries')
      if (entries.length === 0) return Promise.resolve([])
      const bodies = entries.map((e, i) => encodeBody(e, `entry ${i + 1}`))
      this.checkEntries(workspace, entries, options, (i) => `entry ${i + 1}`)
      if (this.replication) {
        return this.replicated(
          workspace,
          bodies,
          () => this.submit(workspace, bodies, entries.length, options) as Promise<Ack[]>,
        )
      }
      return this.submit(workspace, bodies, entries.length, options) as Promise<Ack[]>
    } catch (err) {
      return Promise.reject(err)
    }
  }

  /** The store's path for its own records: no record check (see STORE_APPEND). */
  [STORE_APPEND](
    workspace: string,
    entries: readonly EntryInput[],
    options?: Pick<AppendOptions, 'files'>,
  ): Promise<Ack[] & { [LOG_END]?: number; [LOG_HELD]?: () => boolean }> {
    try {
      checkWorkspace(workspace)
      const bodies = entries.map((e, i) => encodeBody(e, `entry ${i + 1}`))
      const submit = () =>
        this.submit(workspace, bodies, entries.length, options) as Promise<
          Ack[] & { [LOG_END]?: number; [LOG_HELD]?: () => boolean }
        >
      return this.replication ? this.replicated(workspace, bodies, submit) : submit()
    } catch (err) {
      return Promise.reject(err)
    }
  }

  /** Record entries must be vouched for by `objects`; blobs checked when asked. */
  protected override checkEntries(
    workspace: string,
    entries: readonly EntryInput[],
    options: AppendOptions | undefined,
    where: (i: number) => string,
  ): void {
    if (options !== undefined) checkOptionKeys(options, APPEND_OPTION_KEYS, 'append')
    const checkBlobs = options?.checkBlobs ?? this.checkBlobs
    if (typeof checkBlobs !== 'boolean') throw optionError('checkBlobs', 'must be a boolean', checkBlobs)
    const objects = this.objects
    if (checkBlobs && !objects) {
      throw Errors.BAD_OPTION(
        'append option checkBlobs needs the log opened with option objects (e.g. new ObjectStore(root))',
        { field: 'checkBlobs' },
      )
    }
    let records = false
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i] as EntryInput
      if (e.op === 'snapshot' || e.op === 'merge') records = true
      else if (checkBlobs && e.op === 'write' && !(objects as ObjectChecks).hasBlob(e.blob)) {
        throw Errors.MISSING_BLOB(
          `${where(i)}: blob ${e.blob} (for ${JSON.stringify(e.path)}) is not in the object store; store it first (noa blob put), or append with checkBlobs: false`,
          { field: 'blob', blob: e.blob, path: e.path },
        )
      }
    }
    if (!records) return
    if (!objects) {
      const i = entries.findIndex((e) => e.op === 'snapshot' || e.op === 'merge')
      throw Errors.BAD_ENTRY(
        `${where(i)}: ${entries[i]?.op} entries are written by the store (SnapshotEngine snapshot, fork, merge); to append one by hand, open the log with option objects so it can check the record it names`,
        { field: 'op' },
      )
    }
    objects.checkRecords(workspace, entries, where)
  }

  /** With the option `replicate`, each workspace's part is published once committed. */
  override async appendAtomic(
    batch: Readonly<Record<string, readonly EntryInput[]>>,
  ): Promise<Record<string, Ack[]>> {
    const r = this.replication
    if (!r || typeof batch !== 'object' || batch === null) return super.appendAtomic(batch)
    const workspaces = Object.keys(batch)
    for (const ws of workspaces) checkWorkspace(ws)
    await Promise.all(workspaces.map((ws) => r.before(ws)))
    const out = await super.appendAtomic(batch)
    await Promise.all(Object.entries(out).map(([ws, acks]) => r.after(ws, acks, null)))
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
      let startsAtBase = false
      for (let i = 0; i < lines.length; i++) {
        const raw = lines[i] as string
        const text = raw.endsWith('\n') ? raw.slice(0, -1) : raw
        if (text.includes('\n')) throw Errors.BAD_ENTRY(`line ${i + 1}: holds more than one line`)
        let e: Entry
        try {
          // A compacted origin's base record (base.ts) may come first: it starts an empty log.
          const base = i === 0 ? parseBase(text) : null
          e = base
            ? ({
                op: 'snapshot',
                snapshot_id: base.snapshotId,
                message: '',
                seq: base.seq,
                ts: base.ts,
              } as Entry)
            : parseEntry(text)
          if (base) startsAtBase = true
        } catch (err) {
          throw Errors.BAD_ENTRY(`line ${i + 1}: ${(err as Error).message}`)
        }
        if (prev && (e.seq !== prev.seq + 1 || e.ts <= prev.ts)) {
          throw Errors.REPLICA_GAP(
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
      return this.requestFor(workspace, (id) => ({
        t: 'replica',
        id,
        ws: workspace,
        lines: out,
        firstSeq: f.seq,
        firstTs: f.ts,
        lastSeq: l.seq,
        lastTs: l.ts,
        ...(startsAtBase ? { base: true } : {}),
      })).then(() => {
        this.committed(workspace, l.seq)
        return acks
      })
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
      return Promise.reject(Errors.BAD_ARGUMENT(`appendToFile needs an absolute path, got ${file}`))
    }
    try {
      this.checkOutsideLogs(file)
    } catch (err) {
      return Promise.reject(err)
    }
    const owner = this.started(this.owners[ownerIndex(file, this.poolSize)] as Owner)
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
      throw Errors.BAD_ARGUMENT(
        `appendToFile refuses ${file}: it is inside the workspace logs folder ${this.logDir}, which only append (through the workspace's owner) may write`,
        { file },
      )
    }
  }

  /**
   * Every entry of a workspace from `fromSeq` (default 1) in order, then each new one as it
   * commits, until the signal aborts or the iterator is returned. Resuming from the seq after
   * the last one seen gives no gap and no duplicate. A slow consumer holds nothing but its read
   * position. Entries appended by other processes are seen too (the file is followed). A bad
   * option or workspace fails the first `next()`, as `read` does and as through the daemon.
   */
  async *watch(workspace: string, options: WatchOptions = {}): AsyncGenerator<Entry> {
    checkWatchOptions(options)
    const file = existingLog(this.root, workspace)
    yield* followLog(file, workspace, options, {
      nextCommit: () => this.nextCommit(workspace),
      // This process writes it: deliver only what it acknowledged (a line is in the file before
      // the fdatasync of a commit made straight to it returns).
      limit: () => this.ackedSeq.get(workspace) ?? Number.POSITIVE_INFINITY,
    })
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
    for (let m = this.settledOn(workspace); m !== undefined; m = this.settledOn(workspace)) await m
    const idle = this.route.get(workspace) ?? (this.owners[ownerIndex(workspace, this.poolSize)] as Owner)
    if (idle.port === null && idle.failed === null) return recoverLog(this.root, workspace) // no owner to start
    await this.request(this.routeOf(workspace), (id) => ({ t: 'release', id, target: workspace }))
    // A move (the lone lane) may have started meanwhile: the open goes to where it ends.
    for (let m = this.settledOn(workspace); m !== undefined; m = this.settledOn(workspace)) await m
    return (await this.request(this.routeOf(workspace), (id) => ({
      t: 'open',
      id,
      ws: workspace,
    }))) as OpenReport
  }

  /** Opens a workspace (creating its log) without appending: takes the lock, recovers the tail. */
  override async openWorkspace(workspace: string): Promise<OpenReport> {
    checkWorkspace(workspace)
    return (await this.requestFor(workspace, (id) => ({
      t: 'open',
      id,
      ws: workspace,
    }))) as OpenReport
  }

  /** Closes a workspace's fd (and so its lock) once its queue is drained. */
  override async release(workspace: string): Promise<boolean> {
    checkWorkspace(workspace)
    return (await this.requestFor(workspace, (id) => ({
      t: 'release',
      id,
      target: workspace,
    }))) as boolean
  }

  /** Closes a file written by `appendToFile` (and so its lock) once its queue is drained. */
  async releaseFile(file: string): Promise<boolean> {
    if (typeof file !== 'string' || !isAbsolute(file)) {
      throw Errors.BAD_ARGUMENT(`releaseFile needs an absolute path, got ${file}`)
    }
    const owner = this.owners[ownerIndex(file, this.poolSize)] as Owner
    if (owner.port === null) return false // never started: it holds nothing
    return (await this.request(owner, (id) => ({
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

  /**
   * The lone lane (`loneInThread`): where a workspace touched now goes ('local': the caller's
   * thread; 'pool': its worker), how many workspaces are on the caller's thread, and how many
   * moves between owners there were. Null without a lone lane.
   */
  laneStatus(): { lane: 'local' | 'pool'; inThread: number; moves: number } | null {
    if (this.local === null) return null
    let inThread = 0
    for (const owner of this.route.values()) if (owner === this.local) inThread++
    return { lane: this.lane, inThread, moves: this.moves }
  }

  /**
   * Each running owner's counters. `held: true` also counts what its idle files still hold
   * (OwnerStatus.held), which looks at every file it keeps: for tests and diagnosis, not a loop.
   */
  status(options: { held?: boolean } = {}): Promise<OwnerStatus[]> {
    const running = this.owners.filter((o) => o.port !== null && o.failed === null)
    const held = options.held === true
    return Promise.all(
      running.map((o) => this.request(o, (id) => ({ t: 'status', id, ...(held ? { held } : {}) }))),
    ) as Promise<OwnerStatus[]>
  }

  /** Drains every queued append, closes the files (releasing their locks) and ends the workers. */
  close(): Promise<OwnerStatus[]> {
    if (this.closing) return this.closing
    this.closing = (async () => {
      // An owner that committed an atomic batch may remove its journal only once the other
      // owners' parts are durable in their logs: wait for their answers (they come without
      // further requests: each owner fdatasyncs the parts it wrote on its own).
      // Appends held while their workspace moved between owners were made before the close:
      // they go to the owner it moved to first.
      while (this.moving.size > 0) await Promise.allSettled([...this.moving.values()])
      if (this.atomicsRunning > 0 || this.coordinators.size > 0) {
        await new Promise<void>((resolve) => {
          this.drained = resolve
        })
      }
      const live = this.owners.filter((o) => o.failed === null && o.port !== null)
      const finals = await Promise.all(
        live.map((o) => this.request(o, (id) => ({ t: 'close', id }), true).catch(() => null)),
      )
      await Promise.allSettled(live.map((o) => o.task))
      await (await this.piscina)?.destroy()
      for (const o of this.owners) o.port?.close()
      // Every local commit is acknowledged by now: what is committed is published (unless the
      // servers are away: the next open publishes it), then the connection goes.
      await this.replication?.close()
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
}
