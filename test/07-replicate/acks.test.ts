/**
 * Replicated acks (issue 34): an AgentLog opened with `replicate` resolves an append only once
 * the R3 stream acknowledged the message holding it; messages carry several entries when
 * appends pile up (group commit); what a crash left unpublished goes first at open; a stream
 * that disagrees with the log, a fence, and bad options are refused by name.
 */

import { join } from 'node:path'
import { jetstream, jetstreamManager, type StoredMsg } from '@nats-io/jetstream'
import { connect, headers, type NatsConnection } from '@nats-io/transport-node'
import { describe, expect, it } from 'vitest'
import { AgentLog } from '../../dist/src/index.js'
import { initStream, promote, replicatePull } from '../../dist/src/replicate/index.js'
import { encodeFence } from '../../dist/src/replicate/message.js'
import { runCliAsync, tempDir } from '../helpers/index.js'
import { createStream, uniqueNames, withConnection } from '../helpers/nats.js'
import { useNatsCluster } from '../helpers/nats-cluster.js'
import { entries, logBytes } from '../helpers/replicate.js'
import { streamEntries } from '../helpers/replicate-acks.js'
import { startDaemon } from '../helpers/serve.js'

const cluster = useNatsCluster()

async function r3(): Promise<{ prefix: string; stream: string; url: string }> {
  const { prefix, stream } = uniqueNames()
  const url = cluster.urls()
  await initStream({ nats: url, prefix, stream, replicas: 3 })
  return { prefix, stream, url }
}

async function lastOn(url: string, stream: string, subject: string): Promise<StoredMsg | null> {
  return withConnection(url, async (nc) => {
    const jsm = await jetstreamManager(nc)
    return jsm.streams.getMessage(stream, { last_by_subj: subject })
  })
}

describe('replicated acks on an R3 stream', () => {
  it('resolves each append once the stream holds it, exactly once and in order, byte for byte', async () => {
    const { prefix, stream, url } = await r3()
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1, replicate: { nats: url, prefix, stream } })
    try {
      for (let i = 1; i <= 5; i++) {
        const ack = await log.append('solo', entries('solo', i, 1)[0] as never)
        // Acknowledged: the subject's last message is the one holding it, already.
        const last = await lastOn(url, stream, `${prefix}.solo`)
        expect(last?.header?.get('Nats-Msg-Id')).toBe(`solo:${ack.seq}`)
      }
      const many = await log.appendMany('pair', entries('pair', 1, 7))
      const last = await lastOn(url, stream, `${prefix}.pair`)
      expect(last?.header?.get('Nats-Msg-Id')).toBe(`pair:${many[6]?.seq}`)
      await Promise.all(
        ['a', 'b', 'c'].flatMap((ws) => entries(ws, 1, 20).map((e) => log.append(ws, e as never))),
      )
      // Both parts of an atomic batch are on the stream once it resolves (lines read from the logs).
      await log.appendAtomic({ a: entries('a', 21, 2), pair: entries('pair', 8, 1) })
      expect((await lastOn(url, stream, `${prefix}.a`))?.header?.get('Nats-Msg-Id')).toBe('a:22')
      expect((await lastOn(url, stream, `${prefix}.pair`))?.header?.get('Nats-Msg-Id')).toBe('pair:8')
    } finally {
      await log.close()
    }
    const got = await streamEntries(url, stream, prefix)
    for (const ws of ['solo', 'pair', 'a', 'b', 'c']) {
      const list = got.get(ws) ?? []
      expect(list.map((e) => e.seq)).toEqual(list.map((_, i) => i + 1))
      expect(Buffer.concat(list.map((e) => Buffer.from(`${e.line}\n`))).equals(logBytes(root, ws))).toBe(true)
    }
    expect(got.get('solo')?.length).toBe(5)
    expect(got.get('a')?.length).toBe(22)
  })

  it('does not resolve an append while its message waits for the PubAck, and does once it comes', async () => {
    const { prefix, stream, url } = await r3()
    const root = tempDir()
    const real = await connect({ servers: url.split(',') })
    // The connection the log publishes through, with the publishes to one subject held back.
    const held: Array<() => void> = []
    let release = false
    const nc = new Proxy(real, {
      get(target, key) {
        const v = Reflect.get(target, key)
        if (key === 'publish') {
          return (subject: string, ...rest: unknown[]) => {
            const send = () => (v as (...a: unknown[]) => void).call(target, subject, ...rest)
            if (subject === `${prefix}.held` && !release) held.push(send)
            else send()
          }
        }
        return typeof v === 'function' ? v.bind(target) : v
      },
    }) as NatsConnection
    const log = await AgentLog.open({ root, workers: 1, replicate: { nats: nc, prefix, stream } })
    try {
      let resolved = false
      const append = log.append('held', entries('held', 1, 1)[0] as never).then((a) => {
        resolved = true
        return a
      })
      while (held.length === 0) await new Promise((r) => setTimeout(r, 5))
      // Committed locally (its message is built from the ack), published, not acknowledged.
      expect(logBytes(root, 'held').length).toBeGreaterThan(0)
      for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r))
      expect(resolved).toBe(false)
      release = true
      for (const send of held.splice(0)) send()
      expect((await append).seq).toBe(1)
      const last = await lastOn(url, stream, `${prefix}.held`)
      expect(last?.header?.get('Nats-Msg-Id')).toBe('held:1')
    } finally {
      await log.close()
      await real.close()
    }
  })

  it('group-commits: 100 concurrent appends to one workspace go in fewer messages, each entry once', async () => {
    const { prefix, stream, url } = await r3()
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1, replicate: { nats: url, prefix, stream } })
    let acks: { seq: number }[]
    try {
      acks = await Promise.all(entries('hot', 1, 100).map((e) => log.append('hot', e as never)))
    } finally {
      await log.close()
    }
    expect(acks.map((a) => a.seq).sort((x, y) => x - y)).toEqual(acks.map((_, i) => i + 1))
    const got = await streamEntries(url, stream, prefix)
    const list = got.get('hot') ?? []
    expect(list.map((e) => e.seq)).toEqual(list.map((_, i) => i + 1))
    expect(list.length).toBe(100)
    const messages = new Set(list.map((e) => e.streamSeq)).size
    expect(messages).toBeLessThan(100)
    expect(Buffer.concat(list.map((e) => Buffer.from(`${e.line}\n`))).equals(logBytes(root, 'hot'))).toBe(
      true,
    )
  })

  it("with durability 'local' resolves at the local commit and still publishes everything by close", async () => {
    const { prefix, stream, url } = await r3()
    const root = join(tempDir(), 'not-made-yet')
    const log = await AgentLog.open({
      root,
      workers: 1,
      replicate: { nats: url, prefix, stream, durability: 'local' },
    })
    try {
      await Promise.all(entries('lazy', 1, 30).map((e) => log.append('lazy', e as never)))
    } finally {
      await log.close()
    }
    const list = (await streamEntries(url, stream, prefix)).get('lazy') ?? []
    expect(list.map((e) => e.seq)).toEqual(Array.from({ length: 30 }, (_, i) => i + 1))
  })

  it('publishes at open what a log holds and the stream does not (a crash before the PubAck), first', async () => {
    const { prefix, stream, url } = await r3()
    const root = tempDir()
    const first = await AgentLog.open({ root, workers: 1, replicate: { nats: url, prefix, stream } })
    await first.appendMany('left', entries('left', 1, 3))
    await first.close()
    // Committed locally, never published: what a process killed between the two leaves.
    const plain = await AgentLog.open({ root, workers: 1 })
    await plain.appendMany('left', entries('left', 4, 4))
    await plain.appendMany('fresh', entries('fresh', 1, 2))
    await plain.close()
    expect(((await streamEntries(url, stream, prefix)).get('left') ?? []).length).toBe(3)
    const again = await AgentLog.open({ root, workers: 1, replicate: { nats: url, prefix, stream } })
    try {
      // Already on the stream once open returned.
      const now = await streamEntries(url, stream, prefix)
      expect((now.get('left') ?? []).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7])
      expect((now.get('fresh') ?? []).map((e) => e.seq)).toEqual([1, 2])
      await log8(again)
    } finally {
      await again.close()
    }
    const list = (await streamEntries(url, stream, prefix)).get('left') ?? []
    expect(list.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8])
    expect(Buffer.concat(list.map((e) => Buffer.from(`${e.line}\n`))).equals(logBytes(root, 'left'))).toBe(
      true,
    )
  })

  it('refuses a workspace whose stream holds entries the log has not, or another entry where they meet', async () => {
    const { prefix, stream, url } = await r3()
    const ahead = tempDir()
    const other = await AgentLog.open({ root: ahead, workers: 1, replicate: { nats: url, prefix, stream } })
    await other.appendMany('w', entries('w', 1, 5))
    await other.close()
    // A second root with fewer entries of its own for the same workspace.
    const root = tempDir()
    const plain = await AgentLog.open({ root, workers: 1 })
    await plain.appendMany('w', entries('w', 100, 2))
    await plain.close()
    const before = logBytes(root, 'w')
    const log = await AgentLog.open({ root, workers: 1, replicate: { nats: url, prefix, stream } })
    try {
      const err = await log.append('w', entries('w', 200, 1)[0] as never).catch((e) => e)
      expect(err.code).toBe('NOA_REPLICATION')
      expect(err.details).toMatchObject({ workspace: 'w', seq: 3 })
      expect(logBytes(root, 'w').equals(before)).toBe(true)
    } finally {
      await log.close()
    }
    // The same seqs, other bytes: refused at the seq where the log and the stream meet.
    const root2 = tempDir()
    const plain2 = await AgentLog.open({ root: root2, workers: 1 })
    await plain2.appendMany('w', entries('w', 300, 6))
    await plain2.close()
    const before2 = logBytes(root2, 'w')
    const log2 = await AgentLog.open({ root: root2, workers: 1, replicate: { nats: url, prefix, stream } })
    try {
      const err = await log2.appendMany('w', entries('w', 400, 1)).catch((e) => e)
      expect(err.code).toBe('NOA_REPLICATION')
      expect(err.details).toMatchObject({ workspace: 'w', seq: 5 })
      expect(logBytes(root2, 'w').equals(before2)).toBe(true)
    } finally {
      await log2.close()
    }
    expect(((await streamEntries(url, stream, prefix)).get('w') ?? []).length).toBe(5)
  })

  it('rejects with NOA_REPLICA_DIVERGED once a fence took the workspace over, and refuses the next append', async () => {
    const { prefix, stream, url } = await r3()
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1, replicate: { nats: url, prefix, stream } })
    try {
      await log.appendMany('taken', entries('taken', 1, 3))
      // Another host promotes itself: a fence after seq 3, as `noa replicate promote` writes it.
      const last = await lastOn(url, stream, `${prefix}.taken`)
      const fence = encodeFence('taken', 3, 'host-b')
      const h = headers()
      for (const [k, v] of Object.entries(fence.headers)) h.set(k, v)
      await withConnection(url, async (nc) => {
        await jetstream(nc).publish(`${prefix}.taken`, fence.data, {
          msgID: fence.msgId,
          headers: h,
          expect: { lastSubjectSequence: last?.seq as number },
        })
      })
      const err = await log.append('taken', entries('taken', 4, 1)[0] as never).catch((e) => e)
      expect(err.code).toBe('NOA_REPLICA_DIVERGED')
      expect(err.details).toMatchObject({ workspace: 'taken', seqs: [4] })
      const size = logBytes(root, 'taken').length
      const again = await log.append('taken', entries('taken', 5, 1)[0] as never).catch((e) => e)
      expect(again.code).toBe('NOA_REPLICA_DIVERGED')
      expect(logBytes(root, 'taken').length).toBe(size)
      // Other workspaces go on.
      await log.append('free', entries('free', 1, 1)[0] as never)
    } finally {
      await log.close()
    }
    const got = await streamEntries(url, stream, prefix)
    expect((got.get('taken') ?? []).map((e) => e.seq)).toEqual([1, 2, 3])
    // Opened again, the log's entry after the fence is reported as divergent.
    const reopened = await AgentLog.open({ root, workers: 1, replicate: { nats: url, prefix, stream } })
    try {
      const err = await reopened.append('taken', entries('taken', 6, 1)[0] as never).catch((e) => e)
      expect(err.code).toBe('NOA_REPLICA_DIVERGED')
      expect(err.details).toMatchObject({ workspace: 'taken', seqs: [4] })
    } finally {
      await reopened.close()
    }
  })

  it('after a promote, the promoted root appends after its own fence and the old writer is refused', async () => {
    const { prefix, stream, url } = await r3()
    const a = tempDir()
    const logA = await AgentLog.open({ root: a, workers: 1, replicate: { nats: url, prefix, stream } })
    await logA.appendMany('handed', entries('handed', 1, 3))
    await logA.close()
    const b = tempDir()
    await replicatePull({ nats: url, root: b, prefix, stream })
    await promote({ nats: url, root: b, prefix, stream, workspaces: ['handed'], writer: 'host-b' })
    // The old writer, opened again with nothing past the fence, may not write behind it.
    const sizeA = logBytes(a, 'handed').length
    const again = await AgentLog.open({ root: a, workers: 1, replicate: { nats: url, prefix, stream } })
    try {
      const err = await again.append('handed', entries('handed', 4, 1)[0] as never).catch((e) => e)
      expect(err.code).toBe('NOA_REPLICATION')
      expect(err.details).toMatchObject({ workspace: 'handed', seq: 4 })
      expect(err.message).toMatch(/host-b/)
      expect(logBytes(a, 'handed').length).toBe(sizeA)
    } finally {
      await again.close()
    }
    // The promoted root goes on after its own fence, replicated.
    const logB = await AgentLog.open({ root: b, workers: 1, replicate: { nats: url, prefix, stream } })
    try {
      expect((await logB.append('handed', entries('handed', 4, 1)[0] as never)).seq).toBe(4)
    } finally {
      await logB.close()
    }
    const list = (await streamEntries(url, stream, prefix)).get('handed') ?? []
    expect(list.map((e) => e.line).join('\n')).toBe(logBytes(b, 'handed').toString('utf8').trimEnd())
  })

  it('rejects with a named error when the stream is gone for good, and refuses the next append unwritten', async () => {
    const { prefix, stream, url } = await r3()
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1, replicate: { nats: url, prefix, stream } })
    try {
      await log.append('gone', entries('gone', 1, 1)[0] as never)
      await withConnection(url, async (nc) => (await jetstreamManager(nc)).streams.delete(stream))
      const err = await log.append('gone', entries('gone', 2, 1)[0] as never).catch((e) => e)
      expect(err.code).toBe('NOA_STREAM_CONFIG')
      expect(err.message).toMatch(stream)
      const size = logBytes(root, 'gone').length
      const again = await log.append('gone', entries('gone', 3, 1)[0] as never).catch((e) => e)
      expect(again.code).toBe('NOA_STREAM_CONFIG')
      expect(logBytes(root, 'gone').length).toBe(size)
    } finally {
      await log.close()
    }
  }, 60_000)

  it('refuses bad options by name, and a stream that breaks the required settings, writing nothing', async () => {
    const root = tempDir()
    const url = cluster.urls()
    const { prefix, stream } = uniqueNames()
    const bad = async (replicate: unknown) =>
      AgentLog.open({ root, workers: 1, replicate: replicate as never }).then(
        async (l) => {
          await l.close()
          return null
        },
        (e) => e,
      )
    for (const [replicate, field] of [
      [{ nats: 42 }, 'replicate.nats'],
      [{ nats: '' }, 'replicate.nats'],
      [{ nats: 'http://127.0.0.1:4222' }, 'replicate.nats'],
      [{ nats: 'nats://127.0.0.1:99999' }, 'replicate.nats'],
      [{ nats: url, durability: 'eventually' }, 'replicate.durability'],
      [{ nats: url, prefix: 'a..b' }, 'replicate.prefix'],
      [{ nats: url, stream: 'a.b' }, 'replicate.stream'],
      [{ nats: url, spread: 3 }, 'replicate.spread'],
      ['nats://x', 'replicate'],
    ] as const) {
      const err = await bad(replicate)
      expect(err?.code, JSON.stringify(replicate)).toBe('NOA_BAD_OPTION')
      expect(err?.details.field).toBe(field)
    }
    // A stream that would drop entries (a per-subject limit) and keeps them in memory.
    await createStream(url, stream, {
      subjects: [`${prefix}.>`],
      num_replicas: 3,
      max_msgs_per_subject: 10,
      storage: 'memory' as never,
    })
    const err = await bad({ nats: url, prefix, stream })
    expect(err?.code).toBe('NOA_STREAM_CONFIG')
    expect(err?.message).toMatch(/max_msgs_per_subject/)
    expect(err?.message).toMatch(/storage is memory/)
    const info = await withConnection(url, async (nc) => (await jetstreamManager(nc)).streams.info(stream))
    expect(info.state.messages).toBe(0)
    // No workspace appeared.
    const log = await AgentLog.open({ root, workers: 1 })
    expect(await log.workspaces()).toEqual([])
    await log.close()
  })
})

async function log8(log: AgentLog): Promise<void> {
  await log.append('left', entries('left', 8, 1)[0] as never)
}

describe('noa serve --replicate-nats', () => {
  it("answers its clients' appends once the stream holds them, and refuses a client that asks for more than it gives", async () => {
    const { prefix, stream, url } = await r3()
    const root = tempDir()
    const daemon = await startDaemon(root, ['--replicate-nats', url, '--prefix', prefix, '--stream', stream])
    const log = await AgentLog.open({ root, replicate: { nats: url, prefix, stream } })
    try {
      expect(log.constructor.name).toBe('RemoteAgentLog')
      for (let i = 1; i <= 3; i++) {
        const ack = await log.append('served', entries('served', i, 1)[0] as never)
        const last = await lastOn(url, stream, `${prefix}.served`)
        expect(last?.header?.get('Nats-Msg-Id')).toBe(`served:${ack.seq}`)
      }
      await Promise.all(entries('served', 4, 50).map((e) => log.append('served', e as never)))
    } finally {
      await log.close()
      await daemon.stop()
    }
    const list = (await streamEntries(url, stream, prefix)).get('served') ?? []
    expect(list.map((e) => e.line).join('\n')).toBe(logBytes(root, 'served').toString('utf8').trimEnd())
    expect(list.length).toBe(53)

    // A daemon without replication: a client that asks for replicated acks is refused.
    const plainRoot = tempDir()
    const plain = await startDaemon(plainRoot)
    try {
      const err = await AgentLog.open({ root: plainRoot, replicate: { nats: url, prefix, stream } }).catch(
        (e) => e,
      )
      expect(err.code).toBe('NOA_BAD_OPTION')
      expect(err.details.field).toBe('replicate')
      expect(err.message).toMatch(/--replicate-nats/)
    } finally {
      await plain.stop()
    }
    const usage = await runCliAsync(['serve', '--root', tempDir(), '--durability', 'replicated'])
    expect(usage.status).toBe(2)
    expect(usage.stderr).toMatch(/--durability goes with --replicate-nats/)
  })
})
