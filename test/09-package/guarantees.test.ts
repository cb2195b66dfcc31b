/**
 * docs/guarantees.md and scripts/guarantees/mutants.mjs name the same guarantees, tests and
 * mutants (`npm run test:guarantees` then proves each mutant is killed; this only checks the
 * two agree, in a second, so that neither is changed without the other).
 */
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { ROOT_DIR } from '../helpers/index.js'

describe('docs/guarantees.md', () => {
  it('names, for every guarantee of the list, its test and its mutant, and nothing else', () => {
    const r = spawnSync(process.execPath, [join(ROOT_DIR, 'scripts', 'guarantees', 'check.mjs'), '--doc'], {
      encoding: 'utf8',
    })
    expect(r.stdout + r.stderr).toMatch(/docs\/guarantees.md and the list agree/)
    expect(r.status, r.stdout).toBe(0)
  })

  it("docs/mutation.md's scores and mutants not killed are those of Stryker's last results (test/mutation/)", () => {
    const r = spawnSync(process.execPath, [join(ROOT_DIR, 'scripts', 'mutation', 'report.mjs'), '--check'], {
      encoding: 'utf8',
    })
    expect(r.stdout + r.stderr).toMatch(/docs\/mutation.md and test\/mutation\/\*.json agree/)
    expect(r.status, r.stderr).toBe(0)
  })
})
