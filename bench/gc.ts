/**
 * gc benchmark: `node dist/bench/gc.js [--quick]` (1M objects; quick: 100k).
 *
 * The store: half the objects are blobs named by one workspace's writes and held by its
 * snapshot's tree, half are blobs no log names, all older than the grace period. Each trial is a
 * fresh child process: noa's gc (a dry run, so every trial sees the same store: mark from the
 * logs, then sweep every directory, deciding each object) against a plain walk of the same
 * store (readdir of each directory and an lstat of each file, which any sweep needs); A B A B,
 * medians; peak RSS from the child's own resource usage.
 */
import { spawnSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { lstatSync, mkdirSync, mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { AgentLog } from '../src/engine/agent-log.js'
import type { EntryInput } from '../src/engine/entry.js'
import { SnapshotEngine } from '../src/store/snapshot.js'
import { type BenchRow, markdownTable } from './table.js'

function say(line: string): void {
  process.stderr.write(`  ${line}\n`)
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2
}

/** Writes a blob file straight into the store's layout (no fsync: this is set-up, not the test). */
function putRaw(root: string, content: string, made: Set<string>): string {
  const id = createHash('sha256').update(content).digest('hex')
  const dir = join(root, 'objects', id.slice(0, 2))
  if (!made.has(dir)) {
    mkdirSync(dir, { recursive: true })
    made.add(dir)
  }
  writeFileSync(join(dir, id.slice(2)), content, { mode: 0o444 })
  return id
}

async function build(root: string, objects: number): Promise<void> {
  const made = new Set<string>()
  const reachable = objects / 2
  const log = await AgentLog.open({ root, workers: 1 })
  try {
    for (let i = 0; i < reachable; i += 10_000) {
      const batch: EntryInput[] = []
      for (let k = i; k < Math.min(reachable, i + 10_000); k++) {
        batch.push({
          op: 'write',
          path: `src/m${k % 997}/f${k}.ts`,
          blob: putRaw(root, `reachable ${k}\n`, made),
        })
      }
      await log.appendMany('bench', batch)
    }
    await new SnapshotEngine({ log }).snapshot('bench')
  } finally {
    await log.close()
  }
  for (let i = 0; i < objects - reachable; i++) putRaw(root, `garbage ${i}\n`, made)
  const old = new Date(Date.now() - 24 * 3_600_000)
  for (const shard of readdirSync(join(root, 'objects'))) {
    for (const name of readdirSync(join(root, 'objects', shard)))
      utimesSync(join(root, 'objects', shard, name), old, old)
  }
}

interface Trial {
  ms: number
  maxRssMB: number
  objects: number
  removed: number
}

function trial(mode: 'gc' | 'walk', root: string): Trial {
  const r = spawnSync(process.execPath, [fileURLToPath(import.meta.url), '--child', mode, root], {
    encoding: 'utf8',
    maxBuffer: 16 << 20,
  })
  if (r.status !== 0) throw new Error(`gc bench child ${mode} failed: ${r.stderr}`)
  return JSON.parse(r.stdout.trim().split('\n').pop() as string) as Trial
}

async function child(mode: string, root: string): Promise<void> {
  const start = performance.now()
  let objects = 0
  let removed = 0
  if (mode === 'gc') {
    const r = await new SnapshotEngine({ root }).gc({ dryRun: true })
    objects = r.objects
    removed = r.removed
  } else {
    const dir = join(root, 'objects')
    for (const shard of readdirSync(dir)) {
      for (const name of readdirSync(join(dir, shard))) {
        lstatSync(join(dir, shard, name))
        objects++
      }
    }
  }
  const ms = performance.now() - start
  const maxRssMB = process.resourceUsage().maxRSS / 1024
  process.stdout.write(`${JSON.stringify({ ms, maxRssMB, objects, removed })}\n`)
}

export async function gcBench(opts: { quick: boolean; dir: string }): Promise<BenchRow[]> {
  const objects = opts.quick ? 100_000 : 1_000_000
  const rounds = opts.quick ? 3 : 5
  const root = join(opts.dir, 'gc')
  try {
    const t = performance.now()
    await build(root, objects)
    say(
      `gc: built a store of ${objects.toLocaleString('en-US')} objects in ${((performance.now() - t) / 1000).toFixed(0)} s`,
    )
    const gc: Trial[] = []
    const walk: Trial[] = []
    for (let r = 0; r < rounds; r++) {
      const w = trial('walk', root)
      const g = trial('gc', root)
      if (g.removed !== objects / 2) throw new Error(`gc would remove ${g.removed}, expected ${objects / 2}`)
      walk.push(w)
      gc.push(g)
      say(
        `round ${r + 1}: walk ${w.ms.toFixed(0)} ms ${w.maxRssMB.toFixed(0)} MB, gc ${g.ms.toFixed(0)} ms ${g.maxRssMB.toFixed(0)} MB`,
      )
    }
    const n = objects.toLocaleString('en-US')
    return [
      {
        workload: `gc of a ${n}-object store (half reachable; dry run: mark + sweep)`,
        unit: 'ms',
        noa: median(gc.map((x) => x.ms)),
        baseline: median(walk.map((x) => x.ms)),
        baselineName: 'readdir + lstat of every object file',
        higherIsBetter: false,
        note: `fresh process each; medians of ${rounds} interleaved runs`,
      },
      {
        workload: `peak RSS of that gc (${n} objects)`,
        unit: 'MB',
        noa: median(gc.map((x) => x.maxRssMB)),
        baseline: median(walk.map((x) => x.maxRssMB)),
        baselineName: 'readdir + lstat of every object file',
        higherIsBetter: false,
        note: 'the mark set keeps 64-bit id prefixes',
      },
    ]
  } finally {
    // A million small files: rm(1) unlinks them several times faster than Node's recursive rm.
    if (spawnSync('rm', ['-rf', root]).status !== 0) rmSync(root, { recursive: true, force: true })
  }
}

async function main(): Promise<void> {
  if (process.argv[2] === '--child') return child(process.argv[3] as string, process.argv[4] as string)
  const { values } = parseArgs({ options: { quick: { type: 'boolean' } }, strict: true })
  const dir = mkdtempSync(join(tmpdir(), 'noa-bench-gc-'))
  try {
    const quick = values.quick ?? false
    const rows = await gcBench({ quick, dir })
    process.stdout.write(`node dist/bench/gc.js${quick ? ' --quick' : ''}\n\n${markdownTable(rows)}`)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main()
