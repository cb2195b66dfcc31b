/**
 * `npm run bench`: noa's figures beside baselines measured in the same run on the same disk.
 * Every trial is a fresh child process (bench/cases.ts); trials are interleaved round by round
 * (A B C … A B C …) and each figure is the median over the rounds, because this disk's speed
 * swings 2–3× over minutes.
 *
 *   node dist/bench/run.js [--quick] [--rounds N] [--seconds S] [--out FILE]
 */
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import type { CaseResult } from './cases.js'
import { type BenchRow, markdownTable } from './table.js'

const CASES_JS = fileURLToPath(new URL('./cases.js', import.meta.url))

export interface RunCaseOptions {
  /** The child script (default: bench/cases.js) and the arguments that go before `<dir> <seconds>`. */
  script?: string
  args?: string[]
  /** Run in this folder and keep it (prepared data); default: a fresh temp folder, removed after. */
  dir?: string
  /** Kill the child after this long (default: 10 × seconds + 120 s). */
  timeoutMs?: number
  /**
   * After removing the trial's folder, flush the file system (sync) before the next trial: a
   * trial that made thousands of files leaves their removal to be written back, which would
   * otherwise land in the next contender's timed window.
   */
  settle?: boolean
}

export function runCase(name: string, seconds: number, options: RunCaseOptions = {}): CaseResult {
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), `noa-bench-${name.replace(/[^\w.-]/g, '_')}-`))
  try {
    const args = [options.script ?? CASES_JS, ...(options.args ?? [name]), dir, String(seconds)]
    const r = spawnSync(process.execPath, args, {
      encoding: 'utf8',
      timeout: options.timeoutMs ?? seconds * 10_000 + 120_000,
      maxBuffer: 16 << 20,
    })
    if (r.status !== 0) {
      throw new Error(
        `bench case ${name} failed (${r.status ?? r.signal}): ${r.error?.message ?? ''}${r.stderr}`,
      )
    }
    return JSON.parse(r.stdout.trim().split('\n').pop() as string) as CaseResult
  } finally {
    if (options.dir === undefined) rmSync(dir, { recursive: true, force: true })
    if (options.settle) spawnSync('sync')
  }
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2
}

/** Runs the cases round-robin and returns, per case, the list of results (one per round). */
export function interleave(
  names: string[],
  rounds: number,
  seconds: number,
  run: (name: string) => CaseResult = (name) => runCase(name, seconds),
): Map<string, CaseResult[]> {
  const out = new Map<string, CaseResult[]>(names.map((n) => [n, []]))
  for (let r = 0; r < rounds; r++) {
    for (const name of names) {
      process.stderr.write(`  round ${r + 1}/${rounds}: ${name}`)
      const start = performance.now()
      out.get(name)?.push(run(name))
      process.stderr.write(` (${((performance.now() - start) / 1000).toFixed(1)} s)\n`)
    }
  }
  return out
}

export function engineRows(results: Map<string, CaseResult[]>): BenchRow[] {
  const m = (name: string, key: keyof CaseResult) =>
    median((results.get(name) ?? []).map((r) => r[key] as number))
  return [
    {
      workload: 'serial append latency p50 (one submitter awaiting each ack)',
      unit: 'ms',
      noa: m('noa-serial', 'p50'),
      baseline: m('floor-serial', 'p50'),
      baselineName: 'write+fdatasync loop (the floor)',
      higherIsBetter: false,
    },
    {
      workload: 'serial append latency p99',
      unit: 'ms',
      noa: m('noa-serial', 'p99'),
      baseline: m('floor-serial', 'p99'),
      baselineName: 'write+fdatasync loop (the floor)',
      higherIsBetter: false,
    },
    {
      workload: "serial append latency p50, owner in the caller's thread (workers: 0)",
      unit: 'ms',
      noa: m('noa-serial-inthread', 'p50'),
      baseline: m('floor-serial', 'p50'),
      baselineName: 'write+fdatasync loop (the floor)',
      higherIsBetter: false,
    },
    {
      workload: "the journal's sync: 512 B pwrite at the next offset of a written-once file + fdatasync, p50",
      unit: 'ms',
      noa: m('journal-sync-fdatasync', 'p50'),
      baseline: m('floor-serial', 'p50'),
      baselineName: 'appending write+fdatasync (the floor)',
      higherIsBetter: false,
    },
    {
      workload: "the journal's sync: the same pwrite on an O_DSYNC descriptor, p50",
      unit: 'ms',
      noa: m('journal-sync-odsync', 'p50'),
      baseline: m('journal-sync-fdatasync', 'p50'),
      baselineName: 'pwrite + fdatasync',
      higherIsBetter: false,
    },
    {
      workload: "the journal's sync: O_DIRECT|O_DSYNC, 4096-aligned buffer, p50",
      unit: 'ms',
      noa: m('journal-sync-odirect', 'p50'),
      baseline: m('journal-sync-fdatasync', 'p50'),
      baselineName: 'pwrite + fdatasync',
      higherIsBetter: false,
    },
    {
      workload: '1 workspace × 100 submitters',
      unit: 'entries/s',
      noa: m('noa-1ws-100', 'rate'),
      baseline: m('floor-1ws', 'rate'),
      baselineName: 'one fdatasync per entry',
      higherIsBetter: true,
    },
    {
      workload: '1 workspace × 100 submitters',
      unit: 'entries/s',
      noa: m('noa-1ws-100', 'rate'),
      baseline: m('floor-batched-1ws', 'rate'),
      baselineName: 'raw loop, 100 entries per fdatasync',
      higherIsBetter: true,
    },
    {
      workload: '100 workspaces × 1 submitter (commit journal, the default)',
      unit: 'entries/s',
      noa: m('noa-100ws', 'rate'),
      baseline: m('naive-100ws', 'rate'),
      baselineName: 'naive: one fdatasync at a time',
      higherIsBetter: true,
    },
    {
      workload: '100 workspaces × 1 submitter (commit journal, the default)',
      unit: 'entries/s',
      noa: m('noa-100ws', 'rate'),
      baseline: m('noa-100ws-fdatasync', 'rate'),
      baselineName: "noa, durability: 'fdatasync' (one fdatasync per file per batch)",
      higherIsBetter: true,
    },
    {
      workload: '1 workspace × 100 submitters, append option checkBlobs (each blob looked up)',
      unit: 'entries/s',
      noa: m('noa-1ws-100-blobcheck', 'rate'),
      baseline: m('noa-1ws-100', 'rate'),
      baselineName: 'noa, the same without the check',
      higherIsBetter: true,
    },
    {
      workload: '1M appends issued without awaiting, peak RSS (maxPendingBytes bounds the queue)',
      unit: 'MB',
      noa: m('noa-unawaited-1m', 'maxRssMB'),
      baseline: m('caller-1m', 'maxRssMB'),
      baselineName: "the caller's own 1M entries and promises, no log",
      higherIsBetter: false,
    },
    {
      workload: 'bytes per entry',
      unit: 'B',
      noa: m('noa-1ws-100', 'bytes'),
      baseline: 200,
      baselineName: "the seed's ~200 B/entry",
      higherIsBetter: false,
    },
  ]
}

export const ENGINE_CASES = [
  'floor-serial',
  'noa-serial',
  'noa-serial-inthread',
  'noa-phases',
  'noa-phases-inthread',
  'journal-sync-fdatasync',
  'journal-sync-odsync',
  'journal-sync-odirect',
  'floor-1ws',
  'floor-batched-1ws',
  'noa-1ws-100',
  'noa-1ws-100-blobcheck',
  'naive-100ws',
  'noa-100ws',
  'noa-100ws-fdatasync',
  'noa-unawaited-1m',
  'caller-1m',
]

/** What each step of a serial append is, as the breakdown's rows name it (bench/cases.ts phases). */
const STEPS: Array<[string, string]> = [
  ['queued', 'validate and render (append() returns: checked, JSON body, in the outbox)'],
  ['posted', "hand-off: to the end of the caller's turn, the outbox posted to the owner's port"],
  ['received', 'message hop to the owner (MessagePort to a worker; setImmediate in the same thread)'],
  ['built', 'batch built by the owner (seq, ts, the log line)'],
  ['framed', 'journal frame and CRC32C'],
  ['pwritten', 'pwritev of the frame to the journal'],
  ['synced', "the journal's fdatasync"],
  ['logged', 'write of the line to its .log'],
  ['finished', 'round settled (state, checksum sidecar, acks queued)'],
  [
    'ackPosted',
    "ack put in the owner's ack slot (a lone append to a worker), else posted to the caller's port",
  ],
  ['ackReceived', "ack hop back to the caller's thread (woken from Atomics.wait, or by the message)"],
  ['resolved', "the caller's await resumes"],
]

/** The per-phase breakdown: median over the rounds of each step's p50 and p99, defaults beside workers: 0. */
export function phaseTable(results: Map<string, CaseResult[]>): string {
  const col = (name: string, step: string, p99 = false) => {
    const xs = (results.get(name) ?? [])
      .map((r) => (p99 ? r.phases99 : r.phases)?.[step])
      .filter((x): x is number => Number.isFinite(x))
    return xs.length ? median(xs).toFixed(1) : '–'
  }
  const cells = (step: string) =>
    [
      col('noa-phases', step),
      col('noa-phases-inthread', step),
      col('noa-phases', step, true),
      col('noa-phases-inthread', step, true),
    ].join(' | ')
  const lines = [
    '| step of one serial append (µs) | defaults p50 | workers: 0 p50 | defaults p99 | workers: 0 p99 |',
    '|---|---:|---:|---:|---:|',
    ...STEPS.map(([step, what]) => `| ${what} | ${cells(step)} |`),
    `| **the whole append** | ${cells('total')} |`,
  ]
  return `${lines.join('\n')}\n`
}

/**
 * `noa append` of one entry as a fresh process, with the default blob check (the entry names a
 * stored blob), beside Node's own start (`node -e ''`), wall time, interleaved; the medians.
 */
export function cliStartRows(rounds: number): BenchRow[] {
  const cli = fileURLToPath(new URL('../src/cli/bin.cjs', import.meta.url))
  const dir = mkdtempSync(join(tmpdir(), 'noa-bench-cli-'))
  const noa: number[] = []
  const node: number[] = []
  try {
    const time = (args: string[], input?: string) => {
      const start = performance.now()
      const r = spawnSync(process.execPath, args, { input, encoding: 'utf8' })
      if (r.status !== 0) throw new Error(`${args.join(' ')} failed: ${r.stderr}`)
      return performance.now() - start
    }
    // With the default blob check: the entry names a blob stored first, as a user's would.
    const blobFile = join(dir, 'blob.txt')
    writeFileSync(blobFile, 'the bytes an agent wrote\n')
    const put = spawnSync(process.execPath, [cli, 'blob', 'put', blobFile, '--root', dir], {
      encoding: 'utf8',
    })
    if (put.status !== 0) throw new Error(`noa blob put failed: ${put.stderr}`)
    const entry = `{"op":"write","path":"a","blob":"${put.stdout.trim()}"}\n`
    time([cli, 'append', 'w', '--root', dir], entry) // warm the page cache
    for (let i = 0; i < Math.max(5, rounds * 4); i++) {
      noa.push(time([cli, 'append', 'w', '--root', dir], entry))
      node.push(time(['-e', '']))
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
  return [
    {
      workload: '`noa append` of one entry as a fresh process (blob check on), wall time',
      unit: 'ms',
      noa: median(noa),
      baseline: median(node),
      baselineName: "`node -e ''` (Node's own start)",
      higherIsBetter: false,
    },
  ]
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      rounds: { type: 'string' },
      seconds: { type: 'string' },
      out: { type: 'string' },
    },
    strict: true,
  })
  const quick = values.quick ?? false
  const rounds = Number(values.rounds ?? (quick ? 1 : 5))
  const seconds = Number(values.seconds ?? (quick ? 1 : 3))
  const started = new Date()
  process.stderr.write(
    `noa bench: ${rounds} round(s), ${seconds} s per trial, each trial in a fresh process\n`,
  )
  const engine = interleave(ENGINE_CASES, rounds, seconds)
  const rows = engineRows(engine)
  rows.push(...cliStartRows(rounds))
  const replayModule = './replay.js' // written by the snapshot section; optional here
  const replay = await import(replayModule).catch(() => null)
  if (replay && typeof replay.replayBench === 'function') {
    const dir = mkdtempSync(join(tmpdir(), 'noa-bench-replay-'))
    try {
      rows.push(...(await replay.replayBench({ quick, dir })))
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }
  const { gcBench } = await import('./gc.js')
  const gcDir = mkdtempSync(join(tmpdir(), 'noa-bench-gc-'))
  try {
    rows.push(...(await gcBench({ quick, dir: gcDir })))
  } finally {
    rmSync(gcDir, { recursive: true, force: true })
  }
  const { compactBench } = await import('./compact.js')
  const compactDir = mkdtempSync(join(tmpdir(), 'noa-bench-compact-'))
  try {
    rows.push(...(await compactBench({ quick, dir: compactDir })))
  } finally {
    rmSync(compactDir, { recursive: true, force: true })
  }
  // Replication: needs nats-server; NOA_BENCH_NATS_URL names one, else it starts its own.
  const replicate = await import('./replicate.js')
  try {
    rows.push(...(await replicate.replicateSection({ quick })))
  } catch (err) {
    process.stderr.write(`replication section not measured: ${(err as Error).message}\n`)
  }
  const cmd = `npm run bench${quick ? ' -- --quick' : ''}`
  const header = `Measured ${started.toISOString().slice(0, 10)} on ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, Node ${process.version}, with \`${cmd}\` (${rounds} interleaved rounds, medians).\n\n`
  const text = `${header + markdownTable(rows)}\n${phaseTable(engine)}`
  process.stdout.write(text)
  if (values.out) writeFileSync(values.out, text)
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main()
