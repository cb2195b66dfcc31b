import { readFileSync } from 'node:fs'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  boundaryMarker,
  formatRecord,
  formatTimestamp,
  type Message,
  newTranscriptId,
  parseTranscript,
  type TranscriptRecord,
  TranscriptWriter,
} from '../../dist/src/transcript/index.js'
import { tempDir } from '../helpers/index.js'

/** 2024-06-05T13:00:00Z in Unix nanoseconds. */
const T0 = 1_717_592_400n * 1_000_000_000n

/** uuids 0101…, 0202…, … so golden lines are predictable. */
function countingRandom() {
  let n = 0
  return (size: number) => Buffer.alloc(size, ++n)
}

function clockOf(...times: bigint[]) {
  let i = 0
  return () => times[Math.min(i++, times.length - 1)] as bigint
}

describe('timestamps', () => {
  it('formats like Go RFC3339Nano in UTC: 0, 1, 3 and 9 fraction digits, trailing zeros trimmed', () => {
    expect(formatTimestamp(T0)).toBe('2024-06-05T13:00:00Z')
    expect(formatTimestamp(T0 + 500_000_000n)).toBe('2024-06-05T13:00:00.5Z')
    expect(formatTimestamp(T0 + 123_000_000n)).toBe('2024-06-05T13:00:00.123Z')
    expect(formatTimestamp(T0 + 123_456_789n)).toBe('2024-06-05T13:00:00.123456789Z')
    expect(formatTimestamp(T0 + 100_000_000n)).toBe('2024-06-05T13:00:00.1Z')
    expect(formatTimestamp(T0 + 10n)).toBe('2024-06-05T13:00:00.00000001Z')
    expect(formatTimestamp(T0 + 3_723_000_000_001n)).toBe('2024-06-05T14:02:03.000000001Z')
    expect(formatTimestamp(0n)).toBe('1970-01-01T00:00:00Z')
    expect(formatTimestamp(-1n)).toBe('1969-12-31T23:59:59.999999999Z')
  })

  it('the default clock is the wall clock with sub-millisecond digits', async () => {
    const dir = tempDir()
    const w = new TranscriptWriter({ dir, sessionId: 's' })
    const before = Date.now()
    const r = await w.recordMessage({ role: 'user', content: [{ type: 'text', text: 'x' }] })
    const after = Date.now()
    const ms = Date.parse(r.timestamp)
    expect(ms).toBeGreaterThanOrEqual(before - 5)
    expect(ms).toBeLessThanOrEqual(after + 5)
    expect(r.timestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$/)
  })
})

describe('ids', () => {
  it('are 32 lower-case hex characters from 16 random bytes', () => {
    const ids = new Set(Array.from({ length: 100 }, () => newTranscriptId()))
    expect(ids.size).toBe(100)
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{32}$/)
  })

  it('fall back to the hex of the timestamp text when the random source fails', () => {
    const id = newTranscriptId({
      random: () => {
        throw new Error('no entropy')
      },
      clock: () => T0 + 5_000_000n,
    })
    expect(id).toBe(Buffer.from('2024-06-05T13:00:00.005Z').toString('hex'))
    expect(id).toHaveLength(48)
  })
})

// Hand-built lines in the exact shape Go's json.Marshal gives Norma's Record struct.
const G = {
  user:
    '{"uuid":"01010101010101010101010101010101","session_id":"sess-1","timestamp":"2024-06-05T13:00:00Z",' +
    '"type":"message","message":{"role":"user","content":[{"type":"text","text":' +
    '"a \\u003cb\\u003e \\u0026 \\"q\\" \\\\ \\n\\t\\r\\b\\f\\u0001\\u001f \\u2028\\u2029 é 😀 \x7f ~"}]}}',
  assistant:
    '{"uuid":"02020202020202020202020202020202","parent_uuid":"01010101010101010101010101010101",' +
    '"session_id":"sess-1","timestamp":"2024-06-05T13:00:00.5Z","type":"message","message":{"role":"assistant",' +
    '"content":[{"type":"thinking","thinking":"plan","signature":"c2ln"},{"type":"text","text":"ok"},' +
    '{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"cmd":"a \\u003c b \\u0026\\u0026 c \\u003e d",' +
    '"n":[1,2.50,3e2],"s":"\\u003c\\u00e9\\"","u":"\\u2028"}}]},' +
    '"usage":{"input_tokens":120,"output_tokens":7,"cache_read_tokens":0,"cache_write_tokens":3}}',
  result:
    '{"uuid":"03030303030303030303030303030303","parent_uuid":"02020202020202020202020202020202",' +
    '"session_id":"sess-1","timestamp":"2024-06-05T13:00:00.123Z","type":"message","message":{"role":"user",' +
    '"content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"boom"}],"is_error":true},' +
    '{"type":"tool_result","tool_use_id":"toolu_2"},{"type":"text"}]}}',
  boundary:
    '{"uuid":"04040404040404040404040404040404","parent_uuid":"03030303030303030303030303030303",' +
    '"session_id":"sess-1","timestamp":"2024-06-05T13:00:00.123456789Z","type":"boundary",' +
    '"boundary":{"trigger":"auto","pre_tokens":1234,"messages_summarized":7,"active_skills":["pdf","x\\u0026y"]}}',
  marker:
    '{"uuid":"05050505050505050505050505050505","parent_uuid":"04040404040404040404040404040404",' +
    '"session_id":"sess-1","timestamp":"2024-06-05T13:00:01Z","type":"message","message":{"role":"user",' +
    '"content":[{"type":"compact_boundary","input":{"trigger":"auto","pre_tokens":1234,"messages_summarized":7}}]}}',
  nil: '{"uuid":"06060606060606060606060606060606","parent_uuid":"05050505050505050505050505050505","session_id":"sess-1","timestamp":"2024-06-05T13:00:01.00000001Z","type":"message","message":{"role":"assistant","content":null}}',
  empty:
    '{"uuid":"07070707070707070707070707070707","parent_uuid":"06060606060606060606060606060606","session_id":"sess-1","timestamp":"2024-06-05T13:00:01.00000001Z","type":"message","message":{"role":"assistant","content":[]}}',
}

describe('golden lines', () => {
  it('the writer writes, byte for byte, what Go json.Marshal writes for Norma', async () => {
    const dir = tempDir()
    const w = new TranscriptWriter({
      dir,
      sessionId: 'sess-1',
      random: countingRandom(),
      clock: clockOf(
        T0,
        T0 + 500_000_000n,
        T0 + 123_000_000n,
        T0 + 123_456_789n,
        T0 + 1_000_000_000n,
        T0 + 1_000_000_010n,
      ),
    })
    const text = 'a <b> & "q" \\ \n\t\r\b\f\u0001\u001f \u2028\u2029 é 😀 \x7f ~'
    await w.recordMessage({ role: 'user', content: [{ type: 'text', text }] })
    await w.recordMessage(
      {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: 'plan', signature: 'c2ln' },
          { type: 'text', text: 'ok' },
          {
            type: 'tool_use',
            id: 'toolu_1',
            name: 'Bash',
            // Go keeps a RawMessage's bytes but compacts and HTML-escapes them on write.
            input:
              '{\n  "cmd": "a < b && c > d",\n  "n": [1, 2.50, 3e2],\n  "s": "\\u003c\\u00e9\\"",\n\t"u": "\u2028"\n}\n',
          },
        ],
      },
      { input_tokens: 120, output_tokens: 7, cache_write_tokens: 3 },
    )
    await w.recordMessage(
      {
        role: 'user',
        content: [
          {
            type: 'tool_result',
            tool_use_id: 'toolu_1',
            content: [{ type: 'text', text: 'boom' }],
            is_error: true,
          },
          { type: 'tool_result', tool_use_id: 'toolu_2', content: [], is_error: false },
          { type: 'text', text: '' },
        ],
      },
      { input_tokens: 0, output_tokens: 0 },
    )
    const meta = { trigger: 'auto', pre_tokens: 1234, messages_summarized: 7, active_skills: ['pdf', 'x&y'] }
    await w.recordBoundary(meta)
    await w.recordMessage(boundaryMarker({ trigger: 'auto', pre_tokens: 1234, messages_summarized: 7 }))
    await w.recordMessage({ role: 'assistant', content: null })
    await w.recordMessage({ role: 'assistant', content: [] })
    await w.close()
    expect(w.err()).toBeNull()
    const got = readFileSync(w.path, 'utf8')
    const want = `${[G.user, G.assistant, G.result, G.boundary, G.marker, G.nil, G.empty].join('\n')}\n`
    expect(got.split('\n')).toEqual(want.split('\n'))
    expect(got).toBe(want)
  })

  it('sidechain records carry the parent session id, agent_id and is_sidechain', async () => {
    const dir = tempDir()
    const w = new TranscriptWriter({
      dir,
      sessionId: 'sess-1',
      agentId: 'agent-7',
      random: countingRandom(),
      clock: clockOf(T0),
    })
    await w.recordMessage({ role: 'user', content: [{ type: 'text', text: 'sub' }] })
    expect(w.path).toBe(`${dir}/sess-1/subagents/agent-agent-7.jsonl`)
    expect(readFileSync(w.path, 'utf8')).toBe(
      '{"uuid":"01010101010101010101010101010101","session_id":"sess-1","agent_id":"agent-7","is_sidechain":true,' +
        '"timestamp":"2024-06-05T13:00:00Z","type":"message","message":{"role":"user","content":[{"type":"text","text":"sub"}]}}\n',
    )
  })

  it('a loaded Go line is written back unchanged', () => {
    const lines = Object.values(G)
    const t = parseTranscript(`${lines.join('\n')}\n`)
    expect(t.records.map((r) => formatRecord(r))).toEqual(lines)
  })

  it('keeps keys and block types Norma does not know, after the known keys', () => {
    const line =
      '{"zeta":[1,{"b":2,"a":"\\u003c"}],"uuid":"u","session_id":"s","timestamp":"t","type":"message",' +
      '"message":{"extra":true,"role":"user","content":[{"type":"skill","name":"pdf","path":"/x","text":"t"},{"type":"text","text":"hi","cache":{"ttl":5}}]},"usage":{"input_tokens":1,"output_tokens":2,"cache_read_tokens":3,"cache_write_tokens":4,"reasoning":9}}'
    const [r] = parseTranscript(line).records as [TranscriptRecord]
    const rec = r as TranscriptRecord & { zeta: unknown }
    expect(rec.zeta).toEqual([1, { b: 2, a: '<' }])
    const blocks = (r.message as Message).content as unknown as Array<Record<string, unknown>>
    expect(blocks[0]).toEqual({ type: 'skill', name: 'pdf', path: '/x', text: 't' })
    expect(blocks[1]?.cache).toEqual({ ttl: 5 })
    expect(formatRecord(r)).toBe(
      '{"uuid":"u","session_id":"s","timestamp":"t","type":"message","message":{"role":"user","content":[' +
        '{"type":"skill","text":"t","name":"pdf","path":"/x"},{"type":"text","text":"hi","cache":{"ttl":5}}],"extra":true},' +
        '"usage":{"input_tokens":1,"output_tokens":2,"cache_read_tokens":3,"cache_write_tokens":4,"reasoning":9},' +
        '"zeta":[1,{"b":2,"a":"\\u003c"}]}',
    )
  })

  it('writes a zero usage read from a file back (the pointer was set), but the writer omits one', async () => {
    const line =
      '{"uuid":"u","session_id":"s","timestamp":"t","type":"message","message":{"role":"user","content":null},"usage":{"input_tokens":0,"output_tokens":0,"cache_read_tokens":0,"cache_write_tokens":0}}'
    expect(formatRecord(parseTranscript(line).records[0] as TranscriptRecord)).toBe(line)
    const w = new TranscriptWriter({ dir: tempDir(), sessionId: 's' })
    const r = await w.recordMessage({ role: 'user', content: null }, {})
    expect(r.usage).toBeUndefined()
    const u = await w.recordMessage(
      { role: 'user', content: null },
      { input_tokens: undefined, output_tokens: 0 },
    )
    expect(u.usage).toBeUndefined()
    expect(readFileSync(w.path, 'utf8')).not.toContain('usage')
  })

  it('writes a lone surrogate as \\ufffd, as Go writes text it cannot encode', () => {
    const r: TranscriptRecord = {
      uuid: 'u',
      session_id: 's',
      timestamp: 't',
      type: 'message',
      message: { role: 'user', content: [{ type: 'text', text: 'a\ud800b\\ud800c\udc00' }] },
    }
    expect(formatRecord(r)).toContain('"text":"a\\ufffdb\\\\ud800c\\ufffd"')
  })
})

describe('round trip (property)', () => {
  const text = fc.string({ unit: 'binary', maxLength: 40 })
  const json = fc.jsonValue({ maxDepth: 3 })
  const block = fc.oneof(
    fc.record({ type: fc.constant('text'), text }),
    fc.record({ type: fc.constant('thinking'), thinking: text, signature: text }),
    fc.record({
      type: fc.constant('tool_use'),
      id: fc.string({ minLength: 1, maxLength: 8 }),
      name: fc.string({ minLength: 1, maxLength: 8 }),
      input: json.map((v) => JSON.stringify(v, null, 2)),
    }),
    fc.record({
      type: fc.constant('tool_result'),
      tool_use_id: fc.string({ minLength: 1, maxLength: 8 }),
      content: fc.array(fc.record({ type: fc.constant('text'), text }), { maxLength: 2 }),
      is_error: fc.boolean(),
    }),
  )
  const message = fc.record({
    role: fc.constantFrom('user', 'assistant'),
    content: fc.oneof(fc.constant(null), fc.array(block, { maxLength: 4 })),
  })
  const usage = fc.record({
    input_tokens: fc.nat(),
    output_tokens: fc.nat(),
    cache_read_tokens: fc.nat(),
    cache_write_tokens: fc.nat(),
  })

  it('a written line loads back to the same record and is written again identically', () => {
    fc.assert(
      fc.property(message, fc.option(usage, { nil: undefined }), (m, u) => {
        const r: TranscriptRecord = {
          uuid: 'u',
          session_id: 's',
          timestamp: 't',
          type: 'message',
          message: m as Message,
        }
        if (u) r.usage = u
        const line = formatRecord(r)
        const back = parseTranscript(`${line}\n`).records[0] as TranscriptRecord
        expect(formatRecord(back)).toBe(line)
        // The loaded message holds the same text; tool inputs come back compacted.
        const again = parseTranscript(`${formatRecord(back)}\n`).records[0]
        expect(again).toEqual(back)
        for (const [i, b] of ((back.message as Message).content ?? []).entries()) {
          const orig = ((m as Message).content ?? [])[i]
          if (b.type === 'text') expect(b.text).toBe(orig?.text)
          if (b.type === 'tool_use')
            expect(JSON.parse(b.input as string)).toEqual(JSON.parse(orig?.input as string))
        }
      }),
      { numRuns: 300 },
    )
  })
})
