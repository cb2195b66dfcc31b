/**
 * A LangGraph thread of NoaSaver (saver.ts), its state: the shapes a commit is built from (the
 * operations queued, the tree the next snapshot builds on, what the batch made so far), what a
 * thread needs of its saver (ThreadHost), and ThreadState, the fields the layers of a thread
 * share: thread-build.ts builds a batch's entries and snapshot records on it, thread.ts batches
 * operations into commits and brings the thread up to date with its log.
 */
import { LogFollower } from '../adapters/follow.js'
import { decodeWorkspace, type NameScheme } from '../adapters/names.js'
import type { Retention } from '../adapters/retention.js'
import type { AgentLog } from '../engine/agent-log.js'
import { NoaError, rewrap } from '../engine/errors.js'
import type { KeyedMutex } from '../store/mutex.js'
import type { ObjectStore, RecordedNoEffect } from '../store/objects.js'
import type { SnapshotEngine } from '../store/snapshot.js'
import type { TreeBuilder } from '../store/tree.js'
import { ThreadIndex } from './index-log.js'
import type { CheckpointRecord, StoredChannel, WritesRecord } from './layout.js'

export const THREADS: NameScheme = { prefix: 'lg', what: 'thread id' }

/**
 * How long a commit through a daemon goes on trying while other clients' commits to the same
 * thread keep going in first. Each lost try means one of theirs went in; 4 processes stepping one
 * thread as fast as they can lost up to 53 tries in a row (a few hundred ms) on the 2-core VM.
 */
export const GIVE_UP_MS = 30_000

export interface Serialized {
  type: string
  data: Uint8Array
}

export type Op = { resolve(): void; reject(err: unknown): void } & (
  | {
      kind: 'put'
      ns: string
      id: string
      parent: string | undefined
      checkpoint: Serialized
      metadata: Serialized
      step: unknown
      source: unknown
      versions: Record<string, number | string>
      fresh: Map<string, Serialized | null>
    }
  | {
      kind: 'writes'
      ns: string
      id: string
      task: string
      taskPath: string | undefined
      writes: Array<{ idx: number; channel: string; value: Serialized }>
    }
  | { kind: 'delete' }
)

/** Trees of up to this many files are built whole at each snapshot (see snapshotInto). */
export const WHOLE_TREE_FILES = 256

/** What the next snapshot of a thread builds on: its files now and its head. */
export interface TreeState {
  files: Map<string, string>
  /** The files as a builder on the head's tree; null while the tree is small (built whole). */
  builder: TreeBuilder | null
  head: string | undefined
  /** The head's position in the log (the next record's `since`). */
  headPos: number
  lastSeq: number
  /** Writes files written since the head: in no snapshot's tree yet. */
  fresh: Set<string>
  /** Entries since the head that changed nothing (another writer's): the next record lists them. */
  noEffect: RecordedNoEffect[]
}

/** Records and writes made by the commit being built, seen by its later operations. */
export interface Pending {
  records: Map<string, { blob: string; record: CheckpointRecord }>
  writes: Map<string, { blob: string; record: WritesRecord }>
  /** Snapshots (of checkpoints) the batch's puts drop by retention. */
  dropped: Set<string>
}

export class LruMap<V> {
  private readonly map = new Map<string, V>()
  constructor(private readonly max: number) {}
  get(k: string): V | undefined {
    const v = this.map.get(k)
    if (v !== undefined) {
      this.map.delete(k)
      this.map.set(k, v)
    }
    return v
  }
  set(k: string, v: V): void {
    this.map.set(k, v)
    if (this.map.size > this.max) this.map.delete(this.map.keys().next().value as string)
  }
}

/** `checkpoint <id> of thread <id>` (and its namespace), for messages. */
export function checkpointName(threadId: string, ns: string, id: string): string {
  return `checkpoint ${id}${ns === '' ? '' : ` (namespace ${JSON.stringify(ns)})`} of thread ${JSON.stringify(threadId)}`
}

/** A read's NoaError, with what was being read put in front of its message (its code kept). */
export async function named<T>(what: string, p: Promise<T>): Promise<T> {
  try {
    return await p
  } catch (err) {
    throw err instanceof NoaError ? rewrap(err, `${what}: ${err.message}`) : err
  }
}

export function nsKey(ns: string, id: string): string {
  return `${ns}\0${id}`
}

/** What a thread needs of its saver (NoaSaver is one). */
export interface ThreadHost {
  readonly root: string
  readonly store: ObjectStore
  readonly engine: SnapshotEngine
  readonly mutex: KeyedMutex
  readonly records: LruMap<CheckpointRecord>
  readonly writeRecords: LruMap<WritesRecord>
  /** Whether the log is a daemon's client (adapters/logs.ts, viaDaemon). */
  readonly viaDaemon: boolean
  /** The retention policy, or undefined (keep every checkpoint). */
  readonly retention: Retention | undefined
  readonly log: AgentLog
  /** A checkpoint's record (from the commit being built, or the log). */
  record(t: ThreadState, ns: string, id: string, pending?: Pending): Promise<CheckpointRecord | undefined>
  /** A channel's value at a version, from the newest checkpoint of the namespace that has it. */
  channelAt(
    t: ThreadState,
    ns: string,
    ch: string,
    version: number | string,
    pending: Pending,
  ): Promise<StoredChannel | undefined>
  writesRecord(t: ThreadState, ns: string, id: string, task: string): Promise<WritesRecord | undefined>
  recordAt(blob: string): Promise<CheckpointRecord>
  writesAt(blob: string): Promise<WritesRecord>
}

/** A thread's fields, shared by its layers (thread-build.ts, thread.ts). */
export abstract class ThreadState {
  readonly index = new ThreadIndex()
  readonly follower: LogFollower
  loaded = false
  /** Null until the first write, and again after anything unexpected (then rebuilt by replay). */
  tree: TreeState | null = null
  protected queue: Op[] = []
  protected draining: Promise<void> | null = null
  protected refreshing: Promise<void> | null = null
  committing = false
  /** The workspace was opened through the saver's AgentLog (see loadTree). */
  protected opened = false
  /** Whether the workspace's name is a hash of the thread id (`lgh.`), not the id itself. */
  readonly hashed: boolean
  /** Chunk ids of chunked values lately in the tree, by value blob (see heldChunks). */
  protected readonly chunkLists = new LruMap<string[]>(64)

  constructor(
    readonly saver: ThreadHost,
    readonly workspace: string,
    public threadId: string | undefined,
  ) {
    this.follower = new LogFollower(saver.root, workspace)
    this.hashed = decodeWorkspace(THREADS, workspace)?.kind === 'hashed'
  }

  /** Brings the index up to date with the log (thread.ts). */
  abstract refresh(force?: boolean): Promise<void>
}
