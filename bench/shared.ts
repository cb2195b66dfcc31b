/**
 * Shared workspaces (src/replicate/shared.ts): three hosts appending at once to one shared
 * workspace, beside one host alone, on an R3 stream of a three-server cluster on loopback. Each
 * host is a process of its own with its own root and connection, and runs `--submitters`
 * appenders that each await their ack before the next append, for `--seconds`. Reported:
 * entries/s acknowledged (all hosts together), p50 and p99 ack latency, and how many publishes
 * were refused because another host got there first (and so went again).
 *
 *   node dist/bench/shared.js [--seconds S] [--submitters N] [--nats URL,URL,URL]
 *
 * Without --nats three nats-servers (JetStream, routed, loopback, temporary stores) are started.
 */
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { AgentLog } from '../src/engine/agent-log.js'
import { SharedWorkspaces } from '../src/replicate/shared.js'
import { initStream } from '../src/replicate/stream.js'
import { startNatsCluster } from './nats-cluster.js'

const BLOB = 'ab'.repeat(32)
const SELF = fileURLToPath(import.meta.url)

interface HostResult {
  entries: number
  latencies: number[]
  retries: number
  seconds: number
}

/** One host: appends for `seconds` with `submitters` appenders, prints its result as JSON. */
async function host(
  root: string,
  nats: string,
  prefix: string,
  ws: string,
  tag: string,
  seconds: number,
  submitters: number,
) {
  const log = await AgentLog.open({ root, workers: 1 })
  const shared = await SharedWorkspaces.open({ log, nats, prefix, workspaces: [ws], writer: tag })
  const latencies: number[] = []
  let entries = 0
  const started = performance.now()
  const until = started + seconds * 1000
  let n = 0
  await Promise.all(
    Array.from({ length: submitters }, async () => {
      while (performance.now() < until) {
        const i = n++
        const t0 = performance.now()
        await shared.append(ws, {
          op: 'write',
          path: `${tag}/src/module-${i % 997}/file-${i}.ts`,
          blob: BLOB,
        })
        latencies.push(performance.now() - t0)
        entries++
      }
    }),
  )
  const result: HostResult = {
    entries,
    latencies,
    retries: shared.stats().conflicts,
    seconds: (performance.now() - started) / 1000,
  }
  await shared.close()
  await log.close()
  process.stdout.write(`${JSON.stringify(result)}\n`)
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0
}

async function run(hosts: number, dir: string, nats: string, seconds: number, submitters: number) {
  const prefix = `shared${hosts}x${Date.now().toString(36)}`
  await initStream({ nats, prefix, stream: prefix.toUpperCase(), replicas: 3 })
  const results = await Promise.all(
    Array.from({ length: hosts }, (_, i) => {
      const root = join(dir, `${prefix}-h${i}`)
      return new Promise<HostResult>((resolve, reject) => {
        const child = spawn(
          process.execPath,
          [SELF, '--host', root, nats, prefix, 'team', `h${i}`, String(seconds), String(submitters)],
          { stdio: ['ignore', 'pipe', 'inherit'] },
        )
        let out = ''
        child.stdout?.on('data', (d) => {
          out += d
        })
        child.on('exit', (code) =>
          code === 0 ? resolve(JSON.parse(out) as HostResult) : reject(new Error(`host ${i} exited ${code}`)),
        )
      })
    }),
  )
  const latencies = results.flatMap((r) => r.latencies).sort((a, b) => a - b)
  const entries = results.reduce((n, r) => n + r.entries, 0)
  const secs = Math.max(...results.map((r) => r.seconds))
  return {
    hosts,
    entriesPerSecond: Math.round(entries / secs),
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    retries: results.reduce((n, r) => n + r.retries, 0),
    entries,
  }
}

async function main() {
  const { values, positionals } = parseArgs({
    options: {
      host: { type: 'boolean' },
      seconds: { type: 'string' },
      submitters: { type: 'string' },
      nats: { type: 'string' },
    },
    allowPositionals: true,
  })
  if (values.host) {
    const [root, nats, prefix, ws, tag, seconds, submitters] = positionals as [
      string,
      string,
      string,
      string,
      string,
      string,
      string,
    ]
    await host(root, nats, prefix, ws, tag, Number(seconds), Number(submitters))
    return
  }
  const seconds = Number(values.seconds ?? 10)
  const submitters = Number(values.submitters ?? 16)
  const dir = mkdtempSync(join(tmpdir(), 'noa-bench-shared-'))
  const cluster = values.nats ? null : await startNatsCluster()
  const nats = values.nats ?? (cluster as { urls: string }).urls
  try {
    const rows = []
    for (const hosts of [1, 3]) rows.push(await run(hosts, dir, nats, seconds, submitters))
    console.log(`| hosts | entries/s | p50 ack | p99 ack | refused publishes (went again) |`)
    console.log(`|---:|---:|---:|---:|---:|`)
    for (const r of rows)
      console.log(
        `| ${r.hosts} | ${r.entriesPerSecond.toLocaleString('en-US')} | ${r.p50.toFixed(2)} ms | ${r.p99.toFixed(2)} ms | ${r.retries} |`,
      )
  } finally {
    await cluster?.stop()
    rmSync(dir, { recursive: true, force: true })
  }
}

await main()
