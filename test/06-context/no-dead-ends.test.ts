/**
 * The context paths a user takes, followed to their end: a rebuild never replaces a state it
 * cannot reproduce, audit lists archives no block points at, view shows the refs compress takes,
 * and the example of docs/layers.md runs as written.
 */
import { spawnSync } from 'node:child_process'
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { auditSession, ContextSession } from '../../dist/src/context/index.js'
import { isNoaError } from '../../dist/src/index.js'
import type { Message } from '../../dist/src/transcript/index.js'
import {
  assistant,
  compressUse,
  NOW,
  toolResult,
  user,
  writeTranscript,
} from '../helpers/context-fixtures.js'
import { CLI, ROOT_DIR, runCli, tempDir } from '../helpers/index.js'

const conv: Message[] = [
  user('Set up the build.'),
  assistant('Installed the toolchain.'),
  user('Run the tests.'),
  assistant('All tests pass.'),
  user('Next: a benchmark.'),
]

async function setup() {
  const dir = tempDir()
  const transcript = await writeTranscript(join(dir, 't'), 'sid', conv)
  const base = join(dir, 'ctx')
  const stateFile = join(base, 'sid', 'state.json')
  return { dir, base, transcript, stateFile }
}

const compressCli = (base: string, transcript: string, from = 'm00002', to = 'm00004') =>
  runCli([
    'context',
    'compress',
    base,
    'sid',
    '--transcript',
    transcript,
    '--from',
    from,
    '--to',
    to,
    '--summary',
    'Toolchain in; tests pass.',
    '--min-chars',
    '0',
  ])

describe('rebuild never replaces a state it cannot reproduce', () => {
  it('CLI: refuses naming the block made by compress --from/--to, and changes nothing', async () => {
    const { base, transcript, stateFile } = await setup()
    expect(compressCli(base, transcript).status).toBe(0)
    const before = readFileSync(stateFile)
    const files = readdirSync(join(base, 'sid')).sort()
    const r = runCli(['context', 'rebuild', base, 'sid', '--transcript', transcript])
    expect(r.status).toBe(1)
    expect(r.stdout).toBe('')
    expect(r.stderr).toMatch(
      /^noa context: rebuild would drop block b1 \(T1, m00002–m00004\): the transcript's recorded Compress calls do not produce it .*--keep-existing/,
    )
    expect(readFileSync(stateFile)).toEqual(before)
    expect(readdirSync(join(base, 'sid')).sort()).toEqual(files)
    expect(auditSession({ baseDir: base, sessionId: 'sid' })).toMatchObject({
      ok: true,
      blocks: 1,
      orphans: [],
    })
  })

  it('CLI: --keep-existing keeps the block, and the replaced state is kept beside the new one', async () => {
    const { base, transcript, stateFile } = await setup()
    compressCli(base, transcript)
    const before = readFileSync(stateFile)
    const r = runCli(['context', 'rebuild', base, 'sid', '--transcript', transcript, '--keep-existing'])
    expect(r.status).toBe(0)
    const lines = r.stdout.split('\n')
    expect(lines[0]).toBe(`replayed 0, skipped 0: 1 block, 0 archive(s) reused, saved to ${stateFile}`)
    expect(lines[1]).toBe('kept b1 from the previous state (the transcript does not produce it)')
    const aside = /^previous state kept as (.*\.before-rebuild-\d+)$/.exec(lines[2] as string)?.[1] as string
    expect(readFileSync(aside)).toEqual(before)
    const s = ContextSession.open({ baseDir: base, sessionId: 'sid' })
    expect(s.state.blocks.map((b) => [b.blockId, b.active, b.startRef, b.endRef])).toEqual([
      ['b1', true, 'm00002', 'm00004'],
    ])
    expect(auditSession({ baseDir: base, sessionId: 'sid', messages: conv })).toMatchObject({
      ok: true,
      orphans: [],
    })
  })

  it('API: NOA_CONFLICT with the blocks; keepExisting; a rebuild that reproduces all still keeps the old file', async () => {
    const { base, stateFile } = await setup()
    const s = ContextSession.open({
      baseDir: base,
      sessionId: 'sid',
      now: () => NOW,
      config: { minCompressRange: 0 },
    })
    s.compress(conv, [{ startRef: 'm00002', endRef: 'm00003', summary: 'set up', topic: '' }])
    try {
      s.rebuild(conv)
      expect.unreachable()
    } catch (err) {
      expect(isNoaError(err, 'NOA_CONFLICT')).toBe(true)
      expect((err as { details: { blocks: string[] } }).details.blocks).toEqual(['b1'])
    }
    const kept = s.rebuild(conv, { keepExisting: true })
    expect(kept.kept).toEqual(['b1'])
    expect(existsSync(kept.previous as string)).toBe(true)

    // Recorded calls reproduce their blocks: nothing is refused, the old state is still kept.
    const live = [...conv]
    const t = ContextSession.open({
      baseDir: base,
      sessionId: 'other',
      now: () => NOW,
      config: { minCompressRange: 0 },
    })
    live.push(compressUse('c1', [{ startId: 'm00002', endId: 'm00004', summary: 'set up and tested' }]))
    live.push(toolResult('c1', t.compressCall(live, 'c1').panel))
    const old = readFileSync(t.stateFile)
    const again = ContextSession.open({
      baseDir: base,
      sessionId: 'other',
      now: () => NOW,
      config: { minCompressRange: 0 },
    })
    const res = again.rebuild(live)
    expect([res.replayed, res.kept]).toEqual([1, []])
    expect(readFileSync(res.previous as string)).toEqual(old)
    expect(readFileSync(t.stateFile)).toEqual(old)
    expect(stateFile).toContain('sid')
  })

  it('keepExisting refuses a block it cannot keep: the transcript makes another block of that id', async () => {
    const { base } = await setup()
    const s = ContextSession.open({ baseDir: base, sessionId: 'sid', config: { minCompressRange: 0 } })
    s.compress(conv, [{ startRef: 'm00002', endRef: 'm00003', summary: 'by hand', topic: '' }])
    // A call recorded with a result that reports a block, for another range.
    const other = [
      ...conv,
      compressUse('c9', [{ startId: 'm00004', endId: 'm00005', summary: 'elsewhere' }]),
      toolResult('c9', '▣ noa | 9 → 3 tokens (~6 reclaimed)\n  b1(T1)=m00004–m00005 → x'),
    ]
    expect(() => s.rebuild(other, { keepExisting: true })).toThrow(
      /^cannot keep block b1 \(T1, m00002–m00003\): the transcript's calls make another block b1; nothing was changed$/,
    )
  })
})

describe('audit lists archives no block points at', () => {
  it('CLI and API: an archive left by a dropped block is named; the audit still passes', async () => {
    const { base, transcript, stateFile } = await setup()
    compressCli(base, transcript)
    const archive = join(base, 'sid', 'tier1', 'b1_m00002-m00004.md')
    // The state loses its block (an edit, or an old rebuild that replaced it).
    const st = JSON.parse(readFileSync(stateFile, 'utf8')) as { blocks: unknown }
    st.blocks = null
    writeFileSync(stateFile, JSON.stringify(st))
    const report = auditSession({ baseDir: base, sessionId: 'sid' })
    expect(report.ok).toBe(true)
    expect(report.orphans).toEqual([
      {
        file: archive,
        code: 'archive-orphan',
        reason:
          'archive of no block in state.json (a block a rebuild or an edit dropped, or a compression killed before its state was saved)',
      },
    ])
    const r = runCli(['context', 'audit', base, 'sid'])
    expect(r.status).toBe(0)
    expect(r.stdout.split('\n')).toEqual([
      `${archive}: ${report.orphans[0]?.reason}`,
      'ok: 0 blocks, 0 archives checked; 1 orphan archive',
      '',
    ])
    expect(JSON.parse(runCli(['context', 'audit', base, 'sid', '--json']).stdout).orphans).toHaveLength(1)
  })
})

describe('view shows the refs compress takes', () => {
  it('CLI: every message with its ref before any compression, and a summary with its block', async () => {
    const { base, transcript } = await setup()
    const first = runCli(['context', 'view', base, 'sid', '--transcript', transcript])
    expect(first.stdout.split('\n').filter((l) => l.startsWith('──'))).toEqual([
      '── 1 user · m00001',
      '── 2 assistant · m00002',
      '── 3 user · m00003',
      '── 4 assistant · m00004',
      '── 5 user · m00005',
    ])
    // Viewing assigns nothing: no state is written.
    expect(existsSync(join(base, 'sid', 'state.json'))).toBe(false)
    // The refs shown are the ones compress takes.
    expect(compressCli(base, transcript, 'm00002', 'm00004').status).toBe(0)
    const after = runCli(['context', 'view', base, 'sid', '--transcript', transcript])
    expect(after.stdout.split('\n').filter((l) => l.startsWith('──'))).toEqual([
      '── 1 user · m00001',
      '── 2 user · b1 (T1, m00002–m00004)',
      '── 3 user · m00005',
    ])
  })

  it('API: viewWithRefs maps each block to its ref', async () => {
    const { base } = await setup()
    const s = ContextSession.open({ baseDir: base, sessionId: 'sid' })
    const v = s.viewWithRefs(conv)
    expect(v.messages.map((m) => v.refs.get(m.content?.[0] as never))).toEqual([
      'm00001',
      'm00002',
      'm00003',
      'm00004',
      'm00005',
    ])
    expect(v.messages).toEqual(s.view(conv))
  })
})

describe("docs/layers.md's context example", () => {
  it('runs as written, on the data it sets up', () => {
    const doc = readFileSync(join(ROOT_DIR, 'docs', 'layers.md'), 'utf8')
    const block = /<!-- example: context -->\n```sh\n([\s\S]*?)```/.exec(doc)?.[1]
    expect(block).toBeDefined()
    const dir = tempDir()
    const bin = join(dir, 'bin')
    mkdirSync(bin)
    writeFileSync(
      join(bin, 'noa'),
      `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(CLI)} "$@"\n`,
    )
    chmodSync(join(bin, 'noa'), 0o755)
    const r = spawnSync('bash', ['-e', '-o', 'pipefail', '-c', block as string], {
      cwd: dir,
      env: { ...process.env, PATH: `${bin}:${process.env.PATH}` },
      encoding: 'utf8',
    })
    expect(r.stderr).toBe('')
    expect(r.status).toBe(0)
    // What the comments in the example say the commands print.
    expect(r.stdout).toContain('── 2 assistant · m00002')
    expect(r.stdout).toMatch(
      /▣ noa \| 32 → 13 tokens \(~19 reclaimed\)\n {2}b1\(T1\)=m00002–m00004 → .*\/ctx\/demo\/tier1\/b1_m00002-m00004\.md\n/,
    )
    expect(r.stdout).toContain('── 2 user · b1 (T1, m00002–m00004)')
    expect(r.stdout).toContain('1 block (1 active), next b2; 5 refs up to m00005')
    expect(r.stdout).toContain('ok: 1 block, 1 archive checked against the transcript\n')
    expect(r.stdout).toContain('kept b1 from the previous state')
  })
})
