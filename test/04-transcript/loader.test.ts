import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { isNoaError } from '../../dist/src/index.js'
import {
  formatRecord,
  loadTranscript,
  MAX_LINE_BYTES,
  type Message,
  parseTranscript,
  type TranscriptRecord,
} from '../../dist/src/transcript/index.js'
import { tempDir } from '../helpers/index.js'

function rec(n: number, text = `message ${n}`): TranscriptRecord {
  const r: TranscriptRecord = {
    uuid: n.toString(16).padStart(32, '0'),
    session_id: 's',
    timestamp: `2024-06-05T13:00:0${n % 10}Z`,
    type: 'message',
    message: { role: n % 2 ? 'assistant' : 'user', content: [{ type: 'text', text }] },
  }
  if (n > 1) r.parent_uuid = (n - 1).toString(16).padStart(32, '0')
  return r
}

function lines(n: number): string[] {
  return Array.from({ length: n }, (_, i) => formatRecord(rec(i + 1)))
}

function failure(fn: () => unknown): { code: string; message: string; details: Record<string, unknown> } {
  try {
    fn()
  } catch (err) {
    if (isNoaError(err)) return { code: err.code, message: err.message, details: err.details }
    throw err
  }
  throw new Error('expected a failure')
}

async function asyncFailure(p: Promise<unknown>) {
  try {
    await p
  } catch (err) {
    if (isNoaError(err)) return { code: err.code, message: err.message, details: err.details }
    throw err
  }
  throw new Error('expected a failure')
}

describe('loader: line rules of Go bufio.Scanner', () => {
  it('a missing file has no records', async () => {
    const t = await loadTranscript(join(tempDir(), 'nope.jsonl'))
    expect(t).toMatchObject({ exists: false, records: [], tornTail: null })
  })

  it('drops one \\r before \\n (CRLF), skips empty lines, numbers records by file line', () => {
    const [a, b, c] = lines(3)
    const t = parseTranscript(`${a}\r\n\n\r\n${b}\n\n${c}\r\n`)
    expect(t.records.map((r) => r.uuid)).toEqual([rec(1).uuid, rec(2).uuid, rec(3).uuid])
    expect(t.lines).toEqual([1, 4, 6])
    expect(t.tornTail).toBeNull()
  })

  it('a null line is a record of zero values', () => {
    const t = parseTranscript(`null\n${lines(1)[0]}\nnull\n`)
    expect(t.records[0]).toEqual({ uuid: '', session_id: '', timestamp: '', type: '' })
    expect(t.records).toHaveLength(3)
    expect(t.records[2]?.uuid).toBe('')
  })

  it('a whitespace-only line is an error, as json.Unmarshal makes it', () => {
    const f = failure(() => parseTranscript(`${lines(1)[0]}\n  \t\n${lines(2)[1]}\n`, { file: 'x.jsonl' }))
    expect(f.code).toBe('NOA_BAD_TRANSCRIPT')
    expect(f.message).toBe('x.jsonl:2: a line of only whitespace')
    expect(f.details).toMatchObject({ file: 'x.jsonl', line: 2 })
  })

  it('a malformed line in the middle is an error naming file and line, never dropped', async () => {
    const dir = tempDir()
    const file = join(dir, 's.jsonl')
    const [a, b, c] = lines(3)
    writeFileSync(file, `${a}\n${(b as string).slice(0, 30)}\n${c}\n`)
    const f = await asyncFailure(loadTranscript(file))
    expect(f.code).toBe('NOA_BAD_TRANSCRIPT')
    expect(f.message).toMatch(new RegExp(`^${file}:2: not JSON: `))
    expect(f.details).toMatchObject({ file, line: 2 })
  })

  it('a field of the wrong JSON type is an error (Go Unmarshal fails on it too)', () => {
    const cases: Array<[string, string]> = [
      ['{"uuid":5}', 'uuid: expected a string, got number'],
      ['{"is_sidechain":"yes"}', 'is_sidechain: expected a boolean, got string'],
      ['{"message":[]}', 'message: expected an object, got array'],
      ['{"message":{"role":"user","content":"hi"}}', 'message.content: expected an array, got string'],
      [
        '{"message":{"role":"user","content":[{"type":"text","text":1}]}}',
        'message.content[0].text: expected a string',
      ],
      [
        '{"message":{"role":"user","content":[{"type":"tool_result","content":[{"type":7}]}]}}',
        'message.content[0].content[0].type: expected a string, got number',
      ],
      ['{"usage":{"input_tokens":1.5}}', 'usage.input_tokens: expected an integer, got number'],
      ['{"boundary":{"active_skills":[1]}}', 'boundary.active_skills[0]: expected a string, got number'],
      ['[1,2]', 'a record must be a JSON object, got array'],
      ['"text"', 'a record must be a JSON object, got string'],
    ]
    for (const [line, reason] of cases) {
      const f = failure(() => parseTranscript(`${lines(1)[0]}\n${line}\n`, { file: 'f' }))
      expect(f.message).toContain(`f:2: ${reason}`)
    }
  })

  it('null leaves a field at its zero value, as in Go', () => {
    const line =
      '{"uuid":null,"parent_uuid":null,"session_id":"s","timestamp":"t","type":"message","is_sidechain":null,' +
      '"message":{"role":null,"content":[null,{"type":"text","text":null,"id":null,"content":null,"is_error":null}]},' +
      '"usage":{"input_tokens":null,"output_tokens":2},"boundary":null}'
    const [r] = parseTranscript(line).records
    expect(r).toEqual({
      uuid: '',
      session_id: 's',
      timestamp: 't',
      type: 'message',
      message: { role: '', content: [{ type: '' }, { type: 'text', text: '' }] },
      usage: { input_tokens: 0, output_tokens: 2, cache_read_tokens: 0, cache_write_tokens: 0 },
    })
  })

  it('keeps unknown keys and unknown block types', () => {
    const line =
      '{"uuid":"u","session_id":"s","timestamp":"t","type":"note","future":{"x":[1]},' +
      '"message":{"role":"system","content":[{"type":"skill","name":"pdf","body":"…"},{"type":"image","source":{"data":"AA=="}}]}}'
    const [r] = parseTranscript(line).records as [TranscriptRecord & { future: unknown }]
    expect(r.type).toBe('note')
    expect(r.future).toEqual({ x: [1] })
    expect(r.message).toEqual({
      role: 'system',
      content: [
        { type: 'skill', name: 'pdf', body: '…' },
        { type: 'image', source: { data: 'AA==' } },
      ],
    })
  })

  it('keeps tool input as the exact JSON text, at any depth, last key winning', () => {
    const line =
      '{"uuid":"u","session_id":"s","timestamp":"t","type":"message","message":{"role":"assistant","content":[' +
      '{"type":"tool_use","id":"a","name":"n","input": { "b" : 1.50, "a":"\\u003c" } },' +
      '{"type":"tool_use","id":"b","name":"n","input":null},' +
      '{"type":"tool_use","id":"c","name":"n","input":[1],"input":"last"},' +
      '{"type":"tool_result","tool_use_id":"a","content":[{"type":"tool_use","input":{"in":"nested"}}]},' +
      '{"type":"tool_use","id":"d","name":"n"}' +
      ']},"message":{"role":"assistant","content":[' +
      '{"type":"tool_use","id":"a","name":"n","input": { "b" : 1.50, "a":"\\u003c" } },' +
      '{"type":"tool_use","id":"b","name":"n","input":null},' +
      '{"type":"tool_use","id":"c","name":"n","input":[1],"input":"last"},' +
      '{"type":"tool_result","tool_use_id":"a","content":[{"type":"tool_use","input":{"in":"nested"}}]},' +
      '{"type":"tool_use","id":"d","name":"n"}' +
      ']}}'
    const blocks = ((parseTranscript(line).records[0] as TranscriptRecord).message as Message).content ?? []
    expect(blocks.map((b) => b.input)).toEqual([
      '{ "b" : 1.50, "a":"\\u003c" }',
      'null',
      '"last"',
      undefined,
      undefined,
    ])
    expect(blocks[3]?.content?.[0]?.input).toBe('{"in":"nested"}')
    // Go compacts on write and keeps a null RawMessage as null.
    expect(formatRecord(parseTranscript(line).records[0] as TranscriptRecord)).toContain(
      '"input":{"b":1.50,"a":"\\u003c"}},{"type":"tool_use","id":"b","name":"n","input":null}',
    )
  })

  it('reads a file larger than one read chunk, with lines across chunk borders', async () => {
    const file = join(tempDir(), 'big.jsonl')
    const recs = Array.from({ length: 300 }, (_, i) => rec(i + 1, `${'é'.repeat(3000 + i)}\r`))
    const text = recs.map((r) => `${formatRecord(r)}\r\n`).join('')
    writeFileSync(file, `${text}${formatRecord(rec(301)).slice(0, 50)}`)
    const t = await loadTranscript(file)
    expect(t.records).toHaveLength(300)
    expect(t.records[299]).toEqual(recs[299])
    expect(t.tornTail).toMatchObject({ line: 301, offset: Buffer.byteLength(text), bytes: 50 })
    expect(t.bytes).toBe(Buffer.byteLength(text) + 50)
  })
})

describe('loader: torn tails', () => {
  const body = lines(3)
  // A multi-byte character in the last line, so cuts also land inside a UTF-8 sequence.
  const last = formatRecord(rec(4, 'tail with ü and 😀 and <>'))
  const head = `${body.join('\n')}\n`
  const full = Buffer.from(`${head}${last}\n`)
  const headBytes = Buffer.byteLength(head)

  it('at every byte offset of the last line: the complete lines load, the partial one is dropped and reported', () => {
    for (let cut = headBytes; cut <= full.length; cut++) {
      const t = parseTranscript(full.subarray(0, cut))
      const partial = cut - headBytes
      if (partial === 0 || cut === full.length) {
        expect(t.tornTail).toBeNull()
        expect(t.records).toHaveLength(cut === full.length ? 4 : 3)
      } else if (cut === full.length - 1) {
        // Everything but the newline: a complete record (Go reads it too), not a tear.
        expect(t.tornTail).toBeNull()
        expect(t.records).toHaveLength(4)
      } else {
        expect(t.records.map((r) => r.uuid)).toEqual([rec(1).uuid, rec(2).uuid, rec(3).uuid])
        expect(t.tornTail).toMatchObject({ line: 4, offset: headBytes, bytes: partial })
        expect(t.tornTail?.reason).toMatch(/^not JSON: /)
      }
    }
  })

  it('the same from a file, at a sample of offsets', async () => {
    const dir = tempDir()
    for (const cut of [headBytes + 1, headBytes + 17, full.length - 20, full.length - 2]) {
      const file = join(dir, `cut-${cut}.jsonl`)
      writeFileSync(file, full.subarray(0, cut))
      const t = await loadTranscript(file)
      expect(t.records).toHaveLength(3)
      expect(t.tornTail).toMatchObject({ line: 4, offset: headBytes, bytes: cut - headBytes })
    }
  })

  it('a final line that is complete JSON but not a valid record is corruption, not a tear', () => {
    const f = failure(() => parseTranscript(`${head}{"uuid":5}`, { file: 'f' }))
    expect(f.message).toBe('f:4: uuid: expected a string, got number')
  })

  it('strict mode fails on a torn tail, as Norma does', () => {
    const f = failure(() => parseTranscript(full.subarray(0, full.length - 5), { file: 'f', strict: true }))
    expect(f.code).toBe('NOA_BAD_TRANSCRIPT')
    expect(f.message).toMatch(/^f:4: not JSON: .*\(the last line, without a newline: a torn write\)$/)
    // What strict mode accepts is what Norma accepts: CRLF, empty and null lines.
    expect(parseTranscript(`${body[0]}\r\n\nnull\n${body[1]}`, { strict: true }).records).toHaveLength(3)
  })

  it('strict mode refuses a line of 64 MiB or more (bufio.ErrTooLong); the default reads it', () => {
    const line = Buffer.alloc(MAX_LINE_BYTES, 0x61)
    Buffer.from('{"uuid":"').copy(line)
    Buffer.from('"}').copy(line, MAX_LINE_BYTES - 2)
    const f = failure(() => parseTranscript(line, { file: 'f', strict: true }))
    expect(f.message).toMatch(/^f:1: line of 64 MiB or more/)
    expect(parseTranscript(line).records).toHaveLength(1)
    // One byte less fits Norma's buffer with its newline.
    Buffer.from('"}').copy(line, MAX_LINE_BYTES - 3)
    const shorter = line.subarray(0, MAX_LINE_BYTES - 1)
    expect(parseTranscript(shorter, { strict: true }).records[0]?.uuid.length).toBe(MAX_LINE_BYTES - 12)
  })
})
