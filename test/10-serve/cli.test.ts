/**
 * The CLI's side of live tail and compare-and-append: `noa log --follow` prints every entry as
 * it commits, whoever appends it, with or without a daemon and across the daemon's death;
 * `noa append --if-last-seq N` commits only right after seq N and otherwise names the current
 * last seq, writing nothing.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { CLI, runCli, tempDir } from '../helpers/index.js'
import { startDaemon } from '../helpers/serve.js'

const entry = (path: string) => `${JSON.stringify({ op: 'delete', path })}\n`

/** `noa log WS --follow` in its own process; `lines(n)` waits until it printed n lines. */
function follower(root: string, ws: string, args: string[] = []) {
  const child: ChildProcess = spawn(process.execPath, [CLI, 'log', ws, '--follow', '--root', root, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let out = ''
  let err = ''
  let waiter: (() => void) | null = null
  child.stdout?.on('data', (d) => {
    out += d
    waiter?.()
  })
  child.stderr?.on('data', (d) => {
    err += d
  })
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  onTestFinished(() => {
    if (child.exitCode === null) child.kill('SIGKILL')
  })
  return {
    async lines(n: number): Promise<string[]> {
      const deadline = Date.now() + 30_000
      while (out.split('\n').length - 1 < n) {
        if (Date.now() > deadline)
          throw new Error(`follower printed ${out.split('\n').length - 1} lines of ${n}: ${err}`)
        await new Promise<void>((resolve) => {
          waiter = resolve
          setTimeout(resolve, 200)
        })
      }
      return out.split('\n').slice(0, n)
    },
    async stop(): Promise<number | null> {
      child.kill('SIGTERM')
      return exited
    },
    stderr: () => err,
  }
}

function append(root: string, ws: string, paths: string[], extra: string[] = []) {
  const r = runCli(['append', ws, '--root', root, ...extra], { input: paths.map(entry).join('') })
  return {
    ...r,
    acks:
      r.status === 0
        ? r.stdout
            .trim()
            .split('\n')
            .map((l) => JSON.parse(l))
        : [],
  }
}

const stored = (root: string, ws: string) => readFileSync(join(root, 'agent-logs', `${ws}.log`), 'utf8')

describe('noa log --follow', () => {
  it('prints what is there, then every entry other processes append, in order, without a daemon', async () => {
    const root = tempDir()
    expect(append(root, 'w', ['a', 'b']).status).toBe(0)
    const f = follower(root, 'w')
    expect(await f.lines(2)).toEqual(stored(root, 'w').trim().split('\n'))
    for (let i = 0; i < 3; i++) expect(append(root, 'w', [`c${i}`, `d${i}`]).status).toBe(0)
    expect((await f.lines(8)).join('\n')).toBe(stored(root, 'w').trim())
    expect(await f.stop()).toBe(0)
  })

  it('follows through the daemon, and goes on without a gap when the daemon is killed and back', async () => {
    const root = tempDir()
    let d = await startDaemon(root)
    expect(append(root, 'w', ['a']).status).toBe(0)
    const f = follower(root, 'w', ['--from', '1'])
    await f.lines(1)
    expect(append(root, 'w', ['b', 'c']).status).toBe(0)
    await f.lines(3)
    await d.stop('SIGKILL')
    expect(append(root, 'w', ['d']).status).toBe(0) // in process: the socket was stale
    await f.lines(4)
    d = await startDaemon(root)
    expect(append(root, 'w', ['e', 'f']).status).toBe(0)
    const lines = await f.lines(6)
    expect(lines.join('\n')).toBe(stored(root, 'w').trim())
    expect(lines.map((l) => JSON.parse(l).path)).toEqual(['a', 'b', 'c', 'd', 'e', 'f'])
    expect(await f.stop()).toBe(0)
    expect((await d.stop()).code).toBe(0)
  })

  it('through the daemon, waits for a workspace that does not exist yet and prints its entries', async () => {
    const root = tempDir()
    const d = await startDaemon(root)
    const f = follower(root, 'later')
    const until = Date.now() + 30_000
    while (!f.stderr().includes('waiting') && Date.now() < until) await new Promise((r) => setTimeout(r, 20))
    expect(f.stderr()).toMatch(/^noa log: workspace later has no log in .+ yet; waiting for it/)
    expect(append(root, 'later', ['a', 'b']).status).toBe(0)
    expect((await f.lines(2)).join('\n')).toBe(stored(root, 'later').trim())
    expect(await f.stop()).toBe(0)
    expect((await d.stop()).code).toBe(0)
  })

  it('starts at --from; without --follow, refuses an unknown workspace (with it, waits: frictions.test.ts)', async () => {
    const root = tempDir()
    expect(append(root, 'w', ['a', 'b', 'c']).status).toBe(0)
    const f = follower(root, 'w', ['--from', '3'])
    expect((await f.lines(1))[0]).toBe(stored(root, 'w').trim().split('\n')[2])
    await f.stop()
    const r = runCli(['log', 'nope', '--root', root])
    expect(r.status).toBe(1)
    expect(r.stderr).toMatch(/workspace nope has no log/)
  })
})

describe('noa append --if-last-seq', () => {
  for (const served of [false, true]) {
    it(`commits only right after seq N, else names the current last seq (${served ? 'through the daemon' : 'in process'})`, async () => {
      const root = tempDir()
      if (served) await startDaemon(root)
      const first = append(root, 'w', ['a', 'b'], ['--if-last-seq', '0'])
      expect(first.acks.map((a) => a.seq)).toEqual([1, 2])
      const stale = append(root, 'w', ['x'], ['--if-last-seq', '1'])
      expect(stale.status).toBe(1)
      expect(stale.stderr).toBe(
        'noa append: workspace w: the append expected last seq 1, but it is 2; nothing was written\n',
      )
      expect(append(root, 'w', ['c'], ['--if-last-seq', '2']).acks[0].seq).toBe(3)
      expect(
        stored(root, 'w')
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l).path),
      ).toEqual(['a', 'b', 'c'])
      const bad = runCli(['append', 'w', '--root', root, '--if-last-seq', 'two'], { input: entry('y') })
      expect(bad.status).toBe(2)
      expect(bad.stderr).toMatch(/--if-last-seq must be an integer >= 0/)
    })
  }
})
