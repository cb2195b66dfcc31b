/**
 * The publisher (`noa replicate push`): tails one root's workspace logs and publishes every
 * entry, once it is durable on local disk, on `<prefix>.<workspace>` with
 * `Nats-Msg-Id: <workspace>:<seq>` and `Nats-Expected-Last-Subject-Sequence` set to the stream
 * sequence of the workspace's previous message.
 *
 * Durability first. The writer is usually another process, and a complete line on disk may not
 * be covered by its writer's fdatasync yet. Before publishing what it read, the publisher calls
 * fdatasync on the log itself (through its own read-only descriptor: the flush covers the
 * file's dirty pages whoever wrote them), so the stream never holds an entry that a crash of
 * this machine could take back. The writer never waits for any of this.
 *
 * Exactly once, in order. Before a workspace's first publish in a run, the publisher asks the
 * stream for the subject's last message and continues after it (after checking that the
 * stream's copy of the junction entry is byte-equal to the local one), so a restart sends
 * nothing twice whatever the checkpoint says. Each publish names the previous message's stream
 * sequence: a gap, a reorder or a second publisher for the workspace is refused by the server
 * instead of stored. The server checks Nats-Msg-Id before the expected sequence (nats-server
 * 2.9: a duplicate id is acknowledged as a duplicate, whatever the expectation), so a
 * duplicate acknowledgement is verified against the stored message: a different entry under
 * the same id is another publisher's, and refused here.
 */

import { setMaxListeners } from 'node:events'
import { closeSync, existsSync, type FSWatcher, watch } from 'node:fs'
import { type FileHandle, lstat } from 'node:fs/promises'
import { isBaseLine, type LogBase, parseBase, readBase } from '../engine/base.js'
import { parseEntry } from '../engine/entry.js'
import { Errors, isNoaError, NoaError, type NoaErrorCode } from '../engine/errors.js'
import { checkRoot, openFile, openFileSync, READ } from '../engine/files.js'
import { logDirOf, logPath, resolveRoot, scanLogDir } from '../engine/logs.js'
import { seekSeq } from '../engine/reader.js'
import { inspectTail } from '../engine/recovery.js'
import {
  ensureReplicationDir,
  loadCheckpoint,
  type PushCheckpoint,
  type PushPosition,
  saveCheckpoint,
} from './checkpoint.js'
import type { EventSink, ProgressSink } from './events.js'
import {
  asNoaError,
  Backoff,
  describeError,
  isTransient,
  isWrongLastSequence,
  replicationError,
  sleep,
} from './failures.js'
import { countersOf, lineAtSeq, sameBytes } from './lines.js'
import { Aborted, checkKnownOptions, closeLink, type Link, type NatsTarget, openLink } from './link.js'
import { ObjectScanner, objectFile, publishObject } from './objects.js'
import { findEntryOnSubject, lastOnSubject, messageAt, resolveStream, type StreamRef } from './stream.js'
import { checkPrefix, DEFAULT_PREFIX, entryMsgId, isSubjectSafe, workspaceSubject } from './subjects.js'

export interface PushOptions {
  /** Server URL(s), comma-separated, or an open connection (left open). */
  nats: NatsTarget
  /** Root folder (default `$NOA_ROOT` or `./.noa`). */
  root?: string
  /** Subject prefix (default `noa`). */
  prefix?: string
  /** Stream name; by default the stream that captures `<prefix>.>`. */
  stream?: string
  /** Keep running, publishing new entries as they become durable, until `signal` aborts. */
  follow?: boolean
  signal?: AbortSignal
  onEvent?: EventSink
  /** Called after each entry and object published. */
  onProgress?: ProgressSink
  /** Replicate the object store too (default true): merges on other machines need it. */
  objects?: boolean
  /** Workspaces publishing at once (default 64). */
  concurrency?: number
  /** Follow mode: how often the log folder is listed besides file-change events (default 1000 ms). */
  pollMs?: number
  /**
   * Follow mode: least time between two rounds of one workspace (default 10 ms). Each round
   * costs an fdatasync of the log; gathering a few milliseconds of appends keeps that to at
   * most 1000 / roundMs per workspace and second, at the price of that much latency.
   */
  roundMs?: number
  /** Test seam: awaited before each entry is published. */
  beforePublish?: (workspace: string, seq: number) => Promise<void> | void
}

export interface PushedWorkspace {
  workspace: string
  /** First and last seq published by this run. */
  from: number
  to: number
  entries: number
}

/** A workspace log (or object) that could not be published, and why. */
export interface PushFailure {
  /** Absent for a file that is not one workspace's log (an object, a shard folder). */
  workspace?: string
  file: string
  /** NOA_CORRUPT_LOG, NOA_NOT_REGULAR_FILE, EACCES, … */
  code: string
  message: string
}

export interface PushReport {
  stream: string
  prefix: string
  entries: number
  objects: number
  workspaces: PushedWorkspace[]
  /** Workspaces whose names cannot be a subject token sequence (`a..b`, `a.`). */
  skipped: Array<{ workspace: string; reason: string }>
  /**
   * Logs that are corrupt, unreadable or not regular files, and objects that could not be
   * read: nothing of a failed workspace's round was published (its lines are all checked before
   * the first is sent), and every other workspace was published whole. Empty when all went well.
   */
  failed: PushFailure[]
  durationMs: number
}

const OPTION_KEYS = new Set([
  'nats',
  'root',
  'prefix',
  'stream',
  'follow',
  'signal',
  'onEvent',
  'onProgress',
  'objects',
  'concurrency',
  'pollMs',
  'roundMs',
  'beforePublish',
])

function positive(value: number | undefined, name: string, fallback: number): number {
  if (value === undefined) return fallback
  if (!Number.isInteger(value) || value < 1) {
    throw Errors.BAD_OPTION(`option ${name} must be a positive integer, got ${value}`, {
      field: name,
    })
  }
  return value
}

/** Publishes what the root's logs hold beyond the stream; with `follow`, keeps doing so. */
export function replicatePush(options: PushOptions): Promise<PushReport> {
  return asNoaError('push', () => pushNow(options))
}

async function pushNow(options: PushOptions): Promise<PushReport> {
  checkKnownOptions(options, OPTION_KEYS, 'push')
  const prefix = checkPrefix(options.prefix ?? DEFAULT_PREFIX)
  const root = resolveRoot(options.root)
  const follow = options.follow ?? false
  const concurrency = positive(options.concurrency, 'concurrency', 64)
  const pollMs = positive(options.pollMs, 'pollMs', 1000)
  const roundMs = options.roundMs === 0 ? 0 : positive(options.roundMs, 'roundMs', 10)
  // A missing root (or one that is a file) is a named error, and nothing is created for it.
  checkRoot(root, true)
  const link = await openLink(options.nats, {
    name: `noa push ${root}`,
    waitForServer: follow,
    signal: options.signal,
    onEvent: options.onEvent,
  })
  try {
    const publisher = new Publisher(link, {
      root,
      prefix,
      stream: options.stream,
      follow,
      signal: options.signal,
      onEvent: options.onEvent,
      onProgress: options.onProgress,
      objects: options.objects ?? true,
      concurrency,
      pollMs,
      roundMs,
      beforePublish: options.beforePublish,
    })
    return await publisher.run()
  } finally {
    await closeLink(link)
  }
}

interface Settings {
  root: string
  prefix: string
  stream: string | undefined
  follow: boolean
  signal: AbortSignal | undefined
  onEvent: EventSink | undefined
  onProgress: ProgressSink | undefined
  objects: boolean
  concurrency: number
  pollMs: number
  roundMs: number
  beforePublish: PushOptions['beforePublish']
}

interface WorkspaceState {
  ws: string
  file: string
  subject: string
  pos: PushPosition
  reconciled: boolean
  /** The stream was ahead of this log: its entry at this seq must equal ours when we reach it. */
  junction: { seq: number; data: Uint8Array } | null
  /** More may have been written since the last round. */
  dirty: boolean
  running: Promise<void> | null
  /** Size seen by the last poll. */
  seenSize: number
  /** When its last follow-mode round started (Date.now()). */
  lastRound: number
  /** Its log, open read-only between rounds (see handleOf), and that file's inode. */
  handle: FileHandle | null
  ino: number
  /** A round is using the handle. */
  inRound: boolean
  published: { from: number; to: number; entries: number } | null
  /** Its log could not be published (see PushReport.failed): no more rounds in this run. */
  failed: boolean
  /** Lines in [checkedFrom, checked.offset) passed checkRange; seq and ts of the last one. */
  checkedFrom: number
  checked: { offset: number; seq: number; ts: number }
}

/** Thrown inside to unwind when the run is asked to stop. */
class Stopped extends Error {}

/**
 * A problem of one workspace's own log (unreadable, not a regular file, corrupt): that workspace
 * stops, every other goes on. Anything else (the server, the stream) still stops the run.
 */
class LogProblem extends Error {
  constructor(readonly error: unknown) {
    super(error instanceof Error ? error.message : String(error))
  }
}

/** Runs a step that reads the local log; its failure is that workspace's, not the run's. */
async function local<T>(fn: () => T | Promise<T>): Promise<T> {
  try {
    return await fn()
  } catch (err) {
    if (err instanceof Stopped || err instanceof LogProblem) throw err
    throw new LogProblem(err)
  }
}

function failureOf(err: unknown, file: string, workspace?: string): PushFailure {
  const e = err as { code?: unknown; message?: unknown }
  return {
    ...(workspace !== undefined ? { workspace } : {}),
    file,
    code: typeof e?.code === 'string' ? e.code : 'ERROR',
    message: typeof e?.message === 'string' ? e.message : String(err),
  }
}

const NL = 0x0a
/** Bytes read from a log at a time. */
const READ_CHUNK = 256 * 1024
/** Least time between two scans of the object store (ms). */
const SCAN_EVERY_MS = 25
/** Logs kept open between rounds (each is one file descriptor). */
const MAX_OPEN_LOGS = 512
/** Room left in each object part for the subject and headers. */
const PART_HEADROOM = 8 * 1024
/** Object failures that are the object's own (it is skipped), not the run's. */
const UNREADABLE_OBJECT = new Set<NoaErrorCode>([
  'NOA_CORRUPT_OBJECT',
  'NOA_NOT_REGULAR_FILE',
  'NOA_NOT_DIRECTORY',
])

class Publisher {
  private readonly states = new Map<string, WorkspaceState>()
  private readonly skipped = new Map<string, string>()
  /** By file: each problem is reported once however many rounds meet it. */
  private readonly failed = new Map<string, PushFailure>()
  private readonly stop = new AbortController()
  private fatal: unknown = null
  private ref!: StreamRef
  private checkpoint!: PushCheckpoint
  private checkpointDirty = false
  private scanner: ObjectScanner | null
  private partSize = 0
  private entries = 0
  private objectsSent = 0
  private active = 0
  private readonly queue: Array<() => void> = []
  /** Workspaces whose log is open, least recently used first. */
  private readonly handles = new Set<WorkspaceState>()
  // Object barrier: a scan must start after a log's durable end was taken (see objectsBarrier).
  private tick = 0
  private scanDoneTick = 0
  private scanning: Promise<void> | null = null
  private lastScanAt = 0

  constructor(
    private readonly link: Link,
    private readonly s: Settings,
  ) {
    this.scanner = s.objects ? new ObjectScanner(s.root, s.prefix) : null
    // Every request in flight listens for the stop: one per busy workspace, legitimately many.
    setMaxListeners(0, this.stop.signal)
    s.signal?.addEventListener('abort', () => this.stop.abort(), { once: true })
    if (s.signal?.aborted) this.stop.abort()
  }

  private get signal(): AbortSignal {
    return this.stop.signal
  }

  async run(): Promise<PushReport> {
    const started = performance.now()
    try {
      this.ref = await this.retry('look up the stream', () =>
        resolveStream(this.link, this.s.prefix, this.s.stream),
      )
    } catch (err) {
      if (err instanceof Stopped) throw replicationError('push was stopped before it could read the stream')
      throw err
    }
    const maxPayload = this.link.nc.info?.max_payload ?? 1024 * 1024
    const maxMsg = this.ref.config.max_msg_size > 0 ? this.ref.config.max_msg_size : maxPayload
    this.partSize = Math.max(1024, Math.min(maxPayload, maxMsg) - PART_HEADROOM)
    const saved = loadCheckpoint(this.s.root, 'push', this.s.prefix, (message) =>
      this.s.onEvent?.({ type: 'warning', message }),
    )
    const sameStream =
      saved !== null && saved.stream === this.ref.name && saved.streamCreated === this.ref.created
    this.checkpoint = {
      version: 1,
      kind: 'push',
      prefix: this.s.prefix,
      stream: this.ref.name,
      streamCreated: this.ref.created,
      savedAt: '',
      workspaces: sameStream ? saved.workspaces : {},
    }
    this.scanner?.load(!sameStream && saved !== null)
    // Where the checkpoint goes is checked before anything is published, not after.
    ensureReplicationDir(this.s.root)

    let watcher: FSWatcher | null = null
    let timer: NodeJS.Timeout | null = null
    try {
      if (this.s.follow) {
        const logDir = logDirOf(this.s.root)
        const startWatch = () => {
          if (watcher || !existsSync(logDir)) return
          try {
            watcher = watch(logDir, (_event, name) => {
              if (typeof name === 'string' && name.endsWith('.log')) this.wake(name.slice(0, -4))
            })
            watcher.on('error', () => {
              watcher?.close()
              watcher = null
            })
          } catch {
            watcher = null
          }
        }
        startWatch()
        for (const ws of this.listLogs()) this.wake(ws)
        this.s.onEvent?.({
          type: 'following',
          message: `following ${logDir} into stream ${this.ref.name} (${this.s.prefix}.>)`,
        })
        let lastSave = Date.now()
        timer = setInterval(() => {
          startWatch()
          void this.poll()
          if (this.checkpointDirty && Date.now() - lastSave >= 1000) {
            lastSave = Date.now()
            try {
              this.saveCheckpoint()
            } catch (err) {
              this.fail(err)
            }
          }
        }, this.s.pollMs)
        await new Promise<void>((resolve) => {
          if (this.signal.aborted) resolve()
          else this.signal.addEventListener('abort', () => resolve(), { once: true })
        })
      } else {
        for (const ws of this.listLogs()) this.wake(ws)
      }
      await this.settle()
    } finally {
      if (timer) clearInterval(timer)
      ;(watcher as FSWatcher | null)?.close()
      await this.settle()
      for (const st of [...this.handles]) await this.closeHandle(st)
      this.saveCheckpoint()
      await this.scanner?.flush()
    }
    if (this.fatal !== null) throw this.fatal
    const workspaces: PushedWorkspace[] = []
    for (const st of [...this.states.values()].sort((a, b) => (a.ws < b.ws ? -1 : 1))) {
      if (st.published) workspaces.push({ workspace: st.ws, ...st.published })
    }
    for (const p of this.scanner?.problems.values() ?? []) this.failed.set(p.file, p)
    return {
      stream: this.ref.name,
      prefix: this.s.prefix,
      entries: this.entries,
      objects: this.objectsSent,
      workspaces,
      skipped: [...this.skipped].map(([workspace, reason]) => ({ workspace, reason })),
      failed: [...this.failed.values()].sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : 0)),
      durationMs: performance.now() - started,
    }
  }

  /** Stops the run with this error (the first one wins). */
  private fail(err: unknown): void {
    if (this.fatal === null) this.fatal = err
    this.stop.abort()
  }

  /**
   * The workspaces with a regular log; every other entry of `agent-logs/` that is meant to be a
   * log (a symlink, a FIFO, a folder named `<workspace>.log`) is a failure of the run, reported.
   */
  private listLogs(): string[] {
    const { workspaces, problems } = scanLogDir(this.s.root)
    for (const p of problems) {
      if (p.code === 'NOA_BAD_WORKSPACE' || this.failed.has(p.file)) continue
      this.failed.set(p.file, p)
      this.s.onEvent?.({ type: 'warning', message: `${p.message}; not published` })
    }
    return workspaces
  }

  /** Stops one workspace whose log cannot be published; the run goes on with the others. */
  private failWorkspace(st: WorkspaceState, err: unknown): void {
    st.failed = true
    void this.closeHandle(st)
    const f = failureOf(err, st.file, st.ws)
    this.failed.set(st.file, f)
    this.s.onEvent?.({ type: 'skipped', workspace: st.ws, reason: `${f.message}; not published` })
  }

  /** Waits until no workspace task is running. */
  private async settle(): Promise<void> {
    for (;;) {
      const running = [...this.states.values()].map((s) => s.running).filter((p) => p !== null)
      if (running.length === 0 && this.scanning === null) return
      await Promise.allSettled([...running, this.scanning])
    }
  }

  private saveCheckpoint(): void {
    if (!this.checkpoint) return
    for (const st of this.states.values()) {
      if (st.reconciled || st.pos.seq > 0) this.checkpoint.workspaces[st.ws] = { ...st.pos }
    }
    saveCheckpoint(this.s.root, this.checkpoint)
    this.checkpointDirty = false
  }

  private state(ws: string): WorkspaceState | null {
    let st = this.states.get(ws)
    if (st) return st
    if (this.skipped.has(ws)) return null
    if (!isSubjectSafe(ws)) {
      const reason = 'its name would give an empty subject token (".." or a trailing "."); not replicated'
      this.skipped.set(ws, reason)
      this.s.onEvent?.({ type: 'skipped', workspace: ws, reason })
      return null
    }
    const saved = this.checkpoint.workspaces[ws]
    st = {
      ws,
      file: logPath(this.s.root, ws),
      subject: workspaceSubject(this.s.prefix, ws),
      pos: saved ? { ...saved } : { seq: 0, ts: 0, offset: 0, streamSeq: 0 },
      reconciled: false,
      junction: null,
      dirty: false,
      running: null,
      seenSize: -1,
      lastRound: 0,
      handle: null,
      ino: 0,
      inRound: false,
      published: null,
      failed: false,
      checkedFrom: 0,
      checked: { offset: 0, seq: 0, ts: 0 },
    }
    this.states.set(ws, st)
    return st
  }

  /** Marks a workspace as possibly grown and starts its task if it is not running. */
  private wake(ws: string): void {
    if (this.signal.aborted) return
    let st: WorkspaceState | null
    try {
      st = this.state(ws)
    } catch {
      return // not a workspace name
    }
    if (!st || st.failed) return
    st.dirty = true
    if (st.running) return
    const task = st
    task.running = (async () => {
      while (task.dirty && !this.signal.aborted) {
        // Follow mode: let a few milliseconds of appends gather, so that one fdatasync and one
        // round cover them all instead of one per entry.
        if (this.s.follow) {
          const wait = task.lastRound + this.s.roundMs - Date.now()
          if (wait > 0) await sleep(wait, this.signal)
          task.lastRound = Date.now()
        }
        task.dirty = false
        await this.limited(() => this.pushWorkspace(task))
      }
    })()
      .catch((err: unknown) => {
        if (err instanceof LogProblem) this.failWorkspace(task, err.error)
        else if (!(err instanceof Stopped)) this.fail(err)
      })
      .finally(() => {
        task.running = null
      })
  }

  private async poll(): Promise<void> {
    try {
      for (const ws of this.listLogs()) {
        const st = this.state(ws)
        if (!st || st.failed) continue
        const info = await lstat(st.file).catch(() => null)
        const size = info?.size ?? -1
        if (info && st.handle && !st.inRound && info.ino !== st.ino) {
          // The log was replaced: read the new file, from what the stream holds.
          await this.closeHandle(st)
          st.reconciled = false
          st.checkedFrom = 0
          st.checked = { offset: 0, seq: 0, ts: 0 }
        }
        if (size !== st.seenSize) {
          st.seenSize = size
          this.wake(ws)
        }
      }
    } catch {
      // the next poll tries again
    }
  }

  private async limited<T>(fn: () => Promise<T>): Promise<T> {
    if (this.active >= this.s.concurrency) {
      await new Promise<void>((resolve) => this.queue.push(resolve))
    }
    this.active++
    try {
      return await fn()
    } finally {
      this.active--
      this.queue.shift()?.()
    }
  }

  /** The workspace's open read-only handle (kept between rounds, a bounded number of them). */
  private async handleOf(st: WorkspaceState): Promise<FileHandle | null> {
    if (st.handle) {
      this.handles.delete(st)
      this.handles.add(st)
      return st.handle
    }
    let handle: FileHandle
    try {
      handle = await openFile(st.file, READ, { what: 'workspace log' })
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null // removed, or not created yet
      throw new LogProblem(err)
    }
    st.handle = handle
    st.ino = (await local(() => handle.stat())).ino
    this.handles.add(st)
    for (const old of this.handles) {
      if (this.handles.size <= MAX_OPEN_LOGS) break
      if (old.inRound) continue
      this.handles.delete(old)
      await this.closeHandle(old)
    }
    return handle
  }

  private async closeHandle(st: WorkspaceState): Promise<void> {
    const h = st.handle
    st.handle = null
    this.handles.delete(st)
    if (h) await h.close().catch(() => {})
  }

  /** One round for one workspace: make what is on disk durable, then publish it. */
  private async pushWorkspace(st: WorkspaceState): Promise<void> {
    st.inRound = true
    try {
      const handle = await this.handleOf(st)
      if (!handle) return
      const end = (await local(() => handle.stat())).size
      // Nothing new since the last acknowledged entry (or the checkpoint's): no request at all.
      if (end === st.pos.offset || (st.reconciled && end < st.pos.offset)) return
      // Every byte below `end` is now on disk, whoever wrote it and whether or not its
      // writer's own fdatasync has returned.
      await local(() => handle.datasync())
      // Objects named by these lines were stored before the lines were written: a scan that
      // starts now sees them.
      await this.objectsBarrier(++this.tick)
      if (!st.reconciled) await this.reconcile(st, null)
      // Every line about to be published is checked first: a corrupt log publishes nothing of
      // this round, so what the stream gets of a workspace never depends on where the bad line is.
      await local(() => this.checkRange(st, handle, end))
      // Again from the new position when the stream moved under us (see reconcile).
      let moved = true
      while (moved && st.pos.offset < end) moved = await this.publishRange(st, handle, end)
    } finally {
      st.inRound = false
    }
  }

  /**
   * Checks the complete lines from the position to `end` as verify would: each a valid entry,
   * seqs consecutive, ts never going back. Lines checked by an earlier round are not read again.
   * Throws NOA_CORRUPT_LOG naming the file and the byte offset of the first bad line.
   */
  private async checkRange(st: WorkspaceState, handle: FileHandle, end: number): Promise<void> {
    const c = st.checked
    let prev: { seq: number; ts: number } | null = null
    let pos = st.pos.offset
    if (c.offset > pos && st.checkedFrom <= pos) {
      pos = c.offset
      prev = { seq: c.seq, ts: c.ts }
    } else st.checkedFrom = pos
    const corrupt = (at: number, why: string) =>
      Errors.CORRUPT_LOG(`${st.file} (line at byte ${at}): ${why}`, {
        file: st.file,
        offset: at,
        workspace: st.ws,
      })
    let buf = Buffer.allocUnsafe(Math.min(READ_CHUNK, Math.max(1, end - pos)))
    let filled = 0
    while (pos + filled < end) {
      if (filled === buf.length) {
        const bigger = Buffer.allocUnsafe(buf.length * 2)
        buf.copy(bigger, 0, 0, filled)
        buf = bigger
      }
      const { bytesRead } = await handle.read(
        buf,
        filled,
        Math.min(buf.length - filled, end - pos - filled),
        pos + filled,
      )
      if (bytesRead === 0) break
      filled += bytesRead
      let i = 0
      for (let nl = buf.indexOf(NL, 0); nl >= 0 && nl < filled; nl = buf.indexOf(NL, i)) {
        const at = pos + i
        if (nl === i) throw corrupt(at, 'empty line')
        let seq: number
        let ts: number
        try {
          const text = buf.toString('utf8', i, nl)
          // A compacted log's base record (engine/base.ts) is its first line.
          ;({ seq, ts } = (at === 0 ? parseBase(text) : null) ?? parseEntry(text))
        } catch (err) {
          throw corrupt(at, (err as Error).message)
        }
        if (prev && seq !== prev.seq + 1) throw corrupt(at, `seq ${seq} does not follow seq ${prev.seq}`)
        if (prev && ts < prev.ts) throw corrupt(at, `ts ${ts} goes back (previous ${prev.ts})`)
        prev = { seq, ts }
        i = nl + 1
        st.checked = { offset: pos + i, seq, ts }
      }
      if (i > 0) {
        buf.copy(buf, 0, i, filled)
        pos += i
        filled -= i
      }
    }
  }

  /** Publishes the complete lines from the position to `end`; true when the position moved. */
  private async publishRange(st: WorkspaceState, handle: FileHandle, end: number): Promise<boolean> {
    let buf = Buffer.allocUnsafe(Math.min(READ_CHUNK, Math.max(1, end - st.pos.offset)))
    let pos = st.pos.offset // file offset of buf[0]
    let filled = 0
    while (pos + filled < end) {
      if (filled === buf.length) {
        // One line longer than the buffer: grow it.
        const bigger = Buffer.allocUnsafe(buf.length * 2)
        buf.copy(bigger, 0, 0, filled)
        buf = bigger
      }
      const want = Math.min(buf.length - filled, end - pos - filled)
      const { bytesRead } = await local(() => handle.read(buf, filled, want, pos + filled))
      if (bytesRead === 0) return false
      filled += bytesRead
      let i = 0
      for (let nl = buf.indexOf(NL, 0); nl >= 0 && nl < filled; nl = buf.indexOf(NL, i)) {
        if (this.signal.aborted) throw new Stopped()
        const at = pos + i
        const line = buf.subarray(i, nl)
        const lineEnd = pos + nl + 1
        i = nl + 1
        let counters: { seq: number; ts: number }
        try {
          counters = countersOf(line)
        } catch (err) {
          throw new LogProblem(
            Errors.CORRUPT_LOG(`${st.file} (line at byte ${at}): ${(err as Error).message}`, {
              file: st.file,
              offset: at,
              workspace: st.ws,
            }),
          )
        }
        const { seq, ts } = counters
        if (seq <= st.pos.seq) {
          // The stream already holds this entry (it was ahead of this log).
          if (st.junction && seq === st.junction.seq) {
            if (!sameBytes(line, st.junction.data)) {
              throw this.diverged(st, seq, 'the stream holds a different entry for this seq')
            }
            st.junction = null
          }
          st.pos.offset = lineEnd
          continue
        }
        if (at === 0 && seq > st.pos.seq + 1 && isBaseLine(line.toString('utf8'))) {
          // A compacted log: its base record goes first into an empty stream (a mirror starts
          // its log with it); a stream that ends before the base cannot be continued from here.
          if (st.pos.seq > 0) throw new LogProblem(this.behindBase(st, baseOf(st.file) as LogBase))
          if ((await this.publishEntry(st, line, seq, ts, lineEnd)) === 'moved') return true
          continue
        }
        if (seq !== st.pos.seq + 1) {
          throw new LogProblem(
            Errors.CORRUPT_LOG(
              `workspace ${st.ws}: ${st.file} jumps from seq ${st.pos.seq} to ${seq} at byte ${at}; nothing after seq ${st.pos.seq} was published`,
              { file: st.file, offset: at, workspace: st.ws, seq },
            ),
          )
        }
        if (st.junction) throw this.diverged(st, seq, 'the log skipped the entry where it joins the stream')
        if ((await this.publishEntry(st, line, seq, ts, lineEnd)) === 'moved') return true
      }
      // Keep the partial line at the end for the next read.
      if (i > 0) {
        buf.copy(buf, 0, i, filled)
        pos += i
        filled -= i
      }
    }
    return false
  }

  private async publishEntry(
    st: WorkspaceState,
    line: Buffer,
    seq: number,
    ts: number,
    lineEnd: number,
  ): Promise<'ok' | 'moved'> {
    await this.s.beforePublish?.(st.ws, seq)
    const backoff = new Backoff()
    let failures = 0
    for (;;) {
      if (this.signal.aborted) throw new Stopped()
      try {
        const ack = await this.link.guard(
          this.link.publish(st.subject, line, entryMsgId(st.ws, seq), st.pos.streamSeq),
          this.signal,
        )
        if (ack.duplicate) {
          // Acknowledged as a duplicate before the expected sequence was looked at: make sure
          // the stored message is this very entry.
          const stored = await this.link.guard(messageAt(this.link, this.ref.name, ack.seq), this.signal)
          if (!stored || stored.subject !== st.subject || !sameBytes(stored.data, line)) {
            throw this.diverged(
              st,
              seq,
              `the server took it as a duplicate of stream seq ${ack.seq} (same Nats-Msg-Id ${entryMsgId(st.ws, seq)}), which holds a different entry: another publisher has this workspace`,
            )
          }
        }
        const pos = st.pos
        pos.seq = seq
        pos.ts = ts
        pos.offset = lineEnd
        pos.streamSeq = ack.seq
        if (st.published) {
          st.published.to = seq
          st.published.entries++
        } else st.published = { from: seq, to: seq, entries: 1 }
        this.entries++
        this.s.onProgress?.({ entries: this.entries, objects: this.objectsSent })
        this.checkpointDirty = true
        return 'ok'
      } catch (err) {
        if (err instanceof NoaError || err instanceof Stopped) throw err
        if (err instanceof Aborted || this.signal.aborted) throw new Stopped()
        if (isWrongLastSequence(err)) {
          await this.reconcile(st, { seq, expected: st.pos.streamSeq })
          return 'moved'
        }
        if (!isTransient(err)) {
          throw replicationError(
            `workspace ${st.ws}: publishing seq ${seq} on ${st.subject} failed: ${describeError(err)}`,
            { workspace: st.ws, seq },
            err,
          )
        }
        failures++
        if (failures % 8 === 0) await this.checkStreamStillThere()
        const delayMs = backoff.next()
        this.s.onEvent?.({
          type: 'retry',
          what: `publish ${st.ws} seq ${seq}`,
          error: describeError(err),
          delayMs,
        })
        await sleep(delayMs, this.signal)
      }
    }
  }

  /**
   * Continues after what the stream holds for this workspace. The junction (the last entry
   * both have) must be byte-equal in the log and in the stream, or the two have diverged.
   */
  private async reconcile(
    st: WorkspaceState,
    refused: { seq: number; expected: number } | null,
  ): Promise<void> {
    const last = await this.retry(`read the last message of ${st.subject}`, () =>
      lastOnSubject(this.link, this.ref.name, st.subject),
    )
    const why = refused
      ? `the server refused seq ${refused.seq} (expected last subject sequence ${refused.expected} is stale)`
      : null
    if (last === null) {
      st.pos = { seq: 0, ts: 0, offset: 0, streamSeq: 0 }
      st.junction = null
      st.reconciled = true
      return
    }
    let counters: { seq: number; ts: number }
    try {
      counters = countersOf(last.data)
    } catch (err) {
      throw replicationError(
        `workspace ${st.ws}: the last message on ${st.subject} (stream seq ${last.seq}) is not a log entry: ${(err as Error).message}`,
        { workspace: st.ws },
      )
    }
    const serverSeq = counters.seq
    const msgId = last.header?.get('Nats-Msg-Id')
    if (msgId !== entryMsgId(st.ws, serverSeq)) {
      throw replicationError(
        `workspace ${st.ws}: the last message on ${st.subject} (stream seq ${last.seq}) has Nats-Msg-Id ${JSON.stringify(msgId ?? '')}, not ${entryMsgId(st.ws, serverSeq)}: not written by noa`,
        { workspace: st.ws },
      )
    }
    const localLast = await local(() => this.localLastSeq(st))
    const junction = Math.min(localLast, serverSeq)
    const base = await local(() => baseOf(st.file))
    if (base !== null && junction < base.seq) throw new LogProblem(this.behindBase(st, base, serverSeq))
    if (junction > 0 && base?.seq !== junction) {
      // (At the base's own seq the stream may hold the entry it stands for: that is no divergence.)
      const mine = await local(() => lineAtSeq(st.file, junction))
      const remote =
        junction === serverSeq ? last.data : ((await this.findEntry(st, junction, last.seq))?.data ?? null)
      if (mine === null || remote === null || !sameBytes(mine, remote)) {
        throw this.diverged(
          st,
          junction,
          `${why ? `${why}; ` : ''}the stream's entry for seq ${junction} ${remote === null ? 'is missing' : 'differs from the local one'}`,
        )
      }
    }
    if (serverSeq <= localLast) {
      st.pos = {
        seq: serverSeq,
        ts: counters.ts,
        offset: await local(() => seekSeq(st.file, serverSeq + 1)),
        streamSeq: last.seq,
      }
      st.junction = null
    } else {
      // The stream is ahead of this log (a mirror copy, or entries not durable here yet).
      st.pos = {
        seq: serverSeq,
        ts: counters.ts,
        offset: await local(() => seekSeq(st.file, localLast + 1)),
        streamSeq: last.seq,
      }
      st.junction = { seq: serverSeq, data: Uint8Array.from(last.data) }
    }
    st.reconciled = true
    this.checkpointDirty = true
  }

  private localLastSeq(st: WorkspaceState): number {
    let fd: number
    try {
      fd = openFileSync(st.file, READ, { what: 'workspace log' })
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 0
      throw err
    }
    try {
      const tail = inspectTail(fd)
      return tail.lastLine === null ? 0 : countersOf(Buffer.from(tail.lastLine, 'utf8')).seq
    } finally {
      closeSync(fd)
    }
  }

  private findEntry(st: WorkspaceState, seq: number, hiStreamSeq: number) {
    return findEntryOnSubject(
      this.link,
      this.ref.name,
      st.subject,
      seq,
      hiStreamSeq,
      (data) => countersOf(data).seq,
      (what, fn) => this.retry(what, fn),
    )
  }

  /** NOA_COMPACTED: the stream ends before this log's base, whose entries the log no longer has. */
  private behindBase(st: WorkspaceState, base: LogBase, streamLast = st.pos.seq): NoaError {
    return Errors.COMPACTED(
      `workspace ${st.ws}: ${st.file} was compacted up to seq ${base.seq} (snapshot ${base.snapshotId}), but ${st.subject} ends at seq ${streamLast}: entries ${streamLast + 1}..${base.seq} are no longer in the log (push before compacting, or push to a new stream); nothing more was published`,
      {
        file: st.file,
        workspace: st.ws,
        baseSeq: base.seq,
        snapshotId: base.snapshotId,
        seq: streamLast + 1,
      },
    )
  }

  private diverged(st: WorkspaceState, seq: number, why: string): NoaError {
    return replicationError(
      `workspace ${st.ws} (seq ${seq}): the stream and ${st.file} disagree: ${why}. Two publishers for one workspace, or a log that was rewritten; nothing more is published for it`,
      { workspace: st.ws, seq, subject: st.subject },
    )
  }

  private async checkStreamStillThere(): Promise<void> {
    try {
      await resolveStream(this.link, this.s.prefix, this.ref.name)
    } catch (err) {
      if (err instanceof NoaError) throw err
    }
  }

  /** Runs a request, retrying transient failures with backoff until it succeeds or the run stops. */
  private async retry<T>(what: string, fn: () => Promise<T>): Promise<T> {
    const backoff = new Backoff()
    for (;;) {
      if (this.signal.aborted) throw new Stopped()
      try {
        return await this.link.guard(fn(), this.signal)
      } catch (err) {
        if (err instanceof Aborted || this.signal.aborted) throw new Stopped()
        if (err instanceof NoaError || !isTransient(err)) throw err
        const delayMs = backoff.next()
        this.s.onEvent?.({ type: 'retry', what, error: describeError(err), delayMs })
        await sleep(delayMs, this.signal)
      }
    }
  }

  /**
   * Returns once a scan of the object store that started after tick `t` has published what it
   * found. Scans are shared: one scan serves every workspace that waits for it, and a scan
   * (a stat of each shard folder) starts at most every SCAN_EVERY_MS, so that a hundred busy
   * workspaces do not each cost one.
   */
  private async objectsBarrier(t: number): Promise<void> {
    if (!this.scanner?.present()) return
    while (this.scanDoneTick <= t) {
      if (this.signal.aborted) throw new Stopped()
      if (this.scanning) {
        await this.scanning
        continue
      }
      this.scanning = (async () => {
        const wait = this.lastScanAt + SCAN_EVERY_MS - Date.now()
        if (wait > 0) await sleep(wait, this.signal)
        // Taken after the wait: the rounds that came meanwhile are covered too.
        const startTick = ++this.tick
        this.lastScanAt = Date.now()
        await this.scanObjects(startTick)
      })().finally(() => {
        this.scanning = null
      })
      await this.scanning
    }
  }

  private async scanObjects(startTick: number): Promise<void> {
    const scanner = this.scanner as ObjectScanner
    const ids = scanner.scan()
    const ctx = {
      link: this.link,
      stream: this.ref.name,
      prefix: this.s.prefix,
      partSize: this.partSize,
      retry: <T>(what: string, fn: () => Promise<T>) => this.retry(what, fn),
    }
    let next = 0
    const worker = async () => {
      while (next < ids.length) {
        const id = ids[next++] as string
        let sent: number
        try {
          sent = await publishObject(ctx, this.s.root, id)
        } catch (err) {
          // Removed since the scan found it: gc takes only objects no log reaches, so nothing
          // that follows in the stream needs it.
          if ((err as NodeJS.ErrnoException).code === 'ENOENT' || isNoaError(err, 'NOA_NOT_FOUND')) continue
          // An object that cannot be read (damaged, or not a regular file) is reported and left
          // out; the logs and the other objects go on.
          if (!isNoaError(err) || !UNREADABLE_OBJECT.has(err.code)) throw err
          const file = objectFile(this.s.root, id)
          this.failed.set(file, failureOf(err, file))
          continue
        }
        if (sent > 0) {
          this.objectsSent++
          this.s.onProgress?.({ entries: this.entries, objects: this.objectsSent })
        }
        scanner.markPublished(id)
      }
    }
    await Promise.all(Array.from({ length: Math.min(8, ids.length) }, worker))
    await scanner.flush()
    this.scanDoneTick = Math.max(this.scanDoneTick, startTick)
  }
}

/** A log's base record (engine/base.ts), or null (none, or the log is gone). */
function baseOf(file: string): LogBase | null {
  try {
    return readBase(file)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
    throw err
  }
}
