/**
 * Replay benchmark: `node dist/bench/replay.js [--quick]`.
 *
 * - Full replay of a 1M-entry log (quick: 100k) by noa (the workspace's files from an empty
 *   tree, tree id included) against a bare line reader + JSON.parse over the same file, run
 *   interleaved (A B C D A B C D …), each trial in a fresh process; medians. Goal: ≥ 0.7× the baseline's speed.
 *   In the same rounds, validated reading alone (`readEntryBatches`: every entry parsed and
 *   checked) and `verify`'s full scan, each against the same baseline: goal ahead of it.
 * - An incremental snapshot after 1,000 new durable entries, against noa's full replay (goal:
 *   < 1%), on a workspace of ~10k paths and on one of ~100k paths: with the engine kept open (a host: the parent's tree is cached) and with a fresh
 *   engine each time (the CLI: the parent's tree is read from disk and checked).
 * - Peak RSS of each, the highest over its timed runs. Goal: < 150 MB.
 */
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { AgentLog } from '../src/engine/agent-log.js'
import type { EntryInput } from '../src/engine/entry.js'
import { ObjectStore } from '../src/store/objects.js'
import { SnapshotEngine } from '../src/store/snapshot.js'
import { lineReaderParse } from './replay-child.js'
import { WorkloadModel, writeLog } from './replay-data.js'
import { type BenchRow, markdownTable } from './table.js'

const WS = 'bench'

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2
}

async function timed<T>(fn: () => Promise<T>): Promise<[number, T]> {
  const t = performance.now()
  const v = await fn()
  return [performance.now() - t, v]
}

function child(
  mode: 'noa' | 'read' | 'verify' | 'baseline',
  root: string,
): { maxRssMB: number; ms: number; entries: number } {
  const script = fileURLToPath(new URL('./replay-child.js', import.meta.url))
  const r = spawnSync(process.execPath, [script, mode, root, WS], { encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`replay-child ${mode} failed: ${r.stderr}`)
  return JSON.parse(r.stdout)
}

function say(line: string): void {
  process.stderr.write(`  ${line}\n`)
}

export async function replayBench(opts: { quick: boolean; dir: string }): Promise<BenchRow[]> {
  const rows: BenchRow[] = []
  for (const paths of [10_000, 100_000]) {
    const root = join(opts.dir, `replay-${paths}`)
    try {
      rows.push(...(await run(opts.quick, root, paths)))
    } finally {
      rmSync(root, { recursive: true, force: true }) // ~200 MB at full size
    }
  }
  return rows
}

async function run(quick: boolean, root: string, paths: number): Promise<BenchRow[]> {
  const entries = quick ? 100_000 : 1_000_000
  const rounds = quick ? 3 : 5
  const file = join(root, 'agent-logs', `${WS}.log`)
  const model = new WorkloadModel(42, paths)
  const { bytes } = writeLog(file, entries, model)
  const P = paths.toLocaleString('en-US')
  say(
    `replay (${P} names): ${entries.toLocaleString('en-US')} entries, ${(bytes / 1e6).toFixed(0)} MB, ${Math.round(bytes / entries)} bytes/line, ${model.liveCount.toLocaleString('en-US')} files at the end`,
  )

  // A B C D A B C D: the disk and the other tenants of this machine drift; interleaving shares
  // the drift. Each trial is a fresh process (timed inside it, after its imports), so no trial
  // pays for the garbage the one before it left, and each also gives its peak RSS. The
  // incremental snapshots run in the same rounds, beside the full replays they are compared to.
  await lineReaderParse(file) // page cache warm for all
  const modes = (paths === 10_000 ? ['baseline', 'noa', 'read', 'verify'] : ['noa']) as Array<
    'baseline' | 'noa' | 'read' | 'verify'
  >
  const trials = new Map<(typeof modes)[number], Array<{ ms: number; maxRssMB: number; entries: number }>>(
    modes.map((m) => [m, []]),
  )
  const log = await AgentLog.open({ root, workers: 1 })
  const store = new ObjectStore(root)
  const warm: number[] = []
  const cold: number[] = []
  let replayed = 0
  try {
    const host = new SnapshotEngine({ log })
    const [firstMs] = await timed(() => host.snapshot(WS, { message: 'full' }))
    say(`first snapshot (full replay + tree + record + entry): ${firstMs.toFixed(0)} ms`)
    const increment = async (isWarm: boolean, i: number, timedRun = true) => {
      const batch: EntryInput[] = Array.from({ length: 1000 }, () => model.next())
      // The blobs are stored before the entries that name them, as `noa append` does: a
      // snapshot checks that what it takes in is stored, and the base log's made-up hashes
      // would make every increment a report of 1,000 missing blobs.
      const writes = batch.filter((e): e is Extract<EntryInput, { op: 'write' }> => e.op === 'write')
      const ids = await store.putObjects(writes.map((e) => Buffer.from(`${e.path} ${e.blob}\n`)))
      for (const [k, e] of writes.entries()) e.blob = ids[k] as string
      await log.appendMany(WS, batch)
      // A long-lived engine (what a host keeps: the parent's tree is in its cache), and a fresh
      // one (what the CLI does: the parent's tree is read and checked from disk).
      const engine = isWarm ? host : new SnapshotEngine({ log })
      const [ms, r] = await timed(() => engine.snapshot(WS, { message: `increment ${i}` }))
      if (!timedRun) return `host catches up ${ms.toFixed(1)} ms`
      replayed = r.entriesReplayed
      ;(isWarm ? warm : cold).push(ms)
      return `${isWarm ? 'warm' : 'cold'} increment ${ms.toFixed(1)} ms`
    }
    for (let r = 0; r < rounds; r++) {
      const got = modes.map((m) => {
        const t = child(m, root)
        // The log grows by the increments; every mode reads all of it.
        if (t.entries < entries) throw new Error(`${m} read ${t.entries} entries, wrote at least ${entries}`)
        trials.get(m)?.push(t)
        return `${m} ${t.ms.toFixed(0)} ms (${t.maxRssMB.toFixed(0)} MB)`
      })
      // The fresh engine's snapshot is one the host did not make, so the host first takes one
      // untimed snapshot on top of it: the timed one then builds on a parent the host made
      // itself, which is what "kept open" means (a host that is the workspace's snapshotter).
      got.push(
        await increment(false, 3 * r),
        await increment(true, 3 * r + 1, false),
        await increment(true, 3 * r + 2),
      )
      say(`round ${r + 1}: ${got.join(', ')}`)
    }
  } finally {
    await log.close()
  }
  const ms = (m: (typeof modes)[number]): number => median((trials.get(m) ?? []).map((t) => t.ms))
  const rate = (m: (typeof modes)[number]): number =>
    median((trials.get(m) ?? []).map((t) => t.entries / (t.ms / 1000)))
  const rss = (m: (typeof modes)[number]): number => Math.max(...(trials.get(m) ?? []).map((t) => t.maxRssMB))
  const fullMs = ms('noa')
  const n = entries.toLocaleString('en-US')
  const inc = replayed.toLocaleString('en-US')
  if (paths !== 10_000) {
    return [
      {
        workload: `incremental snapshot after ${inc} new entries, ${n}-entry log with ${P} paths, engine kept open`,
        unit: 'ms',
        noa: median(warm),
        baseline: fullMs,
        baselineName: 'noa full replay of the log',
        higherIsBetter: false,
        note: `goal < 1% (noa / baseline < 0.01); durable; medians of ${rounds}, interleaved with the full replays`,
      },
      {
        workload: `incremental snapshot after ${inc} new entries, ${n}-entry log with ${P} paths, fresh engine`,
        unit: 'ms',
        noa: median(cold),
        baseline: fullMs,
        baselineName: 'noa full replay of the log',
        higherIsBetter: false,
        note: `parent tree read and checked from disk, as the CLI does; medians of ${rounds}`,
      },
    ]
  }
  const baseRate = rate('baseline')
  return [
    {
      workload: `full replay of a ${n}-entry log (tree id included)`,
      unit: 'entries/s',
      noa: rate('noa'),
      baseline: baseRate,
      baselineName: 'line reader + JSON.parse, same file',
      higherIsBetter: true,
      note: `goal ≥ 0.7×; medians of ${rounds} interleaved runs, each a fresh process`,
    },
    {
      workload: `validated read of a ${n}-entry log (\`readEntryBatches\`, every entry checked)`,
      unit: 'entries/s',
      noa: rate('read'),
      baseline: baseRate,
      baselineName: 'line reader + JSON.parse, same file',
      higherIsBetter: true,
      note: `goal ahead (> 1×); medians of ${rounds} interleaved runs, each a fresh process`,
    },
    {
      workload: `verify of a ${n}-entry log (full scan)`,
      unit: 'entries/s',
      noa: rate('verify'),
      baseline: baseRate,
      baselineName: 'line reader + JSON.parse, same file',
      higherIsBetter: true,
      note: `every entry checked, seq and ts order; medians of ${rounds} interleaved runs, each a fresh process`,
    },
    {
      workload: `incremental snapshot after ${inc} new entries, engine kept open`,
      unit: 'ms',
      noa: median(warm),
      baseline: fullMs,
      baselineName: 'noa full replay of the log',
      higherIsBetter: false,
      note: `goal < 1% (noa / baseline < 0.01); durable; medians of ${rounds}, interleaved with the full replays`,
    },
    {
      workload: `incremental snapshot after ${inc} new entries, fresh engine`,
      unit: 'ms',
      noa: median(cold),
      baseline: fullMs,
      baselineName: 'noa full replay of the log',
      higherIsBetter: false,
      note: `parent tree read and checked from disk, as the CLI does; medians of ${rounds}`,
    },
    {
      workload: `peak RSS of the full replay (${n} entries)`,
      unit: 'MB',
      noa: rss('noa'),
      baseline: rss('baseline'),
      baselineName: 'line reader + JSON.parse, same file',
      higherIsBetter: false,
      note: 'goal < 150 MB; the highest of the timed runs',
    },
    {
      workload: `peak RSS of the validated read (${n} entries, \`readEntryBatches\`)`,
      unit: 'MB',
      noa: rss('read'),
      baseline: rss('baseline'),
      baselineName: 'line reader + JSON.parse, same file',
      higherIsBetter: false,
      note: 'goal < 150 MB; the highest of the timed runs',
    },
  ]
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { quick: { type: 'boolean' } }, strict: true })
  const dir = mkdtempSync(join(tmpdir(), 'noa-bench-replay-'))
  try {
    const quick = values.quick ?? false
    const rows = await replayBench({ quick, dir })
    process.stdout.write(`node dist/bench/replay.js${quick ? ' --quick' : ''}\n\n${markdownTable(rows)}`)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main()
