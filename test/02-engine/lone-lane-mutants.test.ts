/**
 * The lone lane's ordering rules, each broken in a copy of dist/ (mutantDist), and the workload
 * that shows it: spells of one awaited append at a time (the caller's thread) alternating with
 * bursts (the workers), so that workspaces move between owners dozens of times. Unbroken, every
 * append is acknowledged and every log holds exactly what was acknowledged, in order; each
 * mutant makes appends fail or logs differ.
 */
import { spawnSync } from 'node:child_process'
import { rmSync } from 'node:fs'
import { dirname } from 'node:path'
import { describe, expect, it } from 'vitest'
import { DIST, tempDir } from '../helpers/index.js'
import { type Edit, mutantDist, useThisAddon } from '../helpers/mutant-dist.js'

interface Outcome {
  acks: number
  errors: string[]
  /** Acknowledged entries missing from their log or at another seq, and entries never acknowledged. */
  wrong: string[]
  moves: number
}

const WORKLOAD = `
const [dist, root] = process.argv.slice(1)
const { AgentLog } = await import(dist + '/src/index.js')
const { readEntries } = await import(dist + '/src/engine/index.js')
const log = await AgentLog.open({ root, workers: 2, laneQuietMs: 5 })
const names = ['m0', 'm1', 'm2', 'm3']
const blob = 'ab'.repeat(32)
const acked = new Map(names.map((n) => [n, new Map()]))
const errors = []
let n = 0
const append = (ws) => {
  const path = 'p' + n++
  return log.append(ws, { op: 'write', path, blob }).then(
    (a) => acked.get(ws).set(a.seq, path),
    (e) => errors.push(ws + ' ' + path + ': ' + (e.code ?? '') + ' ' + e.message),
  )
}
for (let cycle = 0; cycle < 12; cycle++) {
  await new Promise((r) => setTimeout(r, 10))
  // A burst that starts new workspaces while the lane is the caller's thread's, two appends each.
  const fresh = [0, 1, 2].map((k) => 'f' + cycle + 'x' + k)
  for (const ws of fresh) {
    names.push(ws)
    acked.set(ws, new Map())
  }
  await Promise.all([...fresh, ...fresh].map((ws) => append(ws)))
  await new Promise((r) => setTimeout(r, 10))
  for (let i = 0; i < 4; i++) await append(names[cycle % 4])
  await Promise.all(Array.from({ length: 12 }, (_, s) => append(names[(cycle + s) % 4])))
}
const moves = log.laneStatus().moves
await log.close().catch((e) => errors.push('close: ' + e.message))
const wrong = []
for (const ws of names) {
  const seen = acked.get(ws)
  let seq = 0
  try {
    for await (const e of readEntries(root + '/agent-logs/' + ws + '.log')) {
      seq++
      if (e.seq !== seq) wrong.push(ws + ': seq ' + e.seq + ' at line ' + seq)
      if (seen.get(e.seq) !== e.path) wrong.push(ws + ' seq ' + e.seq + ': ' + e.path + ', acknowledged as ' + seen.get(e.seq))
    }
  } catch (e) {
    wrong.push(ws + ': ' + e.message)
  }
  if (seq !== seen.size) wrong.push(ws + ': ' + seq + ' lines, ' + seen.size + ' acknowledged')
}
process.stdout.write(JSON.stringify({ acks: n - errors.length, errors, wrong, moves }))
process.exit(0)
`

function run(dist: string): Outcome {
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', WORKLOAD, dist, tempDir()], {
    encoding: 'utf8',
    timeout: 15_000, // a workload that hangs (appends never settle) is caught too
  })
  const last = r.stdout.trim().split('\n').at(-1) ?? ''
  if (!last.startsWith('{'))
    return { acks: 0, errors: [`exit ${r.status} ${r.signal}: ${r.stderr}`], wrong: [], moves: 0 }
  return JSON.parse(last) as Outcome
}

const MUTANTS: Array<{ name: string; edits: Edit[] }> = [
  {
    name: 'a move routes the workspace to its new owner before the old one released it',
    edits: [
      {
        file: 'engine/agent-log-owners.js',
        from: 'this.moving.set(workspace, moved);',
        to: 'this.route.set(workspace, to);',
      },
    ],
  },
  {
    name: 'an append made while its workspace moves does not wait for the move',
    edits: [
      {
        file: 'engine/agent-log-outbox.js',
        from: 'if (moving !== undefined)\n                return moving.then(() => this.submit(',
        to: 'if (false)\n                return moving.then(() => this.submit(',
      },
      {
        file: 'engine/agent-log-outbox.js',
        from: 'if (moving !== undefined) {\n                moving.then(() => this.enqueueWaited(',
        to: 'if (false) {\n                moving.then(() => this.enqueueWaited(',
      },
    ],
  },
  {
    name: "the first appends of a burst stay in the caller's thread's outbox while their workspace goes to a worker",
    edits: [{ file: 'engine/agent-log-owners.js', from: 'this.retarget(workspace, from, to);', to: ';' }],
  },
]

describe('the lone lane: its ordering rules, each broken', () => {
  useThisAddon()

  it('unbroken: workspaces move dozens of times, every append acknowledged, every log exactly what was', () => {
    const got = run(dirname(DIST))
    expect(got.errors).toEqual([])
    expect(got.wrong).toEqual([])
    expect(got.acks).toBe(12 * 22)
    expect(got.moves).toBeGreaterThan(12)
  }, 60_000)

  for (const m of MUTANTS) {
    it(`catches: ${m.name}`, () => {
      const { dist, dir } = mutantDist(m.name, m.edits)
      try {
        const got = run(dist)
        expect(got.errors.length + got.wrong.length, JSON.stringify(got).slice(0, 500)).toBeGreaterThan(0)
      } finally {
        rmSync(dir, { recursive: true, force: true })
      }
    }, 60_000)
  }
})
