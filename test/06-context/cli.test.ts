/** `noa context …` as a user (or a check outside the suite) runs it. */
import { readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { ContextSession, loadTranscript, type Message, messages } from '../../dist/src/index.js'
import {
  assistant,
  cli,
  compressUse,
  NOW,
  toolResult,
  user,
  writeTranscript,
} from '../helpers/context-fixtures.js'
import { runCli, tempDir } from '../helpers/index.js'

const big = (label: string) => `${label} ${'x'.repeat(1500)}`
const conversation: Message[] = [
  user('Task.'),
  ...Array.from({ length: 8 }, (_, i) => assistant(big(`step ${i + 1}`))),
  user('Next.'),
]

async function setup() {
  const dir = tempDir()
  const transcript = await writeTranscript(join(dir, 'transcripts'), 'sid', conversation)
  return { dir, base: join(dir, 'ctx'), transcript }
}

describe('noa context', () => {
  it('compress prints the panel, state lists the block, view shows the summary, audit is clean', async () => {
    const { dir, base, transcript } = await setup()
    const c = runCli(
      [
        'context',
        'compress',
        'ctx',
        'sid',
        '--transcript',
        transcript,
        '--from',
        'm00002',
        '--to',
        'm00005',
        '--summary',
        'Four steps.',
        '--topic',
        'setup',
      ],
      { cwd: dir, env: { TZ: 'Asia/Seoul' } },
    )
    expect(c.stderr).toBe('')
    expect(c.status).toBe(0)
    const archive = join(base, 'sid', 'tier1', 'b1_m00002-m00005.md')
    expect(c.stdout).toMatch(
      new RegExp(
        `^▣ noa \\| \\S+ → \\S+ tokens \\(~\\S+ reclaimed\\)\\n  b1\\(T1\\)=m00002–m00005 → ${archive}\\n$`,
      ),
    )
    expect(readFileSync(archive, 'utf8')).toMatch(/\ncreated: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+09:00\n/)

    const st = await cli(['context', 'state', base, 'sid'])
    expect(st.status).toBe(0)
    expect(st.stdout).toMatch(
      /^session sid \(.*state\.json\)\n1 block \(1 active\), next b2; 10 refs up to m00010, 0 blocked; 1 compression, \d+ tokens compressed\n {2}b1 {2}T1 {2}m00002–m00005 {2}active {2}\d+ tokens {2}setup\n$/,
    )
    const json = await cli(['context', 'state', base, 'sid', '--json'])
    expect(json.stdout).toBe(`${readFileSync(join(base, 'sid', 'state.json'), 'utf8')}\n`)

    const view = await cli(['context', 'view', base, 'sid', '--transcript', transcript, '--json'])
    expect(view.status).toBe(0)
    const shown = JSON.parse(view.stdout) as Message[]
    expect(shown).toHaveLength(7)
    expect(shown[1]?.content?.[0]?.text).toBe(
      `[Compressed conversation section] — setup\nFour steps.\n\n<noa-archive block="b1" tier="1" range="m00002-m00005" path="${archive}"/>`,
    )
    expect((await cli(['context', 'view', base, 'sid', '--transcript', transcript])).stdout).toContain(
      '── 2 user · b1 (T1, m00002–m00005)\n[Compressed conversation section] — setup\n',
    )

    const audit = await cli(['context', 'audit', base, 'sid', '--transcript', transcript])
    expect([audit.status, audit.stdout]).toEqual([
      0,
      'ok: 1 block, 1 archive checked against the transcript\n',
    ])
    const parsed = await cli(['context', 'archive', archive, '--json'])
    expect(JSON.parse(parsed.stdout)).toMatchObject({
      blockId: 'b1',
      tier: 1,
      startRef: 'm00002',
      endRef: 'm00005',
      topic: 'setup',
    })
    expect((await cli(['context', 'archive', archive])).stdout).toMatch(
      /^.*\nb1 · tier 1 · m00002–m00005 · \d+ tokens · session sid · created .* · topic setup\nsummary: Four steps\.\n {2}m00002 · assistant · text \(1507 chars\)\n/,
    )
  })

  it('a refused compression exits 1 with the panel on stderr; --min-chars moves the gate; --utc', async () => {
    const { base, transcript } = await setup()
    const args = [
      'context',
      'compress',
      base,
      'sid',
      '--transcript',
      transcript,
      '--from',
      'm00002',
      '--to',
      'm00003',
      '--summary',
      'Two.',
    ]
    const refused = await cli(args)
    expect(refused.status).toBe(1)
    expect(refused.stderr).toMatch(
      /^▣ noa \| 0 blocks created\n {2}error: Total compressible content too small \(3014 chars across 1 range\(s\), min 5000\)/,
    )
    const ok = await cli([...args, '--min-chars', '3000', '--utc', '--json'])
    expect(ok.status).toBe(0)
    expect(JSON.parse(ok.stdout)).toMatchObject({
      ok: true,
      blocks: [{ blockId: 'b1', tier: 1, startRef: 'm00002', endRef: 'm00003' }],
    })
    expect(readFileSync(join(base, 'sid', 'tier1', 'b1_m00002-m00003.md'), 'utf8')).toMatch(
      /\ncreated: [-0-9T:]+Z\n/,
    )
    expect((await cli([...args.slice(0, -2)])).status).toBe(2) // no --summary: usage
    expect((await cli([...args, '--min-chars', 'many'])).status).toBe(2)
    const missing = await cli([
      'context',
      'compress',
      base,
      'sid',
      '--transcript',
      join(base, 'nope.jsonl'),
      '--from',
      'm1',
      '--to',
      'm2',
      '--summary',
      's',
    ])
    expect([missing.status, missing.stderr]).toEqual([
      1,
      `noa context: ${join(base, 'nope.jsonl')}: no such transcript\n`,
    ])
  })

  it('state: a bad state.json is shown on stderr with the initial state, exit 3', async () => {
    const { base } = await setup()
    await cli(['context', 'state', base, 'sid']) // missing: fine
    const file = join(base, 'sid', 'state.json')
    rmSync(join(base, 'sid'), { recursive: true, force: true })
    const { mkdirSync } = await import('node:fs')
    mkdirSync(join(base, 'sid'), { recursive: true })
    writeFileSync(file, '{"version":2}')
    const r = runCli(['context', 'state', base, 'sid'])
    expect(r.status).toBe(3)
    expect(r.stderr).toBe(`noa context: ${file}: state file version 2, want 1; showing the initial state\n`)
    expect(r.stdout).toMatch(
      /^session sid \(.*\)\n0 blocks \(0 active\), next b1; 0 refs, 0 blocked; 0 compressions, 0 tokens compressed\n$/,
    )
    const j = await cli(['context', 'state', base, 'sid', '--json'])
    expect(j.status).toBe(3)
    expect(JSON.parse(j.stdout)).toMatchObject({ version: 1, sessionId: 'sid', nextBlockId: 1, blocks: null })
    // The other commands warn and go on from the initial state, as Norma does.
    const missing = await cli(['context', 'state', base, 'other'])
    expect(missing.status).toBe(0)
  })

  it('rebuild replays the Compress calls recorded in the transcript; audit finds and repairs a deleted archive', async () => {
    const dir = tempDir()
    const base = join(dir, 'ctx')
    const conv = [...conversation]
    const s = ContextSession.open({ baseDir: base, sessionId: 'sid', now: () => NOW })
    for (const [id, ranges] of [
      ['c1', [{ startId: 'm00002', endId: 'm00005', summary: 'first' }]],
      ['c2', [{ startId: 'm00006', endId: 'm00009', summary: 'second' }]],
      ['c3', [{ startId: 'm00002', endId: 'm00002', summary: 'tiny' }]],
      ['c4', [{ startId: 'b1', endId: 'b2', summary: 'both' }]],
    ] as const) {
      conv.push(compressUse(id, [...ranges]))
      conv.push(toolResult(id, s.compressCall(conv, id).panel))
    }
    const transcript = await writeTranscript(join(dir, 't'), 'sid', conv)
    // The transcript on disk reads back as the conversation the live session saw.
    expect(messages((await loadTranscript(transcript)).records).messages).toEqual(conv)
    const live = readFileSync(s.stateFile, 'utf8')
    rmSync(s.stateFile)
    const r = await cli(['context', 'rebuild', base, 'sid', '--transcript', transcript])
    expect(r.status).toBe(0)
    expect(r.stdout).toBe(`replayed 3, skipped 1: 3 blocks, 3 archive(s) reused, saved to ${s.stateFile}\n`)
    // The archives were adopted, and their created: times with them: the state is the live one.
    expect(readFileSync(s.stateFile, 'utf8')).toBe(live)

    // The same calls processed by the CLI one at a time, as a runtime records them: same panels, same state.
    rmSync(join(base, 'sid'), { recursive: true })
    const partial = [...conversation]
    let file = ''
    for (let i = conversation.length; i < conv.length; i += 2) {
      partial.push(conv[i] as Message)
      file = await writeTranscript(join(dir, `t${i}`), 'sid', partial)
      const id = conv[i]?.content?.[0]?.id as string
      const out = await cli(['context', 'compress', base, 'sid', '--transcript', file, '--call', id, '--utc'])
      expect(out.status).toBe(id === 'c3' ? 1 : 0)
      const panel = (out.stdout || out.stderr).replace(/\n$/, '')
      expect(panel).toBe(conv[i + 1]?.content?.[0]?.content?.[0]?.text)
      partial.push(toolResult(id, panel))
    }
    const times = (text: string) => text.replace(/"createdAt": \d+/g, '"createdAt": 0')
    expect(times(readFileSync(s.stateFile, 'utf8'))).toBe(times(live))
    const none = await cli(['context', 'compress', base, 'sid', '--transcript', file, '--call', 'zz'])
    expect([none.status, none.stderr]).toEqual([
      1,
      'noa context: no Compress call "zz" after the last compaction marker\n',
    ])
    expect(
      (await cli(['context', 'compress', base, 'sid', '--transcript', file, '--call', 'c1', '--from', 'm1']))
        .status,
    ).toBe(2)

    const b2 = join(base, 'sid', 'tier1', 'b2_m00006-m00009.md')
    const text = readFileSync(b2, 'utf8')
    rmSync(b2)
    const found = runCli(['context', 'audit', base, 'sid', '--transcript', transcript])
    expect(found.status).toBe(1)
    expect(found.stdout.split('\n')).toEqual([
      `${b2}: archive of block b2 is missing`,
      `${join(base, 'sid', 'tier2', 'b3_m00002-m00009.md')}: child link ../tier1/b2_m00006-m00009.md (block b2) points to a missing file ${b2}`,
      '',
    ])
    const repaired = await cli([
      'context',
      'audit',
      base,
      'sid',
      '--transcript',
      transcript,
      '--repair',
      '--utc',
      '--json',
    ])
    expect(repaired.status).toBe(0)
    expect(JSON.parse(repaired.stdout)).toMatchObject({
      ok: true,
      problems: [],
      repaired: [{ code: 'archive-missing', block: 'b2' }],
    })
    expect(readFileSync(b2, 'utf8')).toBe(text)
  })

  it('archive: a file that is not an archive is refused with file:line', async () => {
    const file = join(tempDir(), 'x.md')
    writeFileSync(file, '---\nblock: b1\ntier: x\n')
    const r = await cli(['context', 'archive', file])
    expect(r.status).toBe(1)
    expect(r.stderr).toBe(`noa context: ${file}:3: tier must be an integer, got "x"\n`)
    expect((await cli(['context', 'nope'])).status).toBe(2)
    expect((await cli(['context', '--help'])).stdout).toContain('noa context audit <baseDir> <sessionId>')
  })
})
