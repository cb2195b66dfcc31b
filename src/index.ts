export { AgentLog, type AgentLogOptions } from './engine/agent-log.js'
export { type AtomicWriteOptions, fsyncDir, writeFileAtomic } from './engine/atomic.js'
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
export { loadNative, type NativeIo, nativeCandidates } from './engine/native.js'
export type { Durability, OpenReport, OwnerStatus, RawAppendOptions } from './engine/protocol.js'
export { type EntryReadOptions, readChunks, readEntries, readEntryBatches, seekSeq } from './engine/reader.js'
export { inspectTail, type VerifyProblem, type VerifyReport, verifyLog } from './engine/recovery.js'
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
  type PushOptions,
  type PushReport,
  replicatePush,
} from './replicate/publisher.js'
export {
  type Direction,
  type ReplicationStatus,
  replicationStatus,
  type StatusOptions,
  type WorkspaceReplication,
} from './replicate/status.js'
export {
  type EventSink,
  type InitOptions,
  type InitReport,
  initStream,
  type NatsTarget,
  type ReplicationEvent,
  streamProblems,
} from './replicate/stream.js'
export {
  DEFAULT_PREFIX,
  defaultStreamName,
  entryMsgId,
  objectSubject,
  workspaceSubject,
} from './replicate/subjects.js'
