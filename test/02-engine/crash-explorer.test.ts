/**
 * Races found by the crash-state explorer (test/helpers/crash-explorer.ts), made to happen every
 * time, then explored: every state a power cut may leave is recovered and checked.
 */
import { rmSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { AgentLog } from '../../dist/src/index.js'
import {
  BLOB,
  explore,
  readTrace,
  recording,
  recoveryModules,
  scratchRoot,
  type WorkloadResult,
  workloadDirs,
} from '../helpers/crash-explorer.js'

/**
 * Races the random workloads found, made to happen every time: one worker commits an appendAtomic
 * batch in its journal, another writes its part to its own log and fdatasyncs it later; until
 * then the committing worker's journal holds the part's only durable copy.
 */
describe('crash-state explorer: atomic batches across workers', () => {
  /** Workspace names owned by different workers, committing worker first. */
  function acrossWorkers(log: AgentLog): [string, string] {
    const internals = log as unknown as { ownerOf(ws: string): unknown; owners: unknown[] }
    const by = new Map<number, string>()
    for (let i = 0; by.size < 2; i++)
      by.set(internals.owners.indexOf(internals.ownerOf(`atom${i}`)), `atom${i}`)
    return [by.get(0) as string, by.get(1) as string]
  }

  async function scenario(
    extra: Record<string, unknown>,
    during: (log: AgentLog, a: string, b: string, rec: ReturnType<typeof recording>) => Promise<void>,
  ) {
    const base = scratchRoot()
    const { root, traceDir } = workloadDirs(base, 0)
    const rec = recording(traceDir, extra)
    try {
      const log = await AgentLog.open({
        root,
        workers: 2,
        journalSize: 256 << 10,
        ioModule: rec.ioModule,
        ioOptions: rec.ioOptions,
      })
      const [a, b] = acrossWorkers(log)
      try {
        // Two commits per worker straight to the files, then each allocates its journal.
        for (const k of [0, 1]) {
          await Promise.all(
            [a, b].map(async (ws) => {
              const path = `${ws}/warm${k}`
              rec.stamp(ws, (await log.append(ws, { op: 'write', path, blob: BLOB })).seq, path)
            }),
          )
        }
        for (let i = 0; i < 500; i++) {
          if ((await log.status()).every((s) => s.journal?.state === 'ready')) break
          await new Promise((r) => setTimeout(r, 10))
        }
        await during(log, a, b, rec)
      } finally {
        await log.close()
      }
      const w: WorkloadResult = {
        seed: 0,
        root,
        traceDir,
        acks: rec.acks,
        errors: [],
        stats: { checkpoints: 0, wraps: 0, rounds: 0, directCommits: 0, atomics: 1 },
        workspaces: [a, b],
      }
      const ops = readTrace(traceDir)
      const report = await explore(w, { seed: 0, randomPerPoint: 4, modules: await recoveryModules() })
      return { ops, report, a, b }
    } finally {
      rmSync(base, { recursive: true, force: true })
    }
  }

  async function atomic(log: AgentLog, a: string, b: string, rec: ReturnType<typeof recording>) {
    const batch = {
      [a]: [{ op: 'write' as const, path: `atomic/b0/${a}/0`, blob: BLOB }],
      [b]: [0, 1].map((k) => ({ op: 'write' as const, path: `atomic/b0/${b}/${k}`, blob: BLOB })),
    }
    const acks = await log.appendAtomic(batch)
    for (const [ws, list] of Object.entries(acks)) {
      list.forEach((ack, k) => {
        rec.stamp(ws, ack.seq, batch[ws]?.[k]?.path as string)
      })
    }
  }

  it('closing right after the batch: the committing worker keeps its journal until the other part is durable', async () => {
    // The other worker's fdatasync of its part is slow; the log is closed as soon as the batch
    // is acknowledged.
    const { ops, report, b } = await scenario({ slowSyncMs: 150 }, atomic)
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
    const { ops, report } = await scenario({}, async (log, a, b, rec) => {
      await Promise.all([atomic(log, a, b, rec), log.release(b)])
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
