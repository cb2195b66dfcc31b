/**
 * docs/guarantees.md and scripts/guarantees/mutants.mjs name the same guarantees, tests and
 * mutants (`npm run test:guarantees` then proves each mutant is killed; this only checks the
 * two agree, in a second, so that neither is changed without the other).
 */
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
// @ts-expect-error: a script of ours, plain JavaScript without types
import { MUTANTS } from '../../scripts/guarantees/mutants.mjs'
import { ROOT_DIR } from '../helpers/index.js'

describe('docs/guarantees.md', () => {
  it('names, for every guarantee of the list, its test and its mutant, and nothing else', () => {
    const r = spawnSync(process.execPath, [join(ROOT_DIR, 'scripts', 'guarantees', 'check.mjs'), '--doc'], {
      encoding: 'utf8',
    })
    expect(r.stdout + r.stderr).toMatch(/docs\/guarantees.md and the list agree/)
    expect(r.status, r.stdout).toBe(0)
  })

  it('every mutant edit finds its code exactly once in the build (a moved line would make it a no-op)', () => {
    const list = MUTANTS as { id: string; edits?: { file: string; from: string }[] }[]
    expect(list.length).toBeGreaterThan(100)
    const stale: string[] = []
    for (const m of list)
      for (const e of m.edits ?? []) {
        const text = readFileSync(join(ROOT_DIR, 'dist', 'src', e.file), 'utf8')
        const n = text.split(e.from).length - 1
        if (n !== 1) stale.push(`${m.id} ${e.file}: ${n} matches`)
      }
    expect(stale).toEqual([])
  })

  it("docs/mutation.md's scores and mutants not killed are those of Stryker's last results (test/mutation/)", () => {
    const r = spawnSync(process.execPath, [join(ROOT_DIR, 'scripts', 'mutation', 'report.mjs'), '--check'], {
      encoding: 'utf8',
    })
    expect(r.stdout + r.stderr).toMatch(/docs\/mutation.md and test\/mutation\/\*.json agree/)
    expect(r.status, r.stderr).toBe(0)
  })
})
