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
 */
import type { AgentLog } from '../engine/agent-log.js'
import { nowMicros } from '../engine/clock.js'
import { type Ack, checkWorkspace, encodeBody } from '../engine/entry.js'
import { NoaError } from '../engine/errors.js'
import { statFile } from '../engine/files.js'
import { existingLog, logPath, resolveRoot } from '../engine/logs.js'
import { checkOptionKeys } from '../engine/options.js'
import {
  type Head,
  lastSnapshotEntry,
  lengthOfLog,
  type StoredSnapshotEntry,
  snapshotEntriesBackward,
} from './heads.js'
import { type MergeOptions, type MergeResult, mergeWorkspaces } from './merge.js'
import { KeyedMutex, mutexFor } from './mutex.js'
import {
  ObjectStore,
  type SnapshotRecord,
  type SnapshotRecordInput,
  sha256,
  snapshotEntry,
} from './objects.js'
import { type ReplayProgress, replaySegment } from './replay.js'
import { EMPTY_TREE, Tree, TreeBuilder } from './tree.js'

export interface SnapshotEngineOptions {
  /** The AgentLog that appends snapshot, fork and merge entries. Without it, the engine only reads. */
  log?: AgentLog
  /** Root folder (default: the log's root, else `$NOA_ROOT` or `./.noa`). */
  root?: string
  /** Object store (default: `<root>/objects`). */
  store?: ObjectStore
}

const OPTION_KEYS = new Set(['log', 'root', 'store'])

export interface ReplayOptions {
  /**
   * Ignore the workspace's own snapshots and replay its entries from the start (or from the
   * newest fork or merge snapshot, whose tree did not come from this log): a check that
   * incremental snapshots agree with a full replay, and the benchmark's full replay.
   */
  fromScratch?: boolean
  onProgress?: (p: ReplayProgress) => void
}

export interface WorkspaceState {
  workspace: string
  tree: Tree
  /** The snapshot the replay started from (null: an empty tree). */
  parent: string | null
  /** The replay started after this seq. */
  since: number
  /** Last seq read. */
  seq: number
  /** Entries that changed the tree (write, delete, rename). */
  entriesReplayed: number
}

export interface SnapshotOptions {
  message?: string
  onProgress?: (p: ReplayProgress) => void
}

export interface SnapshotResult {
  snapshot_id: string
  tree: string
  parent: string | null
  /** Last seq of the log the snapshot covers. */
  seq: number
  /** Entries replayed since the parent (write, delete, rename). */
  entries_replayed: number
  workspace: string
  /** The `snapshot` entry appended to the log. */
  entry: Ack
}

export interface ForkResult {
  workspace: string
  base: string
  from_workspace: string
  entry: Ack
}

export type SnapshotKind = 'snapshot' | 'fork' | 'merge'

export interface SnapshotInfo {
  snapshot_id: string
  kind: SnapshotKind
  /** Workspace whose history the record belongs to (another one for a fork base). */
  workspace: string
  tree: string
  parent: string | null
  /** Last seq covered (of `workspace`'s log). */
  seq: number
  message: string
  /** When the record was made, unix µs. */
  ts: number
  /** The snapshot entry in the listed workspace's log. */
  entry: Ack
}

export type { Head }

export class SnapshotEngine {
  readonly root: string
  readonly store: ObjectStore
  readonly log: AgentLog | undefined
  private readonly mutex: KeyedMutex

  constructor(options: SnapshotEngineOptions = {}) {
    checkOptionKeys(options, OPTION_KEYS)
    const root = resolveRoot(options.root ?? options.log?.root ?? options.store?.root)
    if (options.log && options.log.root !== root) {
      throw new NoaError(
        'NOA_BAD_OPTION',
        `option root ${root} differs from the log's root ${options.log.root}`,
      )
    }
    this.root = root
    this.log = options.log
    this.store = options.store ?? new ObjectStore(root)
    this.mutex = options.log ? mutexFor(options.log) : new KeyedMutex()
  }

  /** A snapshot's record: one object read. */
  getSnapshot(id: string): Promise<SnapshotRecord> {
    return this.store.getSnapshot(id)
  }

  /** A snapshot's tree (path → blob), from the object store alone. */
  async tree(snapshotId: string): Promise<Tree> {
    const record = await this.store.getSnapshot(snapshotId)
    return this.treeOf(record)
  }

  /** The workspace's newest snapshot entry, or null. Reads the log backwards from its end. */
  async head(workspace: string): Promise<Head | null> {
    const found = lastSnapshotEntry(existingLog(this.root, workspace))
    if (!found) return null
    return this.headOf(workspace, found.entry)
  }

  /** The workspace's snapshot entries, newest first (a backward byte search of its log). */
  async *snapshots(workspace: string): AsyncGenerator<SnapshotInfo> {
    for (const { entry } of snapshotEntriesBackward(existingLog(this.root, workspace))) {
      const { record, own } = await this.headOf(workspace, entry)
      yield {
        snapshot_id: record.id,
        kind: record.merged ? 'merge' : own ? 'snapshot' : 'fork',
        workspace: record.workspace,
        tree: record.tree,
        parent: record.parent ?? null,
        seq: record.seq,
        message: entry.message,
        ts: record.ts,
        entry: { seq: entry.seq, ts: entry.ts },
      }
    }
  }

  async listSnapshots(workspace: string): Promise<SnapshotInfo[]> {
    const out: SnapshotInfo[] = []
    for await (const s of this.snapshots(workspace)) out.push(s)
    return out
  }

  /**
   * The workspace's files now (its head's tree + the entries after it), computed without
   * writing anything.
   */
  async replay(workspace: string, options: ReplayOptions = {}): Promise<WorkspaceState> {
    const s = await this.computeState(workspace, options)
    const bytes = s.builder.encode()
    return {
      workspace,
      tree: Tree.decode(sha256(bytes), bytes),
      parent: s.head?.record.id ?? null,
      since: s.since,
      seq: s.seq,
      entriesReplayed: s.applied,
    }
  }

  /**
   * Snapshot of the workspace as it stands: its head's tree + the entries after it. Stores the
   * tree and the record, then appends the `snapshot` entry.
   */
  async snapshot(workspace: string, options: SnapshotOptions = {}): Promise<SnapshotResult> {
    const log = this.requireLog('snapshot')
    checkWorkspace(workspace)
    const message = options.message ?? ''
    encodeBody({ op: 'snapshot', snapshot_id: 'noa_0', message }) // refuses a bad message before any work
    existingLog(this.root, workspace)
    return this.mutex.run([workspace], async () => {
      await log.openWorkspace(workspace) // takes the workspace's lock, cuts a torn tail
      const s = await this.computeState(workspace, { onProgress: options.onProgress })
      const bytes = s.builder.encode()
      const record = await this.storeSnapshot(
        { workspace, parent: s.head?.record.id, since: s.since, seq: s.seq, message, ts: nowMicros() },
        bytes,
        s.builder,
      )
      const entry = await log.append(workspace, snapshotEntry(record, message))
      return {
        snapshot_id: record.id,
        tree: record.tree,
        parent: record.parent ?? null,
        seq: record.seq,
        entries_replayed: s.applied,
        workspace,
        entry,
      }
    })
  }

  /**
   * Creates `workspace` starting from a snapshot: its log's first entry is a `snapshot` entry
   * naming the base, so its later snapshots take the base as parent. Refused when the
   * workspace already has entries.
   */
  async fork(workspace: string, snapshotId: string, options: { message?: string } = {}): Promise<ForkResult> {
    const log = this.requireLog('fork')
    checkWorkspace(workspace)
    const record = await this.store.getSnapshot(snapshotId)
    await this.treeOf(record) // the base must be whole before anything points at it
    const message = options.message ?? `fork of ${record.workspace} at ${record.id}`
    encodeBody({ op: 'snapshot', snapshot_id: record.id, message })
    return this.mutex.run([workspace], async () => {
      const file = logPath(this.root, workspace)
      const exists = () =>
        new NoaError('NOA_EXISTS', `workspace ${workspace} already exists (${file}); fork into a new one`, {
          workspace,
          file,
        })
      if ((statFile(file, 'workspace log')?.size ?? 0) > 0) throw exists() // refused before the log is touched
      if ((await log.openWorkspace(workspace)).lastSeq > 0) throw exists()
      const entry = await log.append(workspace, { op: 'snapshot', snapshot_id: record.id, message })
      return { workspace, base: record.id, from_workspace: record.workspace, entry }
    })
  }

  /**
   * Merges source workspaces into a target (seed: 統合): see merge.ts. Validates everything and
   * computes the result before writing anything.
   */
  async merge(target: string, sources: readonly string[], options: MergeOptions = {}): Promise<MergeResult> {
    const log = this.requireLog('merge')
    return mergeWorkspaces(
      {
        root: this.root,
        store: this.store,
        log,
        mutex: this.mutex,
        head: (ws) => this.head(ws),
        storeSnapshot: (input, bytes, built) => this.storeSnapshot(input, bytes, built),
        treeOf: (record) => this.treeOf(record),
      },
      target,
      sources,
      options,
    )
  }

  /**
   * Stores a tree (as a delta against the builder's base when worth it) and its record in one
   * batch; the caller appends the entry after.
   */
  private async storeSnapshot(
    input: Omit<SnapshotRecordInput, 'tree'>,
    treeBytes: Buffer,
    built: TreeBuilder,
  ): Promise<SnapshotRecord> {
    const tree = this.store.treeObject(treeBytes, built)
    const record = await this.store.putSnapshot({ ...input, tree: tree.id }, [tree])
    this.store.stored(tree.id, treeBytes)
    return record
  }

  private async treeOf(record: SnapshotRecord): Promise<Tree> {
    try {
      return await this.store.getTree(record.tree)
    } catch (err) {
      if (err instanceof NoaError && err.code === 'NOA_NOT_FOUND' && err.details.object === record.tree) {
        throw new NoaError(
          'NOA_NOT_FOUND',
          `snapshot ${record.id}: its tree ${record.tree} is missing from ${this.store.dir}`,
          { snapshot: record.id, object: record.tree },
        )
      }
      throw err
    }
  }

  private async headOf(workspace: string, entry: StoredSnapshotEntry): Promise<Head> {
    let record: SnapshotRecord
    try {
      record = await this.store.getSnapshot(entry.snapshot_id)
    } catch (err) {
      if (err instanceof NoaError) {
        throw new NoaError(
          err.code,
          `workspace ${workspace} seq ${entry.seq} names snapshot ${entry.snapshot_id}: ${err.message}`,
          { ...err.details, workspace, seq: entry.seq },
        )
      }
      throw err
    }
    // A record of this workspace covers seqs before its own entry. Anything else (a fork base,
    // or a record of a former workspace of the same name) stands for the state at the entry.
    const own = record.workspace === workspace && record.seq < entry.seq
    return { record, entrySeq: entry.seq, pos: own ? record.seq : entry.seq, own }
  }

  private async computeState(
    workspace: string,
    options: ReplayOptions,
  ): Promise<{ builder: TreeBuilder; head: Head | null; since: number; seq: number; applied: number }> {
    const file = existingLog(this.root, workspace)
    const endByte = lengthOfLog(file)
    if (options.fromScratch) return this.fromScratch(workspace, endByte, options.onProgress)
    const found = lastSnapshotEntry(file)
    const head = found ? await this.headOf(workspace, found.entry) : null
    const base = head ? await this.treeOf(head.record) : EMPTY_TREE
    const builder = new TreeBuilder(base)
    const since = head?.pos ?? 0
    const r = await replaySegment(this.root, workspace, builder, {
      since,
      endByte,
      snapshotsUpTo: head?.entrySeq ?? 0,
      onProgress: options.onProgress,
    })
    return { builder, head, since, seq: r.lastSeq, applied: r.applied }
  }

  /**
   * Replays the whole log, ignoring the workspace's own snapshots but not those whose tree came
   * from elsewhere (a fork base, a merge): the newest of those replaces everything before it.
   * They are found on the way, so a log never forked or merged into is read once; meeting one
   * (or an entry that cannot apply before one was met) restarts the replay from the newest
   * seen, until a pass meets none newer than its start.
   */
  private async fromScratch(
    workspace: string,
    endByte: number,
    onProgress: ReplayOptions['onProgress'],
  ): Promise<{ builder: TreeBuilder; head: Head | null; since: number; seq: number; applied: number }> {
    let head: Head | null = null
    for (;;) {
      const since = head?.pos ?? 0
      const builder = new TreeBuilder(head ? await this.treeOf(head.record) : EMPTY_TREE)
      const seen: Array<{ seq: number; id: string }> = []
      let result: { lastSeq: number; applied: number } | null = null
      let failure: unknown = null
      try {
        result = await replaySegment(this.root, workspace, builder, {
          since,
          endByte,
          onSnapshot: (seq, id) => seen.push({ seq, id }),
          onProgress,
        })
      } catch (err) {
        if (!(err instanceof NoaError && err.code === 'NOA_REPLAY')) throw err
        failure = err
      }
      let reset: Head | null = null
      for (let i = seen.length - 1; i >= 0 && !reset; i--) {
        const { seq, id } = seen[i] as { seq: number; id: string }
        if (head && seq <= head.entrySeq) break
        const h = await this.headOf(workspace, { op: 'snapshot', snapshot_id: id, message: '', seq, ts: 0 })
        if (!h.own || h.record.merged) reset = h
      }
      if (reset) {
        head = reset
        continue
      }
      if (failure || !result) throw failure
      return { builder, head, since, seq: result.lastSeq, applied: result.applied }
    }
  }

  private requireLog(what: string): AgentLog {
    if (!this.log) {
      throw new NoaError(
        'NOA_BAD_ARGUMENT',
        `${what} appends to a log: create the SnapshotEngine with { log } (an open AgentLog)`,
      )
    }
    return this.log
  }
}
