/**
 * Racers: nats-server 2.9 stores two publishes made with the same expected last subject
 * sequence on a clustered stream (nats-io/nats-server#4320), as hosts appending to one shared
 * workspace make them. Planted for real here (three connections, one per server of an R3 stream,
 * publishing at once with one expectation, until some are stored twice), then mirrored with
 * `noa replicate pull`: the mirror keeps the order every shared host keeps (a message not
 * starting right after the order's last entry is skipped) and counts the racers it skipped.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import { connect, headers } from '@nats-io/transport-node'
import { expect, it } from 'vitest'
import { formatLine } from '../../dist/src/engine/entry.js'
import { subjectTail } from '../../dist/src/replicate/history.js'
import { replicatePull } from '../../dist/src/replicate/index.js'
import { closeLink, openLink } from '../../dist/src/replicate/link.js'
import { encodeEntries, encodeFence } from '../../dist/src/replicate/message.js'
import { initStream } from '../../dist/src/replicate/stream.js'
import { tempDir } from '../helpers/index.js'
import { uniqueNames } from '../helpers/nats.js'
import { useNatsCluster } from '../helpers/nats-cluster.js'

const cluster = useNatsCluster()

it('a mirror skips the racers a clustered stream stored, as shared hosts do, and rebuilds the order byte for byte', async () => {
  const { prefix, stream } = uniqueNames()
  await initStream({ nats: cluster.urls(), prefix, stream, replicas: 3 })
  const subject = `${prefix}.w`
  const ncs = await Promise.all(
    cluster
      .urls()
      .split(',')
      .map((u) => connect({ servers: u })),
  )
  try {
    const jss = ncs.map((nc) => jetstream(nc))
    let orderLast = 0 // the last entry seq of the order
    let ts = 1_700_000_000_000
    let serverLast = 0 // the subject's last stream seq, racer or not
    const order: string[] = []
    let racersStored = 0
    for (let round = 0; round < 60 && racersStored < 3; round++) {
      // Contender k renders k + 1 entries after the order's last: distinct ids, so the duplicate
      // window never drops one, and a racer's first seq is the winner's first.
      const msgs = jss.map((_, k) => {
        const lines = Array.from({ length: k + 1 }, (_, i) =>
          Buffer.from(
            formatLine(
              orderLast + 1 + i,
              `"op":"write","path":"r${round}k${k}i${i}","blob":"${'a'.repeat(64)}"`,
              ts + 1 + i,
            ).slice(0, -1),
          ),
        )
        return { lines, enc: encodeEntries('w', lines) }
      })
      const settled = await Promise.allSettled(
        jss.map((js, k) => {
          const h = headers()
          for (const [name, value] of Object.entries(msgs[k]?.enc.headers ?? {})) h.set(name, value)
          h.set('Nats-Expected-Last-Subject-Sequence', String(serverLast))
          return js.publish(subject, msgs[k]?.enc.data, { headers: h })
        }),
      )
      const stored = settled
        // A duplicate ack (an id an earlier round's racer used) stored nothing.
        .map((r, k) => (r.status === 'fulfilled' && !r.value.duplicate ? { k, seq: r.value.seq } : null))
        .filter((x): x is { k: number; seq: number } => x !== null)
        .sort((a, b) => a.seq - b.seq)
      if (stored.length === 0) {
        const jsm = await jetstreamManager(ncs[0] as never)
        serverLast = (await jsm.streams.getMessage(stream, { last_by_subj: subject }))?.seq ?? serverLast
        continue // nothing stored (all refused): the next round expects what is there
      }
      const winner = stored[0] as { k: number; seq: number }
      racersStored += stored.length - 1
      const lines = msgs[winner.k]?.lines ?? []
      for (const l of lines) order.push(`${l.toString('utf8')}\n`)
      orderLast += lines.length
      ts += lines.length + 10
      serverLast = (stored[stored.length - 1] as { seq: number }).seq
    }
    expect(racersStored).toBeGreaterThan(0) // the server stored racers: what this test is about

    const root = tempDir()
    const report = await replicatePull({ nats: cluster.urls(), root, prefix, stream })
    expect(report.racers).toBe(racersStored)
    expect(readFileSync(join(root, 'agent-logs', 'w.log'), 'utf8')).toBe(order.join(''))
    // Pulled again, nothing moves (racers are skipped again, not reported as divergence).
    const again = await replicatePull({ nats: cluster.urls(), root, prefix, stream })
    expect(again.entries).toBe(0)
    expect(readFileSync(join(root, 'agent-logs', 'w.log'), 'utf8')).toBe(order.join(''))
  } finally {
    for (const nc of ncs) await nc.close()
  }
}, 120_000)

it("a fence that lost its race with the old writer's publish is void for every reader: the mirror applies the writer's entries, the subject's tail names no fence", async () => {
  const { prefix, stream } = uniqueNames()
  await initStream({ nats: cluster.urls(), prefix, stream, replicas: 3 })
  const ncs = await Promise.all(
    cluster
      .urls()
      .split(',')
      .map((u) => connect({ servers: u })),
  )
  const link = await openLink(cluster.urls(), { name: 'racers test' })
  try {
    const jss = ncs.map((nc) => jetstream(nc))
    const entry = (seq: number, tag: string) =>
      Buffer.from(
        formatLine(
          seq,
          `"op":"write","path":"${tag}","blob":"${'b'.repeat(64)}"`,
          1_700_000_000_000 + seq,
        ).slice(0, -1),
      )
    const publish = (
      k: number,
      subject: string,
      data: Uint8Array,
      hdrs: Record<string, string>,
      expect: number,
    ) => {
      const h = headers()
      for (const [name, value] of Object.entries(hdrs)) h.set(name, value)
      h.set('Nats-Expected-Last-Subject-Sequence', String(expect))
      return (jss[k] as ReturnType<typeof jetstream>).publish(subject, data, { headers: h })
    }
    // Each attempt on a workspace of its own: its first entry, then the old writer's second
    // entry and a promote's fence after entry 1, at once, from two servers. Until the stream
    // stores both, the entry first: the case where the fence is void.
    let raced: string | null = null
    const others: string[] = []
    for (let attempt = 0; attempt < 80 && raced === null; attempt++) {
      const ws = `w${attempt}`
      const subject = `${prefix}.${ws}`
      const one = encodeEntries(ws, [entry(1, 'one')])
      const at = (await publish(0, subject, one.data, one.headers, 0)).seq
      const two = encodeEntries(ws, [entry(2, 'two')])
      const fence = encodeFence(ws, 1, 'promoter')
      const [e, f] = await Promise.allSettled([
        publish(0, subject, two.data, two.headers, at),
        publish(1, subject, fence.data, fence.headers, at),
      ])
      const eSeq = e.status === 'fulfilled' ? e.value.seq : 0
      const fSeq = f.status === 'fulfilled' ? f.value.seq : 0
      if (eSeq > 0 && fSeq > eSeq) raced = ws
      else
        others.push(
          `${ws}: ${eSeq > 0 && fSeq === 0 ? 'entries only' : eSeq === 0 ? 'fence only' : 'fence first'}`,
        )
    }
    expect(raced, `attempts: ${others.join(', ')}`).not.toBeNull()
    const ws = raced as string
    const tail = await subjectTail(link, stream, `${prefix}.${ws}`, ws)
    expect(tail?.fence).toBeNull()
    expect(tail?.entry?.seq).toBe(2)
    const root = tempDir()
    const report = await replicatePull({ nats: cluster.urls(), root, prefix, stream })
    expect(report.racers).toBeGreaterThan(0)
    expect(readFileSync(join(root, 'agent-logs', `${ws}.log`), 'utf8')).toBe(
      `${entry(1, 'one').toString('utf8')}\n${entry(2, 'two').toString('utf8')}\n`,
    )
  } finally {
    await closeLink(link)
    for (const nc of ncs) await nc.close()
  }
}, 120_000)
