/**
 * Noa's model of a session's context compression (formats.md §c): the projected messages, the
 * blocks that replace ranges of them, and the state that is saved as state.json v1.
 *
 * Field names follow Norma's Go structs (camelCase as in the JSON file). Go's zero values stand
 * for absent fields (`''`, `[]`, `0`), because that is what Norma reads and writes back for them.
 * Ints are Go's int64 (`GoInt`: a number, or a bigint beyond 2^53, which only a loaded file gives).
 */
import type { GoInt } from '../gocompat/int.js'

/** Roles of projected messages: tool results get their own role. */
export type CoreRole = 'user' | 'assistant' | 'tool'

/** What one projected message holds (one content block of a transcript message). */
export type CoreContentType = 'text' | 'tool-call' | 'tool-result' | 'reasoning'

/**
 * One content block of the conversation, as Noa sees it (Norma's `CoreMessage`). `id` is the
 * content hash (`h_…`, see `deriveMessageId`), or `noa_summary_<block>` for the summary message
 * that stands in for an active block in a view.
 */
export interface CoreMessage {
  id: string
  role: CoreRole
  contentType: CoreContentType
  /** Text, thinking, raw tool input JSON, or a tool result's text blocks joined by `\n`. */
  text: string
  toolName: string
  toolCallId: string
}

/** A compressed range: a summary that replaces messages (tier 1) or lower-tier blocks (tier 2, 3). */
export interface CompressionBlock {
  /** `b1`, `b2`, … */
  blockId: string
  tier: GoInt
  topic: string
  summary: string
  /** Messages this block compressed itself (not through an absorbed block), in ref order. */
  directMessageIds: string[]
  /** Every message the block covers, absorbed blocks' included, in ref order. */
  effectiveMessageIds: string[]
  /** Blocks this block absorbed (they became inactive). */
  directBlockIds: string[]
  /** Absolute path of the archive file. */
  archivePath: string
  /** `tier<N>/<blockId>_<startRef>-<endRef>.md`, relative to the session's archive root. */
  archiveRel: string
  compressedTokens: GoInt
  startRef: string
  endRef: string
  /** Unix seconds; 0 = unknown. */
  createdAt: GoInt
  active: boolean
  /** The tool_use id of the Compress call that made the block; '' when made otherwise. */
  compressCallId: string
}

/** Refs: raw id → `m00001` (or `BLOCKED`), and `m00001` → raw id. Never reassigned. */
export interface MessageRefMap {
  byRaw: Map<string, string>
  byRef: Map<string, string>
}

export interface NudgeState {
  lastPerMessageNudgeTokens: GoInt
  lastNudgeShownTokens: GoInt
  /** Tier → tokens (saved with decimal string keys). */
  lastShownByTier: Map<GoInt, GoInt>
}

export interface CompressionStats {
  tokensCompressed: GoInt
  compressionCount: GoInt
}

export interface CompressionState {
  sessionId: string
  /** The session's archive directory, `<baseDir>/<sessionId>` (not saved). */
  archiveRoot: string
  nextBlockId: GoInt
  blocks: CompressionBlock[]
  messageRefs: MessageRefMap
  /** Frozen per-ref token counts shown in `<noa-ref>` tags. */
  tokenSnapshot: Map<string, GoInt>
  nudge: NudgeState
  stats: CompressionStats
  /**
   * The session this state was inherited from (noa only: Norma neither writes nor reads the
   * key, and ignores it in a file it loads). '' when not inherited.
   */
  derivedFrom: string
}

/** One requested range of a Compress call. */
export interface CompressRange {
  /** A message ref (`m00002`) or a block id (`b3`, `b003`, `3`, `b3(T1)`). */
  startRef: string
  endRef: string
  summary: string
  topic: string
  /** Raises (or lowers) the summary length limit for this range. */
  summaryMaxChars?: number
}

export const REF_WIDTH = 5
export const MIN_REF_INDEX = 1
export const MAX_REF_INDEX = 99999
/** byRaw value of a message that can never be compressed (a Compress call or a protected tool). */
export const BLOCKED_REF = 'BLOCKED'
export const SUMMARY_HEADER = '[Compressed conversation section]'
export const SUMMARY_ID_PREFIX = 'noa_summary_'
export const NUDGE_MESSAGE_ID = 'noa_nudge'
export const COMPRESS_TOOL_NAME = 'Compress'
/** Tool calls whose messages are never compressed, whatever the configuration. */
export const ALWAYS_PROTECTED_TOOLS: readonly string[] = [COMPRESS_TOOL_NAME]
/** Orphaned Compress calls (no block) kept visible in a view, newest first. */
export const KEEP_LAST_ORPHANED = 2
/** Compress call summaries longer than this are cut in a view (they are in the state). */
export const SUMMARY_STUB_CHARS = 200
/** How far a range is widened to keep tool calls with their results. */
export const TOOL_PAIR_MAX_SCAN = 20
/** Tools whose output never counts as "recent" for the protected zone. */
export const NEVER_PRESERVE_RECENT_TOOLS: readonly string[] = ['Read', 'Grep', 'Glob', 'Bash', 'LS']
