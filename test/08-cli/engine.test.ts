import { appendFileSync, existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { BLOB, runCli, tempDir } from '../helpers/index.js'

const entries = [
  { op: 'write', path: 'src/main.rs', blob: BLOB },
  { op: 'delete', path: 'src/old.rs' },
  { op: 'rename', from: 'src/foo.rs', to: 'src/bar.rs' },
]
const input = `${entries.map((e) => JSON.stringify(e)).join('\n')}\n`

describe('noa append / log', () => {
  it('appends stdin entries durably and prints one {seq,ts} per entry', () => {
    const root = tempDir()
    const r = runCli(['append', 'default', '--root', root, '--no-blob-check'], { input })
    expect(r.status).toBe(0)
    const acks = r.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
    expect(acks.map((a) => a.seq)).toEqual([1, 2, 3])
    expect(r.stdout.split('\n')[0]).toMatch(/^\{"seq":1,"ts":\d+\}$/)
    const stored = readFileSync(join(root, 'agent-logs', 'default.log'))
    const log = runCli(['log', 'default', '--root', root])
    expect(log.status).toBe(0)
    expect(log.stdoutBytes.equals(stored)).toBe(true)
    const from = runCli(['log', 'default', '--root', root, '--from', '3'])
    expect(from.stdout).toBe(`${stored.toString().split('\n')[2]}\n`)
  })

  it('refuses an invalid line with its number and reason, writing nothing', () => {
    const root = tempDir()
    const bad = `${JSON.stringify(entries[0])}\n{"op":"write","path":"../x","blob":"${BLOB}"}\n`
    const r = runCli(['append', 'default', '--root', root, '--no-blob-check'], { input: bad })
    expect(r.status).toBe(1)
    expect(r.stderr).toBe(`noa append: stdin:2: path: has a '..' segment in "../x"; nothing was written\n`)
    expect(existsSync(join(root, 'agent-logs'))).toBe(false)
    const notJson = runCli(['append', 'default', '--root', root, '--no-blob-check'], { input: '{"op":\n' })
    expect(notJson.status).toBe(1)
    expect(notJson.stderr).toMatch(/^noa append: stdin:1: not JSON/)
  })

  it('refuses bad workspace names before touching anything', () => {
    const root = tempDir()
    for (const name of ['../x', 'a/b', '.', '..', 'x'.repeat(200)]) {
      const r = runCli(['append', name, '--root', root, '--no-blob-check'], { input })
      expect(r.status).toBe(1)
      expect(r.stderr).toMatch(/workspace name .* must|is 200 characters/)
    }
    expect(readdirSync(root)).toEqual([])
  })

  it('takes the root from NOA_ROOT', () => {
    const root = tempDir()
    expect(runCli(['append', 'w', '--no-blob-check'], { input, env: { NOA_ROOT: root } }).status).toBe(0)
    expect(existsSync(join(root, 'agent-logs', 'w.log'))).toBe(true)
  })

  it('reports an unknown workspace as an error', () => {
    const r = runCli(['log', 'nope', '--root', tempDir()])
    expect(r.status).toBe(1)
    expect(r.stderr).toMatch(/workspace nope has no log/)
  })
})

describe('noa verify / recover / workspaces', () => {
  it('lists workspaces with entry counts and last seq', () => {
    const root = tempDir()
    runCli(['append', 'b', '--root', root, '--no-blob-check'], { input })
    runCli(['append', 'a', '--root', root, '--no-blob-check'], { input: `${JSON.stringify(entries[1])}\n` })
    const r = runCli(['workspaces', '--root', root, '--json'])
    expect(r.status).toBe(0)
    const list = JSON.parse(r.stdout)
    expect(
      list.map((w: { workspace: string; entries: number; lastSeq: number }) => [
        w.workspace,
        w.entries,
        w.lastSeq,
      ]),
    ).toEqual([
      ['a', 1, 1],
      ['b', 3, 3],
    ])
    const text = runCli(['workspaces', '--root', root]).stdout
    expect(text.split('\n')[0]).toMatch(/^workspace\s+entries\s+last seq\s+bytes$/)
    expect(text).toMatch(/\nb\s+3\s+3\s+\d+\n/)
  })

  it('verify fails with file:line, recover cuts a torn tail and exits 0', () => {
    const root = tempDir()
    runCli(['append', 'w', '--root', root, '--no-blob-check'], { input })
    const file = join(root, 'agent-logs', 'w.log')
    appendFileSync(file, '{"seq":4,"op":"del')
    const v = runCli(['verify', 'w', '--root', root])
    expect(v.status).toBe(1)
    expect(v.stderr).toContain(`${file}:4: partial last line`)
    const r = runCli(['recover', '--root', root])
    expect(r.status).toBe(0)
    expect(r.stdout).toMatch(/^w: cut a torn tail of 18 bytes; consistent, 3 entries/)
    expect(runCli(['verify', '--root', root]).status).toBe(0)
    const again = runCli(['recover', 'w', '--root', root, '--json'])
    expect(JSON.parse(again.stdout)).toMatchObject({
      workspace: 'w',
      ok: true,
      recovered: { truncatedBytes: 0 },
    })
  })

  it('recover exits 1 when a workspace is corrupt in the middle', () => {
    const root = tempDir()
    runCli(['append', 'w', '--root', root, '--no-blob-check'], { input })
    const file = join(root, 'agent-logs', 'w.log')
    const lines = readFileSync(file, 'utf8').split('\n')
    lines[1] = '{"broken":'
    writeFileSync(file, lines.join('\n'))
    const r = runCli(['recover', 'w', '--root', root])
    expect(r.status).toBe(1)
    expect(r.stderr).toContain(`${file}:2:`)
  })

  it('usage errors exit 2 with a usage line', () => {
    const cases = [
      ['append'],
      ['log'],
      ['verify', '--bogus'],
      ['log', 'w', '--from', 'x'],
      ['frobnicate'],
      [],
    ]
    for (const args of cases) {
      const r = runCli(args)
      expect(r.status, args.join(' ')).toBe(2)
      expect(r.stderr).toMatch(/usage: noa/)
    }
  })
})
