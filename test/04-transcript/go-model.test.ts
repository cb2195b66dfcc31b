/**
 * Property: noa's Norma-mode encoding of a record equals a model of Go's json.Marshal written
 * here from Go's documented rules (struct field order, omitempty, string escaping with HTML
 * escaping on, RawMessage compacted), and decoding then encoding is idempotent on any line.
 */
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { formatRecord, parseTranscript, type TranscriptRecord } from '../../dist/src/index.js'

// --- the model ------------------------------------------------------------------------------

/** Go's encodeState.string (HTML-safe; Go ≥ 1.22 short escapes for \b and \f). */
function goString(s: string): string {
  let out = '"'
  for (const ch of s) {
    const c = ch.codePointAt(0) as number
    if (ch === '"') out += '\\"'
    else if (ch === '\\') out += '\\\\'
    else if (ch === '\n') out += '\\n'
    else if (ch === '\r') out += '\\r'
    else if (ch === '\t') out += '\\t'
    else if (ch === '\b') out += '\\b'
    else if (ch === '\f') out += '\\f'
    else if (c < 0x20 || ch === '<' || ch === '>' || ch === '&')
      out += `\\u${c.toString(16).padStart(4, '0')}`
    else if (c === 0x2028 || c === 0x2029) out += `\\u${c.toString(16)}`
    else if (c >= 0xd800 && c <= 0xdfff)
      out += '\\ufffd' // no valid UTF-8: Go's replacement
    else out += ch
  }
  return `${out}"`
}

const goInt = (n: number | bigint) => String(n)

/** json.Compact with HTML escaping, of valid JSON text. */
function compact(raw: string): string {
  let out = ''
  let inString = false
  for (let i = 0; i < raw.length; i++) {
    const ch = raw[i] as string
    if (inString) {
      if (ch === '\\') {
        out += ch + (raw[i + 1] as string)
        i++
        continue
      }
      if (ch === '"') inString = false
    } else if (ch === '"') inString = true
    else if (ch === ' ' || ch === '\n' || ch === '\r' || ch === '\t') continue
    if (ch === '<' || ch === '>' || ch === '&') out += `\\u00${ch.charCodeAt(0).toString(16)}`
    else if (ch === '\u2028' || ch === '\u2029') out += `\\u${ch.charCodeAt(0).toString(16)}`
    else out += ch
  }
  return out
}

type Field = [key: string, value: string | undefined]
const obj = (fields: Field[]) =>
  `{${fields
    .filter((f) => f[1] !== undefined)
    .map(([k, v]) => `"${k}":${v}`)
    .join(',')}}`
const omitString = (s: string | undefined) => (s ? goString(s) : undefined)

interface Block {
  type: string
  text?: string
  thinking?: string
  signature?: string
  id?: string
  name?: string
  input?: string
  tool_use_id?: string
  content?: Block[] | null
  is_error?: boolean
}

function modelBlock(b: Block): string {
  return obj([
    ['type', goString(b.type)],
    ['text', omitString(b.text)],
    ['thinking', omitString(b.thinking)],
    ['signature', omitString(b.signature)],
    ['id', omitString(b.id)],
    ['name', omitString(b.name)],
    ['input', b.input ? compact(b.input) : undefined],
    ['tool_use_id', omitString(b.tool_use_id)],
    ['content', b.content && b.content.length > 0 ? `[${b.content.map(modelBlock).join(',')}]` : undefined],
    ['is_error', b.is_error ? 'true' : undefined],
  ])
}

function modelRecord(r: TranscriptRecord): string {
  const u = r.usage
  const m = r.boundary
  return obj([
    ['uuid', goString(r.uuid)],
    ['parent_uuid', omitString(r.parent_uuid)],
    ['session_id', goString(r.session_id)],
    ['agent_id', omitString(r.agent_id)],
    ['is_sidechain', r.is_sidechain ? 'true' : undefined],
    ['timestamp', goString(r.timestamp)],
    ['type', goString(r.type)],
    [
      'message',
      r.message
        ? obj([
            ['role', goString(r.message.role)],
            [
              'content',
              r.message.content ? `[${(r.message.content as Block[]).map(modelBlock).join(',')}]` : 'null',
            ],
          ])
        : undefined,
    ],
    [
      'usage',
      u
        ? obj([
            ['input_tokens', goInt(u.input_tokens)],
            ['output_tokens', goInt(u.output_tokens)],
            ['cache_read_tokens', goInt(u.cache_read_tokens)],
            ['cache_write_tokens', goInt(u.cache_write_tokens)],
          ])
        : undefined,
    ],
    [
      'boundary',
      m
        ? obj([
            ['trigger', omitString(m.trigger)],
            ['pre_tokens', goInt(m.pre_tokens)],
            ['messages_summarized', m.messages_summarized ? goInt(m.messages_summarized) : undefined],
            [
              'active_skills',
              m.active_skills && m.active_skills.length > 0
                ? `[${m.active_skills.map(goString).join(',')}]`
                : undefined,
            ],
          ])
        : undefined,
    ],
  ])
}

// --- generators -----------------------------------------------------------------------------

const text = fc.string({
  unit: fc.oneof(
    fc.constantFrom(
      'a',
      'Z',
      ' ',
      '"',
      '\\',
      '\n',
      '\t',
      '\b',
      '\f',
      '\u0001',
      '\u007f',
      '<',
      '>',
      '&',
      '\u2028',
      'é',
      '😀',
      '\ufffd',
    ),
    fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }),
  ),
  maxLength: 8,
})
const int64 = fc
  .bigInt({ min: -(1n << 63n), max: (1n << 63n) - 1n })
  .map((v) => (v >= BigInt(-Number.MAX_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v))
const int = fc.oneof(int64, fc.integer({ min: -5, max: 5 }))
const rawJson = fc.oneof(
  fc.constantFrom('{}', '[]', 'null', '1', '"<&>"', ' { "a" : [ 1 , 2 ] } ', '{"k":"\\u2028 x"}', '"\u2028"'),
  fc.jsonValue({ maxDepth: 2 }).map((v) => JSON.stringify(v, null, 1)),
)
/** Records whose strings come from `text`. */
function recordOf(text: fc.Arbitrary<string>): fc.Arbitrary<TranscriptRecord> {
  const block: fc.Arbitrary<Block> = fc.letrec((tie) => ({
    block: fc.record(
      {
        type: fc.constantFrom('text', 'thinking', 'tool_use', 'tool_result', 'compact_boundary', 'skill', ''),
        text,
        thinking: text,
        signature: text,
        id: text,
        name: text,
        input: rawJson,
        tool_use_id: text,
        content: fc.oneof(fc.constant(null), fc.array(tie('block') as fc.Arbitrary<Block>, { maxLength: 2 })),
        is_error: fc.boolean(),
      },
      { requiredKeys: ['type'] },
    ),
  })).block
  return fc.record(
    {
      uuid: text,
      parent_uuid: text,
      session_id: text,
      agent_id: text,
      is_sidechain: fc.boolean(),
      timestamp: text,
      type: fc.constantFrom('message', 'boundary', ''),
      message: fc.record({
        role: text,
        content: fc.oneof(fc.constant(null), fc.array(block, { maxLength: 3 })),
      }),
      usage: fc.record({
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int,
        cache_write_tokens: int,
      }),
      boundary: fc.record(
        {
          trigger: text,
          pre_tokens: int,
          messages_summarized: int,
          active_skills: fc.array(text, { maxLength: 2 }),
        },
        { requiredKeys: ['pre_tokens'] },
      ),
    },
    { requiredKeys: ['uuid', 'session_id', 'timestamp', 'type'] },
  )
}

const record = recordOf(text)
/** A Go string is bytes: text with half a surrogate pair has no Go counterpart to come back as. */
const wellFormed = text.filter(
  (s) => !/[\ud800-\udfff]/.test(s.replace(/[\ud800-\udbff][\udc00-\udfff]/g, '')),
)
const goRecord = recordOf(wellFormed)

const norma = (line: string) => parseTranscript(`${line}\n`, { strict: true }).records[0] as TranscriptRecord

describe("records against a model of Go's json.Marshal", () => {
  it("noa's encoding of any record equals the model's", () => {
    fc.assert(
      fc.property(record, (r) => {
        expect(formatRecord(r)).toBe(modelRecord(r))
      }),
      { numRuns: 400 },
    )
  })

  it('decoding then encoding is idempotent, and gives back the record Go would hold', () => {
    fc.assert(
      fc.property(goRecord, (r) => {
        const line = formatRecord(r)
        const back = norma(line)
        expect(formatRecord(back)).toBe(line)
        expect(modelRecord(back)).toBe(line)
      }),
      { numRuns: 400 },
    )
  })

  it('on any line Go accepts (repeated and case-folded keys, unknown keys, odd numbers), decode-then-encode is idempotent', () => {
    const key = fc.constantFrom(
      'uuid',
      'UUID',
      'session_id',
      'ſession_id',
      'type',
      'Type',
      'message',
      'usage',
      'zzz',
      'timestamp',
      'boundary',
    )
    const value = fc.oneof(
      text.map((s) => JSON.stringify(s)),
      fc.constantFrom(
        'null',
        '{"role":"user","content":[{"type":"text","text":"x"}]}',
        '{"input_tokens":9007199254740993}',
        '{}',
        '{"content":[{},{"text":"y"}]}',
      ),
    )
    fc.assert(
      fc.property(fc.array(fc.tuple(key, value), { maxLength: 8 }), (members) => {
        const line = `{${members.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`
        let once: string
        try {
          once = formatRecord(norma(line))
        } catch {
          return // Go refuses it too (a type error): nothing to re-encode
        }
        expect(formatRecord(norma(once))).toBe(once)
      }),
      { numRuns: 400 },
    )
  })
})
