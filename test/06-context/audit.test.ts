/** The audit finds each planted fault with the file and a reason, and repairs what is derivable. */
import { readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { type AuditProblem, auditSession, ContextSession } from '../../dist/src/context/index.js'
import type { Message } from '../../dist/src/transcript/index.js'
import { assistant, hid, NOW, toolResult, toolUse, user } from '../helpers/context-fixtures.js'
import { tempDir } from '../helpers/index.js'

const big = (label: string) => `${label} ${'x'.repeat(1500)}`

/** b1 = m00002–m00005 (T1), b2 = m00006–m00009 (T1), b3 = b1 + b2 + m00010 (T2). */
function session() {
  const base = tempDir()
  const conv: Message[] = [
    user('Task.'),
    assistant(big('one')),
    toolUse('t1', 'Bash', '{"cmd":"make"}'),
    toolResult('t1', big('make output ```')),
    assistant(big('two')),
    ...Array.from({ length: 4 }, (_, i) => assistant(big(`step ${i}`))),
    user('Loose.'),
    user('Now.'),
  ]
  const s = ContextSession.open({
    baseDir: base,
    sessionId: 's',
    now: () => NOW,
    zone: 'utc',
    config: { minCompressRange: 0 },
  })
  s.compress(conv, [{ startRef: 'm00002', endRef: 'm00005', summary: 'first', topic: 'build' }])
  s.compress(conv, [{ startRef: 'm00006', endRef: 'm00009', summary: 'second', topic: '' }])
  s.compress(conv, [{ startRef: 'b1', endRef: 'm00010', summary: 'both', topic: '' }])
  expect(s.state.blocks.map((b) => [b.blockId, b.tier, b.active])).toEqual([
    ['b1', 1, false],
    ['b2', 1, false],
    ['b3', 2, true],
  ])
  const root = join(base, 's')
  const archive = (id: string) => s.state.blocks.find((b) => b.blockId === id)?.archivePath as string
  const stateFile = join(root, 'state.json')
  const editState = (
    edit: (st: {
      blocks: Array<Record<string, unknown>>
      messageRefs: { byRef: Record<string, string> }
    }) => void,
  ) => {
    const st = JSON.parse(readFileSync(stateFile, 'utf8'))
    edit(st)
    writeFileSync(stateFile, JSON.stringify(st, null, 2))
  }
  const editFile = (file: string, from: string, to: string) => {
    const text = readFileSync(file, 'utf8')
    expect(text).toContain(from)
    writeFileSync(file, text.replace(from, to))
  }
  const audit = (extra: { repair?: boolean; withTranscript?: boolean } = {}) =>
    auditSession({
      baseDir: base,
      sessionId: 's',
      zone: 'utc',
      repair: extra.repair ?? false,
      ...(extra.withTranscript === false ? {} : { messages: conv }),
    })
  return { base, root, conv, s, archive, stateFile, editState, editFile, audit }
}

function lines(problems: AuditProblem[]): string[] {
  return problems.map((p) => `${p.file}: ${p.reason}`)
}

describe('audit', () => {
  it('passes a consistent session, with and without its transcript', () => {
    const t = session()
    for (const withTranscript of [true, false]) {
      const r = t.audit({ withTranscript })
      expect(r.problems).toEqual([])
      expect(r).toMatchObject({ ok: true, exists: true, blocks: 3, archives: 3 })
    }
    expect(auditSession({ baseDir: tempDir(), sessionId: 'none' })).toMatchObject({ ok: true, exists: false })
  })

  it('finds a deleted archive, and renders it again from the transcript when asked', () => {
    const t = session()
    const file = t.archive('b2')
    const original = readFileSync(file, 'utf8')
    rmSync(file)
    const r = t.audit()
    expect(lines(r.problems)).toEqual([
      `${file}: archive of block b2 is missing`,
      `${t.archive('b3')}: child link ../tier1/b2_m00006-m00009.md (block b2) points to a missing file ${file}`,
    ])
    expect(r.problems.map((p) => [p.code, p.block])).toEqual([
      ['archive-missing', 'b2'],
      ['child-link', 'b3'],
    ])
    // Without the transcript nothing can be derived.
    expect(t.audit({ repair: true, withTranscript: false }).problems[0]?.reason).toBe(
      'archive of block b2 is missing (give the transcript to render it again)',
    )
    const fixed = t.audit({ repair: true })
    expect(fixed.ok).toBe(true)
    expect(lines(fixed.repaired)).toEqual([
      `${file}: archive of block b2 is missing (rendered again from the transcript)`,
    ])
    expect(readFileSync(file, 'utf8')).toBe(original)
    expect(t.audit().ok).toBe(true)
  })

  it('renders a missing tier-2 archive again too, absorbed blocks in place', () => {
    const t = session()
    const file = t.archive('b3')
    const original = readFileSync(file, 'utf8')
    rmSync(file)
    expect(t.audit({ repair: true }).ok).toBe(true)
    expect(readFileSync(file, 'utf8')).toBe(original)
  })

  it('finds a range edited in state.json', () => {
    const t = session()
    t.editState((st) => {
      ;(st.blocks[0] as Record<string, unknown>).endRef = 'm00004'
    })
    const r = t.audit()
    expect(lines(r.problems)).toEqual(
      expect.arrayContaining([
        `${t.stateFile}: block b1 says m00002–m00004 but its messages span m00002–m00005`,
        `${t.stateFile}: block b1: archiveRel "tier1/b1_m00002-m00005.md" does not match its tier, id and range (tier1/b1_m00002-m00004.md)`,
        `${t.archive('b1')}: range is "m00002-m00005" in the archive but "m00002-m00004" in state.json`,
      ]),
    )
  })

  it('finds a range edited in an archive', () => {
    const t = session()
    t.editFile(t.archive('b1'), 'range: m00002-m00005', 'range: m00002-m00004')
    t.editFile(
      t.archive('b1'),
      '# Archive b1 · Tier 1 · m00002–m00005',
      '# Archive b1 · Tier 1 · m00002–m00004',
    )
    expect(lines(t.audit().problems)).toEqual([
      `${t.archive('b1')}: range is "m00002-m00004" in the archive but "m00002-m00005" in state.json`,
    ])
    t.editFile(t.archive('b1'), 'range: m00002-m00004', 'range: m00002-m00003')
    expect(lines(t.audit().problems)).toEqual([
      `${t.archive('b1')}: archive does not parse: heading "# Archive b1 · Tier 1 · m00002–m00004" does not match the frontmatter (block b1, tier 1, range m00002-m00003)`,
    ])
  })

  it('finds a dangling child link', () => {
    const t = session()
    t.editFile(t.archive('b3'), '(../tier1/b1_m00002-m00005.md)', '(../tier1/b1_m00002-m00009.md)')
    expect(lines(t.audit().problems)).toEqual([
      `${t.archive('b3')}: the section of absorbed block b1 does not match that block in state.json`,
      `${t.archive('b3')}: child link ../tier1/b1_m00002-m00009.md does not match tier1/b1_m00002-m00005.md`,
      `${t.archive('b3')}: child link ../tier1/b1_m00002-m00009.md (block b1) points to a missing file ${join(t.root, 'tier1', 'b1_m00002-m00009.md')}`,
    ])
  })

  it('finds state pointing outside the session root, and does not read the file', () => {
    const t = session()
    const other = join(tempDir(), 'secret.md')
    writeFileSync(other, 'not an archive')
    t.editState((st) => {
      ;(st.blocks[0] as Record<string, unknown>).archivePath = other
      ;(st.blocks[1] as Record<string, unknown>).archivePath = join(
        t.root,
        '..',
        'elsewhere',
        'tier1',
        'b2_m00006-m00009.md',
      )
    })
    const r = t.audit()
    expect(r.problems.filter((p) => p.code === 'outside-root').map((p) => [p.file, p.block])).toEqual([
      [t.stateFile, 'b1'],
      [t.stateFile, 'b2'],
    ])
    expect(r.problems[0]?.reason).toBe(
      `block b1: archivePath ${JSON.stringify(other)} is outside the session root ${t.root}`,
    )
    expect(r.problems.some((p) => p.file === other)).toBe(false)
  })

  it('finds state and archive disagreeing (tokens, summary, topic)', () => {
    const t = session()
    t.editState((st) => {
      ;(st.blocks[0] as Record<string, unknown>).compressedTokens = 1
      ;(st.blocks[1] as Record<string, unknown>).summary = 'edited'
    })
    t.editFile(t.archive('b1'), 'topic: build', 'topic: deploy')
    expect(lines(t.audit().problems)).toEqual([
      `${t.archive('b1')}: original_tokens is ${readFileSync(t.archive('b1'), 'utf8').match(/original_tokens: (\d+)/)?.[1]} in the archive but 1 in state.json`,
      `${t.archive('b1')}: topic is "deploy" in the archive but "build" in state.json`,
      `${t.archive('b2')}: summary is "second" in the archive but "edited" in state.json`,
      `${t.archive('b3')}: the section of absorbed block b2 does not match that block in state.json`,
    ])
  })

  it('finds a message covered twice and an absorbed block still active', () => {
    const t = session()
    t.editState((st) => {
      ;(st.blocks[0] as Record<string, unknown>).active = true
    })
    const r = t.audit()
    expect(r.problems.map((p) => p.code)).toEqual([
      'absorbed',
      'covered-twice',
      'covered-twice',
      'covered-twice',
      'covered-twice',
    ])
    expect(r.problems[0]?.reason).toBe('block b1 was absorbed by b3 but is still active')
    expect(r.problems[1]?.reason).toBe('message m00002 is covered by both b1 and b3')
  })

  it('finds an archived message that differs from the transcript, and refs that do not map both ways', () => {
    const t = session()
    t.editFile(t.archive('b1'), 'make output ```', 'make output (edited) ```')
    t.editState((st) => {
      st.messageRefs.byRef.m00011 = 'h_0000000000000000'
    })
    const r = t.audit()
    expect(lines(r.problems)).toEqual([
      `${t.stateFile}: byRef[m00011] = h_0000000000000000 but byRaw[h_0000000000000000] = (none)`,
      `${t.stateFile}: byRaw[${hid('user', 'text', 'Now.')}] = m00011 but byRef[m00011] = h_0000000000000000`,
      `${t.archive('b1')}: archived message m00004 differs from the transcript`,
    ])
    expect(t.audit({ withTranscript: false }).problems.map((p) => p.code)).toEqual(['refs', 'refs'])
  })

  it('accepts archives in the root of the session a state was inherited from, and no other', () => {
    const t = session()
    const child = ContextSession.open({
      baseDir: t.base,
      sessionId: 'child',
      parentSessionIds: ['s'],
      zone: 'utc',
    })
    child.save()
    expect(auditSession({ baseDir: t.base, sessionId: 'child' }).problems).toEqual([])
    rmSync(t.archive('b1'))
    const r = auditSession({ baseDir: t.base, sessionId: 'child', messages: t.conv, repair: true })
    expect(lines(r.problems)).toEqual([
      `${t.archive('b1')}: archive of block b1 is missing (it belongs to an ancestor session)`,
      `${t.archive('b3')}: child link ../tier1/b1_m00002-m00005.md (block b1) points to a missing file ${t.archive('b1')}`,
    ])
    // Without the derivedFrom record, the parent's folder is outside the child's root.
    const st = JSON.parse(readFileSync(join(t.base, 'child', 'state.json'), 'utf8'))
    delete st.derivedFrom
    writeFileSync(join(t.base, 'child', 'state.json'), JSON.stringify(st))
    expect(
      new Set(auditSession({ baseDir: t.base, sessionId: 'child' }).problems.map((p) => p.code)),
    ).toEqual(new Set(['outside-root']))
  })

  it('reports an unusable state.json and stops there', () => {
    const t = session()
    writeFileSync(t.stateFile, '{"version": 2}')
    const r = t.audit()
    expect(lines(r.problems)).toEqual([`${t.stateFile}: state file version 2, want 1`])
    expect(r.ok).toBe(false)
  })
})
