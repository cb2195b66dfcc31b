/**
 * `noa/engine`: the durable log below AgentLog. Log files by name and path, reading and
 * verifying them without an owner, the entry line format, atomic file writes, and the addon
 * loader with the interface it is typed by.
 */
export {
  AgentLog,
  type AgentLogOptions,
  type AppendOptions,
  type CompactOptions,
  type CompactResult,
  DEFAULT_JOURNAL_SIZE,
} from './agent-log.js'
export {
  type AtomicWriteOptions,
  fsyncDir,
  fsyncDirs,
  TempFile,
  tempPath,
  writeFileAtomic,
  writeTempFile,
} from './atomic.js'
export type { ObjectChecks } from './checks.js'
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
} from './entry.js'
export {
  type DetailsOf,
  type ErrorFactories,
  Errors,
  isNoaError,
  NOA_ERROR_CODES,
  NoaError,
  type NoaErrorCode,
  type NoaErrorDetails,
} from './errors.js'
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
} from './logs.js'
export {
  type CompletionHandler,
  loadNative,
  type NativeIo,
  nativeCandidates,
  nativePath,
  type PoolStats,
  type SyncMode,
} from './native.js'
export type { Durability, OpenReport, OwnerStatus, RawAppendOptions } from './protocol.js'
export {
  type ChunkOptions,
  type EntryReadOptions,
  readChunks,
  readEntries,
  readEntryBatches,
  seekSeq,
} from './reader.js'
export {
  type DamagedBlock,
  inspectTail,
  type Tail,
  type VerifyOptions,
  type VerifyProblem,
  type VerifyReport,
  verifyLog,
} from './recovery.js'
export type { WatchOptions } from './watch.js'
