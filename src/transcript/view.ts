/**
 * Views over loaded records, as Norma computes them: the conversation (`Messages`), what is sent
 * to the model after compactions (`llm.MessagesForAPI`), the compaction markers.
 */
import { encodeBoundaryMeta } from './encode.js'
import {
  addUsage,
  BLOCK_TYPES,
  type BoundaryMeta,
  type ContentBlock,
  type Message,
  type TranscriptRecord,
  type Usage,
  zeroUsage,
} from './types.js'

export interface Conversation {
  /** Every message, in file order, except boundary records and records without one. */
  messages: Message[]
  /** The record of each message (same index), for its uuid, timestamp and line. */
  records: TranscriptRecord[]
  /** Usage summed over the records kept (Norma's rule: boundary records do not count). */
  usage: Usage
}

const KNOWN_BLOCKS: ReadonlySet<string> = new Set(BLOCK_TYPES)

/** The blocks without unknown types (at any depth), or undefined when there is none to drop. */
function knownBlocks(blocks: readonly ContentBlock[]): ContentBlock[] | undefined {
  let out: ContentBlock[] | undefined
  for (let i = 0; i < blocks.length; i++) {
    const b = blocks[i] as ContentBlock
    let kept: ContentBlock | undefined = b
    if (!KNOWN_BLOCKS.has(b.type)) kept = undefined
    else if (b.content) {
      const inner = knownBlocks(b.content)
      if (inner) kept = { ...b, content: inner }
    }
    if (kept !== b && out === undefined) out = blocks.slice(0, i)
    if (out && kept) out.push(kept)
  }
  return out
}

/**
 * Norma's `transcript.Messages`: skips boundary records and records without a message. Blocks of
 * a type Norma does not know (a future `skill`, an `image`) are left out of the messages (a new
 * message object then; its record still holds them).
 */
export function messages(records: readonly TranscriptRecord[]): Conversation {
  const out: Conversation = { messages: [], records: [], usage: zeroUsage() }
  for (const r of records) {
    if (r.type === 'boundary' || !r.message) continue
    const known = r.message.content ? knownBlocks(r.message.content) : undefined
    out.messages.push(known ? { ...r.message, content: known } : r.message)
    out.records.push(r)
    if (r.usage) addUsage(out.usage, r.usage)
  }
  return out
}

/** Norma's `LastUUID`: the uuid of the last record, whatever its type (undefined when none). */
export function lastUuid(records: readonly TranscriptRecord[]): string | undefined {
  return records.length === 0 ? undefined : (records[records.length - 1] as TranscriptRecord).uuid
}

/** A compaction marker: a message whose content is exactly one compact_boundary block. */
export function isBoundaryMarker(m: Message): boolean {
  return (
    m.content != null && m.content.length === 1 && (m.content[0] as ContentBlock).type === 'compact_boundary'
  )
}

/** The marker message Norma records at a compaction (role user, the meta as the block's input). */
export function boundaryMarker(meta: BoundaryMeta): Message {
  return { role: 'user', content: [{ type: 'compact_boundary', input: encodeBoundaryMeta(meta) }] }
}

function asInt(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isSafeInteger(v) ? v : undefined
}

/**
 * The meta of a marker (Norma's `ParseBoundaryMeta`): the input as a BoundaryMeta object, or a
 * legacy bare integer meaning pre_tokens; anything else is still a marker, with a zero meta.
 * Undefined when `m` is not a marker.
 */
export function parseBoundaryMeta(m: Message): BoundaryMeta | undefined {
  if (!isBoundaryMarker(m)) return undefined
  const raw = (m.content as ContentBlock[])[0]?.input
  let v: unknown
  try {
    v = raw ? JSON.parse(raw) : undefined
  } catch {
    v = undefined
  }
  if (typeof v === 'number') return { pre_tokens: asInt(v) ?? 0 }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return { pre_tokens: 0 }
  const o = v as Record<string, unknown>
  // Go's Unmarshal fails on a field of the wrong type, and the zero meta is used then.
  const meta: BoundaryMeta = { pre_tokens: 0 }
  if (o.trigger != null) {
    if (typeof o.trigger !== 'string') return { pre_tokens: 0 }
    if (o.trigger !== '') meta.trigger = o.trigger
  }
  for (const key of ['pre_tokens', 'messages_summarized'] as const) {
    if (o[key] == null) continue
    const n = asInt(o[key])
    if (n === undefined) return { pre_tokens: 0 }
    if (key === 'pre_tokens') meta.pre_tokens = n
    else if (n !== 0) meta.messages_summarized = n
  }
  if (o.active_skills != null) {
    const skills = o.active_skills
    if (!Array.isArray(skills) || skills.some((s) => s !== null && typeof s !== 'string'))
      return { pre_tokens: 0 }
    if (skills.length > 0) meta.active_skills = skills.map((s) => (s === null ? '' : (s as string)))
  }
  return meta
}

/** Index of the last marker, or -1. */
export function lastBoundaryIndex(msgs: readonly Message[]): number {
  for (let i = msgs.length - 1; i >= 0; i--) if (isBoundaryMarker(msgs[i] as Message)) return i
  return -1
}

/**
 * Norma's `PairToolBlocks`: drops tool_use blocks no tool_result answers and tool_result blocks
 * that answer no tool_use (anywhere in the list), then messages left with no blocks.
 */
export function pairToolBlocks(msgs: readonly Message[]): Message[] {
  const useIds = new Set<string | undefined>()
  const resultIds = new Set<string | undefined>()
  for (const m of msgs) {
    for (const b of m.content ?? []) {
      if (b.type === 'tool_use') useIds.add(b.id ?? '')
      else if (b.type === 'tool_result') resultIds.add(b.tool_use_id ?? '')
    }
  }
  const out: Message[] = []
  for (const m of msgs) {
    const kept = (m.content ?? []).filter((b) => {
      if (b.type === 'tool_use') return resultIds.has(b.id ?? '')
      if (b.type === 'tool_result') return useIds.has(b.tool_use_id ?? '')
      return true
    })
    if (kept.length > 0) out.push({ role: m.role, content: kept })
  }
  return out
}

/**
 * Norma's `llm.MessagesForAPI`: what the model is sent. Starts at the last compaction marker,
 * drops the marker, then pairs tool blocks. New message objects; blocks are shared.
 */
export function viewForModel(msgs: readonly Message[]): Message[] {
  const from = Math.max(0, lastBoundaryIndex(msgs))
  return pairToolBlocks(msgs.slice(from).filter((m) => !isBoundaryMarker(m)))
}
