/** Compress rules, the panel, Materialize, and RebuildFromHistory against live compressions. */
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import {
  ContextSession,
  type ContextSessionOptions,
  encodeState,
  loadState,
  type Message,
  NORMA_CONFIG,
  saveState,
} from '../../dist/src/index.js'
import {
  assistant,
  compressUse,
  hid,
  marker,
  NOW,
  tokens,
  toolResult,
  toolUse,
  user,
} from '../helpers/context-fixtures.js'
import { tempDir } from '../helpers/index.js'

const big = (label: string, n = 1500) => `${label} ${'x'.repeat(n)}`

function open(base: string, extra: Partial<ContextSessionOptions> = {}) {
  return ContextSession.open({ baseDir: base, sessionId: 's', now: () => NOW, zone: 'utc', ...extra })
}

/** The first user message, then n assistant messages of 1,500+ characters (m00002…). */
function conversation(n: number): Message[] {
  return [user('Task.'), ...Array.from({ length: n }, (_, i) => assistant(big(`step ${i + 1}`)))]
}

const r = (startRef: string, endRef: string, summary = `summary of ${startRef}..${endRef}`, topic = '') => ({
  startRef,
  endRef,
  summary,
  topic,
})

describe('size gate', () => {
  it("refuses ranges under 5,000 characters by default, with Norma's message; the limit is configurable", () => {
    const base = tempDir()
    const conv = [user('Task.'), assistant('a'.repeat(2500)), assistant('b'.repeat(2499))]
    const s = open(base)
    const out = s.compress(conv, [r('m00002', 'm00003')])
    expect(out.result.blocksCreated).toEqual([])
    expect(out.panel).toBe(
      '▣ noa | 0 blocks created\n  error: Total compressible content too small (4999 chars across 1 range(s), min 5000). Combine more messages into fewer, larger ranges.',
    )
    expect(existsSync(join(base, 's', 'state.json'))).toBe(false)
    const conv2 = [...conv.slice(0, 2), assistant('b'.repeat(2500))]
    expect(open(tempDir()).compress(conv2, [r('m00002', 'm00003')]).result.blocksCreated).toHaveLength(1)
    expect(
      open(tempDir(), { config: { minCompressRange: 4999 } }).compress(conv, [r('m00002', 'm00003')]).result
        .blocksCreated,
    ).toHaveLength(1)
  })

  it('says when every ref is unknown or already compressed', () => {
    const s = open(tempDir())
    const conv = conversation(8)
    expect(s.compress(conv, [r('m00050', 'm00060')]).result.errors[0]).toMatch(
      /^None of the 1 requested range\(s\) resolved — every ref is unknown to this session\. .*\[diagnostics: session highest ref=m00009, unknown ranges in request=1\/1, session history=0 compression\(s\), 0 block\(s\)\]$/,
    )
    s.compress(conv, [r('m00002', 'm00005')])
    expect(s.compress(conv, [r('m00003', 'm00004')]).result.errors[0]).toMatch(
      /^Every requested range is already compressed — its content is covered by an active block\. Active blocks: b1\.\.b1\. /,
    )
    expect(s.compress(conv, [r('x', 'm00004')]).result.errors[0]).toMatch(/^None of the 1 requested/)
    const lax = open(tempDir(), { config: { minCompressRange: 0 } })
    expect(lax.compress(conv, [r('zz', 'm00004')]).result.errors).toEqual([
      '"zz" is neither a message ref (mNNNNN) nor a block id (bN)',
    ])
  })
})

describe('tiers', () => {
  it('promotes T1+T1 to T2 and T2+T2 to T3, refuses to re-summarize T3 blocks alone, accepts T3 with new messages', () => {
    const s = open(tempDir())
    const conv = conversation(16)
    const tierOf = (summary: string) => s.state.blocks.find((b) => b.summary === summary)?.tier
    for (const [a, b] of [
      ['m00002', 'm00005'],
      ['m00006', 'm00009'],
      ['m00010', 'm00013'],
      ['m00014', 'm00017'],
    ])
      s.compress(conv, [r(a as string, b as string)])
    expect(s.compress(conv, [r('b1', 'b2', 'two')]).result.blocksCreated.map((b) => b.tier)).toEqual([2]) // b5
    expect(s.compress(conv, [r('b3', 'b4', 'three')]).result.blocksCreated.map((b) => b.tier)).toEqual([2]) // b6
    expect(s.compress(conv, [r('b5', 'b6', 'top')]).result.blocksCreated.map((b) => b.tier)).toEqual([3]) // b7
    expect(tierOf('top')).toBe(3)
    // Only b7 (T3) is active now; re-summarizing it alone reclaims nothing.
    const again = s.compress(conv, [r('b7', 'b7', 'again')])
    expect(again.result.errors).toEqual([
      'Tier 3 is the terminal layer — re-summarizing T3 blocks into another T3 block reclaims nothing. Compress a lower tier, or include new uncompressed messages in the range.',
    ])
    // With new messages it is accepted and stays at tier 3.
    const more = [...conv, assistant(big('new 1')), assistant(big('new 2'))]
    const t3 = s.compress(more, [r('b7', 'm00019', 'top and new')])
    expect(t3.result.blocksCreated.map((b) => [b.tier, b.startRef, b.endRef, b.directBlockIds])).toEqual([
      [3, 'm00002', 'm00019', ['b7']],
    ])
    expect(s.state.stats.compressionCount).toBe(8)
  })

  it('absorbs only the lowest tier present; other blocks survive and the panel says so', () => {
    const s = open(tempDir())
    const conv = conversation(12)
    s.compress(conv, [r('m00002', 'm00005')]) // b1
    s.compress(conv, [r('m00006', 'm00009')]) // b2
    s.compress(conv, [r('b1', 'b2', 'pair')]) // b3 T2
    s.compress(conv, [r('m00010', 'm00013')]) // b4 T1
    const out = s.compress(conv, [r('b3', 'b4', 'mixed')])
    expect(out.result.blocksCreated.map((b) => [b.blockId, b.tier, b.directBlockIds])).toEqual([
      ['b5', 2, ['b4']],
    ])
    expect(out.panel.split('\n').slice(2)).toEqual([
      '  note: b3(T2) was inside the requested range but was not consumed',
      '        (only the lowest tier present is absorbed). Compress that layer separately.',
    ])
    expect(s.state.blocks.filter((b) => b.active).map((b) => b.blockId)).toEqual(['b3', 'b5'])
  })

  it('stops at maxTier 2 when so configured', () => {
    const s = open(tempDir(), { config: { maxTier: 2 } })
    const conv = conversation(8)
    s.compress(conv, [r('m00002', 'm00005')])
    s.compress(conv, [r('m00006', 'm00009')])
    s.compress(conv, [r('b1', 'b2')])
    expect(s.compress(conv, [r('b3', 'b3')]).result.errors[0]).toMatch(/^Tier 2 is the terminal layer/)
  })
})

describe('what is never compressed', () => {
  it('leaves Compress calls and their results out (BLOCKED), and protected tools when configured', () => {
    const conv: Message[] = [
      user('Task.'),
      assistant(big('a', 3000)),
      compressUse('c1', [{ startId: 'm00009', endId: 'm00009', summary: 'x' }]),
      toolResult('c1', '▣ noa | 0 blocks created'),
      toolUse('k1', 'Memory', '{"note":"keep"}'),
      toolResult('k1', big('memo', 100)),
      assistant(big('b', 3000)),
    ]
    const s = open(tempDir(), { config: { protectedTools: ['memory'] } })
    const out = s.compress(conv, [r('m00002', 'm00003')])
    expect(out.result.errors).toEqual([])
    const b = s.state.blocks[0]
    const blocked = [
      hid('assistant', 'tool-call', conv[2]?.content?.[0]?.input as string, 'c1', 'Compress'),
      hid('tool', 'tool-result', '▣ noa | 0 blocks created', 'c1', 'Compress'),
      hid('assistant', 'tool-call', '{"note":"keep"}', 'k1', 'Memory'),
      hid('tool', 'tool-result', big('memo', 100), 'k1', 'Memory'),
    ]
    for (const id of blocked) {
      expect(s.state.messageRefs.byRaw.get(id)).toBe('BLOCKED')
      expect(b?.effectiveMessageIds).not.toContain(id)
    }
    expect(b?.directMessageIds).toEqual([
      hid('assistant', 'text', big('a', 3000)),
      hid('assistant', 'text', big('b', 3000)),
    ])
    expect([b?.startRef, b?.endRef]).toEqual(['m00002', 'm00003'])
    const archive = readFileSync(b?.archivePath as string, 'utf8')
    expect(archive).not.toContain('Compress')
    expect(archive).not.toContain('memo')
    // A range of protected messages only has nothing to compress.
    const only = open(tempDir(), { config: { minCompressRange: 0, protectedTools: ['memory'] } })
    only.compress(conv, [r('m00001', 'm00001')]) // assigns refs
    expect(only.compress(conv, [r('m00002', 'm00002')]).result.blocksCreated).toHaveLength(1)
  })

  it('keeps a tool call with its result and reasoning with its turn', () => {
    const conv: Message[] = [
      user('Task.'),
      toolUse('t1', 'Bash', '{"cmd":"make"}', [{ type: 'thinking', thinking: big('think', 3000) }]),
      toolResult('t1', big('output', 3000)),
      assistant('done'),
    ]
    const s = open(tempDir())
    // m00003 is the call: the range grows back to its reasoning (m00002) and on to its result (m00004).
    const out = s.compress(conv, [r('m00003', 'm00003', 'ran make')])
    expect(out.result.errors).toEqual([
      'Total compressible content too small (14 chars across 1 range(s), min 5000). Combine more messages into fewer, larger ranges.',
    ])
    const lax = open(tempDir(), { config: { minCompressRange: 0 } })
    const b = lax.compress(conv, [r('m00003', 'm00003', 'ran make')]).result.blocksCreated[0]
    expect([b?.startRef, b?.endRef, b?.directMessageIds.length]).toEqual(['m00002', 'm00004', 3])
  })

  it("Norma's full defaults: 50-character summaries and the recent zone", () => {
    const conv = conversation(24)
    const s = open(tempDir(), { config: NORMA_CONFIG })
    expect(s.compress(conv, [r('m00002', 'm00005', 'too short')]).result.errors).toEqual([
      'Summary too short (9 chars, min 50). A summary this brief cannot stand in for the content it replaces.',
    ])
    const long = 'A summary long enough to stand for what it replaces, surely.'
    // The last 5 messages and the last 5,000 tokens (about 14 of these messages) are protected.
    expect(s.compress(conv, [r('m00022', 'm00025', long)]).result.errors[0]).toMatch(
      /^Range is entirely within the protected zone \(the last 5 messages and\/or the most recent user message\): m00022, m00023, m00024, m00025\./,
    )
    const partly = s.compress(conv, [r('m00009', 'm00013', long)])
    expect(partly.result.warnings).toEqual([
      'Excluded 2 protected message(s) m00012, m00013 from compression range (recent/last-user zone).',
    ])
    expect(partly.panel.split('\n')[1]).toMatch(/^ {2}b1\(T1\)=m00009–m00011 → /)
    expect(s.compress(conv, [r('m00002', 'm00005', long)]).result.blocksCreated).toHaveLength(1)
    expect(
      open(tempDir()).compress(conv, [r('m00022', 'm00025', 'short')]).result.blocksCreated,
    ).toHaveLength(1)
  })
})

describe('a compression', () => {
  it('updates stats, resets the nudge, and counts tokens with Norma’s estimator', () => {
    const base = tempDir()
    const seeded = loadState(base, 's').state
    seeded.nudge = {
      lastPerMessageNudgeTokens: 7,
      lastNudgeShownTokens: 8,
      lastShownByTier: new Map([[1, 9]]),
    }
    seeded.stats = { tokensCompressed: 100, compressionCount: 2 }
    saveState(seeded)
    const conv = [user('Task.'), assistant('日本語 '.repeat(1000)), assistant(big('z', 2000))]
    const s = open(base)
    const out = s.compress(conv, [r('m00002', 'm00003')])
    const expected = tokens('日本語 '.repeat(1000)) + tokens(big('z', 2000))
    expect(out.result.tokensCompressed).toBe(expected)
    expect(s.state.stats).toEqual({ tokensCompressed: 100 + expected, compressionCount: 3 })
    const text = readFileSync(join(base, 's', 'state.json'), 'utf8')
    expect(text).toContain(
      '"nudge": {\n    "lastPerMessageNudgeTokens": 0,\n    "lastNudgeShownTokens": 0\n  },',
    )
    expect(out.beforeTokens).toBe(tokens('Task.') + expected)
    expect(out.afterTokens).toBe(tokens('Task.'))
  })

  it('applies several ranges at once and skips one that overlaps an earlier one', () => {
    const s = open(tempDir())
    const out = s.compress(conversation(12), [
      r('m00002', 'm00005'),
      r('m00004', 'm00007'),
      r('m00008', 'm00011'),
    ])
    expect(out.result.blocksCreated.map((b) => `${b.blockId}:${b.startRef}-${b.endRef}`)).toEqual([
      'b1:m00002-m00005',
      'b2:m00008-m00011',
    ])
    expect(out.result.warnings).toEqual([
      'Skipped range (m00004..m00007) — overlaps an earlier range in the batch; the earlier range takes precedence. Keep ranges disjoint.',
    ])
  })

  it('refuses an empty summary; changes nothing when the archive cannot be written', () => {
    const base = tempDir()
    const s = open(base)
    expect(s.compress(conversation(4), [r('m00002', 'm00005', '   ')]).result.errors).toEqual([
      'Summary is empty — provide a meaningful summary of the compressed range.',
    ])
    mkdirSync(join(base, 's'), { recursive: true })
    writeFileSync(join(base, 's', 'tier1'), 'not a folder')
    const out = s.compress(conversation(4), [r('m00002', 'm00005')])
    expect(out.result.errors[0]).toMatch(
      /^Failed to archive b1: .*No blocks were created — the originals must be on disk before they leave the context\.$/,
    )
    expect(s.state.blocks).toEqual([])
    expect(existsSync(join(base, 's', 'state.json'))).toBe(false)
  })
})

describe('materialize (the view)', () => {
  it("replaces what active blocks cover by Norma's summary message, keeps the first user message, reads no archive", () => {
    const base = tempDir()
    const conv: Message[] = [
      user('Task.'),
      assistant(big('a', 3000)),
      toolUse('t1', 'Bash', '{"cmd":"ls"}'),
      toolResult('t1', big('listing', 3000)),
      user('Next.'),
    ]
    const s = open(base)
    s.compress(conv, [r('m00002', 'm00004', 'Listed files.', 'listing')])
    rmSync(join(base, 's', 'tier1'), { recursive: true })
    const view = s.view(conv)
    expect(view).toEqual([
      user('Task.'),
      user(
        `[Compressed conversation section] — listing\nListed files.\n\n<noa-archive block="b1" tier="1" range="m00002-m00004" path="${join(base, 's', 'tier1', 'b1_m00002-m00004.md')}"/>`,
      ),
      user('Next.'),
    ])
    // A fresh session (no blocks) shows what the model is sent after the last marker.
    const after = [user('old'), marker(), user('new')]
    expect(open(tempDir()).view(after)).toEqual([user('new')])
  })

  it('keeps the first user message even when a block covers it', () => {
    const s = open(tempDir(), { config: { minCompressRange: 0 } })
    const conv = [user(big('first')), assistant('a'), user('b')]
    s.compress(conv, [r('m00001', 'm00002', 'start')])
    const view = s.view(conv)
    // The summary goes where the block's first message was; that message stays too.
    expect(view[0]?.content?.[0]?.text).toMatch(
      /^\[Compressed conversation section\]\nstart\n\n<noa-archive block="b1"/,
    )
    expect(view.slice(1)).toEqual([user(big('first')), user('b')])
  })
})

describe('rebuild from the transcript', () => {
  /** A live session: the model's Compress calls processed as they come, their panels recorded. */
  function live(base: string) {
    const s = open(base)
    const conv: Message[] = conversation(8)
    const call = (id: string, ranges: Array<Record<string, unknown>>) => {
      conv.push(compressUse(id, ranges))
      const out = s.compressCall(conv, id)
      conv.push(toolResult(id, out.panel))
      return out
    }
    expect(
      call('c1', [{ startId: 'm00002', endId: 'm00005', summary: 'first four', topic: 'one' }]).result
        .blocksCreated,
    ).toHaveLength(1)
    expect(
      call('c2', [{ startId: 'm00006', endId: 'm00009', summary: 'next four' }]).result.blocksCreated,
    ).toHaveLength(1)
    conv.push(...Array.from({ length: 4 }, (_, i) => assistant(big(`more ${i}`))))
    expect(
      call('c3', [{ startId: 'b1', endId: 'b2', summary: 'eight steps' }]).result.blocksCreated,
    ).toHaveLength(1)
    expect(
      call('c4', [{ startId: 'm00010', endId: 'm00010', summary: 'too small' }]).result.blocksCreated,
    ).toHaveLength(0)
    expect(
      call('c5', [{ startId: 'm00010', endId: 'm00013', summary: 'four more' }]).result.blocksCreated,
    ).toHaveLength(1)
    expect(call('c6', 'not json' as never).panel).toMatch(
      /^Compress `content` is neither an array of ranges nor a JSON-encoded one\./,
    )
    conv.push(user('Thanks.'))
    expect(
      call('c7', [{ startId: 'b3', endId: 'b4', summary: 'all but T2' }]).result.blocksCreated.map((b) => [
        b.blockId,
        b.tier,
      ]),
    ).toEqual([['b5', 2]])
    return { s, conv }
  }

  it('reproduces the state live compression produced (same blocks, same refs), reusing the archives', () => {
    const base = tempDir()
    const { s, conv } = live(base)
    const liveText = readFileSync(s.stateFile, 'utf8')
    expect(encodeState(s.state)).toBe(liveText)
    const inodes = s.state.blocks.map((b) => statSync(b.archivePath).ino)
    rmSync(s.stateFile)
    const again = open(base)
    const res = again.rebuild(conv)
    expect([res.replayed, res.skipped]).toEqual([5, 2])
    expect(res.reused).toHaveLength(5)
    expect(readFileSync(s.stateFile, 'utf8')).toBe(liveText)
    expect(again.state.blocks.map((b) => statSync(b.archivePath).ino)).toEqual(inodes)
  })

  it('writes archives that are missing again, identical for the same clock and zone', () => {
    const base = tempDir()
    const { s, conv } = live(base)
    const b1 = s.state.blocks[0]?.archivePath as string
    const before = readFileSync(b1, 'utf8')
    rmSync(b1)
    const res = open(base).rebuild(conv)
    expect(res.reused).toHaveLength(4)
    expect(readFileSync(b1, 'utf8')).toBe(before)
  })

  it('skips calls that fail now and keeps going', () => {
    const base = tempDir()
    const { s: before, conv } = live(base)
    // From the transcript alone: the live state holds blocks this edited transcript no longer makes.
    rmSync(before.stateFile)
    // c1's input now names a ref that does not exist (its result still reports a block).
    const edited = conv.map((m) =>
      m.content?.[0]?.id === 'c1'
        ? compressUse('c1', [{ startId: 'm09999', endId: 'm09999', summary: 'gone' }])
        : m,
    )
    const s = open(base)
    const res = s.rebuild(edited)
    // c2 and c5 replay (as b1 and b2); c3 and c7 name blocks that no longer exist; c4 and c6 had failed.
    expect([res.replayed, res.skipped]).toEqual([2, 5])
    expect(res.warnings).toHaveLength(3)
    for (const w of res.warnings) expect(w).toMatch(/^None of the 1 requested range\(s\) resolved/)
    expect(s.state.blocks.map((b) => `${b.blockId}:${b.startRef}-${b.endRef}`)).toEqual([
      'b1:m00006-m00009',
      'b2:m00010-m00013',
    ])
  })
})
