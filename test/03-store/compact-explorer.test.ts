/**
 * The crash-state explorer (test/helpers/crash-explorer.ts) over a compaction: a workspace is
 * written, snapshotted, compacted and appended to again through the recording io layer, from an
 * empty root; then, for every crash point from just before the compaction to past its end, the
 * states a power cut may leave (nothing unsynced kept, everything kept, random subsets with torn
 * writes) are written into a fresh root and recovered as the next process would. Each must be
 * the old log (a whole-line prefix of it holding every entry acknowledged by then) or the new one
 * (its base record, then a whole-line prefix of the final log); once `compact` has returned, only
 * the new one.
 */
import { mkdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { AgentLog, ObjectStore, SnapshotEngine } from '../../dist/src/index.js'
import {
  BLOB,
  buildModel,
  DurableBase,
  materialize,
  mulberry32,
  readTrace,
  recording,
  recoverState,
  recoveryModules,
  type StateChoice,
  stateAt,
} from '../helpers/crash-explorer.js'
import { tempDir } from '../helpers/index.js'

function lines(buf: Buffer): string[] {
  const text = buf.toString('utf8')
  return text === '' ? [] : text.slice(0, -1).split('\n')
}

describe('crash-state explorer over a compaction', () => {
  it('every state of every crash point is the old log or the new one, with every acknowledged entry', async () => {
    const root = join(tempDir(), 'root')
    const traceDir = join(tempDir(), 'trace')
    mkdirSync(root)
    mkdirSync(traceDir)
    const rec = recording(traceDir)
    const counter = new Int32Array(rec.ioOptions.sab)
    const store = new ObjectStore(root)
    const log = await AgentLog.open({
      root,
      workers: 1,
      objects: store,
      ioModule: rec.ioModule,
      ioOptions: rec.ioOptions,
      journalSize: 1 << 20,
    })
    const acked: Array<{ seq: number; c: number }> = []
    const stamp = (acks: Array<{ seq: number }>) => {
      for (const a of acks) acked.push({ seq: a.seq, c: Atomics.load(counter, 0) })
    }
    let oldLog: Buffer
    let start: number
    let end: number
    try {
      const engine = new SnapshotEngine({ log, store })
      for (let i = 0; i < 4; i++) {
        stamp(
          await log.appendMany(
            'ws',
            Array.from({ length: 10 }, (_, k) => ({ op: 'write', path: `f${i}/${k}`, blob: BLOB })),
          ),
        )
      }
      const snap = await engine.snapshot('ws')
      stamp([snap.entry as { seq: number }])
      for (let i = 0; i < 5; i++) stamp([await log.append('ws', { op: 'delete', path: `f0/${i}` })])
      await log.release('ws')
      oldLog = readFileSync(join(root, 'agent-logs', 'ws.log'))
      start = Atomics.load(counter, 0)
      expect(await log.compact('ws')).toMatchObject({ compacted: true, baseSeq: 40 })
      end = Atomics.load(counter, 0)
      stamp(await log.appendMany('ws', [{ op: 'write', path: 'after', blob: BLOB }]))
    } finally {
      await log.close()
    }
    const final = readFileSync(join(root, 'agent-logs', 'ws.log'))
    const finalLines = lines(final)
    expect(finalLines[0]).toMatch(/^\{"seq":40,"op":"base",/)
    const oldLines = lines(oldLog)

    const ops = readTrace(traceDir)
    const model = buildModel(root, ops)
    const base = new DurableBase(model)
    const modules = await recoveryModules()
    const rand = mulberry32(33)
    const scratch = tempDir()
    const seen = { old: 0, compacted: 0, states: 0 }
    const problems: string[] = []
    for (let k = start - 2; k <= Math.min(ops.length, end + 12); k++) {
      const choices: StateChoice[] = ['none', 'all', 'random', 'random']
      for (const [n, choice] of choices.entries()) {
        const state = stateAt(model, base, k, choice, rand)
        const dir = join(scratch, `${k}-${n}`)
        materialize(model, state, dir)
        const r = recoverState(dir, ['ws'], modules)
        seen.states++
        const where = `crash point ${k} (${choice}): `
        if (r.error !== null || r.damaged.length > 0) {
          problems.push(`${where}${r.error ?? r.damaged.join('; ')}`)
          continue
        }
        const got = lines(r.logs.get('ws') ?? Buffer.alloc(0))
        const want = acked.filter((a) => a.c <= k).map((a) => a.seq)
        if (got[0]?.includes('"op":"base"')) {
          seen.compacted++
          if (got.some((l, i) => l !== finalLines[i]))
            problems.push(`${where}not a prefix of the compacted log`)
          const seqs = new Set(got.map((l) => JSON.parse(l).seq as number))
          const lost = want.filter((s) => s > 40 && !seqs.has(s))
          if (lost.length > 0) problems.push(`${where}lost acknowledged seqs ${lost.join(',')}`)
        } else {
          seen.old++
          if (k >= end) problems.push(`${where}the old log after compact returned`)
          if (got.some((l, i) => l !== oldLines[i])) problems.push(`${where}not a prefix of the old log`)
          if (got.length < want.filter((s) => s <= oldLines.length).length)
            problems.push(`${where}holds ${got.length} lines, ${want.length} were acknowledged`)
        }
      }
    }
    expect(problems).toEqual([])
    expect(seen.old).toBeGreaterThan(0)
    expect(seen.compacted).toBeGreaterThan(0)
  }, 120_000)
})
