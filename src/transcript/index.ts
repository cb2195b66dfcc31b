/**
 * `noa/transcript`: Norma-compatible session transcripts. Append records with TranscriptWriter,
 * load and parse them (a torn tail is reported, not fatal), resume a session, view it as the
 * model sees it, and format records byte for byte as Norma does.
 */
export { formatRecord, formatRecordBytes } from './format.js'
export { formatTimestamp, type IdOptions, type NanoClock, newTranscriptId } from './ids.js'
export {
  type LoadOptions,
  loadTranscript,
  MAX_LINE_BYTES,
  type ParseOptions,
  parseTranscript,
  type TornTail,
  type Transcript,
} from './loader.js'
export { checkTranscriptId, listSidechains, type SidechainFile, transcriptPath } from './paths.js'
export {
  cleanResumed,
  type FileUsage,
  type Resumed,
  type ResumeOptions,
  resume,
  type SessionUsage,
  type SidechainUsage,
  sessionUsage,
} from './session.js'
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
} from './types.js'
export { type CheckOptions, checkBoundaryMeta, checkMessage, checkUsage } from './validate.js'
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
} from './view.js'
export { TranscriptWriter, type TranscriptWriterOptions, type WriterMode } from './writer.js'
