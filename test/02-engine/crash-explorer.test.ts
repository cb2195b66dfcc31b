/**
 * The crash-state explorer (test/helpers/crash-explorer.ts) over seeded random workloads: every
 * state a power cut may leave at every point of the recorded run is recovered and checked.
 * `npm test` runs a quick mode (a few seeds, some crash points skipped); `npm run test:crash`
 * runs many seeds over every crash point with more states each (NOA_CRASH_SEEDS=n seeds from
 * NOA_CRASH_FIRST, or the list NOA_CRASH_SEED_LIST=a,b,…, which CI takes from its commit). A failure keeps its root and trace and names them: NOA_CRASH_SEED=s runs
 * the same workload again (the workers' timing may differ), NOA_CRASH_TRACE=<trace folder>
 * explores the kept trace itself again.
 */
import { readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import {
  atomicAcrossWorkers,
  atomicScenario,
  explore,
  recoveryModules,
  runWorkload,
  scratchRoot,
  seedMode,
  type WorkloadResult,
  workloadDirs,
} from '../helpers/crash-explorer.js'

const LONG = process.env.NOA_CRASH_LONG === '1'
const one = process.env.NOA_CRASH_SEED
const list = process.env.NOA_CRASH_SEED_LIST
const count = Number(process.env.NOA_CRASH_SEEDS ?? (LONG ? 24 : 2))
const first = Number(process.env.NOA_CRASH_FIRST ?? 1)
// NOA_CRASH_SEED_LIST=5,6: the seeds `.ci/run` takes for its commit (scripts/crash-seeds.mjs).
// Quick mode's three seeds: one without syncfs, one with it and slow syncs, one with the lone
// lane moving workspaces between the caller's thread and the workers (seedMode).
const seeds = one
  ? [Number(one)]
  : list !== undefined
    ? list.split(',').map(Number)
    : LONG || process.env.NOA_CRASH_SEEDS !== undefined || process.env.NOA_CRASH_FIRST !== undefined
      ? Array.from({ length: count }, (_, i) => first + i)
      : [1, 6, 7]
if (seeds.length === 0 || !seeds.every((s) => Number.isSafeInteger(s) && s > 0)) {
  throw new Error(
    `crash seeds must be integers > 0, got ${JSON.stringify(seeds)} (NOA_CRASH_SEED_LIST=${list})`,
  )
}

// Quick: every third crash point, 'none', 'all', 'reordered' and two random states at each. Long: every
// crash point, five random states at each, longer runs over three sessions.
const mode = LONG
  ? { sessions: 3, steps: 120, randomPerPoint: 5, stride: 1, agentLogChecks: 4 }
  : { sessions: 2, steps: 60, randomPerPoint: 2, stride: 3, agentLogChecks: 1 }

describe(`crash-state explorer (${LONG ? 'long' : 'quick'} mode)`, () => {
  const totals = { crashPoints: 0, states: 0, distinct: 0, rescued: 0 }
  for (const seed of seeds) {
    it(
      `seed ${seed}: every state a crash may leave recovers every acknowledged entry, prefixes and whole batches`,
      async () => {
        const base = scratchRoot()
        let keep = true
        try {
          const { root, traceDir } = workloadDirs(base, seed)
          const w = await runWorkload({
            seed,
            root,
            traceDir,
            sessions: mode.sessions,
            steps: mode.steps,
            ...seedMode(seed),
          })
          expect(w.errors, `seed ${seed}: the uncrashed run failed (kept in ${base})`).toEqual([])
          // The seeds that ask for it made logs durable with syncfs: that path is explored too.
          if (seedMode(seed).syncfsMin !== undefined) expect(w.stats.logSyncfs).toBeGreaterThan(0)
          const r = await explore(w, {
            seed,
            randomPerPoint: mode.randomPerPoint,
            stride: mode.stride,
            agentLogChecks: mode.agentLogChecks,
            modules: await recoveryModules(),
          })
          // Nothing the owners did failed (the only failing call is the open that finds a log
          // missing and then creates it): a sync on a closed descriptor would show here.
          expect(Object.keys(r.failedOps).filter((op) => op !== 'open ENOENT')).toEqual([])
          const summary = `seed ${seed}: ${r.ops} ops, ${r.crashPoints} crash points, ${r.states} states (${r.distinct} distinct, ${r.replayed} replayed a journal, ${r.cut} cut a torn tail, ${r.checksummed} checked a checksum sidecar, ${r.rescued} needed the journal for an acknowledged entry, ${r.agentLogChecked} opened by an AgentLog); run: ${JSON.stringify(w.stats)}, ${w.acks.length} acks`
          console.log(summary)
          expect(
            r.failures,
            `seed ${seed} (trace kept in ${traceDir}; rerun with NOA_CRASH_SEED=${seed}): ${JSON.stringify(r.failures, null, 1)}`,
          ).toEqual([])
          // The run exercised what it is meant to: checkpoints, wraps, atomic batches, and
          // states where only the journal held acknowledged entries.
          expect(w.stats.checkpoints).toBeGreaterThan(0)
          expect(w.stats.wraps).toBeGreaterThan(0)
          expect(w.stats.atomics).toBeGreaterThan(0)
          expect(r.rescued).toBeGreaterThan(0)
          expect(r.checksummed).toBeGreaterThan(0)
          expect(r.agentLogChecked).toBe(mode.agentLogChecks)
          totals.crashPoints += r.crashPoints
          totals.states += r.states
          totals.distinct += r.distinct
          totals.rescued += r.rescued
          keep = false
        } finally {
          if (!keep) rmSync(base, { recursive: true, force: true })
        }
      },
      // A long seed explores every crash point of a run of 2,000-4,500 operations (25,000-30,000
      // states): 300-650 s on this machine, more when it is busy.
      LONG ? 1_500_000 : 120_000,
    )
  }
  afterAll(() => console.log(`crash-state explorer totals: ${JSON.stringify(totals)}`))
})

describe.runIf(process.env.NOA_CRASH_TRACE !== undefined)('crash-state explorer on a kept trace', () => {
  it('explores it again', async () => {
    const dir = process.env.NOA_CRASH_TRACE as string
    const w = JSON.parse(readFileSync(join(dir, 'workload.json'), 'utf8')) as WorkloadResult
    const r = await explore(w, {
      seed: w.seed,
      randomPerPoint: mode.randomPerPoint,
      modules: await recoveryModules(),
    })
    expect(r.failures).toEqual([])
  }, 600_000)
})

/**
 * Races the random workloads found, made to happen every time: one worker commits an appendAtomic
 * batch in its journal, another writes its part to its own log and fdatasyncs it later; until
 * then the committing worker's journal holds the part's only durable copy.
 */
describe('crash-state explorer: atomic batches across workers', () => {
  it('closing right after the batch: the committing worker keeps its journal until the other part is durable', async () => {
    // The other worker's fdatasync of its part is slow; the log is closed as soon as the batch
    // is acknowledged.
    const { ops, report, b } = await atomicScenario({ slowSyncMs: 150 }, atomicAcrossWorkers)
    const partWrite = ops.find(
      (o) =>
        o.op === 'write' &&
        o.path?.endsWith(`/${b}.log`) &&
        o.len &&
        o.i > 0 &&
        Buffer.from(o.data as string, 'base64').includes('atomic/b0/'),
    )
    const partSync = ops.find(
      (o) => o.op === 'fdatasync' && o.i > (partWrite?.i ?? 0) && o.path?.endsWith(`/${b}.log`),
    )
    const removed = ops.find((o) => o.op === 'unlink' && o.path?.endsWith('-w0.jnl'))
    expect(partWrite && partSync && removed).toBeTruthy()
    expect(
      (partSync?.i ?? 0) < (removed?.i ?? 0),
      'the part is durable before the journal holding it goes',
    ).toBe(true)
    expect(report.failures).toEqual([])
    expect(report.rescued).toBeGreaterThan(0)
  })

  it('releasing the other workspace right after the batch: its part is fdatasynced before its log is closed', async () => {
    const { ops, report } = await atomicScenario({}, async (log, a, b, rec) => {
      await Promise.all([atomicAcrossWorkers(log, a, b, rec), log.release(b)])
      // The committing worker frees the batch's frame once the part is durable: a checkpoint
      // (at most a second away) then leaves nothing live in its journal.
      let frames = -1
      for (let i = 0; i < 300 && frames !== 0; i++) {
        await new Promise((r) => setTimeout(r, 20))
        frames = (await log.status())[0]?.journal?.frames ?? -1
      }
      expect(frames, "frames still live in the committing worker's journal").toBe(0)
    })
    expect(ops.filter((o) => o.err !== undefined && o.op !== 'open')).toEqual([])
    expect(report.failures).toEqual([])
  })
})
