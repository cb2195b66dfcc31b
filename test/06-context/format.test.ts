/**
 * Golden files: state.json and archives byte for byte against text built here by hand from
 * formats.md §c–d (Go's MarshalIndent, Norma's RenderArchive), and the archive reader's round trip.
 */
import { readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  type ArchiveDocument,
  type ArchiveEntry,
  ContextSession,
  countTokens,
  formatRfc3339,
  formatTokens,
  isNoaError,
  type Message,
  parseArchive,
  renderArchive,
  renderArchiveUnchecked,
} from '../../dist/src/index.js'
import { assistant, hid, NOW, NOW_UNIX, toolResult, user } from '../helpers/context-fixtures.js'
import { tempDir } from '../helpers/index.js'

const SID = 'sess-golden'
const ZONE = 120 // +02:00
const CREATED = '2024-06-05T15:00:00+02:00'

function open(base: string) {
  return ContextSession.open({
    baseDir: base,
    sessionId: SID,
    now: () => NOW,
    zone: ZONE,
    config: { minCompressRange: 0 },
  })
}

describe('tier 1 archive and its state', () => {
  const thinking = 'The build fails; check the log.'
  const said = "I'll read the log."
  const input = '{"command":"cat build.log"}'
  const output = 'error: ```\nmissing ; at line 3\n```'
  const conversation: Message[] = [
    user('Fix the build.'),
    {
      role: 'assistant',
      content: [
        { type: 'thinking', thinking, signature: 'sig' },
        { type: 'text', text: said },
        { type: 'tool_use', id: 'tu_1', name: 'Bash', input },
      ],
    },
    toolResult('tu_1', output),
    user('Thanks.'),
  ]
  const summary = 'Read build.log: missing ; in <main.c> & fix it.\nNext: rebuild.'

  it('writes the archive byte for byte, the tool output in a longer fence', () => {
    const base = tempDir()
    const s = open(base)
    const out = s.compress(conversation, [
      { startRef: 'm00002', endRef: 'm00005', summary, topic: 'build failure' },
    ])
    expect(out.result.errors).toEqual([])
    const root = join(base, SID)
    const file = join(root, 'tier1', 'b1_m00002-m00005.md')
    const expected = [
      '---',
      'block: b1',
      'tier: 1',
      `session: ${SID}`,
      `created: ${CREATED}`,
      'range: m00002-m00005',
      'message_count: 4',
      'original_tokens: 29',
      'topic: build failure',
      '---',
      '',
      '# Archive b1 · Tier 1 · m00002–m00005',
      '',
      '**Summary** (the version currently active in context):',
      '',
      '> Read build.log: missing ; in <main.c> & fix it.',
      '> Next: rebuild.',
      '',
      '---',
      '',
      '## m00002 · assistant · thinking',
      '',
      'The build fails; check the log.',
      '',
      '## m00003 · assistant',
      '',
      "I'll read the log.",
      '',
      '## m00004 · assistant · tool_use · Bash',
      '',
      '```json',
      '{"command":"cat build.log"}',
      '```',
      '',
      '## m00005 · tool_result · Bash',
      '',
      '````',
      'error: ```',
      'missing ; at line 3',
      '```',
      '````',
      '',
      '',
    ].join('\n')
    expect(readFileSync(file, 'utf8')).toBe(expected)
    expect(statSync(file).mode & 0o777).toBe(0o644)
    expect(out.panel).toBe(
      `▣ noa | ${formatTokens(out.beforeTokens)} → ${formatTokens(out.afterTokens)} tokens (~29 reclaimed)\n  b1(T1)=m00002–m00005 → ${file}`,
    )
  })

  it('writes state.json as Go MarshalIndent: sorted maps, escaped <>&, no trailing newline', () => {
    const base = tempDir()
    open(base).compress(conversation, [
      { startRef: 'm00002', endRef: 'm00005', summary, topic: 'build failure' },
    ])
    const root = join(base, SID)
    const ids = [
      hid('user', 'text', 'Fix the build.'),
      hid('assistant', 'reasoning', thinking),
      hid('assistant', 'text', said),
      hid('assistant', 'tool-call', input, 'tu_1', 'Bash'),
      hid('tool', 'tool-result', output, 'tu_1', 'Bash'),
      hid('user', 'text', 'Thanks.'),
    ]
    const refs = ids.map((id, i) => [id, `m0000${i + 1}`] as const)
    const byRaw = [...refs].sort((a, b) => (a[0] < b[0] ? -1 : 1))
    const direct = ids.slice(1, 5)
    const expected = `{
  "version": 1,
  "sessionId": "${SID}",
  "nextBlockId": 2,
  "blocks": [
    {
      "blockId": "b1",
      "tier": 1,
      "topic": "build failure",
      "summary": "Read build.log: missing ; in \\u003cmain.c\\u003e \\u0026 fix it.\\nNext: rebuild.",
      "directMessageIds": [
${direct.map((id) => `        "${id}"`).join(',\n')}
      ],
      "effectiveMessageIds": [
${direct.map((id) => `        "${id}"`).join(',\n')}
      ],
      "archivePath": "${root}/tier1/b1_m00002-m00005.md",
      "archiveRel": "tier1/b1_m00002-m00005.md",
      "compressedTokens": 29,
      "startRef": "m00002",
      "endRef": "m00005",
      "createdAt": ${NOW_UNIX},
      "active": true
    }
  ],
  "messageRefs": {
    "byRaw": {
${byRaw.map(([id, ref]) => `      "${id}": "${ref}"`).join(',\n')}
    },
    "byRef": {
${refs.map(([id, ref]) => `      "${ref}": "${id}"`).join(',\n')}
    }
  },
  "nudge": {
    "lastPerMessageNudgeTokens": 0,
    "lastNudgeShownTokens": 0
  },
  "stats": {
    "tokensCompressed": 29,
    "compressionCount": 1
  }
}`
    const file = join(root, 'state.json')
    expect(readFileSync(file, 'utf8')).toBe(expected)
    expect(statSync(file).mode & 0o777).toBe(0o644)
  })
})

describe('tier 2 archive absorbing two blocks and a loose message', () => {
  const conversation: Message[] = [
    user('Task: refactor.'),
    assistant('Step one.'),
    assistant('Step one done.'),
    assistant('Step two.'),
    assistant('Step two done.'),
    user('Loose message.'),
  ]

  it('writes absorbed-block sections with relative link and absolute path, messages at ###', () => {
    const base = tempDir()
    const s = open(base)
    s.compress(conversation, [
      { startRef: 'm00002', endRef: 'm00003', summary: 'Did step one.', topic: 'one' },
    ])
    s.compress(conversation, [{ startRef: 'm00004', endRef: 'm00005', summary: 'Did step two.', topic: '' }])
    const out = s.compress(conversation, [
      { startRef: 'b1', endRef: 'm00006', summary: 'Steps one and two done; user wrote.', topic: 'refactor' },
    ])
    expect(out.result.errors).toEqual([])
    const root = join(base, SID)
    const file = join(root, 'tier2', 'b3_m00002-m00006.md')
    const expected = `---
block: b3
tier: 2
session: ${SID}
created: ${CREATED}
range: m00002-m00006
consumed_blocks: [b1, b2]
loose_messages: 1
original_tokens: 12
topic: refactor
---

# Archive b3 · Tier 2 · m00002–m00006

**Summary** (the version currently active in context):

> Steps one and two done; user wrote.

---

## b1 · Tier 1 · m00002–m00003

**one**

Did step one.

> Child archive: [\`tier1/b1_m00002-m00003.md\`](../tier1/b1_m00002-m00003.md)
> Absolute path: \`${root}/tier1/b1_m00002-m00003.md\`

## b2 · Tier 1 · m00004–m00005

Did step two.

> Child archive: [\`tier1/b2_m00004-m00005.md\`](../tier1/b2_m00004-m00005.md)
> Absolute path: \`${root}/tier1/b2_m00004-m00005.md\`

### m00006 · user

Loose message.

`
    const text = readFileSync(file, 'utf8')
    expect(text).toBe(expected)
    expect(out.panel.split('\n')[1]).toBe(`  b3(T2)=m00002–m00006 → ${file}`)
    // b1 and b2 were absorbed: inactive, b3 covers everything they did plus the loose message.
    expect(s.state.blocks.map((b) => [b.blockId, b.tier, b.active])).toEqual([
      ['b1', 1, false],
      ['b2', 1, false],
      ['b3', 2, true],
    ])
    const b3 = s.state.blocks[2]
    expect(b3?.directBlockIds).toEqual(['b1', 'b2'])
    expect(b3?.directMessageIds).toEqual([hid('user', 'text', 'Loose message.')])
    expect(b3?.effectiveMessageIds).toHaveLength(5)
    expect(b3?.compressedTokens).toBe(12) // "Loose message." 4 + the two summaries 4 + 4
    expect(renderArchive(parseArchive(text))).toBe(text)
    const doc = parseArchive(text)
    expect(doc.entries.map((e) => (e.kind === 'block' ? e.blockId : e.ref))).toEqual(['b1', 'b2', 'm00006'])
  })
})

describe('archive reader', () => {
  it('reads every part of a tier 1 archive back', () => {
    const text = [
      '---',
      'block: b7',
      'tier: 1',
      'range: m00010-m00012',
      'message_count: 3',
      'original_tokens: 5',
      '---',
      '',
      '# Archive b7 · Tier 1 · m00010–m00012',
      '',
      '---',
      '',
      '## (unaddressed) · user',
      '',
      'hello',
      '## m00009 · user',
      '',
      '',
      '## m00011 · assistant · tool_use · Read',
      '',
      '```json',
      '{}',
      '```',
      '',
      '## m00012 · tool_result · tool',
      '',
      '```',
      '',
      '```',
      '',
      '',
    ].join('\n')
    const doc = parseArchive(text)
    expect(doc).toMatchObject({ blockId: 'b7', tier: 1, session: '', created: '', topic: '', summary: '' })
    // The text body holds a line that looks like a heading: the counts decide it is not one.
    expect(doc.entries).toEqual([
      {
        kind: 'message',
        ref: '',
        role: 'user',
        type: 'text',
        toolName: '',
        text: 'hello\n## m00009 · user\n',
      },
      { kind: 'message', ref: 'm00011', role: 'assistant', type: 'tool_use', toolName: 'Read', text: '{}\n' },
      { kind: 'message', ref: 'm00012', role: 'tool', type: 'tool_result', toolName: 'tool', text: '\n' },
    ])
    expect(renderArchive(doc)).toBe(text)
  })

  it('refuses what Norma would not write, naming the line', () => {
    const good = renderArchive({
      blockId: 'b1',
      tier: 1,
      session: 's',
      created: '',
      startRef: 'm00001',
      endRef: 'm00001',
      originalTokens: 1,
      topic: '',
      summary: 'x',
      entries: [{ kind: 'message', ref: 'm00001', role: 'user', type: 'text', toolName: '', text: 'hi' }],
    })
    const bad = (text: string, pattern: RegExp) => {
      try {
        parseArchive(text, { file: 'a.md' })
        expect.unreachable()
      } catch (err) {
        expect(isNoaError(err, 'NOA_BAD_ARCHIVE')).toBe(true)
        expect((err as Error).message).toMatch(pattern)
      }
    }
    bad(
      good.replace('range: m00001-m00001', 'range: m00001-m00002'),
      /^a\.md:\d+: heading .* does not match the frontmatter/,
    )
    bad(good.replace('tier: 1', 'tier: one'), /^a\.md:3: tier must be an integer/)
    bad(
      good.replace('message_count: 1', 'message_count: 2'),
      /^a\.md:\d+: the entries do not match the frontmatter/,
    )
    bad(good.replace('## m00001 · user', '## m00001 user'), /expected an entry heading/)
    bad(good.slice(0, -1), /a\.md:\d+:/)
    bad(`${good}extra`, /a\.md:\d+:/)
  })

  const arbText = fc.string({
    unit: fc.constantFrom('a', 'b', '`', '\n', '#', ' ', '·', '–', '*', '>', 'm', '0', '1', '-'),
  })
  const arbRef = fc.constantFrom('', 'm00001', 'm00002', 'm99999')
  const arbMessage: fc.Arbitrary<ArchiveEntry> = fc.record({
    kind: fc.constant('message' as const),
    ref: arbRef,
    role: fc.constantFrom('user', 'assistant', 'tool'),
    type: fc.constantFrom('text' as const, 'thinking' as const, 'tool_use' as const, 'tool_result' as const),
    toolName: fc.constantFrom('', 'Bash', 'tool', 'My Tool'),
    text: arbText,
  })
  const arbBlock: fc.Arbitrary<ArchiveEntry> = fc.record({
    kind: fc.constant('block' as const),
    blockId: fc.constantFrom('b1', 'b2', 'b10'),
    tier: fc.constantFrom(1, 2),
    startRef: arbRef,
    endRef: arbRef,
    topic: fc.constantFrom('', 'topic', '**x**'),
    summary: fc.constantFrom('', 'one line', 'two\nlines', '**bold**\n\nmore'),
    childRel: fc.constantFrom('', 'tier1/b1_m00001-m00002.md', 'flat.md'),
    childLink: fc.constant(''),
    absolutePath: fc.constantFrom('', '/abs/tier1/b1.md'),
  })

  it('round trip: the text of any document reads back to a document of the same text', () => {
    fc.assert(
      fc.property(
        fc.record({
          blockId: fc.constantFrom('b1', 'b3'),
          tier: fc.constantFrom(1, 2, 3),
          session: fc.constantFrom('', 'sess'),
          created: fc.constantFrom('', '2024-06-05T15:00:00+02:00'),
          startRef: arbRef,
          endRef: arbRef,
          originalTokens: fc.nat(),
          topic: fc.constantFrom('', 'topic'),
          summary: fc.constantFrom('', 'short', 'a\n\nb'),
          entries: fc.array(fc.oneof(arbMessage, arbBlock), { maxLength: 5 }),
        }),
        (raw) => {
          const doc: ArchiveDocument = {
            ...raw,
            entries: raw.entries.map((e) =>
              e.kind === 'block'
                ? { ...e, childLink: e.childRel.includes('/') ? `../${e.childRel}` : e.childRel }
                : e,
            ),
          }
          const text = renderArchiveUnchecked(doc)
          expect(renderArchiveUnchecked(parseArchive(text))).toBe(text)
        },
      ),
      { numRuns: 300 },
    )
  })
})

describe('Norma estimators and clocks', () => {
  it('counts tokens as CJK runes + ceil(other runes / 4)', () => {
    expect(countTokens('')).toBe(0)
    expect(countTokens('abcd')).toBe(1)
    expect(countTokens('abcde')).toBe(2)
    expect(countTokens('日本語')).toBe(3)
    expect(countTokens('한국어 ok')).toBe(4) // 3 Hangul + ceil(3 / 4)
    expect(countTokens('😀😀😀😀😀')).toBe(2) // astral runes count once each
  })

  it("formats token counts like Go's %d / %.1fK / %dK", () => {
    expect(formatTokens(999)).toBe('999')
    expect(formatTokens(1000)).toBe('1.0K')
    expect(formatTokens(1250)).toBe('1.2K') // an exact tie rounds to even in Go
    expect(formatTokens(1750)).toBe('1.8K')
    expect(formatTokens(1050)).toBe('1.1K') // 1.05 is stored just above the tie
    expect(formatTokens(1150)).toBe('1.1K') // and 1.15 just below
    expect(formatTokens(9999)).toBe('10.0K')
    expect(formatTokens(12500)).toBe('13K')
  })

  it('writes created: as RFC 3339 in the local zone, a fixed offset or UTC', () => {
    expect(formatRfc3339(NOW, 'utc')).toBe('2024-06-05T13:00:00Z')
    expect(formatRfc3339(NOW, -330)).toBe('2024-06-05T07:30:00-05:30')
    const tz = process.env.TZ
    try {
      process.env.TZ = 'Asia/Kolkata'
      expect(formatRfc3339(NOW, 'local')).toBe('2024-06-05T18:30:00+05:30')
      process.env.TZ = 'UTC'
      expect(formatRfc3339(NOW, 'local')).toBe('2024-06-05T13:00:00Z')
    } finally {
      if (tz === undefined) delete process.env.TZ
      else process.env.TZ = tz
    }
  })

  it("uses the local zone for a session's archives unless told otherwise", () => {
    const base = tempDir()
    const tz = process.env.TZ
    try {
      process.env.TZ = 'America/New_York'
      const s = ContextSession.open({
        baseDir: base,
        sessionId: 's',
        now: () => NOW,
        config: { minCompressRange: 0 },
      })
      s.compress(
        [user('a'), assistant('b'), assistant('c')],
        [{ startRef: 'm00002', endRef: 'm00003', summary: 'x', topic: '' }],
      )
      const text = readFileSync(s.state.blocks[0]?.archivePath as string, 'utf8')
      expect(text).toContain('\ncreated: 2024-06-05T09:00:00-04:00\n')
    } finally {
      if (tz === undefined) delete process.env.TZ
      else process.env.TZ = tz
    }
  })
})
