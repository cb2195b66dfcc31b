/**
 * `noa/store`: the content-addressed store under SnapshotEngine. Trees and their diffs, the
 * snapshot records and their encoding, history, merge bases, replay of log segments, reachability,
 * garbage collection and verification.
 */
export type { CheckoutOptions, CheckoutResult } from './checkout.js'
export {
  type DiffEntry,
  type DiffResult,
  type DiffSide,
  type DiffStatus,
  diffRefs,
  type FileDiff,
  fileDiff,
} from './diff.js'
export {
  collectGarbage,
  DEFAULT_GRACE_MS,
  type GcItem,
  type GcOptions,
  type GcProgress,
  type GcResult,
  parseDuration,
} from './gc.js'
export { type Head, lastSnapshotEntry, type StoredSnapshotEntry, snapshotEntriesBackward } from './heads.js'
export { drawGraph, type HistoryKind, type HistoryNode, historyOf } from './history.js'
export { type ConflictPolicy, type MergeOptions, type MergeResult, mergeBase } from './merge.js'
export {
  type BlobSource,
  type ConflictSide,
  checkObjectId,
  encodeSnapshotRecord,
  MAX_DELTA_DEPTH,
  type MergeConflict,
  ObjectStore,
  type ObjectStoreOptions,
  type RecordedNoEffect,
  type SnapshotRecord,
  type SnapshotRecordInput,
  type StoredObject,
  sha256,
  snapshotEntry,
} from './objects.js'
export {
  MarkSet,
  type ObjectKind,
  type ReachSink,
  type Referrer,
  snapshotObjects,
  walkRoots,
} from './reach.js'
export { checkRecordEntries, type RecordProblem, scanRecords } from './records.js'
export {
  type ApplyOptions,
  applyEntries,
  type ChangeMark,
  type ChangeOp,
  NO_EFFECT_REASONS,
  type NoEffect,
  type NoEffectReason,
  type ReplayProgress,
  replaySegment,
} from './replay.js'
export {
  type ForkResult,
  type MissingBlob,
  type PruneOptions,
  type PruneResult,
  type ReplayOptions,
  type ResolvedRef,
  SnapshotEngine,
  type SnapshotEngineOptions,
  type SnapshotInfo,
  type SnapshotKind,
  type SnapshotOptions,
  type SnapshotResult,
  type StoreAppender,
  type WorkspaceState,
} from './snapshot.js'
export {
  comparePaths,
  diffTrees,
  EMPTY_TREE,
  TREE_HEADER,
  Tree,
  TreeBuilder,
  type TreeChange,
} from './tree.js'
export { type StoreProblem, verifyStore } from './verify.js'
