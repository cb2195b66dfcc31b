/**
 * Checks on what the writer is asked to record, before anything is written. A refusal is a
 * NoaError NOA_BAD_RECORD whose message starts with the field path (`message.content[1].input`).
 *
 * Two levels. `strict` (the writer's default, and the CLI's): roles are user/assistant, block
 * types are Norma's five, each block carries the fields its type needs and no others, counters
 * are non-negative. Not strict (`formatRecord`, or a writer with `allowUnknown`): only the JSON
 * types of the fields Norma knows are checked, so whatever the loader returns can be written
 * back.
 */
import { NoaError } from '../engine/errors.js'
import { hasLoneSurrogate, isGoInt } from '../gocompat/index.js'
import { BLOCK_KEYS, MESSAGE_KEYS, META_KEYS, USAGE_KEYS } from './encode.js'
import type { BoundaryMeta, ContentBlock, Message, TranscriptRecord, Usage } from './types.js'
import { BLOCK_TYPES, ROLES } from './types.js'

export interface CheckOptions {
  /**
   * Refuse unknown roles, block types, keys and triggers, blocks missing a field their type
   * needs, empty tool ids and negative counters. Default true.
   */
  strict?: boolean
}

/** Fields each block type may carry besides `type`; the first ones listed are required. */
const BLOCK_FIELDS: Record<string, { required: string[]; optional: string[] }> = {
  text: { required: ['text'], optional: [] },
  thinking: { required: ['thinking'], optional: ['signature'] },
  tool_use: { required: ['id', 'name', 'input'], optional: [] },
  tool_result: { required: ['tool_use_id'], optional: ['content', 'is_error'] },
  compact_boundary: { required: ['input'], optional: [] },
}

/** Identifiers that pair tool calls with their results: empty ones would pair with each other. */
const NON_EMPTY: ReadonlySet<string> = new Set(['id', 'name', 'tool_use_id', 'input'])
const STRING_FIELDS = ['text', 'thinking', 'signature', 'id', 'name', 'tool_use_id'] as const
const TRIGGERS = ['auto', 'reactive', 'manual']

export function recordError(field: string, rule: string): NoaError {
  return new NoaError('NOA_BAD_RECORD', `${field}: ${rule}; nothing was written`, { field })
}

function describe(v: unknown): string {
  if (v === null) return 'null'
  if (Array.isArray(v)) return 'an array'
  if (typeof v === 'string') return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v)
  if (typeof v === 'object') return 'an object'
  return `${typeof v} ${String(v)}`
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

function checkInt(v: unknown, field: string, strict: boolean): void {
  // An int is Go's int64: a bigint beyond 2^53 (as the loader gives one) is one too.
  if (!isGoInt(v) || (strict && v < 0)) {
    throw recordError(field, `must be ${strict ? 'a non-negative' : 'an'} integer, got ${describe(v)}`)
  }
}

function unknownKey(field: string, known: ReadonlySet<string>): NoaError {
  return recordError(
    field,
    `unknown key (known: ${[...known].join(', ')}; the writer option allowUnknown keeps unknown keys)`,
  )
}

function checkUnknownKeys(obj: Record<string, unknown>, known: ReadonlySet<string>, field: string): void {
  for (const key of Object.keys(obj)) {
    if (!known.has(key) && obj[key] !== undefined) throw unknownKey(`${field}.${key}`, known)
  }
}

export function checkBlock(b: unknown, field: string, strict: boolean): asserts b is ContentBlock {
  if (!isPlainObject(b)) throw recordError(field, `a content block must be an object, got ${describe(b)}`)
  if (typeof b.type !== 'string')
    throw recordError(`${field}.type`, `must be a string, got ${describe(b.type)}`)
  for (const key of STRING_FIELDS) {
    if (b[key] !== undefined && typeof b[key] !== 'string') {
      throw recordError(`${field}.${key}`, `must be a string, got ${describe(b[key])}`)
    }
  }
  if (b.is_error !== undefined && typeof b.is_error !== 'boolean') {
    throw recordError(`${field}.is_error`, `must be a boolean, got ${describe(b.is_error)}`)
  }
  if (b.input !== undefined) {
    if (typeof b.input !== 'string') {
      throw recordError(
        `${field}.input`,
        `must be JSON text (a string, e.g. JSON.stringify(args)), got ${describe(b.input)}`,
      )
    }
    if (b.input !== '') {
      try {
        JSON.parse(b.input)
      } catch (err) {
        throw recordError(`${field}.input`, `is not JSON: ${(err as Error).message}`)
      }
    }
  }
  if (b.content !== undefined && b.content !== null) {
    if (!Array.isArray(b.content)) {
      throw recordError(`${field}.content`, `must be an array of content blocks, got ${describe(b.content)}`)
    }
    for (let i = 0; i < b.content.length; i++) checkBlock(b.content[i], `${field}.content[${i}]`, strict)
  }
  if (!strict) return
  const fields = BLOCK_FIELDS[b.type]
  if (fields === undefined) {
    throw recordError(
      `${field}.type`,
      `unknown block type ${describe(b.type)} (known: ${BLOCK_TYPES.join(', ')}; the writer option allowUnknown keeps other types)`,
    )
  }
  for (const key of fields.required) {
    if (b[key] === undefined) throw recordError(field, `a ${b.type} block needs ${key}`)
    if (b[key] === '' && NON_EMPTY.has(key)) throw recordError(`${field}.${key}`, 'must not be empty')
  }
  for (const key of Object.keys(b)) {
    if (key === 'type' || b[key] === undefined) continue
    if (fields.required.includes(key) || fields.optional.includes(key)) continue
    if (BLOCK_KEYS.has(key)) throw recordError(`${field}.${key}`, `does not belong in a ${b.type} block`)
    throw unknownKey(`${field}.${key}`, BLOCK_KEYS)
  }
}

export function checkMessage(
  m: unknown,
  options: CheckOptions = {},
  field = 'message',
): asserts m is Message {
  const strict = options.strict ?? true
  if (!isPlainObject(m)) throw recordError(field, `must be an object {role, content}, got ${describe(m)}`)
  if (typeof m.role !== 'string')
    throw recordError(`${field}.role`, `must be a string, got ${describe(m.role)}`)
  if (strict && !(ROLES as readonly string[]).includes(m.role)) {
    throw recordError(`${field}.role`, `must be one of ${ROLES.join(', ')}, got ${describe(m.role)}`)
  }
  if (m.content !== null && !Array.isArray(m.content) && (strict || m.content !== undefined)) {
    throw recordError(
      `${field}.content`,
      `must be an array of content blocks (or null), got ${describe(m.content)}`,
    )
  }
  if (m.content)
    for (let i = 0; i < m.content.length; i++) checkBlock(m.content[i], `${field}.content[${i}]`, strict)
  if (strict) checkUnknownKeys(m, MESSAGE_KEYS, field)
}

/** Usage as given to the writer: missing counters are 0. */
export function checkUsage(
  u: unknown,
  options: CheckOptions = {},
  field = 'usage',
): asserts u is Partial<Usage> {
  const strict = options.strict ?? true
  if (!isPlainObject(u)) throw recordError(field, `must be an object, got ${describe(u)}`)
  for (const key of USAGE_KEYS) if (u[key] !== undefined) checkInt(u[key], `${field}.${key}`, strict)
  if (strict) checkUnknownKeys(u, USAGE_KEYS, field)
}

export function checkBoundaryMeta(
  meta: unknown,
  options: CheckOptions = {},
  field = 'boundary',
): asserts meta is BoundaryMeta {
  const strict = options.strict ?? true
  if (!isPlainObject(meta)) throw recordError(field, `must be an object, got ${describe(meta)}`)
  if (meta.trigger !== undefined) {
    if (typeof meta.trigger !== 'string') {
      throw recordError(`${field}.trigger`, `must be a string, got ${describe(meta.trigger)}`)
    }
    if (strict && meta.trigger !== '' && !TRIGGERS.includes(meta.trigger)) {
      throw recordError(
        `${field}.trigger`,
        `must be one of ${TRIGGERS.join(', ')}, got ${describe(meta.trigger)}`,
      )
    }
  }
  if (meta.pre_tokens === undefined && strict) throw recordError(`${field}.pre_tokens`, 'is required')
  if (meta.pre_tokens !== undefined) checkInt(meta.pre_tokens, `${field}.pre_tokens`, strict)
  if (meta.messages_summarized !== undefined) {
    checkInt(meta.messages_summarized, `${field}.messages_summarized`, strict)
  }
  const skills = meta.active_skills
  if (skills !== undefined && skills !== null) {
    if (!Array.isArray(skills) || skills.some((s) => typeof s !== 'string')) {
      throw recordError(`${field}.active_skills`, `must be an array of strings, got ${describe(skills)}`)
    }
  }
  if (strict) checkUnknownKeys(meta, META_KEYS, field)
}

const OPTIONAL_RECORD_STRINGS = ['parent_uuid', 'agent_id'] as const
const RECORD_STRINGS = ['uuid', 'session_id', 'timestamp', 'type'] as const

/** A whole record, as `formatRecord` takes it: the JSON types of every field Norma knows. */
export function checkRecord(r: unknown): asserts r is TranscriptRecord {
  if (!isPlainObject(r)) throw recordError('record', `must be an object, got ${describe(r)}`)
  for (const key of RECORD_STRINGS) {
    if (r[key] !== undefined && typeof r[key] !== 'string') {
      throw recordError(key, `must be a string, got ${describe(r[key])}`)
    }
  }
  for (const key of OPTIONAL_RECORD_STRINGS) {
    if (r[key] !== undefined && typeof r[key] !== 'string') {
      throw recordError(key, `must be a string, got ${describe(r[key])}`)
    }
  }
  if (r.is_sidechain !== undefined && typeof r.is_sidechain !== 'boolean') {
    throw recordError('is_sidechain', `must be a boolean, got ${describe(r.is_sidechain)}`)
  }
  const lenient = { strict: false }
  if (r.message !== undefined) checkMessage(r.message, lenient)
  if (r.usage !== undefined) checkUsage(r.usage, lenient)
  if (r.boundary !== undefined) checkBoundaryMeta(r.boundary, lenient)
}

/**
 * Refuses text that is not well-formed (a lone surrogate: what a byte that is not UTF-8 becomes
 * on the way into JavaScript). Written out it would become U+FFFD, other bytes than the ones
 * given; the writer stores only what it was given.
 */
export function checkWellFormed(value: unknown, field: string): void {
  if (typeof value === 'string') {
    if (hasLoneSurrogate(value))
      throw recordError(
        field,
        'is not well-formed text (half a surrogate pair, or a byte that was not UTF-8)',
      )
    return
  }
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) checkWellFormed(value[i], `${field}[${i}]`)
    return
  }
  if (typeof value === 'object' && value !== null) {
    for (const [k, v] of Object.entries(value)) {
      checkWellFormed(k, `${field} key`)
      checkWellFormed(v, `${field}.${k}`)
    }
  }
}
