/**
 * Replicated acks through crashes (issue 34): the appending process SIGKILLed right after it
 * reported an ack, and the stream's leader SIGKILLed while appends wait for their acks. Every
 * check is on what the stream, the logs and a mirror hold at the end, never on timing.
 */
import { describe, expect, it } from 'vitest'
import { AgentLog } from '../../dist/src/index.js'
import { initStream } from '../../dist/src/replicate/index.js'
import { SteppedChild } from '../helpers/child.js'
import { runCliAsync, tempDir } from '../helpers/index.js'
import { uniqueNames } from '../helpers/nats.js'
import { type NatsCluster, startNatsCluster, useNatsCluster } from '../helpers/nats-cluster.js'
import { entries, logBytes } from '../helpers/replicate.js'
import { streamEntries } from '../helpers/replicate-acks.js'

const WRITER = new URL('../fixtures/acks-writer.mjs', import.meta.url).pathname

function linesOf(buf: Buffer): string[] {
  return buf
    .toString('utf8')
    .split('\n')
    .filter((l) => l !== '')
}

describe('a process SIGKILLed right after a replicated ack', () => {
  const cluster = useNatsCluster()

  it('the acknowledged entry is on the stream, and a mirror pulled from it has it', async () => {
    const url = cluster.urls()
    const { prefix, stream } = uniqueNames()
    await initStream({ nats: url, prefix, stream, replicas: 3 })
    const root = tempDir()
    const child = new SteppedChild(WRITER, [root, url, prefix, stream])
    let acked = 0
    while (acked < 5) acked = (await child.next('ack')).seq as number
    child.child.kill('SIGKILL')
    await child.exited
    const mine = linesOf(logBytes(root, 'main'))
    const onStream = (await streamEntries(url, stream, prefix)).get('main') ?? []
    expect(onStream.length).toBeGreaterThanOrEqual(acked)
    expect(onStream.map((e) => e.seq)).toEqual(onStream.map((_, i) => i + 1))
    // Every entry on the stream is the log's own, byte for byte.
    for (const e of onStream) expect(e.line).toBe(mine[e.seq - 1])
    const mirror = tempDir()
    const pull = await runCliAsync(['replicate', 'pull', '--root', mirror, '--nats', url, '--prefix', prefix])
    expect(pull.stderr).toBe('')
    expect(pull.status).toBe(0)
    const mirrored = linesOf(logBytes(mirror, 'main'))
    expect(mirrored.length).toBeGreaterThanOrEqual(acked)
    expect(mirrored[acked - 1]).toBe(mine[acked - 1])
    // Opened again, the origin publishes what the kill left committed but unpublished.
    const log = await AgentLog.open({ root, workers: 1, replicate: { nats: url, prefix, stream } })
    await log.close()
    const after = await streamEntries(url, stream, prefix)
    for (const ws of ['main', 'bg']) {
      const list = after.get(ws) ?? []
      expect(list.map((e) => e.line)).toEqual(linesOf(logBytes(root, ws)))
    }
  }, 120_000)
})

describe('the stream leader SIGKILLed while replicated appends wait', () => {
  it('appends wait, then resolve; none lost or duplicated', async () => {
    let own: NatsCluster | null = null
    try {
      own = await startNatsCluster()
      const url = own.urls
      const { prefix, stream } = uniqueNames()
      await initStream({ nats: url, prefix, stream, replicas: 3 })
      const root = tempDir()
      const log = await AgentLog.open({ root, workers: 1, replicate: { nats: url, prefix, stream } })
      const wss = ['k0', 'k1', 'k2']
      let killed = false
      const leader = await own.streamLeader(stream)
      const node = own.nodes.find((n) => n.name === leader)
      try {
        const rounds = wss.map(async (ws) => {
          for (let i = 1; i <= 40; i++) {
            await log.appendMany(ws, entries(ws, i, 1 + (i % 3)))
            if (ws === 'k0' && i === 10) {
              // Mid-run: the leader goes, with publishes of the other workspaces in flight.
              await node?.kill()
              killed = true
            }
          }
        })
        await Promise.all(rounds)
      } finally {
        await log.close()
      }
      expect(killed).toBe(true)
      expect(await own.streamLeader(stream)).not.toBe(leader)
      // Read through the two servers that stayed up: a reader's consumer placed on the killed
      // one while it catches up after a restart would see only what it had (a lagging replica).
      const live = own.nodes
        .filter((n) => n !== node)
        .map((n) => n.url)
        .join(',')
      const got = await streamEntries(live, stream, prefix)
      for (const ws of wss) {
        const list = got.get(ws) ?? []
        expect(list.map((e) => e.line)).toEqual(linesOf(logBytes(root, ws)))
        expect(list.map((e) => e.seq)).toEqual(list.map((_, i) => i + 1))
      }
    } finally {
      await own?.stop()
    }
  }, 180_000)
})
