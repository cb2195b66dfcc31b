/**
 * What a host uses: the durable log (AgentLog), the snapshot store over it (SnapshotEngine, with
 * its ObjectStore), the one error class, and the types these take and return. Each layer has a
 * face of its own: `noa/engine` (log files, line format, the addon loader), `noa/store` (trees,
 * diffs, history, gc, verification), `noa/transcript`, `noa/memory`, `noa/context`,
 * `noa/replicate`, `noa/serve` (the daemon and its client), and the adapters `noa/langgraph`,
 * `noa/openai-agents`.
 */

// Loaded for its effect: AgentLog.open on a root a daemon serves talks to that daemon.
import './serve/forward.js'
// Loaded for its effect: AgentLog.open takes the option replicate (replicated acks).
import './replicate/acks.js'

export { AgentLog, type AgentLogOptions, type AppendOptions } from './engine/agent-log.js'
export type { ObjectChecks } from './engine/checks.js'
export type {
  Ack,
  DeleteEntry,
  Entry,
  EntryInput,
  MergeEntry,
  Op,
  RenameEntry,
  SnapshotEntry,
  WriteEntry,
} from './engine/entry.js'
export {
  isNoaError,
  NOA_ERROR_CODES,
  NoaError,
  type NoaErrorCode,
  type NoaErrorDetails,
} from './engine/errors.js'
export type { WorkspaceInfo } from './engine/logs.js'
export type { Durability, OpenReport, OwnerStatus, RawAppendOptions } from './engine/protocol.js'
export type { EntryReadOptions } from './engine/reader.js'
export type { VerifyOptions, VerifyProblem, VerifyReport } from './engine/recovery.js'
export type { WatchOptions } from './engine/watch.js'
export type { CheckoutOptions, CheckoutResult } from './store/checkout.js'
export type { DiffEntry, DiffResult, DiffSide, DiffStatus } from './store/diff.js'
export type { GcItem, GcOptions, GcProgress, GcResult } from './store/gc.js'
export type { HistoryKind, HistoryNode } from './store/history.js'
export type { ConflictPolicy, MergeOptions, MergeResult } from './store/merge.js'
export {
  type BlobSource,
  type ConflictSide,
  type MergeConflict,
  ObjectStore,
  type ObjectStoreOptions,
  type RecordedNoEffect,
  type SnapshotRecord,
  type SnapshotRecordInput,
  type StoredObject,
} from './store/objects.js'
export type { ChangeOp, NoEffect, NoEffectReason, ReplayProgress } from './store/replay.js'
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
export type { Tree, TreeBuilder } from './store/tree.js'
