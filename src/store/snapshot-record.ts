/**
 * A snapshot record as stored in the object store (design.md §4), with its merge conflicts and
 * the entries its replay passed over: the shape shared by the object store that encodes it
 * (objects.ts) and the rules for the log entries that name it (records.ts).
 */
import type { NoEffectReason, Skipped } from './replay.js'

/** A side of a conflict a merge met: what one participant did to the path. */
export interface ConflictSide {
  /** The participant (target or source) that changed the path. */
  workspace: string
  op: 'write' | 'delete' | 'rename' | 'merge'
  /** Its value for the path (null: deleted, or renamed away). */
  blob: string | null
  ts: number
  /** Seq of the entry (of the merge snapshot for op `merge`). */
  seq: number
  /** The log holding that entry, when it is not `workspace`'s own (history from before a fork). */
  log?: string
}

export interface MergeConflict {
  path: string
  /** Every participant's change, oldest first. */
  sides: ConflictSide[]
  /** The participant whose change is in the merged tree (the last side). */
  winner: string
}

/** An entry of the snapshot's replay that changed nothing, as the record keeps it. */
export interface RecordedNoEffect {
  seq: number
  reason: NoEffectReason
}

/** A snapshot record as stored (design.md §4; field order is the encoding's). */
export interface SnapshotRecord {
  /** `noa_` + the SHA-256 of the stored record (not itself stored). */
  id: string
  /** Workspace whose log the snapshot covers. */
  workspace: string
  /** Tree id. */
  tree: string
  /** The workspace's previous snapshot (or the snapshot it was forked from); absent for the first. */
  parent?: string
  /** Merge snapshots only: the source snapshots merged in, in the order given. */
  merged?: string[]
  /** Merge snapshots only: the common base (absent when the sources share no snapshot). */
  base?: string
  /** The replay started after this seq of the workspace's log (the parent's position in it). */
  since: number
  /** Last seq of the workspace's log the snapshot covers. */
  seq: number
  /**
   * Entries of (since, seq] that changed nothing, and why (stored as `no_effect`; absent when
   * none, so records without any encode as before).
   */
  noEffect?: RecordedNoEffect[]
  /**
   * Damaged parts of the log in (since, seq] that a `skipDamaged` snapshot left out: each with
   * its byte range and, where they could be read, its seqs (stored as `skipped`; absent when
   * none). The tree holds every other entry; these stay in the log for whoever repairs it.
   */
  skipped?: Skipped[]
  /** Merge snapshots only: the conflicts met and who won (absent when none). */
  conflicts?: MergeConflict[]
  /**
   * Snapshots of this workspace dropped by `snapshot prune` (their records stay for the
   * history; their trees are left for gc, and rebuilt from the log when asked for).
   */
  pruned?: string[]
  message: string
  /** Creation time, unix µs. */
  ts: number
}

export type SnapshotRecordInput = Omit<SnapshotRecord, 'id'>
