/**
 * Norma mode (`strict: true`) at the edges of Go's encoding/json: each expected text below is
 * what Norma v0.4.3's own Load, json.Marshal and MessagesForAPI produced for the same input
 * (run once, outside the project, on Go's encoding/json); the tests need no Go.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import {
  formatRecord,
  formatRecordBytes,
  isNoaError,
  messages,
  parseBoundaryMeta,
  parseTranscript,
  type TranscriptRecord,
  viewForModel,
} from '../../dist/src/index.js'
import { encodeMessage } from '../../dist/src/transcript/encode.js'
import { runCli, tempDir } from '../helpers/index.js'

const bytes = (...parts: Array<string | number[]>) =>
  Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p, 'utf8') : Buffer.from(p))))
const norma = (data: string | Uint8Array) => parseTranscript(data, { strict: true, file: 'f' })
const lines = (data: string | Uint8Array) =>
  norma(data).records.map((r) => formatRecordBytes(r).toString('latin1'))
const latin1 = (s: string) => Buffer.from(s, 'utf8').toString('latin1')
const encodeAll = (msgs: ReturnType<typeof viewForModel>) => `[${msgs.map(encodeMessage).join(',')}]`

function refusal(fn: () => unknown): { message: string; go: string } {
  try {
    fn()
  } catch (err) {
    expect(isNoaError(err, 'NOA_BAD_TRANSCRIPT')).toBe(true)
    const e = err as Error & { details: { go: string } }
    return { message: e.message, go: e.details.go }
  }
  throw new Error('expected a refusal')
}

const head = '"uuid":"a","session_id":"s","timestamp":"t","type":"message"'

describe('1. unknown block types stay in the view', () => {
  const file =
    `{${head},"message":{"role":"user","content":[{"type":"compact_boundary","input":{}},{"type":"","input":{"x":1}}]}}\n` +
    `{"uuid":"b","session_id":"s","timestamp":"t","type":"message","message":{"role":"assistant","content":[{"type":"skill","name":"pdf"}]}}\n`
  const goMessages =
    '[{"role":"user","content":[{"type":"compact_boundary","input":{}},{"type":"","input":{"x":1}}]},{"role":"assistant","content":[{"type":"skill","name":"pdf"}]}]'

  it("Norma's view keeps every block: two blocks and no marker, as Go's Messages and MessagesForAPI", () => {
    const conv = messages(norma(file).records, { strict: true })
    expect(encodeAll(conv.messages)).toBe(goMessages)
    expect(conv.messages.map(parseBoundaryMeta)).toEqual([undefined, undefined])
    expect(encodeAll(viewForModel(conv.messages))).toBe(goMessages)
  })

  it('the default view leaves them out, as before (and the record keeps them)', () => {
    const t = norma(file)
    const conv = messages(t.records)
    expect(conv.messages[0]?.content).toHaveLength(1)
    expect(parseBoundaryMeta(conv.messages[0] as never)).toEqual({ pre_tokens: 0 })
    expect(t.records[0]?.message?.content).toHaveLength(2)
  })
})

describe('2. a repeated key decodes into what the first one left', () => {
  it('structs merge field by field; null keeps a string; usage pointers merge', () => {
    const line = `{"uuid":"a","uuid":null,"session_id":"s","timestamp":"t","type":"message","message":{"role":"user","content":[{"type":"text","text":"hi"}]},"message":{"role":"assistant"},"usage":{"input_tokens":5},"usage":{"output_tokens":7}}`
    expect(lines(line)).toEqual([
      '{"uuid":"a","session_id":"s","timestamp":"t","type":"message","message":{"role":"assistant","content":[{"type":"text","text":"hi"}]},"usage":{"input_tokens":5,"output_tokens":7,"cache_read_tokens":0,"cache_write_tokens":0}}',
    ])
  })

  it("a repeated array decodes into the elements already there, past its length too (Go reuses the slice's array)", () => {
    const line = `{"uuid":"b","session_id":"s","timestamp":"t","type":"message","message":{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"},{"type":"text","text":"c"},{"type":"text","text":"d"},{"type":"text","text":"e"}]},"message":{"content":[{"text":"q"}]},"message":{"content":[{},{},{}]}}`
    expect(lines(line)).toEqual([
      '{"uuid":"b","session_id":"s","timestamp":"t","type":"message","message":{"role":"user","content":[{"type":"text","text":"q"},{"type":"text","text":"b"},{"type":"text","text":"c"}]}}',
    ])
  })

  it('null after an object makes the pointer nil; a repeated input is replaced', () => {
    const data =
      `{"uuid":"c","session_id":"s","timestamp":"t","type":"message","message":{"role":"user","content":[{"type":"text","text":"x"}]},"message":null}\n` +
      `{"uuid":"d","session_id":"s","timestamp":"t","type":"message","message":{"role":"user","content":[{"type":"tool_use","id":"t1","name":"Read","input":{"a":1}}]},"message":{"content":[{"input":{"b":2}}]}}\n`
    expect(lines(data)).toEqual([
      '{"uuid":"c","session_id":"s","timestamp":"t","type":"message"}',
      '{"uuid":"d","session_id":"s","timestamp":"t","type":"message","message":{"role":"user","content":[{"type":"tool_use","id":"t1","name":"Read","input":{"b":2}}]}}',
    ])
  })
})

describe('3. ints are int64', () => {
  it('loads values past 2^53 exactly and writes them back; the usage sum wraps as Go int64', () => {
    const data =
      `{"uuid":"a","session_id":"s","timestamp":"t","type":"message","message":{"role":"assistant","content":[]},"usage":{"input_tokens":9007199254740993,"output_tokens":9223372036854775807,"cache_read_tokens":-9223372036854775808}}\n` +
      `{"uuid":"b","session_id":"s","timestamp":"t","type":"message","message":{"role":"assistant","content":[]},"usage":{"input_tokens":9223372036854775807,"output_tokens":1}}\n`
    const t = norma(data)
    expect(t.records.map((r) => formatRecord(r))).toEqual([
      '{"uuid":"a","session_id":"s","timestamp":"t","type":"message","message":{"role":"assistant","content":[]},"usage":{"input_tokens":9007199254740993,"output_tokens":9223372036854775807,"cache_read_tokens":-9223372036854775808,"cache_write_tokens":0}}',
      '{"uuid":"b","session_id":"s","timestamp":"t","type":"message","message":{"role":"assistant","content":[]},"usage":{"input_tokens":9223372036854775807,"output_tokens":1,"cache_read_tokens":0,"cache_write_tokens":0}}',
    ])
    expect(t.records[0]?.usage?.input_tokens).toBe(9007199254740993n)
    expect(t.records[1]?.usage?.output_tokens).toBe(1)
    expect(messages(t.records).usage).toEqual({
      input_tokens: -9214364837600034816n,
      output_tokens: -9223372036854775808n,
      cache_read_tokens: -9223372036854775808n,
      cache_write_tokens: 0,
    })
  })

  it('refuses a value outside int64, in Go words', () => {
    const f = refusal(() => norma(`{${head},"usage":{"input_tokens":9223372036854775808}}\n`))
    expect(f.go).toBe(
      'json: cannot unmarshal number 9223372036854775808 into Go struct field Usage.usage.input_tokens of type int',
    )
    expect(f.message).toBe('f:1: usage.input_tokens: expected an integer, got number 9223372036854775808')
  })
})

describe('4. a float literal in an int field fails the load', () => {
  it.each([
    ['"output_tokens":0.0', 'number 0.0 into Go struct field Usage.usage.output_tokens'],
    ['"input_tokens":1e3', 'number 1e3 into Go struct field Usage.usage.input_tokens'],
  ])('%s', (usage, go) => {
    for (const strict of [true, false]) {
      const f = refusal(() => parseTranscript(`{${head},"usage":{${usage}}}\n`, { strict, file: 'f' }))
      expect(f.go).toBe(`json: cannot unmarshal ${go} of type int`)
    }
  })
})

describe('5. keys Norma has no field for', () => {
  const line = `{"zzz":{"k":[1]},${head},"message":{"role":"user","extra":true,"content":[{"type":"text","text":"x","extra":1}]},"usage":{"input_tokens":1,"reasoning":9}}`

  it("are dropped in Norma mode: load and save writes what Norma's load and save writes", () => {
    expect(lines(line)).toEqual([
      `{${head},"message":{"role":"user","content":[{"type":"text","text":"x"}]},"usage":{"input_tokens":1,"output_tokens":0,"cache_read_tokens":0,"cache_write_tokens":0}}`,
    ])
  })

  it('are kept by default, after the known keys', () => {
    const [r] = parseTranscript(line).records as [TranscriptRecord]
    expect(formatRecord(r)).toBe(
      `{${head},"message":{"role":"user","content":[{"type":"text","text":"x","extra":1}],"extra":true},"usage":{"input_tokens":1,"output_tokens":0,"cache_read_tokens":0,"cache_write_tokens":0,"reasoning":9},"zzz":{"k":[1]}}`,
    )
  })
})

describe('6. bytes that are not UTF-8', () => {
  const file = bytes(
    '{"uuid":"a',
    [0xe2, 0x82],
    'b","session_id":"',
    [0xff],
    '","timestamp":"t","type":"message","message":{"role":"user","content":[{"type":"tool_use","id":"i","name":"n","input":{"p":"',
    [0xe2, 0x82, 0x20, 0xed, 0xa0, 0x80],
    '"}},{"type":"text","text":"',
    [0xf0, 0x9f, 0x98, 0x20, 0xc0, 0x80],
    ' ok €"}]}}\n',
  )
  const F = '\xef\xbf\xbd' // U+FFFD's bytes

  it('in a string: one U+FFFD per byte, as Go decodes them', () => {
    const t = norma(file)
    expect(t.records[0]?.uuid).toBe('a\ufffd\ufffdb')
    expect(lines(file)).toEqual([
      `{"uuid":"a${F}${F}b","session_id":"${F}","timestamp":"t","type":"message","message":{"role":"user","content":[{"type":"tool_use","id":"i","name":"n","input":{"p":"\xe2\x82 \xed\xa0\x80"}},{"type":"text","text":"${F}${F}${F} ${F}${F} ok ${latin1('€')}"}]}}`,
    ])
  })

  it('in a tool input (a json.RawMessage): kept byte for byte, as Go writes it back', () => {
    const input = norma(file).records[0]?.message?.content?.[0]?.input as string
    expect(
      Buffer.from(formatRecordBytes(norma(file).records[0] as TranscriptRecord)).includes(
        Buffer.from([0x22, 0xe2, 0x82, 0x20, 0xed, 0xa0, 0x80, 0x22]),
      ),
    ).toBe(true)
    // The text holds each such byte as a lone surrogate (U+DC00 + byte): nothing is lost.
    expect(input).toBe('{"p":"\udce2\udc82 \udced\udca0\udc80"}')
  })

  it('the same in the default mode', () => {
    expect(parseTranscript(file).records.map((r) => formatRecordBytes(r).toString('latin1'))).toEqual(
      lines(file),
    )
  })
})

describe('7. lone surrogate escapes', () => {
  it('become U+FFFD (written raw, as Go does), pairs stay pairs', () => {
    const line = String.raw`{"uuid":"\ud800","session_id":"\udc00x","timestamp":"\ud83d\ude00\ud800\u0041","type":"message","message":{"role":"user","content":[{"type":"text","text":"a\ud800\ud800\udc00b"}]}}`
    expect(lines(line)).toEqual([
      latin1(
        '{"uuid":"\ufffd","session_id":"\ufffdx","timestamp":"😀\ufffdA","type":"message","message":{"role":"user","content":[{"type":"text","text":"a\ufffd𐀀b"}]}}',
      ),
    ])
  })
})

describe('8. keys match case-insensitively, as Go matches them', () => {
  it('UUID, Type, ſ for s; an exact key is one of the candidates, the last one decoded wins', () => {
    const line = String.raw`{"UUID":"a","Session_ID":"s","TimeStamp":"t","Type":"message","MESSAGE":{"Role":"user","Content":[{"TYPE":"text","Text":"x"}]},"ſession_id":"s2","Usage":{"INPUT_TOKENS":3,"cache_read_to\u212Aens":4},"UUİD":"no","uuid":"b"}`
    expect(lines(line)).toEqual([
      '{"uuid":"b","session_id":"s2","timestamp":"t","type":"message","message":{"role":"user","content":[{"type":"text","text":"x"}]},"usage":{"input_tokens":3,"output_tokens":0,"cache_read_tokens":4,"cache_write_tokens":0}}',
    ])
  })
})

describe("syntax errors are Go's", () => {
  it.each([
    ['{"a":1,}', "invalid character '}' looking for beginning of object key string"],
    ['{"a" 1}', "invalid character '1' after object key"],
    ['{"uuid":"x"} {}', "invalid character '{' after top-level value"],
    ['{"uuid":01}', "invalid character '1' after object key:value pair"],
    ['{"uuid":tru}', "invalid character '}' in literal true (expecting 'e')"],
    ['{"uuid":"\\x"}', "invalid character 'x' in string escape code"],
    ['[1', 'unexpected end of JSON input'],
  ])('%s', (line, go) => {
    expect(refusal(() => norma(`${line}\n`)).go).toBe(go)
  })
})

describe('the CLI in Norma mode (--norma)', () => {
  it('fails on a torn last line as Norma does, and prints ints past 2^53 exactly', () => {
    const dir = tempDir()
    const file = join(dir, 's.jsonl')
    writeFileSync(
      file,
      `{${head},"message":{"role":"assistant","content":[]},"usage":{"input_tokens":9007199254740993}}\n{"uuid":"half`,
    )
    const lenient = runCli(['transcript', 'show', file, '--json'])
    expect(lenient.status).toBe(0)
    expect(lenient.stdout).toContain('"usage":{"input_tokens":9007199254740993,"output_tokens":0,')
    const strict = runCli(['transcript', 'show', file, '--norma', '--json'])
    expect(strict.status).toBe(1)
    expect(strict.stderr).toBe(
      `noa transcript: ${file}:2: not JSON: unexpected end of JSON input (the last line, without a newline: a torn write)\n`,
    )
  })
})
