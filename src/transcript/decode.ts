/**
 * A transcript line to a typed record, exactly as Go's `json.Unmarshal` into Norma's `Record`
 * (gocompat/unmarshal.ts has the rules: repeated keys decode into what is there, keys match
 * case-insensitively, ints are int64 and refuse `1.0`, bytes that are not UTF-8 and lone
 * surrogate escapes become U+FFFD, `input` is the value's exact text).
 *
 * What Go drops, noa keeps unless asked not to (`keepUnknown: false`, Norma mode): members no
 * field takes, at every level, after the known fields.
 */
import {
  BOOL,
  type GoInt,
  type GoObject,
  type GoSlice,
  type GoStruct,
  GoTypeError,
  type GoValue,
  INT,
  type JsonNode,
  parseGoJson,
  RAW,
  STRING,
  sliceItems,
  sliceOf,
  unmarshalNode,
} from '../gocompat/index.js'
import { defineValue } from '../gocompat/parse.js'
import type { BoundaryMeta, ContentBlock, Message, TranscriptRecord, Usage } from './types.js'

/** What is wrong with a line, without the file and line (the loader adds those). */
export class DecodeError extends Error {
  override name = 'DecodeError'
  constructor(
    message: string,
    /** Go's error for the line (what Norma's Load reports after `transcript: corrupt line: `). */
    readonly go: string,
  ) {
    super(message)
  }
}

// Norma's structs (llm/types.go, llm/boundary.go, transcript/transcript.go), field for field.
export const BLOCK_TYPE: GoStruct = { kind: 'struct', name: 'llm.ContentBlock', fields: [] }
BLOCK_TYPE.fields.push(
  { key: 'type', type: { kind: 'string', name: 'llm.BlockType' } },
  { key: 'text', type: STRING },
  { key: 'thinking', type: STRING },
  { key: 'signature', type: STRING },
  { key: 'id', type: STRING },
  { key: 'name', type: STRING },
  { key: 'input', type: RAW },
  { key: 'tool_use_id', type: STRING },
  { key: 'content', type: sliceOf(BLOCK_TYPE) },
  { key: 'is_error', type: BOOL },
)
export const MESSAGE_TYPE: GoStruct = {
  kind: 'struct',
  name: 'llm.Message',
  fields: [
    { key: 'role', type: { kind: 'string', name: 'llm.Role' } },
    { key: 'content', type: sliceOf(BLOCK_TYPE) },
  ],
}
export const USAGE_TYPE: GoStruct = {
  kind: 'struct',
  name: 'llm.Usage',
  fields: ['input_tokens', 'output_tokens', 'cache_read_tokens', 'cache_write_tokens'].map((key) => ({
    key,
    type: INT,
  })),
}
export const META_TYPE: GoStruct = {
  kind: 'struct',
  name: 'llm.BoundaryMeta',
  fields: [
    { key: 'trigger', type: STRING },
    { key: 'pre_tokens', type: INT },
    { key: 'messages_summarized', type: INT },
    { key: 'active_skills', type: sliceOf(STRING) },
  ],
}
export const RECORD_TYPE: GoStruct = {
  kind: 'struct',
  name: 'transcript.Record',
  fields: [
    { key: 'uuid', type: STRING },
    { key: 'parent_uuid', type: STRING },
    { key: 'session_id', type: STRING },
    { key: 'agent_id', type: STRING },
    { key: 'is_sidechain', type: BOOL },
    { key: 'timestamp', type: STRING },
    { key: 'type', type: STRING },
    { key: 'message', type: { kind: 'ptr', elem: MESSAGE_TYPE } },
    { key: 'usage', type: { kind: 'ptr', elem: USAGE_TYPE } },
    { key: 'boundary', type: { kind: 'ptr', elem: META_TYPE } },
  ],
}

function withUnknown<T extends object>(out: T, o: GoObject): T {
  if (o.unknown) for (const [k, v] of o.unknown) defineValue(out as Record<string, unknown>, k, v)
  return out
}

/** Go's value of a ContentBlock as noa's typed block (empty omitempty fields left out). */
export function toBlock(o: GoObject): ContentBlock {
  const f = o.fields
  const b: ContentBlock = { type: f.type as string }
  for (const key of ['text', 'thinking', 'signature', 'id', 'name'] as const) {
    if (f[key] !== '') b[key] = f[key] as string
  }
  if (f.input !== null) b.input = f.input as string
  if (f.tool_use_id !== '') b.tool_use_id = f.tool_use_id as string
  if (f.content !== null) b.content = toBlocks(f.content as GoSlice)
  if (f.is_error === true) b.is_error = true
  // The fields a type is about read as '' when the line had none, as Norma's struct gives them.
  switch (b.type) {
    case 'text':
      b.text ??= ''
      break
    case 'thinking':
      b.thinking ??= ''
      break
    case 'tool_use':
      b.id ??= ''
      b.name ??= ''
      break
    case 'tool_result':
      b.tool_use_id ??= ''
      break
  }
  return withUnknown(b, o)
}

function toBlocks(s: GoSlice): ContentBlock[] {
  return (sliceItems(s) as GoObject[]).map(toBlock)
}

export function toMessage(o: GoObject): Message {
  const content = o.fields.content as GoSlice | null
  return withUnknown(
    { role: o.fields.role as string, content: content === null ? null : toBlocks(content) },
    o,
  )
}

function toUsage(o: GoObject): Usage {
  const f = o.fields
  return withUnknown(
    {
      input_tokens: f.input_tokens as GoInt,
      output_tokens: f.output_tokens as GoInt,
      cache_read_tokens: f.cache_read_tokens as GoInt,
      cache_write_tokens: f.cache_write_tokens as GoInt,
    },
    o,
  )
}

export function toMeta(o: GoObject): BoundaryMeta {
  const f = o.fields
  const m = {} as BoundaryMeta
  if (f.trigger !== '') m.trigger = f.trigger as string
  m.pre_tokens = f.pre_tokens as GoInt
  if (f.messages_summarized !== 0) m.messages_summarized = f.messages_summarized as GoInt
  if (f.active_skills !== null) m.active_skills = sliceItems(f.active_skills as GoValue) as string[]
  return withUnknown(m, o)
}

export function toRecord(o: GoObject): TranscriptRecord {
  const f = o.fields
  const r: TranscriptRecord = { uuid: f.uuid as string, session_id: '', timestamp: '', type: '' }
  if (f.parent_uuid !== '') r.parent_uuid = f.parent_uuid as string
  r.session_id = f.session_id as string
  if (f.agent_id !== '') r.agent_id = f.agent_id as string
  if (f.is_sidechain === true) r.is_sidechain = true
  r.timestamp = f.timestamp as string
  r.type = f.type as string
  if (f.message !== null) r.message = toMessage(f.message as GoObject)
  if (f.usage !== null) r.usage = toUsage(f.usage as GoObject)
  if (f.boundary !== null) r.boundary = toMeta(f.boundary as GoObject)
  return withUnknown(r, o)
}

function want(target: string): string {
  if (target === 'int') return 'an integer'
  if (target === 'bool') return 'a boolean'
  if (target === 'string' || target.startsWith('llm.Role') || target === 'llm.BlockType') return 'a string'
  if (target.startsWith('[]')) return target === '[]string' ? 'an array of strings' : 'an array'
  if (target === 'llm.ContentBlock') return 'a content block object'
  return 'an object'
}

/** noa's wording of Go's type error: the field path with indexes, what it takes, what it got. */
export function describeTypeError(err: GoTypeError, what = 'a record'): string {
  if (err.path === '') return `${what} must be a JSON object, got ${err.value.split(' ')[0]}`
  return `${err.path}: expected ${want(err.target)}, got ${err.value}`
}

export interface DecodeOptions {
  /** Keep members Norma's structs have no field for (default true); Norma drops them. */
  keepUnknown?: boolean
}

/**
 * Decodes a record from its parsed tree. `text` is what the tree was parsed from (`input`
 * values are slices of it). Throws DecodeError.
 */
export function decodeRecordNode(
  node: JsonNode,
  text: string,
  options: DecodeOptions = {},
): TranscriptRecord {
  let v: GoValue
  try {
    v = unmarshalNode(node, text, RECORD_TYPE, { keepUnknown: options.keepUnknown ?? true })
  } catch (err) {
    if (err instanceof GoTypeError) throw new DecodeError(describeTypeError(err), err.message)
    throw err
  }
  return toRecord(v as GoObject)
}

/** Decodes one line's text (as `decodeBytes` gives it). Throws DecodeError, syntax errors included. */
export function decodeRecord(text: string, options: DecodeOptions = {}): TranscriptRecord {
  let node: JsonNode
  try {
    node = parseGoJson(text)
  } catch (err) {
    throw new DecodeError(`not JSON: ${(err as Error).message}`, (err as Error).message)
  }
  return decodeRecordNode(node, text, options)
}
