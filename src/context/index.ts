/**
 * `noa/context`: Norma-compatible context compression. ContextSession compresses a transcript into
 * archived blocks and a state file; the pipeline, refs, archive format and audit are its parts.
 */
export {
  type ArchiveBlockEntry,
  type ArchiveDocument,
  type ArchiveEntry,
  type ArchiveEntryType,
  type ArchiveInput,
  type ArchiveMessageEntry,
  type Archiver,
  type ArchiveSource,
  archiveDocument,
  archiveRel,
  FileArchiver,
  fenceFor,
  ReuseArchiver,
  relLink,
  renderArchiveUnchecked,
} from './archive.js'
export { type ParseArchiveOptions, parseArchive } from './archive-reader.js'
export { renderArchive } from './archive-writer.js'
export {
  type AuditCode,
  type AuditOptions,
  type AuditProblem,
  type AuditReport,
  auditSession,
} from './audit.js'
export { type ResolvedRange, resolveBoundaries } from './boundaries.js'
export {
  type ApplyInput,
  type ApplyResult,
  applyCompression,
  decideTier,
  type TierDecision,
} from './compress.js'
export {
  type CompressArgs,
  type CompressParseDiagnostics,
  type CompressParseKind,
  parseCompressArgs,
} from './compress-args.js'
export {
  type ContextConfig,
  DEFAULT_CONFIG,
  DEFAULT_MIN_COMPRESS_RANGE,
  NORMA_CONFIG,
  resolveConfig,
} from './config.js'
export {
  deriveChildState,
  type InheritCandidate,
  type InheritOptions,
  type InheritResult,
  inheritState,
  MAX_INHERIT_DEPTH,
} from './inherit.js'
export { materialize, type ViewRefs } from './materialize.js'
export { formatPanel, type PanelInput, panelBlockCount } from './panel.js'
export {
  archiveTag,
  processTurn,
  projectedTokenCount,
  pruneOnly,
  renderSummaryMessage,
  type TurnResult,
} from './pipeline.js'
export { deriveMessageId, type Origin, type Projection, project, reassemble, stripRefTag } from './project.js'
export { type RebuildInput, type RebuildResult, rebuildState } from './rebuild.js'
export { assignRefs, indexToRef, parseBlockId, parseBoundary, refToIndex } from './refs.js'
export {
  type CompressOutcome,
  ContextSession,
  type ContextSessionOptions,
  type RebuildOptions,
  type RebuildOutcome,
  withSessionLock,
} from './session.js'
export { activeBlocks, cloneState, coveredMessageIds, createInitialState, findBlock } from './state.js'
export {
  type DecodedState,
  decodeState,
  encodeState,
  loadState,
  loadStateFile,
  STATE_FILE,
  type StateLoad,
  saveState,
  sessionRoot,
  stateFileOf,
} from './state-file.js'
export { type ClockOptions, formatRfc3339, type TimeZoneOption } from './time.js'
export { countTokens, formatTokens } from './tokens.js'
export {
  BLOCKED_REF,
  COMPRESS_TOOL_NAME,
  type CompressionBlock,
  type CompressionState,
  type CompressionStats,
  type CompressRange,
  type CoreContentType,
  type CoreMessage,
  type CoreRole,
  type MessageRefMap,
  type NudgeState,
  SUMMARY_HEADER,
} from './types.js'
