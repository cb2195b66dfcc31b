/**
 * Records to JSON text, byte for byte as Norma's `json.Marshal(rec)`: Go's struct key order,
 * omitempty exactly where Norma's tags have it, Go string escaping. Keys the typed model does
 * not know (kept from a read) follow the known ones in their own order; Norma ignores them.
 */
import { compactRawJson, goInt, goString, goValue } from '../gocompat/index.js'
import type { BoundaryMeta, ContentBlock, Message, TranscriptRecord, Usage } from './types.js'

export const RECORD_KEYS: ReadonlySet<string> = new Set([
  'uuid',
  'parent_uuid',
  'session_id',
  'agent_id',
  'is_sidechain',
  'timestamp',
  'type',
  'message',
  'usage',
  'boundary',
])
export const MESSAGE_KEYS: ReadonlySet<string> = new Set(['role', 'content'])
export const BLOCK_KEYS: ReadonlySet<string> = new Set([
  'type',
  'text',
  'thinking',
  'signature',
  'id',
  'name',
  'input',
  'tool_use_id',
  'content',
  'is_error',
])
export const USAGE_KEYS: ReadonlySet<string> = new Set([
  'input_tokens',
  'output_tokens',
  'cache_read_tokens',
  'cache_write_tokens',
])
export const META_KEYS: ReadonlySet<string> = new Set([
  'trigger',
  'pre_tokens',
  'messages_summarized',
  'active_skills',
])

/** `,"key":value` for each own key outside `known`, in the object's key order. */
function extras(obj: object, known: ReadonlySet<string>): string {
  let out = ''
  for (const key of Object.keys(obj)) {
    if (known.has(key)) continue
    const v = (obj as Record<string, unknown>)[key]
    if (v !== undefined) out += `,${goString(key)}:${goValue(v)}`
  }
  return out
}

/** Go's omitempty for a string field. */
function optString(key: string, v: string | undefined): string {
  return v ? `,"${key}":${goString(v)}` : ''
}

export function encodeBlock(b: ContentBlock): string {
  let s = `{"type":${goString(b.type ?? '')}`
  s += optString('text', b.text)
  s += optString('thinking', b.thinking)
  s += optString('signature', b.signature)
  s += optString('id', b.id)
  s += optString('name', b.name)
  if (b.input) s += `,"input":${compactRawJson(b.input)}`
  s += optString('tool_use_id', b.tool_use_id)
  if (b.content && b.content.length > 0) s += `,"content":${encodeBlocks(b.content)}`
  if (b.is_error) s += ',"is_error":true'
  return `${s}${extras(b, BLOCK_KEYS)}}`
}

export function encodeBlocks(blocks: readonly ContentBlock[]): string {
  let s = '['
  for (let i = 0; i < blocks.length; i++) {
    if (i > 0) s += ','
    s += encodeBlock(blocks[i] as ContentBlock)
  }
  return `${s}]`
}

export function encodeMessage(m: Message): string {
  // `content` has no omitempty: a nil slice is written as null.
  const content = m.content == null ? 'null' : encodeBlocks(m.content)
  return `{"role":${goString(m.role ?? '')},"content":${content}${extras(m, MESSAGE_KEYS)}}`
}

export function encodeUsage(u: Usage): string {
  return (
    `{"input_tokens":${goInt(u.input_tokens ?? 0)},"output_tokens":${goInt(u.output_tokens ?? 0)},` +
    `"cache_read_tokens":${goInt(u.cache_read_tokens ?? 0)},"cache_write_tokens":${goInt(u.cache_write_tokens ?? 0)}` +
    `${extras(u, USAGE_KEYS)}}`
  )
}

export function encodeBoundaryMeta(m: BoundaryMeta): string {
  let s = '{'
  if (m.trigger) s += `"trigger":${goString(m.trigger)},`
  s += `"pre_tokens":${goInt(m.pre_tokens ?? 0)}`
  if (m.messages_summarized) s += `,"messages_summarized":${goInt(m.messages_summarized)}`
  if (m.active_skills && m.active_skills.length > 0) {
    s += `,"active_skills":[${m.active_skills.map((x) => goString(x ?? '')).join(',')}]`
  }
  return `${s}${extras(m, META_KEYS)}}`
}

/** The identity keys, `uuid` to `is_sidechain`: what the writer fills in when it appends. */
export interface RecordHead {
  uuid: string
  parent_uuid?: string | undefined
  session_id: string
  agent_id?: string | undefined
  is_sidechain?: boolean | undefined
}

/** `{"uuid":…` up to `is_sidechain`, without the closing brace. */
export function encodeRecordHead(h: RecordHead): string {
  let s = `{"uuid":${goString(h.uuid ?? '')}`
  s += optString('parent_uuid', h.parent_uuid)
  s += `,"session_id":${goString(h.session_id ?? '')}`
  s += optString('agent_id', h.agent_id)
  if (h.is_sidechain) s += ',"is_sidechain":true'
  return s
}

/** `,"timestamp":…` to the closing brace. */
export function encodeRecordBody(r: Omit<TranscriptRecord, keyof RecordHead>): string {
  let s = `,"timestamp":${goString(r.timestamp ?? '')},"type":${goString(r.type ?? '')}`
  if (r.message) s += `,"message":${encodeMessage(r.message)}`
  if (r.usage) s += `,"usage":${encodeUsage(r.usage)}`
  if (r.boundary) s += `,"boundary":${encodeBoundaryMeta(r.boundary)}`
  return `${s}${extras(r, RECORD_KEYS)}}`
}
