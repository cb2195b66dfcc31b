/**
 * Failover time (issue 34): from `promote` on an up-to-date mirror to the first append on the
 * new writer that is acknowledged, locally (the append resolves: durable on its disk) and by the
 * stream (the entry published after the fence, acknowledged by a JetStream majority). Each
 * trial: an origin root with 1,000 entries pushed, a mirror pulled, its AgentLog already open
 * (a host that takes over is running); then promote, append one entry, push.
 *
 *   node dist/bench/failover.js [--nats URLS | --cluster] [--trials N]
 *
 * Without --nats a single nats-server is started (R1); with --cluster, a three-server cluster on
 * loopback (bench/nats-cluster.ts) and the stream is R3, as with a cluster's URLs in --nats.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { jetstreamManager } from '@nats-io/jetstream'
import { connect } from '@nats-io/transport-node'
import { AgentLog } from '../src/engine/agent-log.js'
import { promote } from '../src/replicate/failover.js'
import { replicatePull } from '../src/replicate/mirror.js'
import { replicatePush } from '../src/replicate/publisher.js'
import { initStream } from '../src/replicate/stream.js'
import { startNatsCluster } from './nats-cluster.js'
import { startNatsServer } from './replicate.js'

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] as number
}

async function trial(url: string, dir: string, replicas: number, i: number) {
  const prefix = `fo${process.pid}_${i}`
  const stream = `FO${process.pid}_${i}`
  await initStream({ nats: url, prefix, stream, replicas })
  const origin = mkdtempSync(join(dir, 'origin-'))
  const mirror = mkdtempSync(join(dir, 'mirror-'))
  try {
    const o = await AgentLog.open({ root: origin, workers: 1 })
    await o.appendMany(
      'w',
      Array.from({ length: 1000 }, (_, k) => ({
        op: 'write' as const,
        path: `f-${k}.ts`,
        blob: 'ab'.repeat(32),
      })),
    )
    await o.close()
    await replicatePush({ nats: url, root: origin, prefix })
    await replicatePull({ nats: url, root: mirror, prefix })
    const log = await AgentLog.open({ root: mirror, workers: 1 })
    try {
      await log.openWorkspace('w')
      const t0 = performance.now()
      await promote({ nats: url, root: mirror, prefix, workspaces: ['w'], writer: 'bench' })
      const t1 = performance.now()
      await log.append('w', { op: 'write', path: 'after-failover.ts', blob: 'cd'.repeat(32) })
      const t2 = performance.now()
      const pushed = await replicatePush({ nats: url, root: mirror, prefix, objects: false })
      const t3 = performance.now()
      if (pushed.entries !== 1) throw new Error(`expected 1 entry pushed, got ${pushed.entries}`)
      return { promote: t1 - t0, local: t2 - t0, stream: t3 - t0 }
    } finally {
      await log.close()
    }
  } finally {
    rmSync(origin, { recursive: true, force: true })
    rmSync(mirror, { recursive: true, force: true })
    const nc = await connect({ servers: url.split(',') })
    await (await jetstreamManager(nc)).streams.delete(stream).catch(() => {})
    await nc.close()
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { nats: { type: 'string' }, cluster: { type: 'boolean' }, trials: { type: 'string' } },
  })
  if (values.nats && values.cluster) throw new Error('--nats and --cluster: give one')
  const trials = Number(values.trials ?? 10)
  const dir = mkdtempSync(join(tmpdir(), 'noa-bench-failover-'))
  const cluster = values.cluster ? await startNatsCluster() : null
  const server = values.nats || cluster ? null : await startNatsServer(dir)
  const url = values.nats ?? cluster?.urls ?? (server as { url: string }).url
  const replicas = url.includes(',') ? 3 : 1
  try {
    const rows: Array<{ promote: number; local: number; stream: number }> = []
    for (let i = 0; i < trials; i++) rows.push(await trial(url, dir, replicas, i))
    const show = (k: 'promote' | 'local' | 'stream') =>
      `p50 ${quantile(
        rows.map((r) => r[k]),
        0.5,
      ).toFixed(1)} ms, max ${Math.max(...rows.map((r) => r[k])).toFixed(1)} ms`
    console.log(`failover, ${trials} trials, R${replicas} on ${url}`)
    console.log(`  promote (check + fence + record):                  ${show('promote')}`)
    console.log(`  promote → first append acknowledged locally:       ${show('local')}`)
    console.log(`  promote → first append acknowledged by the stream: ${show('stream')}`)
  } finally {
    await server?.stop()
    await cluster?.stop()
    rmSync(dir, { recursive: true, force: true })
  }
}

await main()
