/**
 * `npm run bench:peers`: noa against what users would pick instead, same workloads, same disk,
 * same run. Every trial is a fresh process; within a workload the contenders are interleaved
 * round by round; figures are medians over the rounds with ratios against noa.
 *
 *   node dist/bench/peers/run.js [--quick] [--rounds N] [--seconds S] [--entries N]
 *                                [--only serial,1ws,10ws,100ws,1000ws,10kws,100kws,create,
 *                                        8proc,8proc-shared,replay,open]
 *                                [--strace | --strace-only]
 *
 * --strace first re-checks every writer's sync calls per entry with strace and rewrites
 * durability.json, which every run reads; --strace-only does only that.
 */
import { spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { cpus, release, tmpdir, totalmem } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import type { CaseResult } from '../cases.js'
import { interleave, runCase } from '../run.js'
import { PEERS_DIR, peerVersion, requirePeer } from './common.js'
import { procPeerById } from './procs.js'
import {
  type Contender,
  chartFor,
  type FigureResult,
  type Prepared,
  type RunInfo,
  renderResults,
  scalingChart,
  scalingOf,
  summarize,
} from './report.js'
import { readDurability, verifyDurability } from './strace.js'
import { FIGURES, PREFILL, PROC_WORKLOADS, peerById, storeById, WORKLOADS, type WorkloadId } from './suite.js'

const PEER_CASES = fileURLToPath(new URL('./cases.js', import.meta.url))
const BENCH_DIR = join(PEERS_DIR, '..')
const PACKAGES = ['better-sqlite3', 'lmdb', 'sonic-boom', 'hypercore', 'hypercore-crypto']

function checkInstalled(): void {
  const missing = PACKAGES.filter((p) => {
    try {
      requirePeer.resolve(p)
      return false
    } catch {
      return true
    }
  })
  if (missing.length) {
    throw new Error(
      `peer packages not installed (${missing.join(', ')}): run \`npm run bench:peers\`, which installs them into bench/peers/node_modules`,
    )
  }
}

function contender(workload: WorkloadId, id: string): Contender {
  if (workload === 'replay' || workload === 'open') {
    const s = storeById(id)
    return { id, label: s.label, kind: s.kind, how: workload === 'replay' ? s.replayHow : s.openHow }
  }
  const p = PROC_WORKLOADS.has(workload) ? procPeerById(id) : peerById(id)
  return { id, label: p.label, kind: p.kind, how: p.how }
}

function machine(): string {
  const cpu = cpus()
  return `${cpu.length} × ${cpu[0]?.model.trim() ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Linux ${release()}`
}

function diskOf(dir: string): string {
  const r = spawnSync('df', ['-PT', dir], { encoding: 'utf8' })
  const cols = r.stdout?.trim().split('\n')[1]?.split(/\s+/)
  return cols ? `temp files on ${cols[1]} (${cols[0]}, mounted at ${cols[6]})` : `temp files in ${dir}`
}

function prepare(storeId: string, dir: string, entries: number): Prepared {
  const r = spawnSync(process.execPath, [PEER_CASES, 'prepare', storeId, dir, String(entries)], {
    encoding: 'utf8',
    timeout: 1_800_000,
  })
  if (r.status !== 0) throw new Error(`preparing ${storeId} failed (${r.status ?? r.signal}): ${r.stderr}`)
  return JSON.parse(r.stdout.trim().split('\n').pop() as string) as Prepared
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      rounds: { type: 'string' },
      seconds: { type: 'string' },
      entries: { type: 'string' },
      only: { type: 'string' },
      strace: { type: 'boolean', default: false },
      'strace-only': { type: 'boolean', default: false },
    },
    strict: true,
  })
  const quick = values.quick ?? false
  const rounds = Number(values.rounds ?? (quick ? 1 : 5))
  const seconds = Number(values.seconds ?? (quick ? 0.25 : 3))
  const entries = Number(values.entries ?? (quick ? 20_000 : 1_000_000))
  const only = values.only ? new Set(values.only.split(',')) : null
  for (const w of only ?? []) {
    if (!WORKLOADS.some((x) => x.id === w)) throw new Error(`--only: unknown workload ${w}`)
  }
  if (!(rounds >= 1 && seconds > 0 && entries >= 1))
    throw new Error('--rounds, --seconds, --entries must be positive')
  checkInstalled()
  const args = process.argv.slice(2)
  const command = `npm run bench:peers${args.length ? ` -- ${args.join(' ')}` : ''}`
  const started = new Date()
  const t0 = performance.now()

  if (values.strace || values['strace-only']) {
    process.stderr.write('durability check with strace -c -f\n')
    const d = verifyDurability(quick ? 300 : 2000, command)
    process.stderr.write(`wrote bench/peers/durability.json (${Object.keys(d.peers).length} writers)\n`)
    if (values['strace-only']) return
  }
  const durability = readDurability()

  process.stderr.write(
    `noa bench:peers: ${rounds} round(s), ${seconds} s per timed case, ${entries.toLocaleString('en-US')}-entry logs\n`,
  )
  const failures: string[] = []
  const byWorkload = new Map<WorkloadId, Map<string, CaseResult[]>>()
  const prepared: Record<string, Prepared> = {}
  // The read workloads are named for the size of their log: "1M" unless --entries changed it.
  const size =
    entries % 1000 !== 0 ? String(entries) : entries % 1e6 === 0 ? `${entries / 1e6}M` : `${entries / 1000}k`
  const sized = <T extends { title: string }>(x: T): T => ({ ...x, title: x.title.replace('1M', size) })
  const workloads = WORKLOADS.map(sized)
  const selected = workloads.filter((w) => !only || only.has(w.id))

  /** One trial; a failure is recorded and leaves an empty result, so the other trials go on. */
  const attempt = (label: string, run: () => CaseResult, check?: (r: CaseResult) => string | null) => {
    try {
      const r = run()
      const problem = check?.(r)
      if (problem) throw new Error(problem)
      return r
    } catch (err) {
      failures.push(`${label}: ${(err as Error).message.split('\n')[0]}`)
      process.stderr.write(`  FAILED ${label}: ${(err as Error).message}\n`)
      return {}
    }
  }

  for (const w of selected.filter((x) => x.id !== 'replay' && x.id !== 'open')) {
    process.stderr.write(`${w.title}\n`)
    const fill = PREFILL[w.id]
    if (!fill) {
      const results = interleave([...w.contenders], rounds, seconds, (id) =>
        attempt(`${w.id} ${id}`, () =>
          // Settled: each trial's folder is removed and the disk synced before the next trial
          // starts, so that no contender pays for the writeback and the journal commits of the
          // files the one before it made and removed (a create trial leaves ~21,000 files: the
          // next one's creations measured 0.06 ms each on a quiet disk, 0.4 ms right after).
          runCase(`${w.id}-${id}`, seconds, { script: PEER_CASES, args: ['write', w.id, id], settle: true }),
        ),
      )
      byWorkload.set(w.id, results)
      continue
    }
    // A prefilled workload: each contender's store filled once; every trial goes on in it.
    const fillRoot = mkdtempSync(join(tmpdir(), `noa-peers-${w.id}-`))
    try {
      const filled = new Set<string>()
      for (const id of w.contenders) {
        process.stderr.write(
          `  filling ${fill.workspaces.toLocaleString('en-US')} workspaces × ${fill.entries}: ${id}`,
        )
        const start = performance.now()
        const dir = join(fillRoot, id)
        mkdirSync(dir)
        const r = spawnSync(process.execPath, [PEER_CASES, 'fill', w.id, id, dir], {
          encoding: 'utf8',
          timeout: 1_800_000,
        })
        process.stderr.write(` (${((performance.now() - start) / 1000).toFixed(1)} s)\n`)
        if (r.status === 0) filled.add(id)
        else {
          failures.push(`${w.id} ${id}: filling failed (${r.status ?? r.signal})`)
          process.stderr.write(`  FAILED filling ${id}: ${r.stderr}\n`)
        }
      }
      spawnSync('sync')
      const results = interleave([...w.contenders], rounds, seconds, (id) =>
        attempt(`${w.id} ${id}`, () => {
          if (!filled.has(id)) throw new Error('not filled')
          return runCase(`${w.id}-${id}`, seconds, {
            script: PEER_CASES,
            args: ['write', w.id, id],
            dir: join(fillRoot, id),
          })
        }),
      )
      byWorkload.set(w.id, results)
    } finally {
      rmSync(fillRoot, { recursive: true, force: true })
    }
  }

  const reads = selected.filter((x) => x.id === 'replay' || x.id === 'open')
  if (reads.length) {
    const dataRoot = mkdtempSync(join(tmpdir(), 'noa-peers-data-'))
    try {
      const storeIds = [...new Set(reads.flatMap((w) => w.contenders))]
      for (const id of storeIds) {
        process.stderr.write(`  preparing ${entries.toLocaleString('en-US')} entries: ${id}\n`)
        const dir = join(dataRoot, id)
        mkdirSync(dir)
        prepared[id] = prepare(id, dir, entries)
      }
      for (const w of reads) {
        process.stderr.write(`${w.title}\n`)
        const results = interleave([...w.contenders], rounds, seconds, (id) =>
          attempt(
            `${w.id} ${id}`,
            () =>
              runCase(`${w.id}-${id}`, seconds, {
                script: PEER_CASES,
                args: [w.id, id],
                dir: join(dataRoot, id),
                timeoutMs: 1_800_000,
              }),
            (r) =>
              r.entries === entries
                ? null
                : `read ${r.entries} entries of the ${entries} prepared, not all of them`,
          ),
        )
        byWorkload.set(w.id, results)
      }
    } finally {
      rmSync(dataRoot, { recursive: true, force: true })
    }
  }

  const figures: FigureResult[] = []
  for (const f of FIGURES.map(sized)) {
    const w = workloads.find((x) => x.id === f.workload)
    const results = byWorkload.get(f.workload)
    if (!w || !results) continue
    figures.push(
      summarize(
        f,
        w,
        w.contenders.map((id) => contender(w.id, id)),
        results,
      ),
    )
  }
  const info: RunInfo = {
    date: started,
    command,
    quick,
    rounds,
    seconds,
    entries,
    machine: machine(),
    disk: diskOf(tmpdir()),
    versions: `Node ${process.version}; better-sqlite3 ${peerVersion('better-sqlite3')}, lmdb ${peerVersion('lmdb')}, sonic-boom ${peerVersion('sonic-boom')}, hypercore ${peerVersion('hypercore')}`,
    prepared,
    failures,
  }
  const chartsDir = join(BENCH_DIR, 'charts')
  mkdirSync(chartsDir, { recursive: true })
  for (const r of figures) writeFileSync(join(chartsDir, `${r.figure.id}.svg`), chartFor(r, info))
  const scaling = scalingOf(workloads, byWorkload, contender)
  if (scaling.length >= 2) writeFileSync(join(chartsDir, 'scaling.svg'), scalingChart(scaling, info))
  const text = renderResults(figures, info, durability, scaling)
  writeFileSync(join(BENCH_DIR, 'RESULTS.md'), text)
  process.stdout.write(text)
  process.stderr.write(
    `wrote bench/RESULTS.md and ${figures.length} charts in bench/charts/ (${((performance.now() - t0) / 1000).toFixed(0)} s)\n`,
  )
  if (failures.length) process.exitCode = 1
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main()
