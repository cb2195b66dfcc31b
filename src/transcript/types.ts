/**
 * Transcript records as Norma v0.4.3 stores them (formats.md §a), one JSON object per line.
 *
 * Field names are the on-disk (snake_case) names, so a loaded record is its parsed line: keys
 * the typed model does not know (and block types it does not know) stay on the objects, and
 * `formatRecord` writes them back after the known keys. Known fields hold Go's zero value where
 * the line had none (`uuid: ''`, `content: null`, a text block's `text: ''`), because that is what
 * Norma reads and writes back for them.
 */

import { type GoInt, goIntAdd } from '../gocompat/int.js'

export type Role = 'user' | 'assistant'
export const ROLES: readonly Role[] = ['user', 'assistant']

export type RecordType = 'message' | 'boundary'

export type BlockType = 'text' | 'thinking' | 'tool_use' | 'tool_result' | 'compact_boundary'
export const BLOCK_TYPES: readonly BlockType[] = [
  'text',
  'thinking',
  'tool_use',
  'tool_result',
  'compact_boundary',
]

/** JSON text, kept byte for byte on read (Go's `json.RawMessage`); compacted on write. */
export type RawJson = string

/**
 * One content block. Norma has a single struct for every block type; which fields matter
 * depends on `type` (see the narrower interfaces below and the `is…Block` guards). Every field
 * but `type` is omitted from the line when empty.
 */
export interface ContentBlock {
  type: BlockType | (string & {})
  text?: string
  thinking?: string
  signature?: string
  id?: string
  name?: string
  /** tool_use arguments or compact_boundary meta, as JSON text. `''` means none. */
  input?: RawJson
  tool_use_id?: string
  content?: ContentBlock[] | null
  is_error?: boolean
}

export interface TextBlock extends ContentBlock {
  type: 'text'
  text: string
}

export interface ThinkingBlock extends ContentBlock {
  type: 'thinking'
  thinking: string
  signature?: string
}

export interface ToolUseBlock extends ContentBlock {
  type: 'tool_use'
  id: string
  name: string
  input?: RawJson
}

export interface ToolResultBlock extends ContentBlock {
  type: 'tool_result'
  tool_use_id: string
  content?: ContentBlock[] | null
  is_error?: boolean
}

/** The block of a compaction marker: `input` is a BoundaryMeta object or a legacy bare integer. */
export interface CompactBoundaryBlock extends ContentBlock {
  type: 'compact_boundary'
  input?: RawJson
}

export interface Message {
  role: Role | (string & {})
  /** `null` is Go's nil slice (written as `null`); `[]` is written as `[]`. */
  content: ContentBlock[] | null
}

/** Go ints: a number, or a bigint beyond 2^53 (gocompat/int.ts). */
export interface Usage {
  input_tokens: GoInt
  output_tokens: GoInt
  cache_read_tokens: GoInt
  cache_write_tokens: GoInt
}

export interface BoundaryMeta {
  /** `auto`, `reactive` or `manual`; omitted when empty. */
  trigger?: string
  pre_tokens: GoInt
  messages_summarized?: GoInt
  active_skills?: string[] | null
}

/** One line of a transcript file. */
export interface TranscriptRecord {
  /** 32 lower-case hex characters from 128 random bits (written by the writer). */
  uuid: string
  /** The previous successfully appended record; absent on the first. */
  parent_uuid?: string
  /** On a sidechain, the parent session's id. */
  session_id: string
  /** Sidechains only. */
  agent_id?: string
  /** Only `true` is ever written. */
  is_sidechain?: boolean
  /** RFC 3339 with up to 9 fraction digits, UTC, as Go's `time.RFC3339Nano` formats it. */
  timestamp: string
  type: RecordType | (string & {})
  message?: Message
  /** Only on records whose usage is not all zero. */
  usage?: Usage
  /** Boundary records only. */
  boundary?: BoundaryMeta
}

export function isTextBlock(b: ContentBlock): b is TextBlock {
  return b.type === 'text'
}

export function isThinkingBlock(b: ContentBlock): b is ThinkingBlock {
  return b.type === 'thinking'
}

export function isToolUseBlock(b: ContentBlock): b is ToolUseBlock {
  return b.type === 'tool_use'
}

export function isToolResultBlock(b: ContentBlock): b is ToolResultBlock {
  return b.type === 'tool_result'
}

export function isCompactBoundaryBlock(b: ContentBlock): b is CompactBoundaryBlock {
  return b.type === 'compact_boundary'
}

export function zeroUsage(): Usage {
  return { input_tokens: 0, output_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0 }
}

/** Adds `b` into `a` (Go's `Usage.Add`, int64 wrapping around) and returns `a`. */
export function addUsage(a: Usage, b: Usage): Usage {
  a.input_tokens = goIntAdd(a.input_tokens, b.input_tokens)
  a.output_tokens = goIntAdd(a.output_tokens, b.output_tokens)
  a.cache_read_tokens = goIntAdd(a.cache_read_tokens, b.cache_read_tokens)
  a.cache_write_tokens = goIntAdd(a.cache_write_tokens, b.cache_write_tokens)
  return a
}

export function isZeroUsage(u: Usage): boolean {
  return (
    u.input_tokens === 0 && u.output_tokens === 0 && u.cache_read_tokens === 0 && u.cache_write_tokens === 0
  )
}
