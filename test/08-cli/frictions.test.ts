/**
 * What a new user tripped over (issue 38): each friction, as the user met it, with real
 * processes where it is about more than one.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync, mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { CLI, DIST, runCli, runMain, tempDir } from '../helpers/index.js'

interface Child {
  child: ChildProcess
  out(): string
  err(): string
  exited: Promise<number | string>
}

function start(args: string[], input?: string): Child {
  const child = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'pipe'] })
  let out = ''
  let err = ''
  child.stdout?.on('data', (d) => {
    out += d
  })
  child.stderr?.on('data', (d) => {
    err += d
  })
  const exited = new Promise<number | string>((resolve) =>
    child.on('exit', (code, signal) => resolve(code ?? signal ?? -1)),
  )
  if (input !== undefined) child.stdin?.end(input)
  return { child, out: () => out, err: () => err, exited }
}

/** Waits for a condition (no fixed sleep): the test's own timeout bounds it. */
async function until(what: string, ok: () => boolean): Promise<void> {
  while (!ok()) {
    await new Promise((r) => setTimeout(r, 20))
  }
  expect(ok(), what).toBe(true)
}

const DELETE = (path: string) => `${JSON.stringify({ op: 'delete', path })}\n`

describe('noa log --follow on a workspace that does not exist yet', () => {
  it('waits for it, says so once on stderr, and prints the first entry appended later', async () => {
    const root = join(tempDir(), 'root') // the root does not exist yet either
    const f = start([CLI, 'log', 'new-ws', '--follow', '--root', root])
    try {
      await until('the follower says it waits', () => f.err().includes('waiting'))
      expect(f.err()).toMatch(
        /^noa log: workspace new-ws has no log in .+ yet; waiting for it \(Ctrl-C to stop\)\n$/,
      )
      expect(f.out()).toBe('')
      const a = runCli(['append', 'new-ws', '--root', root], { input: DELETE('a.txt') })
      expect(a.status).toBe(0)
      await until('the follower prints the entry', () => f.out().includes('\n'))
      expect(JSON.parse(f.out().split('\n')[0] as string)).toMatchObject({
        seq: 1,
        op: 'delete',
        path: 'a.txt',
      })
      f.child.kill('SIGTERM')
      expect(await f.exited).toBe(0)
      expect(f.err().match(/waiting/g)).toHaveLength(1)
    } finally {
      f.child.kill('SIGKILL')
    }
  })

  it('without --follow, a missing workspace is still an error', () => {
    const root = tempDir()
    runCli(['append', 'w', '--root', root], { input: DELETE('a') })
    const r = runCli(['log', 'nope', '--root', root])
    expect(r.status).toBe(1)
    expect(r.stderr).toMatch(/workspace nope has no log/)
  })
})

describe('noa tree', () => {
  it('takes the refs checkout and diff take: a snapshot id, ws and ws@seq', () => {
    const root = tempDir()
    const file = join(root, 'x.txt')
    writeFileSync(file, 'one\n')
    const blob = runCli(['blob', 'put', file, '--root', root]).stdout.trim()
    const write = (path: string) => `${JSON.stringify({ op: 'write', path, blob })}\n`
    expect(runCli(['append', 'w', '--root', root], { input: write('a.txt') + write('b.txt') }).status).toBe(0)
    const snap = runCli(['snapshot', 'w', '--root', root])
    expect(snap.status).toBe(0)
    const id = snap.stdout.trim()
    expect(runCli(['append', 'w', '--root', root], { input: DELETE('a.txt') }).status).toBe(0)

    const both = `a.txt\t${blob}\nb.txt\t${blob}\n`
    expect(runCli(['tree', id, '--root', root]).stdout).toBe(both)
    expect(runCli(['tree', 'w@2', '--root', root]).stdout).toBe(both)
    expect(runCli(['tree', 'w@1', '--root', root]).stdout).toBe(`a.txt\t${blob}\n`)
    expect(runCli(['tree', 'w', '--root', root]).stdout).toBe(`b.txt\t${blob}\n`)
    const bad = runCli(['tree', 'w@9', '--root', root])
    expect([bad.status, bad.stderr]).toEqual([1, 'noa tree: workspace w has no seq 9 (its last seq is 4)\n'])
  })
})

describe('two writers on one workspace without a daemon', () => {
  /** A process that holds w's lock (an open AgentLog that appended to it) until its stdin ends. */
  function holder(root: string): Child {
    const script = `
      import { AgentLog } from ${JSON.stringify(join(DIST, 'index.js'))}
      const log = await AgentLog.open({ root: ${JSON.stringify(root)}, workers: 0 })
      await log.append('w', { op: 'delete', path: 'held' })
      process.stdout.write('held\\n')
      process.stdin.resume()
      process.stdin.on('end', async () => { await log.close() })`
    return start(['--input-type=module', '-e', script])
  }

  it('the refusal names noa serve and --wait; --wait waits for the lock, bounded by its duration', async () => {
    const root = tempDir()
    const h = holder(root)
    try {
      await until('the holder holds the lock', () => h.out() === 'held\n')
      const refused = runCli(['append', 'w', '--root', root], { input: DELETE('a') })
      expect(refused.status).toBe(1)
      expect(refused.stderr).toMatch(/^noa append: workspace w is locked by process \d+/)
      expect(refused.stderr).toContain(`noa serve --root ${root} lets many processes share the root`)
      expect(refused.stderr).toContain('or pass --wait [DURATION] to wait for the lock')

      const bounded = runCli(['append', 'w', '--wait', '300ms', '--root', root], { input: DELETE('a') })
      expect(bounded.status).toBe(1)
      expect(bounded.stderr).toMatch(/waiting up to 300ms for it\n/)
      expect(bounded.stderr).toMatch(/waited 300ms for it \(--wait\)\. noa serve/)
      expect(bounded.stdout).toBe('')

      // --wait alone (the default, 30s), with the workspace after it: it goes in once the lock is free.
      const waiting = start([CLI, 'append', '--wait', 'w', '--root', root], DELETE('b'))
      await until('the second writer says it waits', () => waiting.err().includes('waiting up to 30s'))
      expect(waiting.out()).toBe('')
      h.child.stdin?.end()
      expect(await h.exited).toBe(0)
      expect(await waiting.exited).toBe(0)
      expect(JSON.parse(waiting.out())).toMatchObject({ seq: 2 })
    } finally {
      h.child.kill('SIGKILL')
    }
  })

  it('--wait refuses a value that is not a duration', () => {
    const r = runCli(['append', 'w', '--wait=soon', '--root', tempDir()], { input: DELETE('a') })
    expect(r.status).toBe(2)
    expect(r.stderr).toMatch(/^noa append: --wait must be a number with a unit/)
  })
})

describe('--root on a folder that is not a noa root', () => {
  it('read commands say so and name the nearest root; exit 1', () => {
    const project = tempDir()
    writeFileSync(join(project, 'package.json'), '{}')
    const root = join(project, '.noa')
    expect(runCli(['append', 'w', '--root', root], { input: DELETE('a') }).status).toBe(0)
    for (const args of [['workspaces'], ['verify'], ['log', 'w'], ['snapshots', 'w'], ['tree', 'w']]) {
      const r = runCli([...args, '--root', '.'], { cwd: project })
      expect([r.status, r.stdout], args.join(' ')).toEqual([1, ''])
      expect(r.stderr).toBe(
        `noa ${args[0]}: ${project} is not a noa root (it has no agent-logs/ or objects/ folder); did you mean --root .noa?\n`,
      )
    }
    // From a folder below: the parent's .noa.
    mkdirSync(join(project, 'src'))
    writeFileSync(join(project, 'src', 'main.ts'), '')
    const below = runCli(['workspaces', '--root', '.'], { cwd: join(project, 'src') })
    expect(below.status).toBe(1)
    expect(below.stderr).toMatch(new RegExp(`did you mean --root ${root.replace(/[.]/g, '\\.')}\\?\n$`))
    // An empty folder is an empty root, as before.
    const empty = tempDir()
    expect(runCli(['workspaces', '--root', empty, '--json']).stdout).toBe('[]\n')
  })

  it('append to a new root creates it and says so once on stderr', () => {
    const root = join(tempDir(), 'new-root')
    const first = runCli(['append', 'w', '--root', root], { input: DELETE('a') })
    expect(first.status).toBe(0)
    expect(first.stderr).toBe(`noa append: created a new noa root at ${root}\n`)
    const second = runCli(['append', 'w', '--root', root], { input: DELETE('b') })
    expect([second.status, second.stderr]).toEqual([0, ''])
    // A folder that held other things (`--root .` in a project) is named too; an empty one is not.
    const project = tempDir()
    writeFileSync(join(project, 'package.json'), '{}')
    const here = runCli(['append', 'w', '--root', project], { input: DELETE('a') })
    expect(here.stderr).toBe(`noa append: created a new noa root at ${project}\n`)
    expect(runCli(['append', 'w', '--root', tempDir()], { input: DELETE('a') }).stderr).toBe('')
  })
})

describe('usage errors', () => {
  it('a typo of a command prints the suggestion and one line of usage, not the whole help', async () => {
    const r = await runMain(['snapshto'])
    expect(r.status).toBe(2)
    expect(r.stderr).toBe(
      `noa: unknown command "snapshto" (did you mean snapshot or snapshots?)\nusage: noa <command> [options] ('noa --help' lists the commands)\n`,
    )
  })

  it('an option without its value is worded like every other usage error', async () => {
    for (const args of [
      ['snapshot', 'w', '-m'],
      ['snapshot', 'w', '--message'],
      ['snapshot', 'w', '-m', '--json'],
    ]) {
      const r = await runMain(args)
      expect(r.status).toBe(2)
      const [first, second] = r.stderr.split('\n')
      expect(first, args.join(' ')).toBe(
        "noa snapshot: option -m, --message needs a value (MESSAGE); a value starting with '-' is written --message=-…",
      )
      expect(second).toMatch(/^usage: noa snapshot /)
    }
  })
})

describe('wording', () => {
  it('one entry is "1 entry"', () => {
    const root = tempDir()
    runCli(['append', 'w', '--root', root], { input: DELETE('a') })
    const r = runCli(['verify', '--root', root])
    expect(r.stdout).toMatch(/^w: ok, 1 entry, seq 1\.\.1, /m)
  })

  it('the checkout refusal says --force on the command line and force: true in the API', async () => {
    const root = tempDir()
    runCli(['append', 'w', '--root', root], { input: DELETE('a') })
    const dir = tempDir()
    writeFileSync(join(dir, 'mine.txt'), '')
    const r = runCli(['checkout', 'w', dir, '--root', root])
    expect(r.status).toBe(1)
    expect(r.stderr).toContain('or pass --force to replace')
    expect(r.stderr).not.toContain('force: true')
    const { SnapshotEngine } = await import('../../dist/src/store/index.js')
    await expect(new SnapshotEngine({ root }).checkout('w', dir)).rejects.toThrow(
      /or pass force: true to replace the tree's files in it$/,
    )
    expect(existsSync(join(dir, 'mine.txt'))).toBe(true)
  })
})
