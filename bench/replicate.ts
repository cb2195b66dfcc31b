/**
 * Replication figures, each beside a baseline measured in the same run:
 *
 * - entries/s pushed (publisher: read, fdatasync, publish with Nats-Msg-Id and the expected
 *   last subject sequence, one message per entry) for 1 and 100 workspaces, against the
 *   official client's js.publish in a loop, same lines and headers, from memory (what a user
 *   would write; noa routes acknowledgements through one inbox instead, see stream.ts);
 * - entries/s mirrored (ordered consumer, appendReplicated, fdatasync) for 1 and 100
 *   workspaces, against a bare ordered consumer that only reads the same messages;
 * - local append throughput (100 submitters awaiting their acks, over 100 workspaces and over
 *   one) with a `noa replicate push --follow` process running on the same root, against the
 *   same workload with no publisher: trials alternate off/on and the medians are compared.
 *
 * - replicated acks (bench/replicate-acks.ts): appends that resolve once the stream holds them,
 *   1 workspace × 100 submitters and 100 × 1, against local durability, against the client's own
 *   publish loop, and against one entry per message; on R1 (the single server) and on R3 (a
 *   three-server cluster started for it on loopback).
 *
 *   node dist/bench/replicate.js [--quick] [--rounds N] [--nats URL] [--acks-only]
 *
 * Without --nats a nats-server (JetStream, loopback, temporary store) is started for the run.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream'
import { connect } from '@nats-io/transport-node'
import { AgentLog } from '../src/engine/agent-log.js'
import type { EntryInput } from '../src/engine/entry.js'
import { replicatePull } from '../src/replicate/mirror.js'
import { replicatePush } from '../src/replicate/publisher.js'
import { initStream } from '../src/replicate/stream.js'
import { startNatsCluster } from './nats-cluster.js'
import { acksBench } from './replicate-acks.js'
import { type BenchRow, markdownTable } from './table.js'

const BLOB = 'ab'.repeat(32)

/** About 200 bytes on disk, like the engine benchmark's entries (cases.ts runs on import, so not shared). */
function entryFor(i: number): EntryInput {
  return { op: 'write', path: `src/agents/module-${i % 997}/component-${i % 31}/file-${i}.ts`, blob: BLOB }
}

const CLI = fileURLToPath(new URL('../src/cli/bin.cjs', import.meta.url))

export interface ReplicateBenchOptions {
  quick: boolean
  /** Scratch folder (the caller removes it). */
  dir: string
  natsUrl: string
  /** Interleaved rounds (default 1 quick, 3 full). */
  rounds?: number
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2
}

let runs = 0
function names(): { prefix: string; stream: string } {
  const tag = `${process.pid}_${runs++}`
  return { prefix: `bench${tag}`, stream: `BENCH${tag}` }
}

async function dropStream(url: string, stream: string): Promise<void> {
  const nc = await connect({ servers: url })
  try {
    await (await jetstreamManager(nc)).streams.delete(stream).catch(() => {})
  } finally {
    await nc.close()
  }
}

/** A root with `perWorkspace` entries in each of `workspaces` workspaces. */
async function filledRoot(dir: string, workspaces: number, perWorkspace: number): Promise<string> {
  const root = mkdtempSync(join(dir, 'origin-'))
  const log = await AgentLog.open({ root, workers: 2 })
  try {
    await Promise.all(
      Array.from({ length: workspaces }, async (_, w) => {
        for (let i = 0; i < perWorkspace; i += 5000) {
          const n = Math.min(5000, perWorkspace - i)
          await log.appendMany(
            `ws-${w}`,
            Array.from({ length: n }, (_, k) => entryFor(i + k)),
          )
        }
      }),
    )
  } finally {
    await log.close()
  }
  return root
}

/** The plain client loop: js.publish of the same lines with the same headers, serial per subject, from memory. */
async function barePublish(url: string, root: string, prefix: string, workspaces: number): Promise<number> {
  const lines = Array.from({ length: workspaces }, (_, w) =>
    readFileSync(join(root, 'agent-logs', `ws-${w}.log`), 'utf8')
      .trimEnd()
      .split('\n'),
  )
  const nc = await connect({ servers: url })
  try {
    const js = jetstream(nc)
    const started = performance.now()
    await Promise.all(
      lines.map(async (ls, w) => {
        let expect = 0
        for (let i = 0; i < ls.length; i++) {
          const ack = await js.publish(`${prefix}.ws-${w}`, ls[i] as string, {
            msgID: `ws-${w}:${i + 1}`,
            expect: { lastSubjectSequence: expect },
          })
          expect = ack.seq
        }
      }),
    )
    return (lines.reduce((n, ls) => n + ls.length, 0) / (performance.now() - started)) * 1000
  } finally {
    await nc.close()
  }
}

/** The bare floor for mirroring: an ordered consumer that reads every message and keeps nothing. */
async function bareRead(url: string, stream: string, prefix: string, total: number): Promise<number> {
  const nc = await connect({ servers: url })
  try {
    const consumer = await jetstream(nc).consumers.get(stream, {
      filter_subjects: `${prefix}.>`,
      deliver_policy: DeliverPolicy.All,
    })
    const started = performance.now()
    const messages = await consumer.consume({ max_messages: 1000 })
    let n = 0
    for await (const m of messages) {
      n += m.data.length > 0 ? 1 : 0
      if (n >= total) break
    }
    messages.stop()
    return (n / (performance.now() - started)) * 1000
  } finally {
    await nc.close()
  }
}

interface Rates {
  push: number[]
  barePush: number[]
  pull: number[]
  bareRead: number[]
}

async function pushPullRound(o: ReplicateBenchOptions, workspaces: number, total: number, r: Rates) {
  const per = Math.ceil(total / workspaces)
  const root = await filledRoot(o.dir, workspaces, per)
  // noa: push into one stream, then mirror it into a fresh root.
  {
    const { prefix, stream } = names()
    await initStream({ nats: o.natsUrl, prefix, stream })
    try {
      const pushed = await replicatePush({ nats: o.natsUrl, root, prefix })
      r.push.push((pushed.entries / pushed.durationMs) * 1000)
      const mirror = mkdtempSync(join(o.dir, 'mirror-'))
      const pulled = await replicatePull({ nats: o.natsUrl, root: mirror, prefix })
      r.pull.push((pulled.entries / pulled.durationMs) * 1000)
      rmSync(mirror, { recursive: true, force: true })
    } finally {
      await dropStream(o.natsUrl, stream)
    }
  }
  // Baselines, on a stream of their own.
  {
    const { prefix, stream } = names()
    await initStream({ nats: o.natsUrl, prefix, stream })
    try {
      r.barePush.push(await barePublish(o.natsUrl, root, prefix, workspaces))
      r.bareRead.push(await bareRead(o.natsUrl, stream, prefix, per * workspaces))
    } finally {
      await dropStream(o.natsUrl, stream)
    }
  }
  rmSync(root, { recursive: true, force: true })
}

function startPublisher(
  root: string,
  url: string,
  prefix: string,
): Promise<{ child: ChildProcess; out: () => string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [CLI, 'replicate', 'push', '--follow', '--root', root, '--nats', url, '--prefix', prefix],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    )
    let out = ''
    let err = ''
    child.stdout?.on('data', (d) => {
      out += d
    })
    child.stderr?.on('data', (d) => {
      err += d
      if (/following /.test(err)) resolve({ child, out: () => out })
    })
    child.on('exit', (code) => reject(new Error(`publisher exited (${code}): ${err}`)))
  })
}

/** 100 submitters, each awaiting its ack, over `workspaces` workspaces, for `seconds`: entries/s. */
async function appendRate(root: string, seconds: number, workspaces: number): Promise<number> {
  const log = await AgentLog.open({ root, workers: 2 })
  try {
    let n = 0
    let stop = false
    const timer = setTimeout(() => {
      stop = true
    }, seconds * 1000)
    const started = performance.now()
    await Promise.all(
      Array.from({ length: 100 }, async (_, w) => {
        for (let i = 0; !stop; i++) {
          await log.append(`ws-${w % workspaces}`, entryFor(i))
          n++
        }
      }),
    )
    clearTimeout(timer)
    return (n / (performance.now() - started)) * 1000
  } finally {
    await log.close()
  }
}

interface AppendRates {
  off: number[]
  on: number[]
  /** Share of the entries the publisher had not pushed when the appends stopped. */
  behind: number[]
}

async function appendRound(o: ReplicateBenchOptions, seconds: number, workspaces: number, r: AppendRates) {
  {
    const root = mkdtempSync(join(o.dir, 'off-'))
    r.off.push(await appendRate(root, seconds, workspaces))
    rmSync(root, { recursive: true, force: true })
  }
  {
    const root = mkdtempSync(join(o.dir, 'on-'))
    mkdirSync(join(root, 'agent-logs'), { recursive: true })
    const { prefix, stream } = names()
    await initStream({ nats: o.natsUrl, prefix, stream })
    try {
      const publisher = await startPublisher(root, o.natsUrl, prefix)
      const rate = await appendRate(root, seconds, workspaces)
      r.on.push(rate)
      const exited = new Promise((resolve) => publisher.child.on('exit', resolve))
      publisher.child.kill('SIGTERM')
      await exited
      const pushed = Number(/pushed (\d+) entries/.exec(publisher.out())?.[1] ?? 0)
      r.behind.push(Math.max(0, 1 - pushed / (rate * seconds)))
    } finally {
      await dropStream(o.natsUrl, stream)
      rmSync(root, { recursive: true, force: true })
    }
  }
}

export async function replicateBench(opts: ReplicateBenchOptions): Promise<BenchRow[]> {
  const rounds = opts.rounds ?? (opts.quick ? 1 : 3)
  const one: Rates = { push: [], barePush: [], pull: [], bareRead: [] }
  const hundred: Rates = { push: [], barePush: [], pull: [], bareRead: [] }
  const spread: AppendRates = { off: [], on: [], behind: [] }
  const single: AppendRates = { off: [], on: [], behind: [] }
  const seconds = opts.quick ? 2 : 4
  for (let round = 0; round < rounds; round++) {
    process.stderr.write(`  replication round ${round + 1}/${rounds}\n`)
    await pushPullRound(opts, 1, opts.quick ? 3_000 : 10_000, one)
    await pushPullRound(opts, 100, opts.quick ? 10_000 : 40_000, hundred)
    await appendRound(opts, seconds, 100, spread)
    await appendRound(opts, seconds, 1, single)
  }
  const rows: BenchRow[] = []
  for (const [label, r] of [
    ['1 workspace', one],
    ['100 workspaces', hundred],
  ] as const) {
    rows.push({
      workload: `replicate push, ${label} (one message per entry, expected-sequence chain)`,
      unit: 'entries/s',
      noa: median(r.push),
      baseline: median(r.barePush),
      baselineName: "the client's js.publish in a loop, same lines and headers, from memory",
      higherIsBetter: true,
    })
    rows.push({
      workload: `replicate pull (mirror), ${label}`,
      unit: 'entries/s',
      noa: median(r.pull),
      baseline: median(r.bareRead),
      baselineName: 'bare ordered consumer, reading only',
      higherIsBetter: true,
    })
  }
  for (const [label, r] of [
    ['100 workspaces × 1 submitter', spread],
    ['1 workspace × 100 submitters', single],
  ] as const) {
    rows.push({
      workload: `local appends, ${label}, with \`replicate push --follow\` running`,
      unit: 'entries/s',
      noa: median(r.on),
      baseline: median(r.off),
      baselineName: 'same workload, replication off',
      higherIsBetter: true,
      note: `publisher ${Math.round(median(r.behind) * 100)}% behind when the appends stopped`,
    })
  }
  return rows
}

/** Starts a nats-server with JetStream on a free loopback port; returns its URL and a stop function. */
export async function startNatsServer(dir: string): Promise<{ url: string; stop(): Promise<void> }> {
  const portsDir = mkdtempSync(join(dir, 'nats-ports-'))
  const bin = process.env.NOA_NATS_SERVER ?? 'nats-server'
  const child = spawn(
    bin,
    ['-js', '-a', '127.0.0.1', '-p', '-1', '-sd', join(dir, 'nats-store'), '--ports_file_dir', portsDir],
    {
      stdio: 'ignore',
    },
  )
  const failed = new Promise<never>((_, reject) => {
    child.on('error', (err) =>
      reject(new Error(`cannot start ${bin} (${err.message}): install nats-server or pass --nats URL`)),
    )
  })
  const until = Date.now() + 10_000
  for (;;) {
    const file = readdirSync(portsDir).find((f) => f.endsWith('.ports'))
    if (file) {
      try {
        const url = (JSON.parse(readFileSync(join(portsDir, file), 'utf8')) as { nats: string[] }).nats[0]
        if (url) {
          return {
            url,
            stop: () =>
              new Promise((resolve) => {
                child.on('exit', () => resolve())
                child.kill('SIGTERM')
              }),
          }
        }
      } catch {
        // not fully written yet
      }
    }
    if (Date.now() > until) throw new Error('nats-server did not start')
    await Promise.race([new Promise((r) => setTimeout(r, 50)), failed])
  }
}

/** The section as `npm run bench` runs it: a server of its own unless NOA_BENCH_NATS_URL names one. */
export async function replicateSection(options: {
  quick: boolean
  rounds?: number
  natsUrl?: string
  acksOnly?: boolean
}) {
  const dir = mkdtempSync(join(tmpdir(), 'noa-bench-replicate-'))
  let server: { url: string; stop(): Promise<void> } | null = null
  let cluster: { urls: string; stop(): Promise<void> } | null = null
  try {
    let url = options.natsUrl ?? process.env.NOA_BENCH_NATS_URL
    if (!url) {
      server = await startNatsServer(dir)
      url = server.url
    }
    const rows = options.acksOnly
      ? []
      : await replicateBench({ quick: options.quick, dir, natsUrl: url, rounds: options.rounds })
    const acks = { rounds: options.rounds ?? (options.quick ? 1 : 3), seconds: options.quick ? 2 : 3 }
    rows.push(...(await acksBench(dir, { url, replicas: 1 }, acks)))
    await server?.stop()
    server = null
    cluster = await startNatsCluster()
    rows.push(...(await acksBench(dir, { url: cluster.urls, replicas: 3 }, acks)))
    return rows
  } finally {
    await server?.stop()
    await cluster?.stop()
    rmSync(dir, { recursive: true, force: true })
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      rounds: { type: 'string' },
      nats: { type: 'string' },
      'acks-only': { type: 'boolean', default: false },
    },
    strict: true,
  })
  const quick = values.quick ?? false
  const rounds = values.rounds === undefined ? undefined : Number(values.rounds)
  const started = new Date()
  const acksOnly = values['acks-only'] ?? false
  const rows = await replicateSection({ quick, rounds, natsUrl: values.nats, acksOnly })
  const cmd = `node dist/bench/replicate.js${quick ? ' --quick' : ''}${values.rounds ? ` --rounds ${values.rounds}` : ''}${acksOnly ? ' --acks-only' : ''}`
  process.stdout.write(
    `Measured ${started.toISOString().slice(0, 10)} on ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, Node ${process.version}, nats-server on loopback, with \`${cmd}\` (interleaved rounds, medians).\n\n${markdownTable(rows)}`,
  )
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main()
