/**
 * What the operations on a root (checkout, diff, gc, history, reach) need of it: its object
 * store, its snapshot records and trees, and how a ref resolves. `SnapshotEngine` implements it
 * and is the facade that calls them; they take this narrow view, so none imports the facade.
 */
import type { Ack } from '../engine/entry.js'
import type { Head } from './heads.js'
import type { ObjectStore, RecordedNoEffect, SnapshotRecord } from './objects.js'
import type { Skipped } from './replay.js'
import type { Tree } from './tree.js'

export type SnapshotKind = 'snapshot' | 'fork' | 'merge'

export interface SnapshotInfo {
  snapshotId: string
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
  /** Entries of its replay that changed nothing. */
  noEffect: RecordedNoEffect[]
  /** Damaged parts of the log its replay left out. */
  skipped: Skipped[]
  /** Dropped by a later `snapshot prune` of this workspace (its tree is left for gc). */
  pruned: boolean
  /** Snapshots this one dropped (a prune). */
  prunes: string[]
}

/** Where a ref (`noa_…`, `ws`, `ws@seq`) points. */
export interface ResolvedRef {
  ref: string
  tree: Tree
  /** The snapshot named, or the head the state was replayed from (null: from empty). */
  snapshotId: string | null
  /** Workspace of a `ws` / `ws@seq` ref, or of the snapshot's record. */
  workspace: string
  /** Last seq the state covers (a snapshot's record seq). */
  seq: number
}

export interface SnapshotView {
  /** The root folder (its agent-logs/ and objects/). */
  readonly root: string
  readonly store: ObjectStore
  /** The record of a snapshot id (`noa_…`); a named error when there is none. */
  getSnapshot(id: string): Promise<SnapshotRecord>
  /** A workspace's newest snapshot that means something (null: none). */
  head(workspace: string): Promise<Head | null>
  /** A workspace's snapshots, newest first. */
  snapshots(workspace: string): AsyncGenerator<SnapshotInfo>
  /** Where a ref (`noa_…`, `ws`, `ws@seq`) points. */
  resolve(ref: string): Promise<ResolvedRef>
  /** The tree of a record (rebuilt from the log when gc freed it). */
  treeOf(record: SnapshotRecord, depth?: number): Promise<Tree>
}
