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
 */
import type { AgentLog } from '../engine/agent-log.js'
import { compactedError, readBase } from '../engine/base.js'
import { STORE_APPEND } from '../engine/checks.js'
import { nowMicros } from '../engine/clock.js'
import { type Ack, checkWorkspace, type EntryInput, encodeBody } from '../engine/entry.js'
import { Errors, NoaError, rewrap } from '../engine/errors.js'
import { statFile } from '../engine/files.js'
import { readThroughJournals } from '../engine/journal-view.js'
import { existingLog, logPath, resolveRoot } from '../engine/logs.js'
import { checkOptionKeys } from '../engine/options.js'
import { type CheckoutOptions, type CheckoutResult, checkout } from './checkout.js'
import { type DiffResult, diffRefs } from './diff.js'
import { collectGarbage, type GcOptions, type GcResult } from './gc.js'
import { type Head, lengthOfLog, type StoredSnapshotEntry, snapshotEntriesBackward } from './heads.js'
import { type HistoryNode, historyOf } from './history.js'
import { type MergeOptions, type MergeResult, mergeWorkspaces } from './merge.js'
import { KeyedMutex, mutexFor } from './mutex.js'
import {
  ObjectStore,
  type RecordedNoEffect,
  type SnapshotRecord,
  type SnapshotRecordInput,
  sha256,
  snapshotEntry,
} from './objects.js'
import { lastSeqOf, writeSeqs } from './records.js'
import { type ChangeMark, type NoEffect, type ReplayProgress, replaySegment, type Skipped } from './replay.js'
import { EMPTY_TREE, Tree, TreeBuilder } from './tree.js'
import type { ResolvedRef, SnapshotInfo, SnapshotView } from './view.js'

export interface SnapshotEngineOptions {
  /** The AgentLog that appends snapshot, fork and merge entries. Without it, the engine only reads. */
  log?: AgentLog
  /** Root folder (default: the log's root, else `$NOA_ROOT` or `./.noa`). */
  root?: string
  /** Object store (default: `<root>/objects`). */
  store?: ObjectStore
}

const OPTION_KEYS = new Set(['log', 'root', 'store'])
const SNAPSHOT_KEYS = new Set(['message', 'onProgress', 'strict', 'allowEmpty', 'skipDamaged', 'dropOlder'])
const REPLAY_KEYS = new Set(['fromScratch', 'onProgress', 'strict', 'skipDamaged'])

export interface ReplayOptions {
  /**
   * Ignore the workspace's own snapshots and replay its entries from the start (or from the
   * newest fork or merge snapshot, whose tree did not come from this log): a check that
   * incremental snapshots agree with a full replay, and the benchmark's full replay.
   */
  fromScratch?: boolean
  /** Refuse entries that cannot apply (NOA_REPLAY) instead of giving them no effect. */
  strict?: boolean
  /** Leave damaged lines out (listed in `skipped`) instead of refusing the replay. */
  skipDamaged?: boolean
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
  /** Entries replayed that changed nothing, and why. */
  noEffect: NoEffect[]
  /** Damaged parts of the log left out (`skipDamaged`). */
  skipped: Skipped[]
}

export interface SnapshotOptions {
  message?: string
  onProgress?: (p: ReplayProgress) => void
  /** Refuse entries that cannot apply (NOA_REPLAY, nothing written), as before replay was total. */
  strict?: boolean
  /** Write a snapshot even when nothing happened since the last one (as `git commit --allow-empty`). */
  allowEmpty?: boolean
  /**
   * A damaged line in the log (not an entry, or out of seq order) is left out instead of
   * refusing the snapshot, and the record lists exactly what was left out (`skipped`: seqs
   * where they are known, byte ranges always), so nothing is lost silently and the workspace
   * can go on. The damaged bytes stay in the log.
   */
  skipDamaged?: boolean
  /**
   * The record also drops (lists in `pruned`, as `prune` does) the workspace's earlier snapshots
   * not dropped yet, but forks and merges: retention that keeps only the state now (NoaSession's).
   * The search stops at the newest snapshot that dropped some itself: what came before it was
   * dropped or kept then.
   */
  dropOlder?: boolean
}

/** A blob a tree names that is not in the object store, with the entry that wrote it. */
export interface MissingBlob {
  path: string
  blob: string
  /** Workspace and seq of the last `write` of that blob replayed (null when not found). */
  workspace: string
  seq: number | null
}

export interface SnapshotResult {
  /** false: nothing new since the head, nothing was written (see `allowEmpty`). */
  created: boolean
  /** The snapshot written, or (not created) the head that already is the state; null: none. */
  snapshotId: string | null
  tree: string
  parent: string | null
  /** Last seq of the log the snapshot covers. */
  seq: number
  /** Entries replayed since the parent that changed the tree (write, delete, rename). */
  entriesReplayed: number
  /** Entries replayed that changed nothing, and why (also kept in the record). */
  noEffect: NoEffect[]
  /** Blobs written since the parent that are not in the object store. */
  missingBlobs: MissingBlob[]
  /** Damaged parts of the log left out (`skipDamaged`; also kept in the record). */
  skipped: Skipped[]
  workspace: string
  /** The `snapshot` entry appended to the log (null when nothing was written). */
  entry: Ack | null
}

export interface ForkResult {
  workspace: string
  base: string
  fromWorkspace: string
  entry: Ack
}

export type { ResolvedRef, SnapshotInfo, SnapshotKind, SnapshotView } from './view.js'
export type { Head }

export interface PruneOptions {
  /** Keep the newest N snapshots (the head is always kept). */
  keepLast?: number
  /** Keep snapshots made within this many milliseconds. */
  keepWithinMs?: number
  message?: string
  /** Say what would be dropped and write nothing (no log needed; `created` is false). */
  dryRun?: boolean
}

const PRUNE_KEYS = new Set(['keepLast', 'keepWithinMs', 'message', 'dryRun'])
const CHECKOUT_KEYS = new Set(['force', 'caseInsensitive'])

export interface PruneResult {
  /** false: nothing to drop, nothing written. */
  created: boolean
  /** The snapshot that records the drop. */
  snapshotId: string | null
  dropped: string[]
  kept: string[]
  entry: Ack | null
}

/** What a search of the log for its head found. */
interface HeadSearch {
  head: Head | null
  /** Snapshot entries after the head that mean nothing (unknown or foreign records). */
  ignored: Map<number, NoEffect>
}

interface State {
  builder: TreeBuilder
  head: Head | null
  since: number
  seq: number
  applied: number
  treeOps: number
  noEffect: NoEffect[]
  skipped: Skipped[]
}

/** Blobs whose last write a snapshot keeps while it replays (past this, it reads again). */
const WRITES_KEPT = 100_000

const REF_RE = /^([A-Za-z0-9][A-Za-z0-9._-]{0,127})(?:@(\d+))?$/

export class SnapshotEngine implements SnapshotView {
  readonly root: string
  readonly store: ObjectStore
  readonly log: AgentLog | undefined
  private readonly mutex: KeyedMutex

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
    this.store = options.store ?? new ObjectStore(root)
    this.mutex = options.log ? mutexFor(options.log) : new KeyedMutex()
  }

  /** A snapshot's record: one object read. */
  getSnapshot(id: string): Promise<SnapshotRecord> {
    return this.store.getSnapshot(id)
  }

  /** A snapshot's tree (path → blob), from the object store (rebuilt from its log if pruned and collected). */
  async tree(snapshotId: string): Promise<Tree> {
    const record = await this.store.getSnapshot(snapshotId)
    return this.treeOf(record)
  }

  /** The workspace's newest meaningful snapshot entry, or null. Reads the log backwards from its end. */
  async head(workspace: string): Promise<Head | null> {
    return (await this.findHead(workspace)).head
  }

  /** The workspace's snapshot entries, newest first (a backward byte search of its log). */
  async *snapshots(workspace: string): AsyncGenerator<SnapshotInfo> {
    const pruned = new Set<string>()
    for (const { entry, offset } of snapshotEntriesBackward(this.logOf(workspace))) {
      const found = await this.classify(workspace, entry, offset === 0, false)
      if (!('record' in found)) continue // names nothing of this workspace: verify reports it
      const { record, own } = found
      for (const p of record.pruned ?? []) pruned.add(p)
      yield {
        snapshotId: record.id,
        kind: record.merged ? 'merge' : own ? 'snapshot' : 'fork',
        workspace: record.workspace,
        tree: record.tree,
        parent: record.parent ?? null,
        seq: record.seq,
        message: entry.message,
        ts: record.ts,
        entry: { seq: entry.seq, ts: entry.ts },
        noEffect: record.noEffect ?? [],
        skipped: record.skipped ?? [],
        pruned: own && pruned.has(record.id),
        prunes: record.pruned ?? [],
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
    checkOptionKeys(options, REPLAY_KEYS, 'replay')
    const s = options.fromScratch
      ? await this.fromScratch(workspace, lengthOfLog(this.logOf(workspace)), options)
      : await this.computeState(workspace, options)
    return {
      workspace,
      tree: Tree.ofPack(s.builder.buildPack(this.store)),
      parent: s.head?.record.id ?? null,
      since: s.since,
      seq: s.seq,
      entriesReplayed: s.applied,
      noEffect: s.noEffect,
      skipped: s.skipped,
    }
  }

  /**
   * Resolves a ref: a snapshot id (`noa_…`), a workspace (its files now) or `ws@seq` (its files
   * after entry seq, replayed from the nearest snapshot at or before it).
   */
  async resolve(ref: string): Promise<ResolvedRef> {
    if (typeof ref !== 'string' || ref === '') {
      throw Errors.BAD_ARGUMENT(
        `a ref must be a snapshot id, a workspace or ws@seq, got ${JSON.stringify(ref)}`,
      )
    }
    if (ref.startsWith('noa_')) {
      const record = await this.store.getSnapshot(ref)
      return {
        ref,
        tree: await this.treeOf(record),
        snapshotId: record.id,
        workspace: record.workspace,
        seq: record.seq,
      }
    }
    const m = REF_RE.exec(ref)
    if (!m || m[1] === '.' || m[1] === '..') {
      throw Errors.BAD_ARGUMENT(
        `ref ${JSON.stringify(ref)} is not a snapshot id (noa_…), a workspace name or ws@seq`,
      )
    }
    const workspace = m[1] as string
    let until: number | undefined
    if (m[2] !== undefined) {
      until = Number(m[2])
      this.logOf(workspace)
      const last = lastSeqOf(this.root, workspace)
      if (!Number.isSafeInteger(until) || until > last) {
        throw Errors.NOT_FOUND(`workspace ${workspace} has no seq ${m[2]} (its last seq is ${last})`, {
          workspace,
        })
      }
    }
    const s = await this.computeState(workspace, { until })
    const tree = Tree.ofPack(s.builder.buildPack(this.store))
    this.store.remember(tree)
    return { ref, tree, snapshotId: s.head?.record.id ?? null, workspace, seq: until ?? s.seq }
  }

  /**
   * Snapshot of the workspace as it stands: its head's tree + the entries after it. Stores the
   * tree and the record, then appends the `snapshot` entry. With nothing new since the head
   * (no write, delete or rename after it), writes nothing and says so (`created: false`).
   */
  async snapshot(workspace: string, options: SnapshotOptions = {}): Promise<SnapshotResult> {
    checkOptionKeys(options, SNAPSHOT_KEYS, 'snapshot')
    const log = this.requireLog('snapshot')
    checkWorkspace(workspace)
    const message = options.message ?? ''
    encodeBody({ op: 'snapshot', snapshot_id: 'noa_0', message }) // refuses a bad message before any work
    existingLog(this.root, workspace)
    return this.mutex.run([workspace], async () => {
      await log.openWorkspace(workspace) // takes the workspace's lock, cuts a torn tail
      // The seq of each blob's last write, kept while the segment is small: a blob found
      // missing is named with it without reading the segment again.
      let writes: Map<string, number> | null = new Map()
      const track = (_path: string, blob: string | null, mark: ChangeMark) => {
        if (writes === null || mark.op !== 'write') return
        writes.set(blob as string, mark.seq)
        if (writes.size > WRITES_KEPT) writes = null
      }
      const s = await this.computeState(workspace, {
        onProgress: options.onProgress,
        strict: options.strict,
        skipDamaged: options.skipDamaged,
        track,
      }).catch((err) => {
        throw suggestSkip(err, workspace)
      })
      if (s.treeOps === 0 && s.noEffect.length === 0 && s.skipped.length === 0 && !options.allowEmpty) {
        const r = s.head?.record
        return {
          created: false,
          snapshotId: r?.id ?? null,
          tree: r?.tree ?? EMPTY_TREE.id,
          parent: r?.parent ?? null,
          seq: s.seq,
          entriesReplayed: 0,
          noEffect: [],
          missingBlobs: [],
          skipped: [],
          workspace,
          entry: null,
        }
      }
      const pruned: string[] = []
      if (options.dropOlder) {
        for await (const info of this.snapshots(workspace)) {
          if (info.kind === 'snapshot' && !info.pruned) pruned.push(info.snapshotId)
          if (info.prunes.length > 0) break
        }
      }
      // The tree is built at once and its objects' fsyncs run in the pool while the blobs the
      // replay took in are looked up: the report of missing ones does not wait for the disk.
      const storing = this.storeSnapshot(
        {
          workspace,
          parent: s.head?.record.id,
          since: s.since,
          seq: s.seq,
          noEffect: recorded(s.noEffect),
          ...(s.skipped.length > 0 ? { skipped: s.skipped } : {}),
          ...(pruned.length > 0 ? { pruned } : {}),
          message,
          ts: nowMicros(),
        },
        s.builder,
      )
      const [record, missingBlobs] = await Promise.all([storing, this.missingBlobs(workspace, s, writes)])
      const [entry] = await this.append(workspace, [snapshotEntry(record, message)])
      return {
        created: true,
        snapshotId: record.id,
        tree: record.tree,
        parent: record.parent ?? null,
        seq: record.seq,
        entriesReplayed: s.applied,
        noEffect: s.noEffect,
        missingBlobs,
        skipped: s.skipped,
        workspace,
        entry: entry as Ack,
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
    const tree = await this.treeOf(record) // the base must be whole before anything points at it
    if (!this.store.has(record.tree)) await this.store.putWholeTree(tree) // rebuilt: store it again
    const message = options.message ?? `fork of ${record.workspace} at ${record.id}`
    encodeBody({ op: 'snapshot', snapshot_id: record.id, message })
    return this.mutex.run([workspace], async () => {
      const file = logPath(this.root, workspace)
      const exists = () =>
        Errors.EXISTS(`workspace ${workspace} already exists (${file}); fork into a new one`, {
          workspace,
          file,
        })
      if ((statFile(file, 'workspace log')?.size ?? 0) > 0) throw exists() // refused before the log is touched
      if ((await log.openWorkspace(workspace)).lastSeq > 0) throw exists()
      const [entry] = await this.append(workspace, [{ op: 'snapshot', snapshot_id: record.id, message }])
      return { workspace, base: record.id, fromWorkspace: record.workspace, entry: entry as Ack }
    })
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
   * made within `keepWithinMs`, and always the head, forks and merges (a merge's tree cannot be
   * rebuilt from one log). The drop is recorded in the log: a snapshot entry (one of the seed's
   * five ops) whose record lists the dropped ids in `pruned`, so history says so. Nothing is
   * removed here: gc no longer keeps the dropped snapshots' trees and blobs; their records stay
   * for the history, and a dropped tree is rebuilt from the log if asked for while its blobs last.
   */
  async prune(workspace: string, options: PruneOptions): Promise<PruneResult> {
    checkOptionKeys(options, PRUNE_KEYS, 'prune')
    const log = options.dryRun ? undefined : this.requireLog('prune')
    checkWorkspace(workspace)
    const { keepLast, keepWithinMs } = options
    if (keepLast === undefined && keepWithinMs === undefined) {
      throw Errors.BAD_OPTION('prune needs keepLast or keepWithinMs (which snapshots to keep)', {
        field: 'keepLast',
      })
    }
    if (keepLast !== undefined && (!Number.isSafeInteger(keepLast) || keepLast < 0)) {
      throw Errors.BAD_OPTION(`prune option keepLast must be an integer >= 0, got ${keepLast}`, {
        field: 'keepLast',
      })
    }
    if (keepWithinMs !== undefined && (typeof keepWithinMs !== 'number' || !(keepWithinMs >= 0))) {
      throw Errors.BAD_OPTION(`prune option keepWithinMs must be a number >= 0, got ${keepWithinMs}`, {
        field: 'keepWithinMs',
      })
    }
    existingLog(this.root, workspace)
    return this.mutex.run([workspace], async () => {
      await log?.openWorkspace(workspace)
      // Snapshots that dropped others (a prune's, a retention put's) are not counted: their
      // records keep what was dropped, whatever becomes of their trees.
      const listed = await this.listSnapshots(workspace)
      const alive = listed.filter((s) => !s.pruned && s.prunes.length === 0)
      const now = nowMicros()
      const keep = new Set<string>()
      for (const s of alive.slice(0, Math.max(1, keepLast ?? 0))) keep.add(s.snapshotId)
      if (keepWithinMs !== undefined) {
        for (const s of alive) if (now - s.ts <= keepWithinMs * 1000) keep.add(s.snapshotId)
      }
      // Those older than every snapshot kept go too (their trees hold states older than any
      // kept), or each prune that dropped something would keep one more tree for ever. Newer
      // ones stay: a retention put's snapshot is a checkpoint of its thread.
      const keptAt = alive.filter((s) => keep.has(s.snapshotId)).map((s) => s.entry.seq)
      const oldestKept = keptAt.length > 0 ? Math.min(...keptAt) : 0
      const stale = listed.filter(
        (s) => s.kind === 'snapshot' && !s.pruned && s.prunes.length > 0 && s.entry.seq < oldestKept,
      )
      const dropped = [
        ...new Set(
          [...alive, ...stale]
            .filter((s) => s.kind === 'snapshot' && !keep.has(s.snapshotId))
            .map((s) => s.snapshotId),
        ),
      ].filter((id) => !keep.has(id))
      const kept = alive.filter((s) => !dropped.includes(s.snapshotId)).map((s) => s.snapshotId)
      if (dropped.length === 0 || options.dryRun)
        return { created: false, snapshotId: null, dropped, kept: [...new Set(kept)], entry: null }
      const s = await this.computeState(workspace, {})
      const message =
        options.message ?? `prune: dropped ${dropped.length} snapshot${dropped.length === 1 ? '' : 's'}`
      encodeBody({ op: 'snapshot', snapshot_id: 'noa_0', message })
      const record = await this.storeSnapshot(
        {
          workspace,
          parent: s.head?.record.id,
          since: s.since,
          seq: s.seq,
          noEffect: recorded(s.noEffect),
          pruned: dropped,
          message,
          ts: nowMicros(),
        },
        s.builder,
      )
      const [entry] = await this.append(workspace, [snapshotEntry(record, message)])
      return { created: true, snapshotId: record.id, dropped, kept: [...new Set(kept)], entry: entry as Ack }
    })
  }

  /**
   * Writes a ref's files (a snapshot id, `ws`, `ws@seq`) into `dir`, never outside it
   * (checkout.ts). Checkout lives on the store, not on AgentLog: the log is the engine below it.
   */
  checkout(ref: string, dir: string, options: CheckoutOptions = {}): Promise<CheckoutResult> {
    checkOptionKeys(options, CHECKOUT_KEYS, 'checkout')
    return checkout(this, ref, dir, options)
  }

  /** Paths added, removed and changed from ref `a` to ref `b` (diff.ts). */
  diff(a: string, b: string): Promise<DiffResult> {
    return diffRefs(this, a, b)
  }

  /** The snapshot/fork/merge graph of a workspace, oldest first (history.ts). */
  history(workspace: string): Promise<HistoryNode[]> {
    return historyOf(this, workspace)
  }

  /** Garbage collection of the object store (gc.ts): a dry run unless `dryRun: false`. */
  gc(options: GcOptions = {}): Promise<GcResult> {
    return collectGarbage(this, options)
  }

  /** The store's own appends: its records, past the record check normal callers get. */
  append(workspace: string, entries: readonly EntryInput[]): Promise<Ack[]> {
    return this.requireLog('append')[STORE_APPEND](workspace, entries)
  }

  /**
   * Stores a tree (the folders on the changed paths, in one pack) and its record in one batch;
   * the caller appends the entry after.
   */
  async storeSnapshot(input: Omit<SnapshotRecordInput, 'tree'>, built: TreeBuilder): Promise<SnapshotRecord> {
    const tree = this.store.treeObject(null, built)
    const record = await this.store.putSnapshot({ ...input, tree: tree.id }, [tree])
    this.store.stored(tree.id)
    return record
  }

  /**
   * A record's tree. A tree that is no longer stored (its snapshot was pruned and gc took it) is
   * rebuilt from its parent's tree and the log segment the record covers, and checked against
   * the record; a merge's tree cannot be rebuilt that way, so gc always keeps those.
   */
  async treeOf(record: SnapshotRecord, depth = 0): Promise<Tree> {
    try {
      return await this.store.getTree(record.tree)
    } catch (err) {
      if (!(err instanceof NoaError && err.code === 'NOA_NOT_FOUND')) throw err
      const rebuilt = depth < 100_000 ? await this.rebuildTree(record, depth) : null
      if (rebuilt) return rebuilt
      if (err.details.object === record.tree) {
        throw Errors.NOT_FOUND(
          `snapshot ${record.id}: its tree ${record.tree} is missing from ${this.store.dir}`,
          { snapshot: record.id, object: record.tree },
        )
      }
      throw err
    }
  }

  private async rebuildTree(record: SnapshotRecord, depth: number): Promise<Tree | null> {
    if (record.merged || statFileOrNull(logPath(this.root, record.workspace)) === null) return null
    let base: Tree
    try {
      base = record.parent
        ? await this.treeOf(await this.store.getSnapshot(record.parent), depth + 1)
        : EMPTY_TREE
    } catch {
      return null
    }
    const builder = new TreeBuilder(base)
    await replaySegment(this.root, record.workspace, builder, {
      since: record.since,
      until: record.seq,
      // The same parts are left out as when it was made (the tree id is checked below).
      skipDamaged: (record.skipped?.length ?? 0) > 0,
    })
    // The record names the tree in the format it was written in: folders, or flat before.
    const pack = builder.buildPack(this.store)
    let tree: Tree
    if (pack.id === record.tree) tree = Tree.ofPack(pack)
    else {
      const bytes = builder.encode()
      if (sha256(bytes) !== record.tree) return null
      tree = Tree.decode(record.tree, bytes)
    }
    this.store.remember(tree)
    return tree
  }

  /**
   * A compacted log's base (engine/base.ts) as a head: the base's snapshot covers every seq up to
   * it. Null when the log has no base. A state wanted at a seq the base replaced is refused
   * (NOA_COMPACTED); the base's snapshot has it.
   */
  private async baseHead(workspace: string, until?: number): Promise<Head | null> {
    const file = this.logOf(workspace)
    const base = readBase(file)
    if (base === null) return null
    if (until !== undefined && until < base.seq) throw compactedError(file, until, base, workspace)
    const record = await this.store.getSnapshot(base.snapshotId)
    return { record, entrySeq: base.seq, pos: base.seq, own: true }
  }

  /** Finds the head: the newest snapshot entry (at or before `atOrBefore`) that means something. */
  async findHead(
    workspace: string,
    options: { strict?: boolean; atOrBefore?: number } = {},
  ): Promise<HeadSearch> {
    const ignored = new Map<number, NoEffect>()
    for (const { entry, offset } of snapshotEntriesBackward(this.logOf(workspace))) {
      if (options.atOrBefore !== undefined && entry.seq > options.atOrBefore) continue
      const found = await this.classify(workspace, entry, offset === 0, options.strict ?? false)
      if ('record' in found) return { head: found, ignored }
      ignored.set(entry.seq, found)
    }
    return { head: null, ignored }
  }

  /** What a snapshot entry stands for (records.ts has the rules), or why it means nothing. */
  private async classify(
    workspace: string,
    entry: StoredSnapshotEntry,
    first: boolean,
    strict: boolean,
  ): Promise<Head | NoEffect> {
    let record: SnapshotRecord
    try {
      record = await this.store.getSnapshot(entry.snapshot_id)
    } catch (err) {
      if (err instanceof NoaError) {
        if (!strict && err.code === 'NOA_NOT_FOUND') {
          return { seq: entry.seq, reason: 'unknown-snapshot', snapshotId: entry.snapshot_id }
        }
        throw rewrap(
          err,
          `workspace ${workspace} seq ${entry.seq} names snapshot ${entry.snapshot_id}: ${err.message}`,
          { workspace, seq: entry.seq },
          err.code === 'NOA_NOT_FOUND' ? 'NOA_REPLAY' : err.code,
        )
      }
      throw err
    }
    // A record of this workspace covers seqs before its own entry; a fork is the log's first
    // entry. Anything else was not written by the store for this log.
    const own = record.workspace === workspace && record.seq < entry.seq
    if (!own && !first) {
      if (strict) {
        throw Errors.REPLAY(
          `workspace ${workspace} seq ${entry.seq}: snapshot ${record.id} is not a snapshot of this log (workspace ${record.workspace}, seq ${record.seq}) nor a fork`,
          { workspace, seq: entry.seq },
        )
      }
      return { seq: entry.seq, reason: 'foreign-snapshot', snapshotId: entry.snapshot_id }
    }
    return { record, entrySeq: entry.seq, pos: own ? record.seq : entry.seq, own }
  }

  private async computeState(
    workspace: string,
    options: {
      strict?: boolean
      until?: number
      onProgress?: ReplayOptions['onProgress']
      skipDamaged?: boolean
      track?: (path: string, value: string | null, mark: ChangeMark) => void
    },
  ): Promise<State> {
    const file = this.logOf(workspace)
    const endByte = lengthOfLog(file)
    const { head: found, ignored } = await this.findHead(workspace, {
      strict: options.strict,
      atOrBefore: options.until,
    })
    // A compacted log with no snapshot entry at or before `until` starts from its base's snapshot.
    const head = found ?? (await this.baseHead(workspace, options.until))
    const base = head ? await this.treeOf(head.record) : EMPTY_TREE
    const builder = new TreeBuilder(base)
    const since = head?.pos ?? 0
    const r = await replaySegment(this.root, workspace, builder, {
      since,
      until: options.until,
      endByte,
      snapshotsUpTo: head?.entrySeq ?? 0,
      ignoredSnapshots: ignored,
      strict: options.strict,
      onProgress: options.onProgress,
      skipDamaged: options.skipDamaged,
      track: options.track,
    })
    return {
      builder,
      head,
      since,
      seq: r.lastSeq,
      applied: r.applied,
      treeOps: r.treeOps,
      noEffect: r.noEffect,
      skipped: r.skipped,
    }
  }

  /**
   * Replays the whole log, ignoring the workspace's own snapshots but not those whose tree came
   * from elsewhere (a fork base, a merge): the newest of those replaces everything before it.
   * They are found on the way, so a log never forked or merged into is read once; meeting one
   * restarts the replay from the newest seen, until a pass meets none newer than its start.
   */
  private async fromScratch(workspace: string, endByte: number, options: ReplayOptions): Promise<State> {
    // A compacted log's scratch is its base: the entries before it are in the base's snapshot.
    let head: Head | null = await this.baseHead(workspace)
    const ignored = new Map<number, NoEffect>()
    for (;;) {
      const since = head?.pos ?? 0
      const builder = new TreeBuilder(head ? await this.treeOf(head.record) : EMPTY_TREE)
      const seen: Array<{ seq: number; id: string; first: boolean }> = []
      const r = await replaySegment(this.root, workspace, builder, {
        since,
        endByte,
        ignoredSnapshots: ignored,
        strict: options.strict,
        onSnapshot: (seq, id, first) => seen.push({ seq, id, first }),
        onProgress: options.onProgress,
        skipDamaged: options.skipDamaged,
      })
      let reset: Head | null = null
      let newlyIgnored = false
      for (let i = seen.length - 1; i >= 0 && !reset; i--) {
        const { seq, id, first } = seen[i] as (typeof seen)[number]
        if (head && seq <= head.entrySeq) break
        if (ignored.has(seq)) continue
        const entry: StoredSnapshotEntry = { op: 'snapshot', snapshot_id: id, message: '', seq, ts: 0 }
        const found = await this.classify(workspace, entry, first, options.strict ?? false)
        if (!('record' in found)) {
          ignored.set(seq, found)
          newlyIgnored = true
        } else if (!found.own || found.record.merged) reset = found
      }
      if (reset) {
        head = reset
        continue
      }
      if (newlyIgnored) continue // again, so the entries passed over are reported in order
      return {
        builder,
        head,
        since,
        seq: r.lastSeq,
        applied: r.applied,
        treeOps: r.treeOps,
        noEffect: r.noEffect,
        skipped: r.skipped,
      }
    }
  }

  /**
   * Blobs the replay put in the tree that are not stored, each with the seq that wrote it
   * (`writes`: each blob's last write in the segment, when kept; else the segment is read again).
   */
  private async missingBlobs(
    workspace: string,
    s: State,
    writes: ReadonlyMap<string, number> | null,
  ): Promise<MissingBlob[]> {
    // Each blob is looked up once; paths are gathered only for the missing ones (most are stored).
    const byBlob = new Map<string, string[] | null>()
    const missing: string[] = []
    for (const [path, blob] of s.builder.touched()) {
      if (blob === null) continue
      const paths = byBlob.get(blob)
      if (paths) paths.push(path)
      else if (paths === undefined) {
        const gone = !this.store.hasLately(blob)
        byBlob.set(blob, gone ? [path] : null)
        if (gone) missing.push(blob)
      }
    }
    if (missing.length === 0) return []
    const seqs = writes ?? (await writeSeqs(this.root, workspace, s.since, s.seq, new Set(missing)))
    const out: MissingBlob[] = []
    for (const blob of missing) {
      for (const path of byBlob.get(blob) ?? [])
        out.push({ path, blob, workspace, seq: seqs.get(blob) ?? null })
    }
    return out.sort((a, b) => (a.seq ?? 0) - (b.seq ?? 0) || (a.path < b.path ? -1 : 1))
  }

  /**
   * The workspace's log file, to be read. An engine without a log (a command that only reads)
   * reads through the dead commit journals of the root (engine/journal-view.ts): a power cut can
   * leave acknowledged rounds, snapshot entries among them, in a journal alone until the next
   * writer or `noa recover` replays it. An engine with a log is in a process whose AgentLog
   * replayed them when it opened the root.
   */
  private logOf(workspace: string): string {
    const file = existingLog(this.root, workspace)
    if (this.log === undefined) readThroughJournals(this.root)
    return file
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

/**
 * A damaged log refuses a snapshot with NOA_CORRUPT_LOG; the error says how to get past it
 * without losing anything silently.
 */
function suggestSkip(err: unknown, workspace: string): unknown {
  if (!(err instanceof NoaError) || err.code !== 'NOA_CORRUPT_LOG') return err
  return Errors.CORRUPT_LOG(
    `${err.message}; a snapshot with skipDamaged (noa snapshot ${workspace} --skip-damaged) leaves the damaged lines out and records which`,
    { ...err.details, workspace },
  )
}

/** The form a record keeps: seq and reason. */
export function recorded(list: readonly NoEffect[]): RecordedNoEffect[] {
  return list.map((n) => ({ seq: n.seq, reason: n.reason }))
}

/** The file's stats, or null when it is missing or not a regular file. */
function statFileOrNull(file: string): ReturnType<typeof statFile> | null {
  try {
    return statFile(file, 'workspace log') ?? null
  } catch {
    return null
  }
}
