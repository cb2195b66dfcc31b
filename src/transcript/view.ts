/**
 * Views over loaded records, as Norma computes them: the conversation (`Messages`), what is sent
 * to the model after compactions (`llm.MessagesForAPI`), the compaction markers.
 */
import { type GoInt, type GoObject, GoSyntaxError, GoTypeError, INT, unmarshal } from '../gocompat/index.js'
import { META_TYPE, toMeta } from './decode.js'
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

export interface MessagesOptions {
  /**
   * Norma's view exactly: blocks of every type stay in the messages, as Go's `Messages` keeps
   * them (and a message holding a compact_boundary block and another block is no marker). By
   * default blocks of a type Norma does not know (a future `skill`, an `image`) are left out of
   * the messages (a new message object then; its record still holds them).
   */
  strict?: boolean
}

/** Norma's `transcript.Messages`: skips boundary records and records without a message. */
export function messages(records: readonly TranscriptRecord[], options: MessagesOptions = {}): Conversation {
  const out: Conversation = { messages: [], records: [], usage: zeroUsage() }
  for (const r of records) {
    if (r.type === 'boundary' || !r.message) continue
    const known = !options.strict && r.message.content ? knownBlocks(r.message.content) : undefined
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

/**
 * The meta of a marker (Norma's `ParseBoundaryMeta`): `json.Unmarshal` of the input into a
 * BoundaryMeta, else into an int (the legacy bare pre_tokens); when both fail it is still a
 * marker, with a zero meta. Undefined when `m` is not a marker.
 */
export function parseBoundaryMeta(m: Message): BoundaryMeta | undefined {
  if (!isBoundaryMarker(m)) return undefined
  const raw = (m.content as ContentBlock[])[0]?.input ?? ''
  try {
    const meta = toMeta(unmarshal(raw, META_TYPE) as GoObject)
    if (meta.active_skills?.length === 0) delete meta.active_skills
    return meta
  } catch (err) {
    if (!(err instanceof GoSyntaxError || err instanceof GoTypeError)) throw err
  }
  try {
    return { pre_tokens: unmarshal(raw, INT) as GoInt }
  } catch (err) {
    if (!(err instanceof GoSyntaxError || err instanceof GoTypeError)) throw err
  }
  return { pre_tokens: 0 }
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
