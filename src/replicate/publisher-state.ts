/**
 * The publisher's shapes and shared state: the options and report of a push, the state of one
 * workspace being published, how a workspace's own failure unwinds (LogProblem, local) apart
 * from a stop (Stopped), and PublisherBase: the fields every part of the Publisher reads and
 * writes, with the constructor, the run's stop (fail) and retried requests (retry).
 *
 * Publisher (publisher.ts) is one object whose class is built in layers, each in its own file
 * and each importing only the ones below it (no circles):
 *   publisher-state.ts    the shared fields, stop and retry
 *   publisher-objects.ts  publishing the object store (the scan barrier before a log's lines)
 *   publisher-exact.ts    exactly once: one entry published and its acknowledgement checked,
 *                         reconciling with what the stream holds, a compacted log's base
 *   publisher-tail.ts     one workspace's round: its log's handle, durability before publish,
 *                         checking the lines, then publishing them in order
 *   publisher.ts          replicatePush and the run: the workspaces, follow mode, checkpoints
 */
import { setMaxListeners } from 'node:events'
import type { FileHandle } from 'node:fs/promises'
import { NoaError } from '../engine/errors.js'
import type { PushCheckpoint, PushPosition } from './checkpoint.js'
import type { EventSink, ProgressSink } from './events.js'
import { Backoff, describeError, isTransient, sleep } from './failures.js'
import { Aborted, type Link, type NatsTarget } from './link.js'
import { ObjectScanner } from './objects.js'
import type { StreamRef } from './stream.js'

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
  /** NOA_CORRUPT_LOG, NOA_NOT_REGULAR_FILE, NOA_REPLICA_DIVERGED, EACCES, … */
  code: string
  message: string
  /** NOA_REPLICA_DIVERGED: the local seqs the stream does not have (kept in the log). */
  seqs?: number[]
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
   * the first is sent), and every other workspace was published whole. A workspace another
   * writer took over (a fence) is here too, as NOA_REPLICA_DIVERGED with the seqs it holds that
   * the stream does not. Empty when all went well.
   */
  failed: PushFailure[]
  durationMs: number
}

export interface Settings {
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

export interface WorkspaceState {
  ws: string
  file: string
  subject: string
  pos: PushPosition
  reconciled: boolean
  /** Another writer's fence follows what the stream and this log share: nothing more is published. */
  fenced: boolean
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
export class Stopped extends Error {}

/**
 * A problem of one workspace's own log (unreadable, not a regular file, corrupt): that workspace
 * stops, every other goes on. Anything else (the server, the stream) still stops the run.
 */
export class LogProblem extends Error {
  constructor(readonly error: unknown) {
    super(error instanceof Error ? error.message : String(error))
  }
}

/** Runs a step that reads the local log; its failure is that workspace's, not the run's. */
export async function local<T>(fn: () => T | Promise<T>): Promise<T> {
  try {
    return await fn()
  } catch (err) {
    if (err instanceof Stopped || err instanceof LogProblem) throw err
    throw new LogProblem(err)
  }
}

export function failureOf(err: unknown, file: string, workspace?: string): PushFailure {
  const e = err as { code?: unknown; message?: unknown }
  return {
    ...(workspace !== undefined ? { workspace } : {}),
    file,
    code: typeof e?.code === 'string' ? e.code : 'ERROR',
    message: typeof e?.message === 'string' ? e.message : String(err),
    ...(err instanceof NoaError && err.code === 'NOA_REPLICA_DIVERGED'
      ? { seqs: (err.details as { seqs: number[] }).seqs }
      : {}),
  }
}

export abstract class PublisherBase {
  protected readonly states = new Map<string, WorkspaceState>()
  protected readonly skipped = new Map<string, string>()
  /** By file: each problem is reported once however many rounds meet it. */
  protected readonly failed = new Map<string, PushFailure>()
  protected readonly stop = new AbortController()
  protected fatal: unknown = null
  protected ref!: StreamRef
  protected checkpoint!: PushCheckpoint
  protected checkpointDirty = false
  protected scanner: ObjectScanner | null
  protected partSize = 0
  protected entries = 0
  protected objectsSent = 0
  protected active = 0
  protected readonly queue: Array<() => void> = []
  /** Workspaces whose log is open, least recently used first. */
  protected readonly handles = new Set<WorkspaceState>()
  // Object barrier: a scan must start after a log's durable end was taken (see objectsBarrier).
  protected tick = 0
  protected scanDoneTick = 0
  protected scanning: Promise<void> | null = null
  protected lastScanAt = 0

  constructor(
    protected readonly link: Link,
    protected readonly s: Settings,
  ) {
    this.scanner = s.objects ? new ObjectScanner(s.root, s.prefix) : null
    // Every request in flight listens for the stop: one per busy workspace, legitimately many.
    setMaxListeners(0, this.stop.signal)
    s.signal?.addEventListener('abort', () => this.stop.abort(), { once: true })
    if (s.signal?.aborted) this.stop.abort()
  }

  protected get signal(): AbortSignal {
    return this.stop.signal
  }

  /** Stops the run with this error (the first one wins). */
  protected fail(err: unknown): void {
    if (this.fatal === null) this.fatal = err
    this.stop.abort()
  }

  /** Runs a request, retrying transient failures with backoff until it succeeds or the run stops. */
  protected async retry<T>(what: string, fn: () => Promise<T>): Promise<T> {
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
}
