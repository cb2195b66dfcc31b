/**
 * state.json and archives at the edges of Go's encoding/json and of Norma's RenderArchive: the
 * expected texts are what Norma v0.4.3's own state store and RenderArchive produced for the same
 * input (run once, outside the project); the tests need no Go.
 */
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  type ArchiveDocument,
  decodeState,
  encodeState,
  isNoaError,
  parseArchive,
  renderArchive,
  renderArchiveUnchecked,
} from '../../dist/src/index.js'

const F = '\ufffd'
const file = Buffer.concat([
  Buffer.from('{"version":1,"sessionId":"s'),
  Buffer.from([0xe2, 0x82]),
  Buffer.from(
    String.raw`","nextBlockId":9007199254740993,"blocks":[{"blockId":"b1","tier":1,"summary":"\ud800x","createdAt":9007199254740993,"compressedTokens":9223372036854775807,"active":true,"zzz":1}],"Blocks":[{"topic":"merged"}],"messageRefs":{"byRaw":{"h_1":"m00001"}},"messageRefs":{"byRaw":{"h_2":"m00002"},"BYREF":{"m00001":"h_1"}},"nudge":{"lastShownByTier":{"1":10}},"nudge":{"lastShownByTier":{"2":20," 3x":30,"x":1}},"stats":{"tokensCompressed":1},"derivedFrom":"parent","future":true}`,
  ),
])

const goSaved = `{
  "version": 1,
  "sessionId": "s${F}${F}",
  "nextBlockId": 9007199254740993,
  "blocks": [
    {
      "blockId": "b1",
      "tier": 1,
      "topic": "merged",
      "summary": "${F}x",
      "compressedTokens": 9223372036854775807,
      "createdAt": 9007199254740993,
      "active": true
    }
  ],
  "messageRefs": {
    "byRaw": {
      "h_1": "m00001",
      "h_2": "m00002"
    },
    "byRef": {
      "m00001": "h_1"
    }
  },
  "nudge": {
    "lastPerMessageNudgeTokens": 0,
    "lastNudgeShownTokens": 0,
    "lastShownByTier": {
      "1": 10,
      "2": 20,
      "3": 30
    }
  },
  "stats": {
    "tokensCompressed": 1,
    "compressionCount": 0
  }
}`

describe('state.json in Norma mode', () => {
  it("load and save writes what Norma's load and save writes: merged repeats, int64, U+FFFD, folded keys, no derivedFrom", () => {
    const { state, unknownKeys } = decodeState(file, 'SID', '/root/x', 'state.json', { strict: true })
    expect(encodeState(state)).toBe(goSaved)
    expect(state.nextBlockId).toBe(9007199254740993n)
    expect(state.blocks[0]?.createdAt).toBe(9007199254740993n)
    expect(unknownKeys).toEqual(['future', 'blocks.zzz'])
  })

  it('by default noa keeps derivedFrom (written last), which Norma drops', () => {
    const { state } = decodeState(file, 'SID', '/root/x')
    expect(state.derivedFrom).toBe('parent')
    expect(encodeState(state)).toBe(`${goSaved.slice(0, -2)},\n  "derivedFrom": "parent"\n}`)
  })

  it("a derivedFrom of the wrong type fails the load, as in Go (Norma's struct has the field)", () => {
    try {
      decodeState('{"version":1,"derivedFrom":5}', 'SID', '/root/x', 'state.json', { strict: true })
      expect.unreachable()
    } catch (err) {
      expect(isNoaError(err, 'NOA_BAD_STATE')).toBe(true)
      expect((err as Error).message).toBe(
        'state.json: parse state file: json: cannot unmarshal number into Go struct field stateFile.derivedFrom of type string',
      )
    }
  })

  it('refuses a float or an int past int64 in Go words', () => {
    for (const [text, go] of [
      ['{"version":1,"blocks":[{"tier":2.0}]}', 'number 2.0 into Go struct field blockJSON.blocks.tier'],
      ['{"version":1,"tokenSnapshot":{"m1":1e2}}', 'number 1e2 into Go struct field stateFile.tokenSnapshot'],
      [
        '{"version":1,"stats":{"tokensCompressed":9223372036854775808}}',
        'number 9223372036854775808 into Go struct field statsJSON.stats.tokensCompressed',
      ],
    ] as const) {
      expect(() => decodeState(text, 'SID', '/r', 'state.json', { strict: true })).toThrow(
        `state.json: parse state file: json: cannot unmarshal ${go} of type int`,
      )
    }
  })
})

const base: ArchiveDocument = {
  blockId: 'b1',
  tier: 1,
  session: 'sess',
  created: '',
  startRef: 'm00001',
  endRef: 'm00002',
  originalTokens: 3,
  topic: '',
  summary: 'sum',
  entries: [{ kind: 'message', ref: 'm00001', role: 'user', type: 'text', toolName: '', text: 'hi' }],
}

describe('archives', () => {
  it('9. a session id holding a newline renders as Go does and reads back', () => {
    const doc = { ...base, session: 'a\nrange: b', topic: 'two\nlines' }
    const goText =
      '---\nblock: b1\ntier: 1\nsession: a\nrange: b\nrange: m00001-m00002\nmessage_count: 1\noriginal_tokens: 3\ntopic: two\nlines\n---\n\n' +
      '# Archive b1 · Tier 1 · m00001–m00002\n\n**Summary** (the version currently active in context):\n\n> sum\n\n---\n\n## m00001 · user\n\nhi\n\n'
    expect(renderArchive(doc)).toBe(goText)
    expect(parseArchive(goText)).toEqual(doc)
  })

  it('refuses, naming the field, a document the text cannot give back', () => {
    const refused = (doc: ArchiveDocument, field: string) => {
      try {
        renderArchive(doc)
        expect.unreachable()
      } catch (err) {
        expect(isNoaError(err, 'NOA_BAD_ARCHIVE')).toBe(true)
        expect((err as { details: { field: string } }).details.field).toBe(field)
        expect((err as Error).message).toMatch(/^archive of block "b1": /)
      }
    }
    // The fence adds a final newline: a body without one reads back with it.
    refused(
      {
        ...base,
        entries: [
          { kind: 'message', ref: 'm00001', role: 'assistant', type: 'tool_use', toolName: 'R', text: '{}' },
        ],
      },
      'entries[0].text',
    )
    refused({ ...base, summary: ' padded ' }, 'summary')
    refused({ ...base, tier: 1.5 }, 'tier')
    // A text body holding what reads as the next heading.
    refused(
      {
        ...base,
        entries: [
          {
            kind: 'message',
            ref: 'm00001',
            role: 'user',
            type: 'text',
            toolName: '',
            text: 'a\n\n## m00002 · user\n\nb',
          },
          { kind: 'message', ref: 'm00003', role: 'user', type: 'text', toolName: '', text: 'c' },
        ],
      },
      'entries[0].text',
    )
    // Norma's renderer writes any of them.
    expect(renderArchiveUnchecked({ ...base, summary: ' padded ' })).toContain('> padded\n')
  })

  it('property: parseArchive(renderArchive(doc)) equals doc for every document it accepts; the others are refused by name', () => {
    const text = fc.string({
      unit: fc.constantFrom(
        'a',
        '`',
        '\n',
        '#',
        ' ',
        '·',
        '–',
        '*',
        '>',
        'm',
        '0',
        '-',
        '## m00002 · user',
        '---',
      ),
      maxLength: 12,
    })
    const ref = fc.constantFrom('', 'm00001', 'm00002', 'a-b')
    const entry = fc.oneof(
      fc.record({
        kind: fc.constant('message' as const),
        ref,
        role: fc.constantFrom('user', 'assistant', 'tool'),
        type: fc.constantFrom(
          'text' as const,
          'thinking' as const,
          'tool_use' as const,
          'tool_result' as const,
        ),
        toolName: fc.constantFrom('', 'Bash', 'tool'),
        text,
      }),
      fc
        .record({
          kind: fc.constant('block' as const),
          blockId: fc.constantFrom('b1', 'b2'),
          tier: fc.constantFrom(1, 2),
          startRef: ref,
          endRef: ref,
          topic: fc.constantFrom('', 'topic', 'a\nb'),
          summary: fc.constantFrom('', 'one', '**bold**\n\nmore'),
          childRel: fc.constantFrom('', 'tier1/b1_m00001-m00002.md', 'flat.md'),
          absolutePath: fc.constantFrom('', '/abs/x.md'),
        })
        .map((b) => ({ ...b, childLink: b.childRel.includes('/') ? `../${b.childRel}` : b.childRel })),
    )
    let accepted = 0
    fc.assert(
      fc.property(
        fc.record({
          blockId: fc.constantFrom('b1', 'b3'),
          tier: fc.constantFrom(1, 2, 3),
          session: fc.constantFrom('', 'sess', 'a\nb', 'x\nrange: y'),
          created: fc.constantFrom('', '2024-06-05T15:00:00+02:00'),
          startRef: ref,
          endRef: ref,
          originalTokens: fc.nat(),
          topic: fc.constantFrom('', 'topic', 'two\nlines'),
          summary: fc.constantFrom('', 'short', 'a\n\nb', ' untrimmed'),
          entries: fc.array(entry, { maxLength: 4 }),
        }),
        (doc) => {
          let out: string
          try {
            out = renderArchive(doc)
          } catch (err) {
            expect(isNoaError(err, 'NOA_BAD_ARCHIVE')).toBe(true)
            expect((err as { details: { field?: string } }).details.field).toMatch(
              /^[a-zA-Z]+(\[\d+\](\.[a-zA-Z]+)?)?$/,
            )
            return
          }
          accepted++
          expect(out).toBe(renderArchiveUnchecked(doc))
          expect(parseArchive(out)).toEqual(doc)
        },
      ),
      { numRuns: 400 },
    )
    // Most documents are plain enough to come back whole.
    expect(accepted).toBeGreaterThan(100)
  })
})
