export { AgentLog, type AgentLogOptions } from './engine/agent-log.js'
export {
  type AtomicWriteOptions,
  fsyncDir,
  fsyncDirs,
  TempFile,
  tempPath,
  writeFileAtomic,
  writeTempFile,
} from './engine/atomic.js'
export { nextTs, nowMicros } from './engine/clock.js'
export {
  type Ack,
  checkBlob,
  checkPath,
  checkWorkspace,
  type DeleteEntry,
  type Entry,
  type EntryInput,
  encodeBody,
  formatLine,
  isWorkspaceName,
  type MergeEntry,
  OPS,
  type Op,
  parseEntry,
  type RenameEntry,
  type SnapshotEntry,
  type WriteEntry,
} from './engine/entry.js'
export { isNoaError, NoaError, type NoaErrorCode, type NoaErrorDetails } from './engine/errors.js'
export { lastSnapshotEntry, type StoredSnapshotEntry, snapshotEntriesBackward } from './engine/heads.js'
export {
  DEFAULT_ROOT,
  listWorkspaces,
  logDirOf,
  logPath,
  readWorkspace,
  readWorkspaceBatches,
  readWorkspaceBytes,
  resolveRoot,
  verifyWorkspace,
  type WorkspaceInfo,
  workspaceInfo,
  workspaceNames,
} from './engine/logs.js'
export {
  type ConflictPolicy,
  type ConflictSide,
  type MergeConflict,
  type MergeOptions,
  type MergeResult,
  mergeBase,
} from './engine/merge.js'
export { loadNative, type NativeIo, nativeCandidates } from './engine/native.js'
export {
  type BlobSource,
  checkObjectId,
  encodeSnapshotRecord,
  MAX_DELTA_DEPTH,
  ObjectStore,
  type SnapshotRecord,
  type SnapshotRecordInput,
  type StoredObject,
  sha256,
  snapshotEntry,
} from './engine/objects.js'
export type { Durability, OpenReport, OwnerStatus, RawAppendOptions } from './engine/protocol.js'
export { type EntryReadOptions, readChunks, readEntries, readEntryBatches, seekSeq } from './engine/reader.js'
export { inspectTail, type VerifyProblem, type VerifyReport, verifyLog } from './engine/recovery.js'
export {
  applyEntries,
  type ChangeMark,
  type ChangeOp,
  type ReplayProgress,
  replaySegment,
} from './engine/replay.js'
export {
  type ForkResult,
  type Head,
  type ReplayOptions,
  SnapshotEngine,
  type SnapshotEngineOptions,
  type SnapshotInfo,
  type SnapshotKind,
  type SnapshotOptions,
  type SnapshotResult,
  type WorkspaceState,
} from './engine/snapshot.js'
export {
  comparePaths,
  diffTrees,
  EMPTY_TREE,
  TREE_HEADER,
  Tree,
  TreeBuilder,
  type TreeChange,
} from './engine/tree.js'
