/**
 * Compaction benchmark: `node dist/bench/compact.js [--entries N] [--paths P] [--rounds R] [--quick]`
 * (default 1,000,000 entries over 100,000 paths; --quick: 100,000 over 10,000).
 *
 * One workspace: writes over the paths, a snapshot after the first 90% of them, then the rest.
 * A copy of it is compacted behind that snapshot (timed, in its own process). Then, each trial a
 * fresh child process, interleaved (before, after, before, after …), medians: the time to open
 * the log (AgentLog.open and opening the workspace: lock, tail), a snapshot (replay since the
 * head and store the tree, on a throwaway copy of the root), and a full replay from the log's
 * start (from empty before, from the base snapshot's tree after). Log bytes before and after.
 */
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { AgentLog } from '../src/engine/agent-log.js'
import type { EntryInput } from '../src/engine/entry.js'
import { ObjectStore } from '../src/store/objects.js'
import { SnapshotEngine } from '../src/store/snapshot.js'
import { type BenchRow, markdownTable } from './table.js'

const WS = 'bench'

function say(line: string): void {
  process.stderr.write(`  ${line}\n`)
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2
}

const blobOf = (i: number) => i.toString(16).padStart(64, '0')

async function build(root: string, entries: number, paths: number): Promise<{ baseAt: number }> {
  const baseAt = Math.floor(entries * 0.9)
  const log = await AgentLog.open({ root, workers: 1 })
  try {
    const append = async (from: number, to: number) => {
      for (let i = from; i < to; i += 10_000) {
        const batch: EntryInput[] = []
        for (let k = i; k < Math.min(to, i + 10_000); k++) {
          batch.push({ op: 'write', path: `src/m${(k % paths) % 997}/f${k % paths}.ts`, blob: blobOf(k) })
        }
        await log.appendMany(WS, batch)
      }
    }
    await append(0, baseAt)
    await new SnapshotEngine({ log }).snapshot(WS, { message: 'base' })
    await append(baseAt, entries)
  } finally {
    await log.close()
  }
  return { baseAt }
}

function copyRoot(from: string, to: string): void {
  const r = spawnSync('cp', ['-a', from, to])
  if (r.status !== 0) throw new Error(`cp -a ${from} ${to} failed: ${r.stderr}`)
}

interface Trial {
  ms: number
  note?: string
}

function trial(mode: string, root: string): Trial {
  const r = spawnSync(process.execPath, [fileURLToPath(import.meta.url), '--child', mode, root], {
    encoding: 'utf8',
    maxBuffer: 16 << 20,
  })
  if (r.status !== 0) throw new Error(`compact bench child ${mode} failed: ${r.stderr}`)
  return JSON.parse(r.stdout.trim().split('\n').pop() as string) as Trial
}

async function child(mode: string, root: string): Promise<void> {
  let ms = 0
  let note: string | undefined
  if (mode === 'open') {
    const start = performance.now()
    const log = await AgentLog.open({ root, workers: 0 })
    await log.openWorkspace(WS)
    ms = performance.now() - start
    await log.close()
  } else if (mode === 'snapshot') {
    // On a copy: a snapshot appends its entry and stores its tree.
    const copy = `${root}-snap`
    copyRoot(root, copy)
    try {
      const log = await AgentLog.open({ root: copy, workers: 0 })
      const start = performance.now()
      const r = await new SnapshotEngine({ log }).snapshot(WS, { allowEmpty: true })
      ms = performance.now() - start
      note = `${r.entriesReplayed} entries replayed`
      await log.close()
    } finally {
      rmSync(copy, { recursive: true, force: true })
    }
  } else if (mode === 'replay') {
    const start = performance.now()
    const r = await new SnapshotEngine({ root }).replay(WS, { fromScratch: true })
    ms = performance.now() - start
    note = `${r.entriesReplayed} entries replayed, ${r.tree.size} paths`
  } else if (mode === 'compact') {
    const store = new ObjectStore(root)
    const start = performance.now()
    const log = await AgentLog.open({ root, workers: 0, objects: store })
    const r = await log.compact(WS)
    await log.close()
    ms = performance.now() - start
    note = `base seq ${r.baseSeq}: ${r.bytesBefore} → ${r.bytesAfter} bytes`
  } else if (mode === 'copy') {
    const start = performance.now()
    copyRoot(join(root, 'agent-logs', `${WS}.log`), join(root, 'copy.log'))
    ms = performance.now() - start
    rmSync(join(root, 'copy.log'))
  }
  process.stdout.write(`${JSON.stringify({ ms, note })}\n`)
}

export async function compactBench(opts: {
  dir: string
  entries?: number
  paths?: number
  rounds?: number
  quick?: boolean
}): Promise<BenchRow[]> {
  const entries = opts.entries ?? (opts.quick ? 100_000 : 1_000_000)
  const paths = opts.paths ?? Math.max(1, Math.floor(entries / 10))
  const rounds = opts.rounds ?? (opts.quick ? 3 : 5)
  const before = join(opts.dir, 'before')
  const after = join(opts.dir, 'after')
  const t = performance.now()
  const { baseAt } = await build(before, entries, paths)
  const n = entries.toLocaleString('en-US')
  say(
    `compact: built ${n} entries over ${paths.toLocaleString('en-US')} paths in ${((performance.now() - t) / 1000).toFixed(0)} s`,
  )
  copyRoot(before, after)
  const copy = trial('copy', after)
  const compact = trial('compact', after)
  say(`compact: ${compact.ms.toFixed(0)} ms (${compact.note})`)
  const logBytes = (root: string) => statSync(join(root, 'agent-logs', `${WS}.log`)).size
  const bytesBefore = logBytes(before)
  const bytesAfter = logBytes(after)
  const times: Record<string, { before: number[]; after: number[] }> = {
    open: { before: [], after: [] },
    snapshot: { before: [], after: [] },
    replay: { before: [], after: [] },
  }
  for (let r = 0; r < rounds; r++) {
    for (const mode of Object.keys(times)) {
      const b = trial(mode, before)
      const a = trial(mode, after)
      times[mode]?.before.push(b.ms)
      times[mode]?.after.push(a.ms)
      say(
        `round ${r + 1} ${mode}: before ${b.ms.toFixed(1)} ms, after ${a.ms.toFixed(1)} ms (${a.note ?? ''})`,
      )
    }
  }
  const row = (workload: string, mode: string, note: string): BenchRow => ({
    workload,
    unit: 'ms',
    noa: median(times[mode]?.after ?? []),
    baseline: median(times[mode]?.before ?? []),
    baselineName: 'the same log before compaction',
    higherIsBetter: false,
    note,
  })
  const what = `${n}-entry log, base after ${baseAt.toLocaleString('en-US')}`
  return [
    {
      workload: `log bytes of a ${what}`,
      unit: 'bytes',
      noa: bytesAfter,
      baseline: bytesBefore,
      baselineName: 'the same log before compaction',
      higherIsBetter: false,
      note: `down ${(100 * (1 - bytesAfter / bytesBefore)).toFixed(1)}% (goal: at least 85%)`,
    },
    row(`AgentLog.open + open the workspace (${what})`, 'open', `fresh process each; medians of ${rounds}`),
    row(
      `snapshot of the last ${(entries - baseAt).toLocaleString('en-US')} entries (${what})`,
      'snapshot',
      'replays since the head, stores the tree',
    ),
    row(
      `full replay from the log's start (${what})`,
      'replay',
      'before: from empty; after: from the base snapshot',
    ),
    {
      workload: `compaction itself (${what})`,
      unit: 'ms',
      noa: compact.ms,
      baseline: copy.ms,
      baselineName: 'cp of the whole log',
      higherIsBetter: false,
      note: 'open, plan, write + fdatasync the new log and its checksums, rename, folder fsync',
    },
  ]
}

async function main(): Promise<void> {
  if (process.argv[2] === '--child') return child(process.argv[3] as string, process.argv[4] as string)
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean' },
      entries: { type: 'string' },
      paths: { type: 'string' },
      rounds: { type: 'string' },
    },
    strict: true,
  })
  const dir = mkdtempSync(join(tmpdir(), 'noa-bench-compact-'))
  try {
    const rows = await compactBench({
      dir,
      quick: values.quick ?? false,
      ...(values.entries ? { entries: Number(values.entries) } : {}),
      ...(values.paths ? { paths: Number(values.paths) } : {}),
      ...(values.rounds ? { rounds: Number(values.rounds) } : {}),
    })
    const args = process.argv.slice(2).join(' ')
    process.stdout.write(`node dist/bench/compact.js${args ? ` ${args}` : ''}\n\n${markdownTable(rows)}`)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main()
