/**
 * The input of a Compress call, read as leniently as Norma's `ParseCompressArgs` reads it:
 * `{"content":[{"startId","endId","summary","topic"?,"summaryMaxChars"?}],"topic"?,"summaryMaxChars"?}`,
 * also with `startRef`/`endRef` (or `messageId` for both ends), the whole input or `content`
 * given as a JSON string, wrapped in a Markdown fence, with trailing commas, raw newlines in
 * strings, or cut off (the complete entries before the cut are kept).
 */
import { goTrimSpace } from '../gocompat/index.js'
import type { CompressRange } from './types.js'

export type CompressParseKind =
  | 'ok'
  | 'empty-input'
  | 'missing-content'
  | 'content-not-array'
  | 'no-valid-ranges'
  | 'truncated'
  | 'malformed-json'

export interface CompressParseDiagnostics {
  ok: boolean
  kind: CompressParseKind
  invalidItems: number
  invalidReasons: string[]
  /** Entries were picked out of text that is not JSON. */
  salvaged: boolean
  /** A `content` string missing its last `}` was completed. */
  tailRepaired: boolean
}

export interface CompressArgs {
  ranges: CompressRange[]
  topic: string
  summaryMaxChars?: number
  diagnostics: CompressParseDiagnostics
}

type Entry = Record<string, unknown>

const WS = '[\\t\\n\\f\\r ]'
const FENCE = new RegExp(`^${WS}*\`\`\`[a-zA-Z0-9]*${WS}*\\n([\\s\\S]*?)\\n?${WS}*\`\`\`${WS}*$`)

function stripFence(s: string): string {
  const m = FENCE.exec(s)
  return m ? goTrimSpace(m[1] as string) : s
}

function tryJson(s: string): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: JSON.parse(s) }
  } catch {
    return { ok: false }
  }
}

/** Removes commas that are followed (after blanks) by `}` or `]`, outside strings. */
export function stripTrailingCommas(s: string): string {
  let out = ''
  let inStr = false
  let esc = false
  for (let i = 0; i < s.length; i++) {
    const c = s[i] as string
    if (inStr) {
      out += c
      if (esc) esc = false
      else if (c === '\\') esc = true
      else if (c === '"') inStr = false
      continue
    }
    if (c === '"') {
      inStr = true
      out += c
      continue
    }
    if (c === ',') {
      let j = i + 1
      while (j < s.length && ' \n\r\t'.includes(s[j] as string)) j++
      if (j < s.length && (s[j] === '}' || s[j] === ']')) continue
    }
    out += c
  }
  return out
}

/** Escapes raw newlines, carriage returns and tabs inside strings. */
export function escapeRawNewlinesInStrings(s: string): string {
  let out = ''
  let inStr = false
  let esc = false
  for (const c of s) {
    if (inStr) {
      if (esc) {
        esc = false
        out += c
      } else if (c === '\\') {
        esc = true
        out += c
      } else if (c === '"') {
        inStr = false
        out += c
      } else if (c === '\n') out += '\\n'
      else if (c === '\r') out += '\\r'
      else if (c === '\t') out += '\\t'
      else out += c
      continue
    }
    if (c === '"') inStr = true
    out += c
  }
  return out
}

function isObject(v: unknown): v is Entry {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/** Go's Unmarshal into map[string]any: an object, or null (a nil map). */
function lenientObject(s: string): Entry | null | undefined {
  for (const t of [
    s,
    stripTrailingCommas(s),
    escapeRawNewlinesInStrings(s),
    escapeRawNewlinesInStrings(stripTrailingCommas(s)),
  ]) {
    const r = tryJson(t)
    if (r.ok && (r.value === null || isObject(r.value))) return r.value as Entry | null
  }
  return undefined
}

function lenientArray(s: string): unknown[] | undefined {
  for (const t of [s, stripTrailingCommas(s), escapeRawNewlinesInStrings(s)]) {
    const r = tryJson(t)
    if (r.ok && (r.value === null || Array.isArray(r.value))) return (r.value as unknown[] | null) ?? []
  }
  return undefined
}

function tailRepair(s: string): unknown[] | undefined {
  const t = goTrimSpace(s)
  if (!t.endsWith(']')) return undefined
  const w = goTrimSpace(t.slice(0, -1))
  if (!w.endsWith('"')) return undefined
  const r = tryJson(`${w}}]`)
  return r.ok && (r.value === null || Array.isArray(r.value))
    ? ((r.value as unknown[] | null) ?? [])
    : undefined
}

const CONTENT_KEY = /"content"[\t\n\f\r ]*:[\t\n\f\r ]*\[/

/** The complete `{…}` objects of the content array of text that is not JSON (cut off, say). */
function salvageEntries(s: string): Entry[] | undefined {
  const key = CONTENT_KEY.exec(s)
  let start: number
  if (key) start = key.index + key[0].length
  else {
    const i = s.indexOf('[')
    if (i < 0) return undefined
    start = i + 1
  }
  const out: Entry[] = []
  let depth = 0
  let objStart = -1
  let inStr = false
  let esc = false
  for (let i = start; i < s.length; i++) {
    const c = s[i]
    if (inStr) {
      if (esc) esc = false
      else if (c === '\\') esc = true
      else if (c === '"') inStr = false
      continue
    }
    if (c === '"') inStr = true
    else if (c === '{') {
      if (depth === 0) objStart = i
      depth++
    } else if (c === '}') {
      depth--
      if (depth === 0 && objStart >= 0) {
        const r = tryJson(s.slice(objStart, i + 1))
        if (r.ok && (r.value === null || isObject(r.value))) out.push((r.value as Entry | null) ?? {})
        objStart = -1
      }
    } else if (c === ']' && depth === 0) {
      return out.length > 0 ? out : undefined
    }
  }
  return out.length > 0 ? out : undefined
}

function stringField(m: Entry | null, key: string): string {
  const v = m?.[key]
  return typeof v === 'string' ? goTrimSpace(v) : ''
}

function firstString(m: Entry, ...keys: string[]): string {
  for (const k of keys) {
    const s = stringField(m, k)
    if (s !== '') return s
  }
  return ''
}

function intField(m: Entry | null, key: string): number | undefined {
  const v = m?.[key]
  return typeof v === 'number' ? Math.trunc(v) : undefined
}

function toRanges(
  entries: Entry[],
  topTopic: string,
  topMax: number | undefined,
  d: CompressParseDiagnostics,
): CompressRange[] {
  const out: CompressRange[] = []
  for (const e of entries) {
    const startRef = firstString(e, 'startId', 'startRef', 'messageId')
    const endRef = firstString(e, 'endId', 'endRef', 'messageId')
    const summary = stringField(e, 'summary')
    const why: string[] = []
    if (startRef === '') why.push('missing startId')
    if (endRef === '') why.push('missing endId')
    if (summary === '') why.push('missing summary')
    if (why.length > 0) {
      d.invalidItems++
      d.invalidReasons.push(why.join(', '))
      continue
    }
    const r: CompressRange = { startRef, endRef, summary, topic: stringField(e, 'topic') || topTopic }
    const max = intField(e, 'summaryMaxChars') ?? topMax
    if (max !== undefined) r.summaryMaxChars = max
    out.push(r)
  }
  return out
}

/** Norma's `ParseCompressArgs` over the call's raw input JSON text. */
export function parseCompressArgs(raw: string): CompressArgs {
  const d: CompressParseDiagnostics = {
    ok: false,
    kind: 'empty-input',
    invalidItems: 0,
    invalidReasons: [],
    salvaged: false,
    tailRepaired: false,
  }
  const res: CompressArgs = { ranges: [], topic: '', diagnostics: d }
  const trimmed = goTrimSpace(raw)
  if (trimmed === '' || trimmed === 'null') return res
  let body = trimmed
  const asString = tryJson(body)
  if (asString.ok && typeof asString.value === 'string') body = goTrimSpace(asString.value)
  body = stripFence(body)
  const obj = lenientObject(body)
  if (obj === undefined) {
    const entries = salvageEntries(body)
    if (entries) {
      d.salvaged = true
      d.kind = 'truncated'
      res.ranges = toRanges(entries, '', undefined, d)
      d.ok = res.ranges.length > 0
      return res
    }
    d.kind = 'malformed-json'
    return res
  }
  res.topic = stringField(obj, 'topic')
  const max = intField(obj, 'summaryMaxChars')
  if (max !== undefined) res.summaryMaxChars = max
  if (obj === null || !Object.hasOwn(obj, 'content')) {
    d.kind = 'missing-content'
    return res
  }
  const content = obj.content
  let entries: Entry[] | undefined
  if (Array.isArray(content)) entries = content.filter(isObject)
  else if (typeof content === 'string') {
    const s = stripFence(goTrimSpace(content))
    const arr = lenientArray(s)
    if (arr) entries = arr.filter(isObject)
    else {
      const repaired = tailRepair(s)
      if (repaired) {
        d.tailRepaired = true
        entries = repaired.filter(isObject)
      } else {
        entries = salvageEntries(s)
        if (entries) d.salvaged = true
      }
    }
  }
  if (!entries) {
    d.kind = 'content-not-array'
    return res
  }
  res.ranges = toRanges(entries, res.topic, res.summaryMaxChars, d)
  if (res.ranges.length === 0 && d.invalidItems > 0) {
    d.kind = 'no-valid-ranges'
    return res
  }
  d.kind = 'ok'
  d.ok = true
  return res
}
