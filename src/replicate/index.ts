/**
 * `noa/replicate`: replication of workspaces and objects through a NATS JetStream stream. Create
 * the stream, push, pull into a mirror, and report how far each side is; the subject names are
 * the stream's contract with other readers.
 */
// Loaded for its effect: AgentLog.open takes the option replicate (replicated acks).
import './acks.js'

export {
  type Checkpoint,
  checkpointPath,
  type PullCheckpoint,
  type PullPosition,
  type PushCheckpoint,
  type PushPosition,
} from './checkpoint.js'
export type { EventSink, ProgressSink, ReplicationEvent, ReplicationProgress } from './events.js'
export {
  type PromotedWorkspace,
  type PromoteOptions,
  type PromoteReport,
  promote,
  type ResyncedWorkspace,
  type ResyncOptions,
  type ResyncReport,
  resync,
} from './failover.js'
export type { NatsTarget } from './link.js'
export { type PulledWorkspace, type PullOptions, type PullReport, replicatePull } from './mirror.js'
export {
  type PushedWorkspace,
  type PushFailure,
  type PushOptions,
  type PushReport,
  replicatePush,
} from './publisher.js'
export { type SharedAppendOptions, type SharedOptions, SharedWorkspaces } from './shared.js'
export {
  type Direction,
  type Position,
  type ReplicationStatus,
  replicationStatus,
  type StatusFailure,
  type StatusOptions,
  type WorkspaceReplication,
} from './status.js'
export { type InitOptions, type InitReport, initStream, streamProblems } from './stream.js'
export {
  DEFAULT_PREFIX,
  defaultStreamName,
  entryMsgId,
  objectSubject,
  workspaceSubject,
} from './subjects.js'
