#!/usr/bin/env node
/**
 * `npm run test:mutation [slug…] [--force]`: one Stryker run (stryker.config.mjs) per module of
 * scripts/mutation/modules.mjs (all, or those named), each against its own tests, with
 * scripts/mutation/hook.cjs preloaded into every process and thread (an absolute path: the
 * tests start processes in other folders). Incremental: each module's results are kept in
 * test/mutation/<slug>.json (committed), so a rerun tests only the mutants whose code or tests
 * changed. Then the score of each module, and every mutant that survived, from the JSON reports
 * (reports/mutation/<slug>.json). Exits 1 when a Stryker run fails.
 */
import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { MODULES } from './modules.mjs'

const hook = fileURLToPath(new URL('./hook.cjs', import.meta.url))
const flags = process.argv.slice(2).filter((a) => a.startsWith('--')) // passed to Stryker (--force: no incremental reuse)
const wanted = process.argv.slice(2).filter((a) => !a.startsWith('--'))
const unknown = wanted.filter((w) => !MODULES.some((m) => m.slug === w))
if (unknown.length > 0) {
  console.error(`unknown module ${unknown.join(', ')}; the modules: ${MODULES.map((m) => m.slug).join(', ')}`)
  process.exit(2)
}
const chosen = wanted.length > 0 ? MODULES.filter((m) => wanted.includes(m.slug)) : MODULES

const minutes = (ms) => `${(ms / 60000).toFixed(1)} min`
const t0 = performance.now()
const rows = []
let failed = false
for (const m of chosen) {
  const started = performance.now()
  console.log(`\n== ${m.name}`)
  const r = spawnSync(
    process.execPath,
    ['node_modules/@stryker-mutator/core/bin/stryker.js', 'run', ...flags],
    {
      stdio: 'inherit',
      env: {
        ...process.env,
        NOA_MUTATION_MODULE: m.slug,
        NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --require=${hook}`.trim(),
      },
    },
  )
  if (r.status !== 0) failed = true
  rows.push({ m, ms: performance.now() - started, status: r.status })
}

console.log('\n== mutation scores (killed + timed out) / (killed + timed out + survived + no coverage)')
const survivors = []
for (const { m, ms, status } of rows) {
  const file = `reports/mutation/${m.slug}.json`
  if (status !== 0 || !existsSync(file)) {
    console.log(`${m.slug}: the Stryker run failed (exit ${status}), ${minutes(ms)}`)
    continue
  }
  const count = {}
  for (const [path, f] of Object.entries(JSON.parse(readFileSync(file, 'utf8')).files)) {
    for (const x of f.mutants) {
      count[x.status] = (count[x.status] ?? 0) + 1
      if (x.status === 'Survived' || x.status === 'NoCoverage') {
        survivors.push(
          `${m.slug} ${path}:${x.location.start.line}:${x.location.start.column} ${x.status} ${x.mutatorName}: ${JSON.stringify(x.replacement ?? '')}`,
        )
      }
    }
  }
  const n = (s) => count[s] ?? 0
  const detected = n('Killed') + n('Timeout')
  const undetected = n('Survived') + n('NoCoverage')
  const score = detected + undetected === 0 ? 100 : (100 * detected) / (detected + undetected)
  console.log(
    `${m.slug}: ${score.toFixed(1)}% (killed ${n('Killed')}, timed out ${n('Timeout')}, survived ${n('Survived')}, no coverage ${n('NoCoverage')}; not compiling ${n('CompileError')}, runtime errors ${n('RuntimeError')}), ${minutes(ms)}`,
  )
}
if (survivors.length > 0) console.log(`\n== survivors\n${survivors.join('\n')}`)
console.log(`\ntest:mutation: ${minutes(performance.now() - t0)} in all`)
process.exitCode = failed ? 1 : 0
