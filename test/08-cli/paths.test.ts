/**
 * The paths a user takes through the CLI end cleanly: a reader that goes away (`| head -1`)
 * ends the command with 0 and no message, a missing root is refused by every command that only
 * reads, data commands take --json with camelCase keys and human tables say the same numbers,
 * and long commands show progress on a terminal only.
 */
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AgentLog, MemoryStore, ObjectStore, SnapshotEngine, TranscriptWriter } from '../../dist/src/index.js'
import { BLOB, blobOf, CLI, runMainIo, tempDir } from '../helpers/index.js'

const ERASE = '\r\x1b[K'

/** Runs noa with the reader of its stdout gone (closed before the command starts). */
function withClosedStdout(args: string[], input = ''): Promise<{ status: number; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ['pipe', 'pipe', 'pipe'] })
    child.stdout.destroy()
    let stderr = ''
    child.stderr.on('data', (d) => {
      stderr += d
    })
    child.on('error', reject)
    child.on('close', (code, signal) => resolve({ status: code ?? (signal ? -1 : -2), stderr }))
    child.stdin.end(input)
  })
}

/** Runs noa and closes its stdout after the first chunk, as `| head -1` does. */
function readFirstChunk(args: string[]): Promise<{ status: number; stderr: string; first: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
    let first = ''
    let stderr = ''
    child.stdout.once('data', (d) => {
      first = String(d)
      child.stdout.destroy()
    })
    child.stderr.on('data', (d) => {
      stderr += d
    })
    child.on('error', reject)
    child.on('close', (code) => resolve({ status: code ?? -1, stderr, first }))
  })
}

/** Keys anywhere in a JSON value that are not camelCase. */
function nonCamelKeys(value: unknown, at = ''): string[] {
  if (Array.isArray(value)) return value.flatMap((v, i) => nonCamelKeys(v, `${at}[${i}]`))
  if (value === null || typeof value !== 'object') return []
  return Object.entries(value).flatMap(([k, v]) => [
    ...(/^[a-z][a-zA-Z0-9]*$/.test(k) ? [] : [`${at}.${k}`]),
    ...nonCamelKeys(v, `${at}.${k}`),
  ])
}

const BIG = 3000

let dir: string
let root: string
let snapshotId: string
let blob: string
let transcriptDir: string
let memDir: string
let contextDir: string

beforeAll(async () => {
  dir = join(tmpdir(), `noa-paths-${process.pid}-${Date.now()}`)
  root = join(dir, 'root')
  mkdirSync(root, { recursive: true })
  const log = await AgentLog.open({ root, workers: 1 })
  try {
    await log.appendMany(
      'big',
      Array.from({ length: BIG }, (_, i) => ({
        op: 'write' as const,
        path: `src/file-${i}.ts`,
        blob: blobOf(i),
      })),
    )
    await log.appendMany('small', [{ op: 'write', path: 'a', blob: BLOB }])
    snapshotId = (await new SnapshotEngine({ log }).snapshot('big', { message: 'all' })).snapshotId as string
  } finally {
    await log.close()
  }
  blob = await new ObjectStore(root).putBlob(Buffer.alloc(300_000, 'x'))
  transcriptDir = join(dir, 'transcripts')
  const w = new TranscriptWriter({ dir: transcriptDir, sessionId: 's1' })
  await w.recordMessage({ role: 'user', content: [{ type: 'text', text: 'hello' }] })
  await w.close()
  memDir = join(dir, 'mem')
  new MemoryStore(memDir).save({
    name: 'Deploy',
    description: 'how we ship',
    type: 'project',
    content: 'make',
  })
  contextDir = join(dir, 'context')
})

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true })
})

describe('a closed pipe ends the command quietly with 0, as git does', () => {
  it('noa log big | head -1: the first line arrives, then exit 0 without a word', async () => {
    const r = await readFirstChunk(['log', 'big', '--root', root])
    expect(r.first.startsWith('{"seq":1,"op":"write"')).toBe(true)
    expect(r.stderr).toBe('')
    expect(r.status).toBe(0)
  })

  it('every command writing to stdout, the reader gone before it starts', async () => {
    const hash = blob
    const cases: string[][] = [
      ['log', 'big', '--root', root],
      ['log', 'big', '--json', '--root', root],
      ['workspaces', '--root', root],
      ['workspaces', '--json', '--root', root],
      ['verify', '--root', root],
      ['verify', '--json', '--root', root],
      ['recover', 'small', '--root', root],
      ['snapshots', 'big', '--root', root],
      ['tree', snapshotId, '--root', root],
      ['tree', snapshotId, '--json', '--root', root],
      ['blob', 'get', hash, '--root', root],
      ['transcript', 'show', join(transcriptDir, 's1.jsonl')],
      ['transcript', 'usage', transcriptDir, 's1', '--json'],
      ['memory', 'list', '--dir', memDir],
      ['memory', 'index', '--dir', memDir],
      ['context', 'state', contextDir, 's1', '--json'],
      ['replicate', 'status', '--root', root],
      ['--help'],
      ['--version'],
      ['help', 'log'],
      ['log', '--help'],
      ['completion', 'bash'],
    ]
    // Two at a time: each is a process of its own.
    for (let i = 0; i < cases.length; i += 2) {
      const batch = cases.slice(i, i + 2)
      const results = await Promise.all(batch.map((args) => withClosedStdout(args)))
      results.forEach((r, j) => {
        const what = (batch[j] as string[]).join(' ')
        expect(r.stderr, what).toBe('')
        expect(r.status, what).toBe(0)
      })
    }
  })

  it('append goes on appending every entry when the reader of its acks has gone', async () => {
    const r0 = tempDir()
    const n = 25_000 // more than one commit of the CLI's
    const input = Array.from({ length: n }, (_, i) => `{"op":"delete","path":"p${i}"}\n`).join('')
    const r = await withClosedStdout(['append', 'w', '--root', r0], input)
    expect(r.stderr).toBe('')
    expect(r.status).toBe(0)
    const log = readFileSync(join(r0, 'agent-logs', 'w.log'), 'utf8').split('\n')
    expect(log.length - 1).toBe(n)
    expect(JSON.parse(log[n - 1] as string).seq).toBe(n)
  })

  it('a write error that is not a closed pipe still fails, awaited or not', () => {
    // /dev/full: every write fails with ENOSPC.
    for (const args of ['log big', 'verify', 'workspaces --json']) {
      const r = spawnSync('sh', ['-c', `"${process.execPath}" "${CLI}" ${args} --root "${root}" > /dev/full`])
      expect(String(r.stderr), args).toMatch(/^noa \w+: .*ENOSPC: no space left on device, write\n$/)
      expect(r.status, args).toBe(1)
    }
  })
})

describe('a missing or mistyped root is refused by the commands that only read', () => {
  it('exit 1, "no noa root at PATH", nothing created', async () => {
    const base = tempDir()
    const missing = join(base, 'typo')
    const zero = `noa_${'0'.repeat(64)}`
    const cases: string[][] = [
      ['log', 'w'],
      ['workspaces'],
      ['workspaces', '--json'],
      ['verify'],
      ['verify', 'w'],
      ['recover'],
      ['recover', 'w'],
      ['snapshots', 'w'],
      ['snapshot', 'w'],
      ['tree', zero],
      ['blob', 'get', BLOB],
      ['merge', 'w', 'x'],
      ['replicate', 'status'],
      // Refused before the server is asked (nothing listens there).
      ['replicate', 'push', '--nats', 'nats://127.0.0.1:9'],
    ]
    for (const args of cases) {
      const r = await runMainIo([...args, '--root', missing])
      const what = args.join(' ')
      expect(r.stderr, what).toContain(`no noa root at ${missing} (the folder does not exist)`)
      expect(r.stdout, what).toBe('')
      expect(r.status, what).toBe(1)
    }
    expect(existsSync(missing)).toBe(false)
  })

  it('a root that is a file is named as such', async () => {
    const file = join(tempDir(), 'notes.txt')
    writeFileSync(file, 'x')
    for (const args of [['workspaces'], ['tree', `noa_${'0'.repeat(64)}`], ['blob', 'get', BLOB]]) {
      const r = await runMainIo([...args, '--root', file])
      expect(r.stderr, args.join(' ')).toContain(`${file} is a file, not a folder: it cannot be a noa root`)
      expect(r.status, args.join(' ')).toBe(1)
    }
  })
})

describe('--json: every data command, one vocabulary', () => {
  it('log --json is accepted and prints the stored lines (the on-disk keys stay the seed’s)', async () => {
    const plain = await runMainIo(['log', 'small', '--root', root])
    const json = await runMainIo(['log', 'small', '--json', '--root', root])
    expect(json.status).toBe(0)
    expect(json.stdout).toBe(plain.stdout)
    expect(JSON.parse(json.stdout)).toMatchObject({ seq: 1, op: 'write', path: 'a', blob: BLOB })
  })

  it('append --json prints one {seq, ts} per entry', async () => {
    const r0 = tempDir()
    const r = await runMainIo(['append', 'w', '--json', '--root', r0], {
      input: '{"op":"delete","path":"a"}\n{"op":"delete","path":"b"}\n',
    })
    expect(r.status).toBe(0)
    const acks = r.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
    expect(acks.map((a) => Object.keys(a))).toEqual([
      ['seq', 'ts'],
      ['seq', 'ts'],
    ])
    expect(acks.map((a) => a.seq)).toEqual([1, 2])
  })

  it('workspaces, verify, recover and replicate status --json use camelCase keys only', async () => {
    for (const args of [
      ['workspaces', '--json'],
      ['verify', '--json'],
      ['recover', 'small', '--json'],
      ['replicate', 'status', '--json'],
    ]) {
      const r = await runMainIo([...args, '--root', root])
      expect(r.status, args.join(' ')).toBe(0)
      for (const line of r.stdout.trim().split('\n')) {
        expect(nonCamelKeys(JSON.parse(line)), args.join(' ')).toEqual([])
      }
    }
  })

  it('workspaces: the table has a header and the numbers of --json', async () => {
    const json = JSON.parse((await runMainIo(['workspaces', '--json', '--root', root])).stdout)
    const lines = (await runMainIo(['workspaces', '--root', root])).stdout.trim().split('\n')
    expect(lines[0]?.split(/\s{2,}/)).toEqual(['workspace', 'entries', 'last seq', 'bytes'])
    const rows = lines.slice(1).map((l) => l.trim().split(/\s+/))
    expect(rows).toEqual(
      json.map((w: { workspace: string; entries: number; lastSeq: number; bytes: number }) => [
        w.workspace,
        String(w.entries),
        String(w.lastSeq),
        String(w.bytes),
      ]),
    )
    expect(rows.find((r) => r[0] === 'big')).toEqual([
      'big',
      String(BIG + 1),
      String(BIG + 1),
      expect.any(String),
    ])
  })
})

describe('terminals: say what is awaited, show progress, stay quiet when piped', () => {
  it('append on a terminal says it reads JSONL from stdin until Ctrl-D; piped, it says nothing', async () => {
    const r0 = tempDir()
    const input = '{"op":"delete","path":"a"}\n'
    const tty = await runMainIo(['append', 'w', '--root', r0], { stdinIsTTY: true, input })
    expect(tty.status).toBe(0)
    expect(tty.stderr).toMatch(/^noa append: reading JSONL entries for w from stdin until Ctrl-D/)
    const piped = await runMainIo(['append', 'w', '--root', r0], { input })
    expect(piped.status).toBe(0)
    expect(piped.stderr).toBe('')
  })

  it('append on a real terminal (script(1) gives it one)', () => {
    const r0 = tempDir()
    const found = spawnSync('sh', ['-c', 'command -v script'])
    if (found.status !== 0)
      throw new Error('script(1) not found: install util-linux (apt-get install bsdutils)')
    // script's stdin is empty: the terminal gets an end of file, as after Ctrl-D.
    const r = spawnSync(
      'script',
      ['-qec', `"${process.execPath}" "${CLI}" append w --root "${r0}"`, '/dev/null'],
      {
        input: '',
      },
    )
    expect(String(r.stdout)).toContain('reading JSONL entries for w from stdin until Ctrl-D')
    expect(r.status).toBe(0)
  })

  const NOW = { NOA_PROGRESS_DELAY_MS: '0' }

  it('verify, recover, workspaces and append draw a progress line on stderr and erase it', async () => {
    const r0 = tempDir()
    const cases: Array<[string[], RegExp, string?]> = [
      [['verify', '--root', root], /verifying big \(1\/2\): 100% of 0\.\d MB/],
      [['recover', 'big', 'small', '--root', root], /recovering big \(1\/2\)/],
      [['workspaces', '--root', root], /counting entries: big \(1\/2\)/],
      [
        ['append', 'w', '--root', r0],
        /appending to w: 1\/1 entries durable 100%/,
        '{"op":"delete","path":"a"}\n',
      ],
    ]
    for (const [args, line, input] of cases) {
      const what = args.join(' ')
      const tty = await runMainIo(args, { isTTY: true, env: NOW, input })
      expect(tty.status, what).toBe(0)
      expect(tty.stderr.startsWith(ERASE), what).toBe(true)
      expect(tty.stderr, what).toMatch(line)
      expect(tty.stderr.endsWith(ERASE), what).toBe(true)
      // The data on stdout is the same as without a terminal.
      const piped = await runMainIo(args, { env: NOW, input })
      expect(piped.stderr, what).toBe('')
      if (args[0] !== 'append') expect(tty.stdout, what).toBe(piped.stdout)
    }
  })

  it('a failing command erases its progress line before the error', async () => {
    const r0 = tempDir()
    mkdirSync(join(r0, 'agent-logs'))
    writeFileSync(join(r0, 'agent-logs', 'a.log'), readFileSync(join(root, 'agent-logs', 'big.log')))
    writeFileSync(join(r0, 'agent-logs', 'b.log'), '{"seq":1,"op":"delete","path":"a","ts":1}\nnot json\n')
    const r = await runMainIo(['workspaces', '--root', r0], { isTTY: true, env: NOW })
    expect(r.status).toBe(1)
    expect(r.stderr).toMatch(/counting entries: a \(1\/2\)/)
    expect(r.stderr).toContain(`${ERASE}noa workspaces: `)
    expect(r.stderr).toContain('b.log')
  })
})
