/**
 * The dependency-free Python client (examples/python) against a real daemon, over the unix
 * socket and over TCP with a token: append, compare-and-append, pipelined appends, read, tail.
 */
import { spawnSync } from 'node:child_process'
import { chmodSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { ROOT_DIR, tempDir } from '../helpers/index.js'
import { startDaemon } from '../helpers/serve.js'

const DEMO = join(ROOT_DIR, 'examples', 'python', 'demo.py')

function demo(args: string[]) {
  // No __pycache__ left in the repository by a test run.
  const r = spawnSync('python3', [DEMO, ...args], {
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1' },
  })
  const steps = r.stdout
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l))
  return { status: r.status, steps, stderr: r.stderr }
}

describe('the Python client', () => {
  it('appends, reads and tails through the unix socket and through TCP with a token', async () => {
    const root = tempDir()
    const token = join(tempDir(), 'token')
    writeFileSync(token, 'python-client-test-token-0123456789\n')
    chmodSync(token, 0o600)
    const d = await startDaemon(root, ['--listen', '127.0.0.1:0', '--token-file', token])
    const [host, port] = (d.info.tcp as string).split(':') as [string, string]

    const unix = demo(['--root', root, '--ws', 'py', '--entries', '40'])
    expect(unix.stderr).toBe('')
    expect(unix.status).toBe(0)
    expect(unix.steps.map((s) => s.step)).toEqual([
      'hello',
      'append',
      'if_last_seq',
      'pipelined',
      'refused',
      'read',
      'watch',
      'verify',
    ])
    expect(unix.steps[0]).toMatchObject({ v: 1, transport: 'unix' })
    expect(unix.steps.at(-1)).toMatchObject({ entries: 42, lastSeq: 42 })

    const tcp = demo(['--host', host, '--port', port, '--token-file', token, '--ws', 'py', '--entries', '10'])
    expect(tcp.stderr).toBe('')
    expect(tcp.status).toBe(0)
    expect(tcp.steps[0]).toMatchObject({ v: 1, transport: 'tcp' })
    expect(tcp.steps.at(-1)).toMatchObject({ entries: 54, lastSeq: 54 })

    const lines = readFileSync(join(root, 'agent-logs', 'py.log'), 'utf8')
      .trim()
      .split('\n')
    expect(lines.map((l) => JSON.parse(l).seq)).toEqual(Array.from({ length: 54 }, (_, i) => i + 1))
    expect(JSON.parse(lines[0] as string)).toMatchObject({ op: 'write', path: 'py/first.txt' })
    expect((await d.stop()).code).toBe(0)
  })
})
