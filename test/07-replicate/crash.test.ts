/**
 * Replication through crashes: real processes killed with SIGKILL, a real nats-server stopped
 * and started again while entries flow. Every check is on what the stream and the logs hold
 * at the end, never on how long anything took.
 */
import { spawn } from 'node:child_process'
import { describe, expect, it, onTestFinished } from 'vitest'
import { replicatePull, replicatePush, replicationStatus } from '../../dist/src/replicate/index.js'
import { runCliAsync, tempDir } from '../helpers/index.js'
import { type NatsServer, startCli, startNatsServer, uniqueNames, useNats, waitFor } from '../helpers/nats.js'
import {
  completeLines,
  dropStream,
  expectExactlyOnce,
  fill,
  initStreamCli,
  lineCount,
  messageCount,
} from '../helpers/replicate.js'

const nats = useNats()
const WRITER = new URL('../fixtures/replicate-writer.mjs', import.meta.url).pathname
const WORKSPACES = ['rep-0', 'rep-1', 'rep.two']

function startWriter(root: string, pauseMs = 2) {
  const child = spawn(process.execPath, [WRITER, root, WORKSPACES.join(','), String(pauseMs)], {
    stdio: ['ignore', 'ignore', 'pipe'],
  })
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()))
  onTestFinished(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  })
  return {
    async kill() {
      child.kill('SIGKILL')
      await exited
    },
  }
}

function counts(root: string): Record<string, number> {
  return Object.fromEntries(WORKSPACES.map((ws) => [ws, lineCount(root, ws)]))
}

function expectSameLogs(origin: string, mirror: string): void {
  for (const ws of WORKSPACES) {
    expect(completeLines(mirror, ws).equals(completeLines(origin, ws)), ws).toBe(true)
  }
}

/** Both sides hold the same last seq for every workspace, as the server sees it. */
async function inSync(url: string, root: string, prefix: string): Promise<boolean | null> {
  try {
    const s = await replicationStatus({ root, prefix, nats: url })
    return s.workspaces.length >= WORKSPACES.length && s.workspaces.every((w) => w.direction === 'in-sync')
      ? true
      : null
  } catch {
    return null
  }
}

describe('replication through crashes', () => {
  it('a publisher killed with SIGKILL mid-stream and restarted sends no entry twice and leaves no gap', async () => {
    const { prefix, stream } = uniqueNames()
    const url = nats.url()
    await initStreamCli(url, prefix, stream)
    try {
      const a = tempDir()
      await fill(a, Object.fromEntries(WORKSPACES.map((ws) => [ws, [1, 800]])))
      const writer = startWriter(a)
      for (let round = 0; round < 3; round++) {
        const before = (await messageCount(url, stream)) ?? 0
        const pusher = startCli([
          'replicate',
          'push',
          '--follow',
          '--root',
          a,
          '--nats',
          url,
          '--prefix',
          prefix,
        ])
        await waitFor('the publisher to make progress', async () => {
          const n = await messageCount(url, stream)
          return n !== null && n >= before + 200 ? n : null
        })
        await new Promise((r) => setTimeout(r, Math.floor(Math.random() * 100)))
        pusher.child.kill('SIGKILL')
        expect(await pusher.exited).toBe('SIGKILL')
      }
      await writer.kill()
      // The restart catches up from where the stream is, whatever the checkpoint says.
      const last = await runCliAsync(['replicate', 'push', '--root', a, '--nats', url, '--prefix', prefix])
      expect(last.stderr).toBe('')
      expect(last.status).toBe(0)
      await expectExactlyOnce(url, stream, prefix, counts(a))

      const b = tempDir()
      await replicatePull({ nats: url, root: b, prefix })
      expectSameLogs(a, b)
      // And a follower stops cleanly on SIGTERM, with nothing left to send.
      const follower = startCli([
        'replicate',
        'push',
        '--follow',
        '--root',
        a,
        '--nats',
        url,
        '--prefix',
        prefix,
      ])
      await waitFor('the follower to start', () => (/following /.test(follower.stderr()) ? true : null))
      follower.child.kill('SIGTERM')
      expect(await follower.exited).toBe(0)
      expect(follower.stdout()).toMatch(/^pushed 0 entries/)
    } finally {
      await dropStream(url, stream)
    }
  })

  it('a mirror killed with SIGKILL mid-pull resumes from its checkpoint and ends byte-equal', async () => {
    const { prefix, stream } = uniqueNames()
    const url = nats.url()
    await initStreamCli(url, prefix, stream)
    try {
      const a = tempDir()
      await fill(a, Object.fromEntries(WORKSPACES.map((ws) => [ws, [1, 2000]])))
      await replicatePush({ nats: url, root: a, prefix })
      const b = tempDir()
      let applied = 0
      for (let round = 0; round < 3; round++) {
        const puller = startCli([
          'replicate',
          'pull',
          '--follow',
          '--root',
          b,
          '--nats',
          url,
          '--prefix',
          prefix,
        ])
        await waitFor(
          'the mirror to make progress',
          () => {
            let n = 0
            try {
              for (const ws of WORKSPACES) n += lineCount(b, ws)
            } catch {
              return null
            }
            return n > applied ? n : null
          },
          30_000,
        )
        await new Promise((r) => setTimeout(r, Math.floor(Math.random() * 30)))
        puller.child.kill('SIGKILL')
        expect(await puller.exited).toBe('SIGKILL')
        applied = WORKSPACES.reduce((n, ws) => n + lineCount(b, ws), 0)
      }
      const done = await runCliAsync(['replicate', 'pull', '--root', b, '--nats', url, '--prefix', prefix])
      expect(done.status).toBe(0)
      expectSameLogs(a, b)
      const verify = await runCliAsync(['verify', '--root', b])
      expect(verify.status).toBe(0)
    } finally {
      await dropStream(url, stream)
    }
  })

  it('the server restarted mid-stream: push and pull wait, retry, and end exactly once and byte-equal', async () => {
    // A server of its own: this test stops it.
    let server: NatsServer | null = await startNatsServer()
    try {
      const url = server.url
      const { prefix, stream } = uniqueNames()
      await initStreamCli(url, prefix, stream)
      const a = tempDir()
      const b = tempDir()
      await fill(a, Object.fromEntries(WORKSPACES.map((ws) => [ws, [1, 300]])))
      const writer = startWriter(a, 5)
      const pusher = startCli([
        'replicate',
        'push',
        '--follow',
        '--root',
        a,
        '--nats',
        url,
        '--prefix',
        prefix,
      ])
      const puller = startCli([
        'replicate',
        'pull',
        '--follow',
        '--root',
        b,
        '--nats',
        url,
        '--prefix',
        prefix,
      ])
      for (let round = 0; round < 2; round++) {
        const before = (await messageCount(url, stream)) ?? 0
        await waitFor(
          'entries to flow',
          async () => {
            const n = await messageCount(url, stream)
            return n !== null && n >= before + 300 ? n : null
          },
          30_000,
        )
        await server.restart()
      }
      await waitFor(
        'entries to flow after the restarts',
        async () => {
          const n = await messageCount(url, stream)
          return n !== null && n >= 1500 ? n : null
        },
        30_000,
      )
      await writer.kill()
      await waitFor('the publisher to catch up', () => inSync(url, a, prefix), 60_000)
      await waitFor('the mirror to catch up', () => inSync(url, b, prefix), 60_000)
      pusher.child.kill('SIGTERM')
      puller.child.kill('SIGTERM')
      expect(await pusher.exited).toBe(0)
      expect(await puller.exited).toBe(0)
      expect(pusher.stderr()).toMatch(/disconnect|retrying/)
      await expectExactlyOnce(url, stream, prefix, counts(a))
      expectSameLogs(a, b)
    } finally {
      await server?.stop()
      server = null
    }
  })
})
