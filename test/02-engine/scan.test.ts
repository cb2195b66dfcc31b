/**
 * The line scanner against the reference it replaces: for any bytes, reading them through the
 * scanner gives exactly the entries (keys in the same order) or exactly the error that splitting
 * the decoded text on `\n` and running `parseEntry` (JSON.parse + the field checks) on each line
 * gives; `verifyLog` gives exactly the report of the plain line-by-line scan.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { setThreadPolicy, threadStats } from '../../dist/src/engine/parallel.js'
import { BadLine, LineScanner, parseLines } from '../../dist/src/engine/scan.js'
import {
  type Entry,
  encodeBody,
  formatLine,
  isNoaError,
  parseEntry,
  readEntryBatches,
  verifyLog,
} from '../../dist/src/index.js'
import { tempDir } from '../helpers/index.js'

type Outcome = { entries: Entry[] } | { line: number; message: string }

/** What reading `bytes` meant before the scanner: decode, split, parseEntry each non-empty line. */
function reference(bytes: Buffer, validate = true): Outcome {
  const end = bytes.lastIndexOf(0x0a)
  if (end < 0) return { entries: [] }
  const entries: Entry[] = []
  const lines = bytes.toString('utf8', 0, end).split('\n')
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string
    if (line.length === 0) continue
    let e: Entry
    try {
      e = validate ? parseEntry(line) : (JSON.parse(line) as Entry)
    } catch (err) {
      return { line: i + 1, message: (err as Error).message }
    }
    if (e.seq >= 1) entries.push(e)
  }
  return { entries }
}

function scanned(bytes: Buffer, validate = true): Outcome {
  const end = bytes.lastIndexOf(0x0a)
  if (end < 0) return { entries: [] }
  const entries: Entry[] = []
  try {
    parseLines(new LineScanner(), bytes.subarray(0, end + 1), entries, { validate, fromSeq: 1 })
  } catch (err) {
    if (!(err instanceof BadLine)) throw err
    return { line: err.lineIndex, message: err.message }
  }
  return { entries }
}

/** Same outcome, and the same key order in every entry (JSON.stringify shows it). */
function expectSame(bytes: Buffer, validate = true): void {
  const outcome = (read: () => Outcome): Outcome | { thrown: string } => {
    try {
      return read()
    } catch (err) {
      return { thrown: String(err) } // JSON.parse('null').seq, without validation: as it always did
    }
  }
  const want = outcome(() => reference(bytes, validate))
  const got = outcome(() => scanned(bytes, validate))
  expect(got).toEqual(want)
  expect(JSON.stringify(got)).toBe(JSON.stringify(want))
}

const HEX = '0123456789abcdef'
const hex64 = fc.string({ unit: fc.constantFrom(...HEX), minLength: 64, maxLength: 64 })
/** Characters that stress the scanner: separators, dots, quotes, escapes, controls, non-ASCII. */
const pathChar = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom(...'abcxyz019-_.') },
  { weight: 3, arbitrary: fc.constant('/') },
  {
    weight: 2,
    arbitrary: fc.constantFrom('"', '\\', '\n', '\t', '\0', '\u001f', '\u007f', ' ', '\u2028', '\uffff'),
  },
  { weight: 2, arbitrary: fc.constantFrom('é', 'ß', 'ファイル', '日本', '😀', '\ufffd') },
  { weight: 1, arbitrary: fc.constantFrom('\ud800', '\udc00') },
)
const path = fc.oneof(
  { weight: 6, arbitrary: fc.string({ unit: pathChar, minLength: 0, maxLength: 24 }) },
  { weight: 1, arbitrary: fc.constantFrom('', '.', '..', '/', 'a//b', './a', 'a/..', '/a', 'a/', '.a/..b') },
  { weight: 1, arbitrary: fc.integer({ min: 4090, max: 4100 }).map((n) => 'p'.repeat(n)) },
  { weight: 1, arbitrary: fc.integer({ min: 1360, max: 1370 }).map((n) => 'é'.repeat(n)) },
)
const counter = fc.oneof(
  { weight: 6, arbitrary: fc.integer({ min: 1, max: 2 ** 40 }) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(0, -1, 1.5, 2 ** 53 - 1, 2 ** 53, 2 ** 53 + 2, 1e21, 999_999_999_999_999),
  },
)
const blob = fc.oneof({ weight: 6, arbitrary: hex64 }, { weight: 1, arbitrary: fc.string({ maxLength: 66 }) })
const snapshotId = fc.oneof(fc.stringMatching(/^noa_[0-9a-z]{1,12}$/), fc.constantFrom('noa_', 'x', 'noa_-'))

/** An entry as an object: the five ops, with values valid or not, and sometimes an extra key. */
const entryObject = fc
  .tuple(
    fc.oneof(
      fc.record({ op: fc.constant('write'), path, blob }),
      fc.record({ op: fc.constant('delete'), path }),
      fc.record({ op: fc.constant('rename'), from: path, to: path }),
      fc.record({ op: fc.constant('rename'), from: path }).map((e) => ({ ...e, to: e.from })),
      fc.record(
        { op: fc.constant('snapshot'), snapshot_id: snapshotId, parent: snapshotId, message: fc.string() },
        { requiredKeys: ['op', 'snapshot_id', 'message'] },
      ),
      fc.record(
        {
          op: fc.constant('merge'),
          from_workspace: fc.constantFrom('main', 'feature-1', '.x'),
          from_snapshot: snapshotId,
          base: snapshotId,
        },
        { requiredKeys: ['op', 'from_workspace', 'from_snapshot'] },
      ),
      fc.record({ op: fc.constantFrom('copy', 'Write', 'write '), path }),
    ),
    counter,
    counter,
    fc.option(fc.constantFrom(['extra', 1], ['seq', 3], ['op', 'delete'], ['path', 7]), { nil: undefined }),
  )
  .map(([body, seq, ts, extra]) => ({ body: body as Record<string, unknown>, seq, ts, extra }))

/** Renders `[key, value]` pairs the way other tools might: raw (unescaped) strings, \\u escapes, spaces. */
function render(pairs: Array<[string, unknown]>, style: 'json' | 'raw' | 'uescape' | 'spaced'): string {
  const value = (v: unknown): string => {
    if (typeof v !== 'string' || style === 'json' || style === 'spaced') return JSON.stringify(v)
    if (style === 'raw') return `"${v}"`
    return `"${[...v].map((c) => `\\u${(c.codePointAt(0) as number).toString(16).padStart(4, '0')}`).join('')}"`
  }
  const sep = style === 'spaced' ? ', ' : ','
  const colon = style === 'spaced' ? ': ' : ':'
  return `{${pairs.map(([k, v]) => `${JSON.stringify(k)}${colon}${value(v)}`).join(sep)}}`
}

/** One line of text, as noa writes it or as something else might. */
const line = fc
  .tuple(
    entryObject,
    fc.constantFrom('noa', 'noa', 'noa', 'json', 'raw', 'uescape', 'spaced', 'shuffled'),
    fc.infiniteStream(fc.nat()),
  )
  .map(([{ body, seq, ts, extra }, style, randoms]) => {
    if (style === 'noa' && !extra) {
      try {
        // What the write path stores (when it accepts the body): the canonical shape.
        return formatLine(1, encodeBody(body), 1)
          .slice(0, -1)
          .replace('"seq":1,', `"seq":${seq},`)
          .replace(/"ts":1}$/, `"ts":${ts}}`)
      } catch {
        // Refused by the write path: render it anyway, as a damaged or foreign line would be.
      }
    }
    const pairs: Array<[string, unknown]> = [['seq', seq], ...Object.entries(body), ['ts', ts]]
    if (extra) pairs.splice(1 + (randoms.next().value % pairs.length), 0, extra as [string, unknown])
    if (style === 'shuffled') {
      for (let i = pairs.length - 1; i > 0; i--) {
        const j = randoms.next().value % (i + 1)
        ;[pairs[i], pairs[j]] = [pairs[j] as [string, unknown], pairs[i] as [string, unknown]]
      }
    }
    return render(pairs, style === 'noa' || style === 'shuffled' ? 'json' : style)
  })

/** A line as noa writes it, with one character replaced or inserted: every rule at every position. */
const nearCanonical = fc
  .tuple(
    fc.oneof(
      fc.record({
        op: fc.constant('write'),
        path: fc.stringMatching(/^[a-z0-9._-]{1,6}(\/[a-z0-9._-]{1,6}){0,3}$/),
        blob: hex64,
      }),
      fc.record({
        op: fc.constant('delete'),
        path: fc.stringMatching(/^[a-zé日.]{1,5}(\/[a-z.]{1,5}){0,2}$/),
      }),
      fc.record({
        op: fc.constant('rename'),
        from: fc.stringMatching(/^[ab]{1,2}$/),
        to: fc.stringMatching(/^[ab]{1,2}$/),
      }),
    ),
    counter,
    counter,
    fc.nat(),
    fc.boolean(),
    fc.constantFrom(
      '"',
      '\\',
      '\0',
      '\u001f',
      ' ',
      '\u007f',
      'A',
      'F',
      'g',
      '/',
      '.',
      '0',
      '9',
      '-',
      'e',
      '}',
      '{',
      ',',
      ':',
      'é',
      '\ufffd',
      '',
    ),
  )
  .map(([body, seq, ts, at, insert, c]) => {
    const pairs = [['seq', seq], ...Object.entries(body), ['ts', ts]]
    const text = `{${pairs.map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`).join(',')}}`
    const i = at % (text.length + 1)
    return text.slice(0, i) + c + text.slice(insert ? i : i + 1)
  })

/** Damage to the bytes of a log: a flipped, dropped or inserted byte, invalid UTF-8, blank lines. */
const damage = fc.oneof(
  fc.record({ kind: fc.constant('flip' as const), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
  fc.record({ kind: fc.constant('drop' as const), at: fc.nat() }),
  fc.record({
    kind: fc.constant('insert' as const),
    at: fc.nat(),
    bytes: fc.constantFrom(
      [0x0a],
      [0x0a, 0x0a],
      [0xff],
      [0xc3],
      [0xed, 0xa0, 0x80],
      [0x5c],
      [0x22],
      [0x20],
      [0x0d],
      [0x30],
    ),
  }),
)

function damaged(bytes: Buffer, d: Array<Record<string, unknown>>): Buffer {
  let b = Buffer.from(bytes)
  for (const x of d) {
    if (b.length === 0) break
    const at = (x.at as number) % b.length
    if (x.kind === 'flip') b[at] = (b[at] as number) ^ (1 << (x.bit as number))
    else if (x.kind === 'drop') b = Buffer.concat([b.subarray(0, at), b.subarray(at + 1)])
    else b = Buffer.concat([b.subarray(0, at), Buffer.from(x.bytes as number[]), b.subarray(at)])
  }
  return b
}

const toBytes = (lines: string[]): Buffer => Buffer.from(lines.map((l) => `${l}\n`).join(''))

describe('line scanner', () => {
  it('reads every line exactly as JSON.parse + the field checks do', () => {
    fc.assert(
      fc.property(line, (l) => {
        expectSame(toBytes([l]))
        expectSame(toBytes([l]), false)
      }),
      { numRuns: 3000 },
    )
  })

  it('refuses or takes a canonical line with any one character changed exactly as JSON.parse does', () => {
    fc.assert(
      fc.property(nearCanonical, (l) => {
        expectSame(toBytes([l]))
      }),
      { numRuns: 6000 },
    )
  })

  it('reads whole logs, damaged or not, with the same entries or the same error on the same line', () => {
    fc.assert(
      fc.property(fc.array(line, { maxLength: 12 }), fc.array(damage, { maxLength: 3 }), (lines, d) => {
        const bytes = damaged(toBytes(lines), d)
        expectSame(bytes)
        expectSame(bytes, false)
      }),
      { numRuns: 1500 },
    )
  })

  it('takes the canonical shapes itself and leaves the rest to parseEntry', () => {
    const blob = 'ab'.repeat(32)
    const taken = (text: string): boolean => new LineScanner().take(Buffer.from(`${text}\n`), 0)
    expect(taken(`{"seq":1,"op":"write","path":"src/a.ts","blob":"${blob}","ts":0}`)).toBe(true)
    expect(taken('{"seq":9007199254740991,"op":"delete","path":"日本/ファイル","ts":9007199254740991}')).toBe(
      true,
    )
    expect(taken('{"seq":2,"op":"rename","from":"a","to":"b","ts":5}')).toBe(true)
    // Valid, but not a shape the scanner decides: parseEntry does.
    expect(taken('{"seq":2,"op":"rename","from":"a","to":"\\u0062","ts":5}')).toBe(false)
    expect(taken('{"op":"delete","seq":2,"path":"a","ts":5}')).toBe(false)
    expect(taken('{"seq":1e0,"op":"delete","path":"a","ts":5}')).toBe(false)
    expect(taken('{"seq":9007199254740992,"op":"delete","path":"a","ts":5}')).toBe(false)
    expect(taken('{"seq":2,"op":"rename","from":"a","to":"a","ts":5}')).toBe(false)
    expect(taken(`{"seq":1,"op":"write","path":"a/./b","blob":"${blob}","ts":0}`)).toBe(false)
    expect(taken(`{"seq":1,"op":"write","path":"a","blob":"${blob.toUpperCase()}","ts":0}`)).toBe(false)
    expect(taken(`{"seq":1,"op":"write","path":"a","blob":"${blob}","ts":0} `)).toBe(false)
    for (const l of [
      '{"seq":2,"op":"rename","from":"a","to":"\\u0062","ts":5}',
      '{"op":"delete","seq":2,"path":"a","ts":5}',
      '{"seq":1e0,"op":"delete","path":"a","ts":5}',
      `{"seq":1,"op":"write","path":"a","blob":"${blob}","ts":0}\r`,
    ]) {
      expectSame(toBytes([l]))
    }
  })

  it('treats two invalid UTF-8 sequences that decode alike as the same path', () => {
    const bytes = Buffer.concat([
      Buffer.from('{"seq":1,"op":"rename","from":"a'),
      Buffer.from([0xff]),
      Buffer.from('","to":"a'),
      Buffer.from([0xfe]),
      Buffer.from('","ts":5}\n'),
    ])
    expect(scanned(bytes)).toMatchObject({ line: 1, message: 'to: must differ from from' })
    expectSame(bytes)
  })
})

/** verifyLog as it was: decode, split, parseEntry each line; bytes counted on the raw file. */
function referenceVerify(bytes: Buffer) {
  const report = { ok: true, entries: 0, firstSeq: 0, lastSeq: 0, lastTs: 0, bytes: 0, tornTailBytes: 0 }
  const end = bytes.lastIndexOf(0x0a) + 1
  const lines = end > 0 ? bytes.toString('utf8', 0, end - 1).split('\n') : []
  let offset = 0
  const fail = (line: number, reason: string) => ({ ...report, ok: false, problem: { line, reason } })
  for (let i = 0; i < lines.length; i++) {
    const next = bytes.indexOf(0x0a, offset) + 1
    report.bytes += next - offset
    offset = next
    const l = lines[i] as string
    if (l.length === 0) return fail(i + 1, 'empty line')
    let e: Entry
    try {
      e = parseEntry(l)
    } catch (err) {
      return fail(i + 1, (err as Error).message)
    }
    if (report.entries > 0 && e.seq <= report.lastSeq)
      return fail(i + 1, `seq ${e.seq} does not increase (previous ${report.lastSeq})`)
    if (report.entries > 0 && e.ts < report.lastTs)
      return fail(i + 1, `ts ${e.ts} goes back (previous ${report.lastTs})`)
    if (report.entries === 0) report.firstSeq = e.seq
    report.entries++
    report.lastSeq = e.seq
    report.lastTs = e.ts
  }
  if (end < bytes.length) {
    report.tornTailBytes = bytes.length - end
    return fail(
      lines.length + 1,
      `partial last line (${report.tornTailBytes} bytes without a newline): a torn write; recover cuts it`,
    )
  }
  return report
}

describe('verify and the reader through the scanner', () => {
  it('verify reports exactly what the line-by-line scan reports, and the reader agrees', async () => {
    const dir = tempDir()
    let k = 0
    const good = fc
      .array(fc.tuple(entryObject, fc.integer({ min: 0, max: 3 }), fc.integer({ min: -1, max: 2 })), {
        maxLength: 20,
      })
      .map((xs) => {
        let seq = 0
        let ts = 100
        return xs.map(([{ body }, ds, dt]) => {
          seq += ds
          ts += dt
          try {
            return formatLine(seq, encodeBody(body), ts).slice(0, -1)
          } catch {
            return JSON.stringify({ seq, ...body, ts })
          }
        })
      })
    await fc.assert(
      fc.asyncProperty(good, fc.array(damage, { maxLength: 2 }), fc.boolean(), async (lines, d, torn) => {
        let bytes = damaged(toBytes(lines), d)
        if (torn) bytes = Buffer.concat([bytes, Buffer.from('{"seq":')])
        const file = join(dir, `w${k++}.log`)
        writeFileSync(file, bytes)
        const { file: _, ...report } = await verifyLog(file)
        expect(report).toEqual(referenceVerify(bytes))
        const read: Entry[] = []
        let problem: string | undefined
        try {
          for await (const batch of readEntryBatches(file)) read.push(...batch)
        } catch (err) {
          if (!isNoaError(err)) throw err
          problem = err.message
        }
        const want = reference(bytes)
        if ('entries' in want) expect(read).toEqual(want.entries)
        else expect(problem).toBe(`${file}:${want.line}: corrupt entry: ${want.message}`)
      }),
      { numRuns: 400 },
    )
  })

  it('counts lines across chunks for the error, however long the log', async () => {
    const dir = tempDir()
    const file = join(dir, 'long.log')
    const blob = 'cd'.repeat(32)
    const lines: string[] = []
    for (let seq = 1; seq <= 30_000; seq++) {
      lines.push(
        formatLine(seq, encodeBody({ op: 'write', path: `dir-${seq % 50}/file-${seq}.ts`, blob }), seq).slice(
          0,
          -1,
        ),
      )
    }
    lines[25_000] = lines[25_000]?.replace('dir-', '../dir-') as string
    writeFileSync(file, toBytes(lines))
    const report = await verifyLog(file)
    expect(report.problem).toEqual({
      line: 25_001,
      reason: expect.stringMatching(/^path: has a '\.\.' segment/),
    })
    await expect(async () => {
      for await (const _ of readEntryBatches(file)) {
      }
    }).rejects.toThrow(`${file}:25001: corrupt entry: path: has a '..' segment`)
  })
})

describe('reading a large log on two threads', () => {
  /** Runs `fn` with every read of at least `bytes` on a scanning thread. */
  async function withThreads<T>(bytes: number, fn: () => Promise<T>): Promise<T> {
    const before = setThreadPolicy({ minBytes: bytes, whenBusy: true })
    try {
      return await fn()
    } finally {
      setThreadPolicy(before)
    }
  }

  async function readAll(file: string, options: { fromSeq?: number; validate?: boolean } = {}) {
    const entries: Entry[] = []
    try {
      for await (const batch of readEntryBatches(file, options)) entries.push(...batch)
    } catch (err) {
      if (!isNoaError(err)) throw err
      return { entries, error: err.message }
    }
    return { entries }
  }

  /** One thread and two read the file alike: same entries, or the same error after the same entries. */
  async function expectSameOnThreads(file: string, options: { fromSeq?: number; validate?: boolean } = {}) {
    const one = await withThreads(Number.MAX_SAFE_INTEGER, () => readAll(file, options))
    const slots = threadStats.slots
    const two = await withThreads(0, () => readAll(file, options))
    expect(threadStats.slots).toBeGreaterThan(slots)
    expect(two.error).toBe(one.error)
    if (one.error === undefined) expect(two.entries.length).toBe(one.entries.length)
    // Before an error each gives the batches it finished, and batches need not end alike.
    const n = Math.min(one.entries.length, two.entries.length)
    expect(JSON.stringify(two.entries.slice(0, n))).toBe(JSON.stringify(one.entries.slice(0, n)))
    const { file: _a, ...v1 } = await withThreads(Number.MAX_SAFE_INTEGER, () => verifyLog(file))
    const ranges = threadStats.verifiedRanges
    const { file: _b, ...v2 } = await withThreads(0, () => verifyLog(file))
    expect(threadStats.verifiedRanges).toBe(ranges + 1)
    expect(v2).toEqual(v1)
    return one
  }

  /** Lines of every shape, about `bytes` of them, seq from 1. */
  function logLines(count: number, shape: (seq: number) => string): string[] {
    return Array.from({ length: count }, (_, i) => shape(i + 1))
  }
  const blob = 'ef'.repeat(32)
  const mixed = (seq: number): string => {
    const path = seq % 7 === 0 ? `日本/ファイル-${seq}` : `src/m${seq % 97}/f-${seq}.ts`
    if (seq % 11 === 0) return `{"seq":${seq},"op":"delete","path":"${path}","ts":${seq * 3}}`
    if (seq % 13 === 0) return `{"seq":${seq},"op":"rename","from":"${path}","to":"x/${seq}","ts":${seq * 3}}`
    if (seq % 17 === 0) return JSON.stringify({ op: 'write', seq, path: `a\\"b${seq}`, blob, ts: seq * 3 })
    if (seq % 19 === 0)
      return `{"seq":${seq},"op":"snapshot","snapshot_id":"noa_${seq}","message":"m","ts":${seq * 3}}`
    return `{"seq":${seq},"op":"write","path":"${path}","blob":"${blob}","ts":${seq * 3}}`
  }

  it('gives the same entries, in order, across many slots, with fromSeq and without validation', async () => {
    const file = join(tempDir(), 'big.log')
    writeFileSync(file, toBytes(logLines(60_000, mixed))) // ~5 MB: more slots than there are
    const { entries } = await expectSameOnThreads(file)
    expect(entries.length).toBe(60_000)
    await expectSameOnThreads(file, { fromSeq: 31_234 })
    await expectSameOnThreads(file, { validate: false })
  })

  it('cuts a slot of very short lines at its record limit, and numbers lines on across it', async () => {
    const file = join(tempDir(), 'short.log')
    const lines = logLines(70_000, (seq) => `{"seq":${seq},"op":"delete","path":"a","ts":1}`)
    lines.splice(50_000, 0, '', '') // blank lines: skipped by the reader, refused by verify
    lines[65_000] = '{"seq":65000,"op":"delete","path":"a/","ts":1}'
    writeFileSync(file, toBytes(lines))
    const { error } = await expectSameOnThreads(file)
    expect(error).toBe(`${file}:65001: corrupt entry: path: has an empty segment in "a/"`)
  })

  it('reads on by itself past a line longer than a slot', async () => {
    const file = join(tempDir(), 'long-line.log')
    const lines = logLines(20_000, mixed)
    // Valid JSON and a valid entry, padded with whitespace past the slot size.
    lines[12_000] = `{"seq":12001,${' '.repeat(3 << 20)}"op":"delete","path":"p","ts":36003}`
    lines[15_000] = `${lines[15_000]?.slice(0, -1)},"extra":1}`
    writeFileSync(file, toBytes(lines))
    const bails = threadStats.bails
    const { error } = await expectSameOnThreads(file)
    expect(threadStats.bails).toBe(bails + 1)
    expect(error).toMatch(new RegExp(`^${file}:15001: corrupt entry: extra: is not a field of`))
  })

  it('stops the thread when the reader is left early, and reads a torn tail as the single thread does', async () => {
    const file = join(tempDir(), 'torn.log')
    writeFileSync(file, `${toBytes(logLines(40_000, mixed))}{"seq":40001,"op":"del`)
    await expectSameOnThreads(file)
    await withThreads(0, async () => {
      for await (const batch of readEntryBatches(file)) {
        expect(batch[0]?.seq).toBe(1)
        break
      }
    })
  })

  it('verify joins the halves exactly: a problem on either side of the split or on the line at it', async () => {
    const dir = tempDir()
    const lines = logLines(30_000, mixed)
    const size = Buffer.byteLength(toBytes(lines))
    // The line at the split (the first line starting at or after the middle byte) and its neighbours.
    let at = 0
    let k = 0
    while (at < size / 2) at += Buffer.byteLength(lines[k++] as string) + 1
    const line = (ls: string[], i: number): string => ls[i] as string
    // Each case: the lines to change (index → new text).
    const cases: Array<[string, (ls: string[]) => Record<number, string>]> = [
      ['clean', () => ({})],
      ['seq back at the split', (ls) => ({ [k]: line(ls, k).replace(`"seq":${k + 1},`, `"seq":${k},`) })],
      ['ts back at the split', (ls) => ({ [k]: line(ls, k).replace(/"ts":\d+}$/, '"ts":0}') })],
      ['bad line at the split', () => ({ [k]: '{"seq":' })],
      ['blank line at the split', () => ({ [k]: '' })],
      ['problem before the split', () => ({ [k - 2]: '[]' })],
      ['problems on both sides', () => ({ [k - 2]: '[]', [k + 5]: 'x' })],
      ['problem after the split', (ls) => ({ [k + 5]: line(ls, k + 5).replace('"seq":', '"seq":-') })],
    ]
    for (const [name, change] of cases) {
      const ls = [...lines]
      for (const [i, text] of Object.entries(change(ls))) ls[Number(i)] = text
      const file = join(dir, `${name.replaceAll(' ', '-')}.log`)
      writeFileSync(file, toBytes(ls))
      const bytes = toBytes(ls)
      const { file: _, ...two } = await withThreads(0, () => verifyLog(file))
      expect(two, name).toEqual(referenceVerify(bytes))
    }
  })
})
