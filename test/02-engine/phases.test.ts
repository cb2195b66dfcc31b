/**
 * `npm run bench`'s per-phase breakdown of a serial append (src/engine/phases.ts): the caller's
 * thread and the owner stamp each moment, in a worker or in the same thread, and every step of
 * the breakdown is measured. Behaviour only: which steps are there, never how long they take.
 */
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { PHASES, phaseStamps } from '../../dist/src/engine/phases.js'
import { ROOT_DIR, tempDir } from '../helpers/index.js'

function runPhases(name: string) {
  const r = spawnSync(
    process.execPath,
    [join(ROOT_DIR, 'dist', 'bench', 'cases.js'), name, tempDir(), '0.3'],
    {
      encoding: 'utf8',
    },
  )
  expect(r.status, r.stderr).toBe(0)
  return JSON.parse(r.stdout.trim().split('\n').pop() as string) as {
    phases: Record<string, number>
    samples: number
  }
}

describe('per-phase breakdown of a serial append', () => {
  it.each([['noa-phases'], ['noa-phases-inthread']])(
    '%s stamps every moment of an append in order, from the call to the resumed await',
    (name) => {
      const r = runPhases(name)
      expect(r.samples).toBeGreaterThan(10)
      expect(Object.keys(r.phases).sort()).toEqual(['total', ...PHASES.slice(1)].sort())
      for (const [step, us] of Object.entries(r.phases)) {
        expect(Number.isFinite(us), step).toBe(true)
        expect(us, step).toBeGreaterThanOrEqual(0)
      }
    },
  )

  it('is off unless NOA_PHASES=1: no shared stamps are made', () => {
    expect(process.env.NOA_PHASES).toBeUndefined()
    expect(phaseStamps()).toBeNull()
  })
})
