/**
 * SnapshotEngine (seed: スナップショット計算; design.md §4): turns a workspace's log into trees.
 *
 * A workspace's head is its newest `snapshot` entry (found by a backward search of the log's
 * tail, heads.ts). The entry names a record in the object store; the record says which seq of
 * the log its tree covers. The workspace's files now = that tree + the entries after it. So a
 * snapshot costs the entries since its parent, and resolving an id never reads a log.
 *
 * A fork is a new workspace whose first entry is a `snapshot` entry naming the base snapshot (a
 * record of another workspace, with no `parent` in the entry). Read with the same rule, the
 * fork starts from the base's tree, and its first snapshot takes the base as its parent.
 *
 * Every write puts objects first (tree, then record) and the log entry last: a crash in between
 * leaves unreferenced objects, never an entry naming a missing object.
 *
 * A snapshot entry that names no record, or another workspace's record without being a fork
 * (records.ts), is passed over: the head is the newest entry that means something, and the
 * entries passed over are recorded in the next snapshot as having had no effect.
 *
 * SnapshotEngine is the facade: the reads are in snapshot-read.ts, snapshot, fork and prune in
 * snapshot-write.ts, merge in merge.ts, and checkout, diff, history and gc in their own modules,
 * each taking the narrow view of view.ts.
 */
import type { AgentLog } from '../engine/agent-log.js'
import { STORE_APPEND } from '../engine/checks.js'
import type { Ack, EntryInput } from '../engine/entry.js'
import { Errors } from '../engine/errors.js'
import { resolveRoot } from '../engine/logs.js'
import { checkOptionKeys } from '../engine/options.js'
import { type CheckoutOptions, type CheckoutResult, checkout } from './checkout.js'
import { type DiffResult, diffRefs } from './diff.js'
import { collectGarbage, type GcOptions, type GcResult } from './gc.js'
import type { Head } from './heads.js'
import { type HistoryNode, historyOf } from './history.js'
import { type MergeOptions, type MergeResult, mergeWorkspaces } from './merge.js'
import { KeyedMutex, mutexFor } from './mutex.js'
import { ObjectStore, type SnapshotRecord, type SnapshotRecordInput } from './objects.js'
import { type HeadSearch, type ReplayOptions, SnapshotReader, type WorkspaceState } from './snapshot-read.js'
import {
  type ForkResult,
  forkWorkspace,
  type PruneOptions,
  type PruneResult,
  pruneSnapshots,
  type SnapshotOptions,
  type SnapshotResult,
  type SnapshotWriter,
  storeSnapshot,
  takeSnapshot,
} from './snapshot-write.js'
import type { Tree, TreeBuilder } from './tree.js'
import type { ResolvedRef, SnapshotInfo, SnapshotView } from './view.js'

export type { ReplayOptions, WorkspaceState } from './snapshot-read.js'
export {
  type ForkResult,
  type MissingBlob,
  type PruneOptions,
  type PruneResult,
  recorded,
  type SnapshotOptions,
  type SnapshotResult,
} from './snapshot-write.js'
export type { ResolvedRef, SnapshotInfo, SnapshotKind, SnapshotView } from './view.js'
export type { Head }

export interface SnapshotEngineOptions {
  /** The AgentLog that appends snapshot, fork and merge entries. Without it, the engine only reads. */
  log?: AgentLog
  /** Root folder (default: the log's root, else `$NOA_ROOT` or `./.noa`). */
  root?: string
  /** Object store (default: `<root>/objects`). */
  store?: ObjectStore
  /**
   * How the store's records (snapshot, fork and merge entries) reach a log, when not through the
   * log's own store path: a workspace written through another channel (a shared workspace,
   * replicate's `SharedWorkspaces.storeAppender()`). Called only after the objects the entries
   * name are stored. Still needs `log` (its workspaces are opened and read as usual).
   */
  append?: StoreAppender
}

/** The store's own appends: its records, after the objects they name are stored. */
export type StoreAppender = (workspace: string, entries: readonly EntryInput[]) => Promise<Ack[]>

const OPTION_KEYS = new Set(['log', 'root', 'store', 'append'])
const CHECKOUT_KEYS = new Set(['force', 'caseInsensitive'])

/**
 * The facade: reads go to the SnapshotReader (snapshot-read.ts), snapshot, fork and prune to
 * snapshot-write.ts, merge to merge.ts, and checkout, diff, history and gc to their modules,
 * each given the narrow thing it needs.
 */
export class SnapshotEngine implements SnapshotView {
  readonly root: string
  readonly store: ObjectStore
  readonly log: AgentLog | undefined
  private readonly appender: StoreAppender | undefined
  private readonly mutex: KeyedMutex
  /** The reads, and the view the operations take (snapshot-read.ts). */
  private readonly reader: SnapshotReader
  /** What snapshot, fork and prune take (snapshot-write.ts). */
  private readonly writer: SnapshotWriter

  constructor(options: SnapshotEngineOptions = {}) {
    checkOptionKeys(options, OPTION_KEYS)
    const root = resolveRoot(options.root ?? options.log?.root ?? options.store?.root)
    if (options.log && options.log.root !== root) {
      throw Errors.BAD_OPTION(`option root ${root} differs from the log's root ${options.log.root}`, {
        field: 'root',
      })
    }
    this.root = root
    this.log = options.log
    if (options.append !== undefined && typeof options.append !== 'function')
      throw Errors.BAD_OPTION('option append must be a function (workspace, entries) => acks', {
        field: 'append',
      })
    this.appender = options.append
    this.store = options.store ?? new ObjectStore(root)
    this.mutex = options.log ? mutexFor(options.log) : new KeyedMutex()
    this.reader = new SnapshotReader(root, this.store, this.log)
    this.writer = {
      root,
      store: this.store,
      reader: this.reader,
      mutex: this.mutex,
      requireLog: (what) => this.requireLog(what),
      append: (workspace, entries) => this.append(workspace, entries),
    }
  }

  /** A snapshot's record: one object read. */
  getSnapshot(id: string): Promise<SnapshotRecord> {
    return this.reader.getSnapshot(id)
  }

  /** A snapshot's tree (path → blob), from the object store (rebuilt from its log if pruned and collected). */
  tree(snapshotId: string): Promise<Tree> {
    return this.reader.tree(snapshotId)
  }

  /** The workspace's newest meaningful snapshot entry, or null. Reads the log backwards from its end. */
  head(workspace: string): Promise<Head | null> {
    return this.reader.head(workspace)
  }

  /** The workspace's snapshot entries, newest first (a backward byte search of its log). */
  snapshots(workspace: string): AsyncGenerator<SnapshotInfo> {
    return this.reader.snapshots(workspace)
  }

  listSnapshots(workspace: string): Promise<SnapshotInfo[]> {
    return this.reader.listSnapshots(workspace)
  }

  /**
   * The workspace's files now (its head's tree + the entries after it), computed without
   * writing anything.
   */
  replay(workspace: string, options: ReplayOptions = {}): Promise<WorkspaceState> {
    return this.reader.replay(workspace, options)
  }

  /**
   * Resolves a ref: a snapshot id (`noa_…`), a workspace (its files now) or `ws@seq` (its files
   * after entry seq, replayed from the nearest snapshot at or before it).
   */
  resolve(ref: string): Promise<ResolvedRef> {
    return this.reader.resolve(ref)
  }

  /**
   * Snapshot of the workspace as it stands: its head's tree + the entries after it. Stores the
   * tree and the record, then appends the `snapshot` entry. With nothing new since the head
   * (no write, delete or rename after it), writes nothing and says so (`created: false`).
   */
  snapshot(workspace: string, options: SnapshotOptions = {}): Promise<SnapshotResult> {
    return takeSnapshot(this.writer, workspace, options)
  }

  /**
   * Creates `workspace` starting from a snapshot: its log's first entry is a `snapshot` entry
   * naming the base, so its later snapshots take the base as parent. Refused when the
   * workspace already has entries.
   */
  fork(workspace: string, snapshotId: string, options: { message?: string } = {}): Promise<ForkResult> {
    return forkWorkspace(this.writer, workspace, snapshotId, options)
  }

  /**
   * Merges source workspaces into a target (seed: 統合): see merge.ts. Validates everything and
   * computes the result before writing anything.
   */
  async merge(target: string, sources: readonly string[], options: MergeOptions = {}): Promise<MergeResult> {
    this.requireLog('merge')
    return mergeWorkspaces(
      {
        root: this.root,
        store: this.store,
        append: (ws, entries) => this.append(ws, entries),
        openWorkspace: (ws) => (this.log as AgentLog).openWorkspace(ws).then(() => undefined),
        mutex: this.mutex,
        head: (ws) => this.findHead(ws, { strict: options.strict }),
        storeSnapshot: (input, built) => this.storeSnapshot(input, built),
        treeOf: (record) => this.treeOf(record),
      },
      target,
      sources,
      options,
    )
  }

  /**
   * Retention: drops the workspace's older snapshots, keeping the newest `keepLast` and those
   * made within `keepWithinMs`, and always the head, forks and merges (snapshot-write.ts). The
   * drop is recorded in the log; nothing is removed here: gc no longer keeps what only the
   * dropped snapshots held.
   */
  prune(workspace: string, options: PruneOptions): Promise<PruneResult> {
    return pruneSnapshots(this.writer, workspace, options)
  }

  /**
   * Writes a ref's files (a snapshot id, `ws`, `ws@seq`) into `dir`, never outside it
   * (checkout.ts). Checkout lives on the store, not on AgentLog: the log is the engine below it.
   */
  checkout(ref: string, dir: string, options: CheckoutOptions = {}): Promise<CheckoutResult> {
    checkOptionKeys(options, CHECKOUT_KEYS, 'checkout')
    return checkout(this.reader, ref, dir, options)
  }

  /** Paths added, removed and changed from ref `a` to ref `b` (diff.ts). */
  diff(a: string, b: string): Promise<DiffResult> {
    return diffRefs(this.reader, a, b)
  }

  /** The snapshot/fork/merge graph of a workspace, oldest first (history.ts). */
  history(workspace: string): Promise<HistoryNode[]> {
    return historyOf(this.reader, workspace)
  }

  /** Garbage collection of the object store (gc.ts): a dry run unless `dryRun: false`. */
  gc(options: GcOptions = {}): Promise<GcResult> {
    return collectGarbage(this.reader, options)
  }

  /** The store's own appends: its records, past the record check normal callers get. */
  append(workspace: string, entries: readonly EntryInput[]): Promise<Ack[]> {
    const log = this.requireLog('append')
    return this.appender ? this.appender(workspace, entries) : log[STORE_APPEND](workspace, entries)
  }

  /**
   * Stores a tree (the folders on the changed paths, in one pack) and its record in one batch;
   * the caller appends the entry after.
   */
  storeSnapshot(input: Omit<SnapshotRecordInput, 'tree'>, built: TreeBuilder): Promise<SnapshotRecord> {
    return storeSnapshot(this.store, input, built)
  }

  /**
   * A record's tree. A tree that is no longer stored (its snapshot was pruned and gc took it) is
   * rebuilt from its parent's tree and the log segment the record covers (snapshot-read.ts).
   */
  treeOf(record: SnapshotRecord, depth = 0): Promise<Tree> {
    return this.reader.treeOf(record, depth)
  }

  /** Finds the head: the newest snapshot entry (at or before `atOrBefore`) that means something. */
  findHead(workspace: string, options: { strict?: boolean; atOrBefore?: number } = {}): Promise<HeadSearch> {
    return this.reader.findHead(workspace, options)
  }

  private requireLog(what: string): AgentLog {
    if (!this.log) {
      throw Errors.BAD_ARGUMENT(
        `${what} appends to a log: create the SnapshotEngine with { log } (an open AgentLog)`,
      )
    }
    return this.log
  }
}
