// Loaded for its effect: AgentLog.open on a root a daemon serves talks to that daemon.
import './serve/forward.js'

export * from './context/index.js'
export { AgentLog, type AgentLogOptions, type AppendOptions } from './engine/agent-log.js'
export {
  type AtomicWriteOptions,
  fsyncDir,
  fsyncDirs,
  TempFile,
  tempPath,
  writeFileAtomic,
  writeTempFile,
} from './engine/atomic.js'
export type { ObjectChecks } from './engine/checks.js'
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
export {
  DEFAULT_ROOT,
  type ListOptions,
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
export { loadNative, type NativeIo, nativeCandidates, nativePath } from './engine/native.js'
export type { Durability, OpenReport, OwnerStatus, RawAppendOptions } from './engine/protocol.js'
export { type EntryReadOptions, readChunks, readEntries, readEntryBatches, seekSeq } from './engine/reader.js'
export {
  inspectTail,
  type VerifyOptions,
  type VerifyProblem,
  type VerifyReport,
  verifyLog,
} from './engine/recovery.js'
export { type GoInt, goToLower, goTrimSpace } from './gocompat/index.js'
export { linkTarget, renderIndex } from './memory/index-file.js'
export { LOCK_FILE } from './memory/lock.js'
export {
  checkMemory,
  MEMORY_TYPES,
  type MemoryFields,
  type MemoryInput,
  type MemoryNote,
  type MemoryType,
  parseMemory,
  renderMemory,
} from './memory/note.js'
export {
  age,
  type RecallHit,
  relevant,
  renderForInjection,
  STALE_NOTE,
  STOP_WORDS,
  score,
  stalenessNote,
  tokenize,
} from './memory/recall.js'
export {
  INDEX_FILE,
  mtimeNs,
  newerFirst,
  readNote,
  type ScanResult,
  type SkippedFile,
  scanDir,
} from './memory/scan.js'
export { slug } from './memory/slug.js'
export { candidates, DEFAULT_INJECT_LIMIT, type InjectOptions, MemoryStore } from './memory/store.js'
export {
  type Checkpoint,
  checkpointPath,
  type PullCheckpoint,
  type PullPosition,
  type PushCheckpoint,
  type PushPosition,
} from './replicate/checkpoint.js'
export { type PulledWorkspace, type PullOptions, type PullReport, replicatePull } from './replicate/mirror.js'
export {
  type PushedWorkspace,
  type PushFailure,
  type PushOptions,
  type PushReport,
  replicatePush,
} from './replicate/publisher.js'
export {
  type Direction,
  type ReplicationStatus,
  replicationStatus,
  type StatusFailure,
  type StatusOptions,
  type WorkspaceReplication,
} from './replicate/status.js'
export {
  type EventSink,
  type InitOptions,
  type InitReport,
  initStream,
  type NatsTarget,
  type ProgressSink,
  type ReplicationEvent,
  type ReplicationProgress,
  streamProblems,
} from './replicate/stream.js'
export {
  DEFAULT_PREFIX,
  defaultStreamName,
  entryMsgId,
  objectSubject,
  workspaceSubject,
} from './replicate/subjects.js'
export {
  type ConnectOptions,
  connectDaemon,
  type DaemonInfo,
  RemoteAgentLog,
} from './serve/client.js'
export { Daemon, type DaemonStats, type ServeOptions } from './serve/daemon.js'
export { DEFAULT_LIMITS, type Limits, PROTOCOL_VERSION, SOCKET_NAME } from './serve/protocol.js'
export type { CheckoutOptions, CheckoutResult } from './store/checkout.js'
export {
  type DiffEntry,
  type DiffResult,
  type DiffSide,
  type DiffStatus,
  diffRefs,
  type FileDiff,
  fileDiff,
} from './store/diff.js'
export {
  collectGarbage,
  DEFAULT_GRACE_MS,
  type GcItem,
  type GcOptions,
  type GcProgress,
  type GcResult,
  parseDuration,
} from './store/gc.js'
export { lastSnapshotEntry, type StoredSnapshotEntry, snapshotEntriesBackward } from './store/heads.js'
export { drawGraph, type HistoryKind, type HistoryNode, historyOf } from './store/history.js'
export {
  type ConflictPolicy,
  type ConflictSide,
  type MergeConflict,
  type MergeOptions,
  type MergeResult,
  mergeBase,
} from './store/merge.js'
export {
  type BlobSource,
  checkObjectId,
  encodeSnapshotRecord,
  MAX_DELTA_DEPTH,
  ObjectStore,
  type RecordedNoEffect,
  type SnapshotRecord,
  type SnapshotRecordInput,
  type StoredObject,
  sha256,
  snapshotEntry,
} from './store/objects.js'
export {
  MarkSet,
  type ObjectKind,
  type ReachSink,
  type Referrer,
  snapshotObjects,
  walkRoots,
} from './store/reach.js'
export { checkRecordEntries, type RecordProblem, scanRecords } from './store/records.js'
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
} from './store/replay.js'
export {
  type ForkResult,
  type Head,
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
  type WorkspaceState,
} from './store/snapshot.js'
export {
  comparePaths,
  diffTrees,
  EMPTY_TREE,
  TREE_HEADER,
  Tree,
  TreeBuilder,
  type TreeChange,
} from './store/tree.js'
export { type StoreProblem, verifyStore } from './store/verify.js'
export { formatRecord, formatRecordBytes } from './transcript/format.js'
export {
  formatTimestamp,
  type IdOptions,
  type NanoClock,
  newTranscriptId,
  nowNanos,
} from './transcript/ids.js'
export {
  type LoadOptions,
  loadTranscript,
  MAX_LINE_BYTES,
  type ParseOptions,
  parseTranscript,
  type TornTail,
  type Transcript,
} from './transcript/loader.js'
export { checkTranscriptId, listSidechains, type SidechainFile, transcriptPath } from './transcript/paths.js'
export {
  cleanResumed,
  type FileUsage,
  type Resumed,
  type ResumeOptions,
  resume,
  type SessionUsage,
  type SidechainUsage,
  sessionUsage,
} from './transcript/session.js'
export {
  addUsage,
  BLOCK_TYPES,
  type BlockType,
  type BoundaryMeta,
  type CompactBoundaryBlock,
  type ContentBlock,
  isCompactBoundaryBlock,
  isTextBlock,
  isThinkingBlock,
  isToolResultBlock,
  isToolUseBlock,
  isZeroUsage,
  type Message,
  type RawJson,
  type RecordType,
  ROLES,
  type Role,
  type TextBlock,
  type ThinkingBlock,
  type ToolResultBlock,
  type ToolUseBlock,
  type TranscriptRecord,
  type Usage,
  zeroUsage,
} from './transcript/types.js'
export { type CheckOptions, checkBoundaryMeta, checkMessage, checkUsage } from './transcript/validate.js'
export {
  boundaryMarker,
  type Conversation,
  isBoundaryMarker,
  lastBoundaryIndex,
  lastUuid,
  type MessagesOptions,
  messages,
  pairToolBlocks,
  parseBoundaryMeta,
  viewForModel,
} from './transcript/view.js'
export { TranscriptWriter, type TranscriptWriterOptions, type WriterMode } from './transcript/writer.js'
