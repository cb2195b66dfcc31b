/**
 * The CLI over a root others can write into: whole-root commands go on past a bad log and name
 * each at the end (exit 1); a root that is a file, a missing root for a read-only command and an
 * over-long name are named errors, never a raw errno or a hang; invalid UTF-8 on stdin is
 * refused with its line and byte offset; every file and folder noa creates takes its mode from
 * the umask (objects then lose their write bits).
 */
import { execFileSync, spawnSync } from 'node:child_process'
import { appendFileSync, existsSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { FILE_PLANTS, outsideState, TORN } from '../helpers/hostile.js'
import { BLOB, ROOT_DIR, runCli, tempDir } from '../helpers/index.js'

const line = (path: string) => `${JSON.stringify({ op: 'write', path, blob: BLOB })}\n`

/** Two healthy workspaces; a log corrupt in the middle, one symlinked outside, a FIFO, a stray file. */
function hostileRoot(): { root: string; outside: string; bad: string[] } {
  const root = tempDir()
  const outside = tempDir()
  for (const ws of ['alpha', 'beta', 'corrupt'])
    expect(
      runCli(['append', ws, '--no-blob-check', '--root', root], { input: line('a') + line('b') + line('c') })
        .status,
    ).toBe(0)
  const logs = join(root, 'agent-logs')
  const text = readFileSync(join(logs, 'corrupt.log'), 'utf8').split('\n')
  text.splice(1, 0, '{"seq":"two"}')
  writeFileSync(join(logs, 'corrupt.log'), text.join('\n'))
  writeFileSync(join(outside, 'target.txt'), TORN)
  symlinkSync(join(outside, 'target.txt'), join(logs, 'linked.log'))
  execFileSync('mkfifo', [join(logs, 'fifo.log')])
  writeFileSync(join(logs, 'notes.txt'), 'not a log')
  return { root, outside, bad: ['corrupt', 'fifo', 'linked'].map((w) => join(logs, `${w}.log`)) }
}

describe('whole-root commands beside a bad log', () => {
  it('workspaces lists the healthy ones and names each bad log at the end', () => {
    const { root, outside, bad } = hostileRoot()
    const before = outsideState(outside)
    const r = runCli(['workspaces', '--root', root])
    expect(r.status).toBe(1)
    expect(r.stdout).toMatch(/^workspace\s+entries/)
    expect(r.stdout).toMatch(/\nalpha\s+3\s+3\s/)
    expect(r.stdout).toMatch(/\nbeta\s+3\s+3\s/)
    // A listing reads tails, not every line: the log corrupt in the middle is listed (verify finds it).
    expect(r.stdout).toMatch(/\ncorrupt\s+4\s+3\s/)
    for (const file of bad.slice(1)) expect(r.stderr).toContain(file)
    expect(r.stderr).toMatch(/ignored: .*notes\.txt is not a workspace log/)
    const json = runCli(['workspaces', '--root', root, '--json'])
    expect(json.status).toBe(1)
    expect(JSON.parse(json.stdout).map((w: { workspace: string }) => w.workspace)).toEqual([
      'alpha',
      'beta',
      'corrupt',
    ])
    expect(outsideState(outside)).toEqual(before)
  })

  it('verify checks every healthy log and names each bad one at the end', () => {
    const { root, outside, bad } = hostileRoot()
    const before = outsideState(outside)
    const r = runCli(['verify', '--root', root])
    expect(r.status).toBe(1)
    expect(r.stdout).toMatch(/^alpha: ok, 3 entries/m)
    expect(r.stdout).toMatch(/^beta: ok, 3 entries/m)
    const summary = r.stderr.slice(r.stderr.indexOf('noa verify: 3 files'))
    for (const file of bad) expect(summary).toContain(file)
    expect(summary).toContain(`${bad[0]}:2:`)
    const lines = runCli(['verify', '--root', root, '--json'])
      .stdout.trim()
      .split('\n')
      .map((l) => JSON.parse(l))
    expect(lines.filter((l) => l.ok).map((l) => l.workspace)).toEqual(['alpha', 'beta'])
    expect(
      lines
        .filter((l) => !l.ok)
        .map((l) => l.file)
        .sort(),
    ).toEqual(bad)
    expect(outsideState(outside)).toEqual(before)
  })

  it('recover repairs the healthy logs, never the bad ones, and names each at the end', () => {
    const { root, outside, bad } = hostileRoot()
    appendFileSync(join(root, 'agent-logs', 'beta.log'), '{"seq":4,"op"')
    const before = outsideState(outside)
    const corrupt = readFileSync(bad[0] as string)
    const r = runCli(['recover', '--root', root])
    expect(r.status).toBe(1)
    expect(r.stdout).toMatch(/^alpha: nothing to repair; consistent/m)
    expect(r.stdout).toMatch(/^beta: cut a torn tail of 13 bytes; consistent/m)
    const summary = r.stderr.slice(r.stderr.indexOf('noa recover: 3 files'))
    for (const file of bad) expect(summary).toContain(file)
    expect(readFileSync(bad[0] as string)).toEqual(corrupt)
    expect(outsideState(outside)).toEqual(before)
    // A named workspace that does not exist is not created.
    const typo = runCli(['recover', 'typo', '--root', root])
    expect(typo.status).toBe(1)
    expect(existsSync(join(root, 'agent-logs', 'typo.log'))).toBe(false)
  })
})

describe('a workspace log planted by someone else, through the CLI', () => {
  for (const { name, plant } of FILE_PLANTS) {
    it(`${name} is refused by append and log, and named by workspaces, verify and recover`, async () => {
      const root = tempDir()
      const outside = tempDir()
      expect(runCli(['append', 'ok', '--no-blob-check', '--root', root], { input: line('a') }).status).toBe(0)
      const file = join(root, 'agent-logs', 'v.log')
      await plant(file, outside)
      const before = outsideState(outside)
      for (const args of [
        ['append', 'v', '--no-blob-check'],
        ['log', 'v'],
        ['workspaces'],
        ['verify'],
        ['recover'],
        ['verify', 'v'],
      ]) {
        const r = runCli([...args, '--root', root], { input: line('b') })
        expect(r.status, args.join(' ')).toBe(1)
        expect(r.stderr, args.join(' ')).toContain(file)
        expect(r.stderr, args.join(' ')).toContain('not a regular file')
      }
      expect(runCli(['verify', 'ok', '--root', root]).status).toBe(0)
      expect(outsideState(outside)).toEqual(before)
    })
  }
})

describe('roots and names', () => {
  it('a root that is a file is a named error for every command', () => {
    const file = join(tempDir(), 'file')
    writeFileSync(file, '')
    for (const args of [
      ['workspaces'],
      ['verify'],
      ['recover'],
      ['append', 'w', '--no-blob-check'],
      ['log', 'w'],
      ['blob', 'get', BLOB],
      ['blob', 'put', '-'],
      ['replicate', 'status'],
    ]) {
      const r = runCli([...args, '--root', file], { input: line('a') })
      expect(r.status, args.join(' ')).toBe(1)
      expect(r.stderr, args.join(' ')).toMatch(
        /is a file, not a folder: it cannot be a noa root|cannot be a noa root/,
      )
    }
    expect(readFileSync(file, 'utf8')).toBe('')
  })

  it('a missing root is a named error for read-only commands, and is not created', () => {
    const missing = join(tempDir(), 'missing')
    for (const args of [
      ['workspaces'],
      ['verify'],
      ['log', 'w'],
      ['snapshots', 'w'],
      ['tree', `noa_${BLOB}`],
      ['blob', 'get', BLOB],
      ['replicate', 'status'],
    ]) {
      const r = runCli([...args, '--root', missing])
      expect(r.status, args.join(' ')).toBe(1)
      expect(r.stderr, args.join(' ')).toContain(`no noa root at ${missing}`)
    }
    expect(existsSync(missing)).toBe(false)
  })

  it('over-long names are named errors, not raw errnos', () => {
    const dir = tempDir()
    const long = 'x'.repeat(300)
    const cases: Array<[string[], string]> = [
      [['workspaces', '--root', join(dir, long)], ''],
      [['blob', 'put', join(dir, long), '--root', dir], ''],
      [['transcript', 'append', dir, long], JSON.stringify({ role: 'user', content: 'hi' })],
      [['memory', 'save', '--dir', join(dir, 'm'), '--name', long], 'body'],
    ]
    for (const [args, input] of cases) {
      const r = runCli(args, { input })
      expect(r.status, args[0]).toBe(1)
      expect(r.stderr, args[0]).toMatch(/the name is too long for the filesystem/)
      expect(r.stderr).not.toMatch(/ENAMETOOLONG/)
    }
  })
})

describe('append input bytes', () => {
  it('refuses invalid UTF-8 with its line and byte offset, writing nothing', () => {
    const root = tempDir()
    const good = Buffer.from(line('a'))
    // Line 2: a path holding \xff, and (in the second case) an overlong encoding of '/'.
    for (const bad of [Buffer.from([0xff]), Buffer.from([0xc0, 0xaf]), Buffer.from([0xed, 0xa0, 0x80])]) {
      const second = Buffer.concat([
        Buffer.from('{"op":"write","path":"a'),
        bad,
        Buffer.from(`","blob":"${BLOB}"}\n`),
      ])
      const r = runCli(['append', 'w', '--no-blob-check', '--root', root], {
        input: Buffer.concat([good, second]),
      })
      expect(r.status).toBe(1)
      expect(r.stderr).toBe(
        `noa append: stdin:2: invalid UTF-8 at byte offset ${good.length + 23} of stdin (byte 24 of the line); nothing was written\n`,
      )
    }
    expect(existsSync(join(root, 'agent-logs'))).toBe(false)
    // Valid multi-byte UTF-8 goes through unchanged.
    const ok = runCli(['append', 'w', '--no-blob-check', '--root', root], { input: line('ファイル-é-😀') })
    expect(ok.status).toBe(0)
    expect(readFileSync(join(root, 'agent-logs', 'w.log'), 'utf8')).toContain('ファイル-é-😀')
  })
})

describe('modes follow the umask', () => {
  function modesUnder(mask: string): Record<string, { mode: number; dir: boolean }> {
    const base = tempDir()
    const r = spawnSync(process.execPath, [join(ROOT_DIR, 'test', 'fixtures', 'umask-root.mjs'), mask, base])
    expect(r.stderr.toString()).toBe('')
    expect(r.status).toBe(0)
    return JSON.parse(r.stdout.toString())
  }
  const isObject = (p: string) => /\/objects\/[0-9a-f]{2}\/[0-9a-f]{62}$/.test(p)

  it('umask 077: every file is 0600 (objects 0400), every folder 0700', () => {
    const modes = modesUnder('077')
    const kinds = new Set(Object.keys(modes).map((p) => p.split('/').slice(0, 2).join('/')))
    // Every layer made something: logs, objects, transcripts, memory, context, replication.
    for (const k of [
      'root/agent-logs',
      'root/objects',
      'root/sessions',
      'root/memory',
      'root/context',
      'root/replication',
      'mirror/objects',
    ])
      expect(kinds.has(k), k).toBe(true)
    for (const [path, { mode, dir }] of Object.entries(modes)) {
      expect(mode.toString(8), path).toBe(dir ? '700' : isObject(path) ? '400' : '600')
    }
  })

  it('umask 022: files 0644 (objects 0444), folders 0755, as before', () => {
    for (const [path, { mode, dir }] of Object.entries(modesUnder('022'))) {
      expect(mode.toString(8), path).toBe(dir ? '755' : isObject(path) ? '444' : '644')
    }
  })
})
