/**
 * Property: noa's encoding of a state equals a model of Go's `json.MarshalIndent(toFile(st), "",
 * "  ")` written here from Go's documented rules (struct order, omitempty, maps sorted by key
 * bytes, HTML-safe strings), and decoding then encoding is idempotent.
 */
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { type CompressionState, decodeState, encodeState } from '../../dist/src/index.js'

type Node = string | { obj: Array<[string, Node]> } | { arr: Node[] }

function goString(s: string): string {
  let out = '"'
  for (const ch of s) {
    const c = ch.codePointAt(0) as number
    if (ch === '"' || ch === '\\') out += `\\${ch}`
    else if (ch === '\n') out += '\\n'
    else if (ch === '\r') out += '\\r'
    else if (ch === '\t') out += '\\t'
    else if (ch === '\b') out += '\\b'
    else if (ch === '\f') out += '\\f'
    else if (c < 0x20 || ch === '<' || ch === '>' || ch === '&')
      out += `\\u${c.toString(16).padStart(4, '0')}`
    else if (c === 0x2028 || c === 0x2029) out += `\\u${c.toString(16)}`
    else if (c >= 0xd800 && c <= 0xdfff) out += '\\ufffd'
    else out += ch
  }
  return `${out}"`
}

/** Go sorts map keys by their UTF-8 bytes. */
const byBytes = (a: [string, unknown], b: [string, unknown]) =>
  Buffer.compare(Buffer.from(a[0]), Buffer.from(b[0]))

function indent(n: Node, depth: number): string {
  if (typeof n === 'string') return n
  const pad = '  '.repeat(depth + 1)
  const close = '  '.repeat(depth)
  if ('arr' in n)
    return n.arr.length === 0
      ? '[]'
      : `[\n${n.arr.map((x) => pad + indent(x, depth + 1)).join(',\n')}\n${close}]`
  return n.obj.length === 0
    ? '{}'
    : `{\n${n.obj.map(([k, v]) => `${pad}${goString(k)}: ${indent(v, depth + 1)}`).join(',\n')}\n${close}}`
}

const I = (n: number | bigint) => String(n)
const sortedMap = <V>(m: Map<string, V>, f: (v: V) => Node): Node => ({
  obj: [...m].sort(byBytes).map(([k, v]) => [k, f(v)]),
})

function model(s: CompressionState): string {
  const root: Array<[string, Node]> = [
    ['version', '1'],
    ['sessionId', goString(s.sessionId)],
    ['nextBlockId', I(s.nextBlockId)],
    [
      'blocks',
      s.blocks.length === 0
        ? 'null'
        : {
            arr: s.blocks.map((b) => {
              const f: Array<[string, Node | undefined]> = [
                ['blockId', goString(b.blockId)],
                ['tier', I(b.tier)],
                ['topic', b.topic ? goString(b.topic) : undefined],
                ['summary', goString(b.summary)],
                [
                  'directMessageIds',
                  b.directMessageIds.length ? { arr: b.directMessageIds.map(goString) } : undefined,
                ],
                [
                  'effectiveMessageIds',
                  b.effectiveMessageIds.length ? { arr: b.effectiveMessageIds.map(goString) } : undefined,
                ],
                [
                  'directBlockIds',
                  b.directBlockIds.length ? { arr: b.directBlockIds.map(goString) } : undefined,
                ],
                ['archivePath', b.archivePath ? goString(b.archivePath) : undefined],
                ['archiveRel', b.archiveRel ? goString(b.archiveRel) : undefined],
                ['compressedTokens', I(b.compressedTokens)],
                ['startRef', b.startRef ? goString(b.startRef) : undefined],
                ['endRef', b.endRef ? goString(b.endRef) : undefined],
                ['createdAt', b.createdAt !== 0 ? I(b.createdAt) : undefined],
                ['active', String(b.active)],
                ['compressCallId', b.compressCallId ? goString(b.compressCallId) : undefined],
              ]
              return { obj: f.filter((x): x is [string, Node] => x[1] !== undefined) }
            }),
          },
    ],
    [
      'messageRefs',
      {
        obj: [
          ['byRaw', sortedMap(s.messageRefs.byRaw, goString)],
          ['byRef', sortedMap(s.messageRefs.byRef, goString)],
        ],
      },
    ],
  ]
  if (s.tokenSnapshot.size > 0) root.push(['tokenSnapshot', sortedMap(s.tokenSnapshot, I)])
  const nudge: Array<[string, Node]> = [
    ['lastPerMessageNudgeTokens', I(s.nudge.lastPerMessageNudgeTokens)],
    ['lastNudgeShownTokens', I(s.nudge.lastNudgeShownTokens)],
  ]
  // toFile always makes the map; omitempty leaves an empty one out.
  if (s.nudge.lastShownByTier.size > 0)
    nudge.push([
      'lastShownByTier',
      sortedMap(new Map([...s.nudge.lastShownByTier].map(([k, v]) => [I(k), v])), I),
    ])
  root.push(['nudge', { obj: nudge }])
  root.push([
    'stats',
    {
      obj: [
        ['tokensCompressed', I(s.stats.tokensCompressed)],
        ['compressionCount', I(s.stats.compressionCount)],
      ],
    },
  ])
  return indent({ obj: root }, 0)
}

const text = fc.string({
  unit: fc.constantFrom('a', 'Z', '"', '\\', '\n', '\b', '\u0001', '<', '&', '\u2028', 'é', '😀', 'Ω', '~'),
  maxLength: 6,
})
const int = fc.oneof(
  fc.integer({ min: -3, max: 3 }),
  fc
    .bigInt({ min: -(1n << 63n), max: (1n << 63n) - 1n })
    .map((v) =>
      v >= BigInt(-Number.MAX_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v,
    ),
)
const ids = fc.array(text, { maxLength: 3 })
const state: fc.Arbitrary<CompressionState> = fc.record({
  sessionId: text.filter((s) => s !== ''),
  archiveRoot: fc.constant('/root/x'),
  nextBlockId: int.filter((n) => n >= 1),
  blocks: fc.array(
    fc.record({
      blockId: text,
      tier: int,
      topic: text,
      summary: text,
      directMessageIds: ids,
      effectiveMessageIds: ids,
      directBlockIds: ids,
      archivePath: text,
      archiveRel: text,
      compressedTokens: int,
      startRef: text,
      endRef: text,
      createdAt: int,
      active: fc.boolean(),
      compressCallId: text,
    }),
    { maxLength: 3 },
  ),
  messageRefs: fc.record({
    byRaw: fc.array(fc.tuple(text, text)).map((e) => new Map(e)),
    byRef: fc.array(fc.tuple(text, text)).map((e) => new Map(e)),
  }),
  tokenSnapshot: fc.array(fc.tuple(text, int)).map((e) => new Map(e)),
  nudge: fc.record({
    lastPerMessageNudgeTokens: int,
    lastNudgeShownTokens: int,
    lastShownByTier: fc.array(fc.tuple(int, int)).map((e) => new Map(e)),
  }),
  stats: fc.record({ tokensCompressed: int, compressionCount: int }),
  derivedFrom: fc.constant(''),
})

describe("state.json against a model of Go's MarshalIndent", () => {
  it("noa's encoding of any state equals the model's", () => {
    fc.assert(
      fc.property(state, (s) => {
        expect(encodeState(s)).toBe(model(s))
      }),
      { numRuns: 300 },
    )
  })

  it('decoding then encoding is idempotent (Norma mode and default)', () => {
    fc.assert(
      fc.property(state, fc.boolean(), (s, strict) => {
        const text = encodeState(s)
        const back = decodeState(text, 'other', '/root/x', 'state.json', { strict }).state
        expect(encodeState(back)).toBe(text)
        expect(model(back)).toBe(text)
      }),
      { numRuns: 300 },
    )
  })
})
