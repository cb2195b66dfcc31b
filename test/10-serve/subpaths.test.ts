/**
 * Every subpath that opens a root forwards to a running `noa serve`, whatever the program
 * imported: a program that imports only `noa/engine`, `noa/transcript` or `noa/replicate` holds
 * no lock on the root and no commit journal of its own while it writes (before, it opened the
 * root in process and took the workspace or file lock away from the daemon, or was refused one
 * the daemon held), and the CLI, also a client of the daemon, writes to the same workspace
 * meanwhile. (The adapters' subpaths: test/10-adapters/through-daemon.test.ts.)
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { AgentLog } from '../../dist/src/index.js'
import { replicatePush } from '../../dist/src/replicate/index.js'
import { locksOf, SteppedChild } from '../helpers/child.js'
import { runCli, tempDir } from '../helpers/index.js'
import { uniqueNames, useNats } from '../helpers/nats.js'
import { dropStream, fill, initStreamCli } from '../helpers/replicate.js'
import { startDaemon } from '../helpers/serve.js'

const nats = useNats()

const WRITER = fileURLToPath(new URL('./fixtures/subpath-writer.mjs', import.meta.url))

/** No lock held by `pid` (/proc/locks) and no commit journal named by it under the root. */
function expectNothingHeld(root: string, pid: number): void {
  const locks = locksOf(pid, existsSync('/proc/locks') ? readFileSync('/proc/locks', 'utf8') : null)
  if (locks !== null) expect(locks).toEqual([])
  const journals = existsSync(join(root, 'journal')) ? readdirSync(join(root, 'journal')) : []
  expect(journals.filter((f) => f.startsWith(`${pid}-`))).toEqual([])
}

describe('subpaths through noa serve', () => {
  it('noa/engine: AgentLog.open is the daemon client; the CLI appends to the same workspace between its appends', async () => {
    const root = tempDir('noa-sub-engine-')
    const d = await startDaemon(root)
    const c = new SteppedChild(WRITER, [root, 'engine', 'w'])
    const open = (await c.next('open')) as unknown as { client: string; seq: number }
    expect(open.client).toBe('RemoteAgentLog')
    expect(open.seq).toBe(1)
    expectNothingHeld(root, c.pid)
    // In process, the child would hold w's lock: NOA_WORKSPACE_LOCKED here.
    const r = runCli(['append', 'w', '--root', root], { input: '{"op":"delete","path":"cli"}\n' })
    expect(r.status, r.stderr).toBe(0)
    expect((JSON.parse(r.stdout) as { seq: number }).seq).toBe(2)
    c.go()
    const done = (await c.next('done')) as unknown as { seq: number }
    await c.done()
    expect(done.seq).toBe(3)
    const log = runCli(['log', 'w', '--root', root])
    expect(log.status, log.stderr).toBe(0)
    expect(
      log.stdout
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as { path: string }).path),
    ).toEqual(['a', 'cli', 'b'])
    expect((await d.stop()).code).toBe(0)
  })

  it('noa/transcript: a durable TranscriptWriter given the root appends through the daemon', async () => {
    const root = tempDir('noa-sub-transcript-')
    const d = await startDaemon(root)
    const dir = join(root, 'transcripts')
    const c = new SteppedChild(WRITER, [root, 'transcript', dir])
    const open = (await c.next('open')) as unknown as { path: string }
    expectNothingHeld(root, c.pid)
    expect(readFileSync(open.path, 'utf8')).toContain('"hello"')
    c.go()
    await c.next('done')
    await c.done()
    const records = readFileSync(open.path, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { message: { content: Array<{ text: string }> } })
    expect(records.map((r) => r.message.content[0]?.text)).toEqual(['hello', 'again'])
    expect((await d.stop()).code).toBe(0)
  })

  it('noa/replicate: a pull into a served root appends through the daemon, which holds the workspace', async () => {
    const { prefix, stream } = uniqueNames()
    const origin = tempDir('noa-sub-origin-')
    const root = tempDir('noa-sub-mirror-')
    await initStreamCli(nats.url(), prefix, stream)
    try {
      await fill(origin, { ws: [1, 5] })
      expect((await replicatePush({ nats: nats.url(), root: origin, prefix })).entries).toBe(5)
      const d = await startDaemon(root)
      // The daemon opens (creates and locks) the workspace the pull will fill: in process, the
      // pull could not take its lock (NOA_WORKSPACE_LOCKED).
      const client = await AgentLog.open({ root })
      await client.openWorkspace('ws')
      const c = new SteppedChild(WRITER, [root, 'replicate', nats.url(), prefix])
      const done = (await c.next('done')) as unknown as { entries: number }
      await c.done()
      expect(done.entries).toBe(5)
      expect((await client.append('ws', { op: 'delete', path: 'after' })).seq).toBe(6)
      await client.close()
      const log = runCli(['log', 'ws', '--root', root])
      expect(log.status, log.stderr).toBe(0)
      expect(log.stdout.trim().split('\n')).toHaveLength(6)
      expect((await d.stop()).code).toBe(0)
    } finally {
      await dropStream(nats.url(), stream)
    }
  })
})
