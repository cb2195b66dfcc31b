/**
 * The writes of snapshots (snapshot.ts has the rules): a snapshot of a workspace as it stands, a
 * fork (a new workspace starting from a snapshot) and a prune (retention). Each stores its
 * objects first (tree, then record) and appends the log entry last. They take a SnapshotWriter:
 * the reader they build on (snapshot-read.ts), the workspace mutex, and the log's appends.
 */
import type { AgentLog } from '../engine/agent-log.js'
import { nowMicros } from '../engine/clock.js'
import { type Ack, checkWorkspace, type EntryInput, encodeBody } from '../engine/entry.js'
import { Errors, NoaError } from '../engine/errors.js'
import { statFile } from '../engine/files.js'
import { existingLog, logPath } from '../engine/logs.js'
import { checkOptionKeys } from '../engine/options.js'
import type { KeyedMutex } from './mutex.js'
import {
  type ObjectStore,
  type RecordedNoEffect,
  type SnapshotRecord,
  type SnapshotRecordInput,
  snapshotEntry,
} from './objects.js'
import { writeSeqs } from './records.js'
import type { ChangeMark, NoEffect, ReplayProgress, Skipped } from './replay.js'
import type { SnapshotReader, State } from './snapshot-read.js'
import { EMPTY_TREE, type TreeBuilder } from './tree.js'

const SNAPSHOT_KEYS = new Set(['message', 'onProgress', 'strict', 'allowEmpty', 'skipDamaged', 'dropOlder'])
const PRUNE_KEYS = new Set(['keepLast', 'keepWithinMs', 'message', 'dryRun'])

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

export interface PruneOptions {
  /** Keep the newest N snapshots (the head is always kept). */
  keepLast?: number
  /** Keep snapshots made within this many milliseconds. */
  keepWithinMs?: number
  message?: string
  /** Say what would be dropped and write nothing (no log needed; `created` is false). */
  dryRun?: boolean
}

export interface PruneResult {
  /** false: nothing to drop, nothing written. */
  created: boolean
  /** The snapshot that records the drop. */
  snapshotId: string | null
  dropped: string[]
  kept: string[]
  entry: Ack | null
}

/** Blobs whose last write a snapshot keeps while it replays (past this, it reads again). */
const WRITES_KEPT = 100_000

/** What the writes need: the reader they build on, the workspace mutex, the log's appends. */
export interface SnapshotWriter {
  readonly root: string
  readonly store: ObjectStore
  readonly reader: SnapshotReader
  readonly mutex: KeyedMutex
  /** The log, or a NOA_BAD_ARGUMENT saying that `what` appends to one. */
  requireLog(what: string): AgentLog
  /** The store's own appends: its records, past the record check normal callers get. */
  append(workspace: string, entries: readonly EntryInput[]): Promise<Ack[]>
}

/**
 * Snapshot of the workspace as it stands: its head's tree + the entries after it. Stores the
 * tree and the record, then appends the `snapshot` entry. With nothing new since the head
 * (no write, delete or rename after it), writes nothing and says so (`created: false`).
 */
export async function takeSnapshot(
  w: SnapshotWriter,
  workspace: string,
  options: SnapshotOptions = {},
): Promise<SnapshotResult> {
  checkOptionKeys(options, SNAPSHOT_KEYS, 'snapshot')
  const log = w.requireLog('snapshot')
  checkWorkspace(workspace)
  const message = options.message ?? ''
  encodeBody({ op: 'snapshot', snapshot_id: 'noa_0', message }) // refuses a bad message before any work
  existingLog(w.root, workspace)
  return w.mutex.run([workspace], async () => {
    await log.openWorkspace(workspace) // takes the workspace's lock, cuts a torn tail
    // The seq of each blob's last write, kept while the segment is small: a blob found
    // missing is named with it without reading the segment again.
    let writes: Map<string, number> | null = new Map()
    const track = (_path: string, blob: string | null, mark: ChangeMark) => {
      if (writes === null || mark.op !== 'write') return
      writes.set(blob as string, mark.seq)
      if (writes.size > WRITES_KEPT) writes = null
    }
    const s = await w.reader
      .computeState(workspace, {
        onProgress: options.onProgress,
        strict: options.strict,
        skipDamaged: options.skipDamaged,
        track,
      })
      .catch((err) => {
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
      for await (const info of w.reader.snapshots(workspace)) {
        if (info.kind === 'snapshot' && !info.pruned) pruned.push(info.snapshotId)
        if (info.prunes.length > 0) break
      }
    }
    // The tree is built at once and its objects' fsyncs run in the pool while the blobs the
    // replay took in are looked up: the report of missing ones does not wait for the disk.
    const storing = storeSnapshot(
      w.store,
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
    const [record, missingBlobs] = await Promise.all([storing, findMissingBlobs(w, workspace, s, writes)])
    const [entry] = await w.append(workspace, [snapshotEntry(record, message)])
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
export async function forkWorkspace(
  w: SnapshotWriter,
  workspace: string,
  snapshotId: string,
  options: { message?: string } = {},
): Promise<ForkResult> {
  const log = w.requireLog('fork')
  checkWorkspace(workspace)
  const record = await w.store.getSnapshot(snapshotId)
  const tree = await w.reader.treeOf(record) // the base must be whole before anything points at it
  if (!w.store.has(record.tree)) await w.store.putWholeTree(tree) // rebuilt: store it again
  const message = options.message ?? `fork of ${record.workspace} at ${record.id}`
  encodeBody({ op: 'snapshot', snapshot_id: record.id, message })
  return w.mutex.run([workspace], async () => {
    const file = logPath(w.root, workspace)
    const exists = () =>
      Errors.EXISTS(`workspace ${workspace} already exists (${file}); fork into a new one`, {
        workspace,
        file,
      })
    if ((statFile(file, 'workspace log')?.size ?? 0) > 0) throw exists() // refused before the log is touched
    if ((await log.openWorkspace(workspace)).lastSeq > 0) throw exists()
    const [entry] = await w.append(workspace, [{ op: 'snapshot', snapshot_id: record.id, message }])
    return { workspace, base: record.id, fromWorkspace: record.workspace, entry: entry as Ack }
  })
}

/**
 * Retention: drops the workspace's older snapshots, keeping the newest `keepLast` and those
 * made within `keepWithinMs`, and always the head, forks and merges (a merge's tree cannot be
 * rebuilt from one log). The drop is recorded in the log: a snapshot entry (one of the seed's
 * five ops) whose record lists the dropped ids in `pruned`, so history says so. Nothing is
 * removed here: gc no longer keeps the dropped snapshots' trees and blobs; their records stay
 * for the history, and a dropped tree is rebuilt from the log if asked for while its blobs last.
 */
export async function pruneSnapshots(
  w: SnapshotWriter,
  workspace: string,
  options: PruneOptions,
): Promise<PruneResult> {
  checkOptionKeys(options, PRUNE_KEYS, 'prune')
  const log = options.dryRun ? undefined : w.requireLog('prune')
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
  existingLog(w.root, workspace)
  return w.mutex.run([workspace], async () => {
    await log?.openWorkspace(workspace)
    // Snapshots that dropped others (a prune's, a retention put's) are not counted: their
    // records keep what was dropped, whatever becomes of their trees.
    const listed = await w.reader.listSnapshots(workspace)
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
    const s = await w.reader.computeState(workspace, {})
    const message =
      options.message ?? `prune: dropped ${dropped.length} snapshot${dropped.length === 1 ? '' : 's'}`
    encodeBody({ op: 'snapshot', snapshot_id: 'noa_0', message })
    const record = await storeSnapshot(
      w.store,
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
    const [entry] = await w.append(workspace, [snapshotEntry(record, message)])
    return { created: true, snapshotId: record.id, dropped, kept: [...new Set(kept)], entry: entry as Ack }
  })
}

/**
 * Stores a tree (the folders on the changed paths, in one pack) and its record in one batch;
 * the caller appends the entry after.
 */
export async function storeSnapshot(
  store: ObjectStore,
  input: Omit<SnapshotRecordInput, 'tree'>,
  built: TreeBuilder,
): Promise<SnapshotRecord> {
  const tree = store.treeObject(null, built)
  const record = await store.putSnapshot({ ...input, tree: tree.id }, [tree])
  store.stored(tree.id)
  return record
}

/**
 * Blobs the replay put in the tree that are not stored, each with the seq that wrote it
 * (`writes`: each blob's last write in the segment, when kept; else the segment is read again).
 */
async function findMissingBlobs(
  w: SnapshotWriter,
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
      const gone = !w.store.hasLately(blob)
      byBlob.set(blob, gone ? [path] : null)
      if (gone) missing.push(blob)
    }
  }
  if (missing.length === 0) return []
  const seqs = writes ?? (await writeSeqs(w.root, workspace, s.since, s.seq, new Set(missing)))
  const out: MissingBlob[] = []
  for (const blob of missing) {
    for (const path of byBlob.get(blob) ?? [])
      out.push({ path, blob, workspace, seq: seqs.get(blob) ?? null })
  }
  return out.sort((a, b) => (a.seq ?? 0) - (b.seq ?? 0) || (a.path < b.path ? -1 : 1))
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
