#!/usr/bin/env node
/**
 * `npm run test:guarantees`: proves that each guarantee of docs/guarantees.md is pinned by its
 * test. For each mutant of scripts/guarantees/mutants.mjs (the guarantee removed from the built
 * code), a copy of the checkout gets that edit in its dist/, and the named test must fail there;
 * the same test must pass on the unmutated build first. Also checks that docs/guarantees.md
 * and the list name the same ids, tests and mutants.
 *
 *   node scripts/guarantees/check.mjs [id…]      (after `npm run build`; all ids by default)
 *   node scripts/guarantees/check.mjs --doc      (only the doc against the list; no test runs)
 *   node scripts/guarantees/check.mjs --write-doc (writes the doc's tables from the list)
 *   node scripts/guarantees/check.mjs --crash    (also the crash explorer's own mutants, ~9 min)
 *
 * A copy, not dist/ itself, so that a mutant never outlives an interrupted run and other runs
 * of the tests on this checkout meanwhile see the real build. The copy has no CLI bundle
 * (dist/src/cli/noa.cjs), so `noa` runs the edited modules, as it does after a bare tsc.
 */
import { spawnSync } from 'node:child_process'
import {
  chmodSync,
  cpSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { CLAIMS, MUTANTS } from './mutants.mjs'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const DOC = join(ROOT, 'docs', 'guarantees.md')
const LINKED = ['node_modules', 'prebuilds', 'native', 'binding.gyp', 'examples', 'bench']
const COPIED = [
  'dist',
  'test',
  'src',
  'scripts',
  'package.json',
  'README.md',
  'docs',
  'vitest.config.ts',
  'tsconfig.json',
]

/** The doc's rows: `| id | … | test | mutant | status |` with the id in backquotes. */
function docRows() {
  const rows = new Map()
  for (const line of readFileSync(DOC, 'utf8').split('\n')) {
    const m = /^\| `([A-Z]+-\d+[a-z]?)` \|/.exec(line)
    if (m) rows.set(m[1], line)
  }
  return rows
}

function checkDoc() {
  const problems = []
  const rows = docRows()
  const ids = new Set()
  for (const m of MUTANTS) {
    if (ids.has(m.id)) problems.push(`${m.id}: listed twice`)
    ids.add(m.id)
    const row = rows.get(m.id)
    if (!row) {
      problems.push(`${m.id}: in scripts/guarantees/mutants.mjs, not in docs/guarantees.md`)
      continue
    }
    if (!row.includes(m.test)) problems.push(`${m.id}: the doc's row does not name the test file ${m.test}`)
    if (m.mutant && !row.includes(m.mutant))
      problems.push(`${m.id}: the doc's row does not name the mutant "${m.mutant}"`)
  }
  for (const id of rows.keys()) {
    if (!ids.has(id)) problems.push(`${id}: in docs/guarantees.md, not in scripts/guarantees/mutants.mjs`)
  }
  return problems
}

function copyCheckout() {
  const dir = mkdtempSync(join(tmpdir(), 'noa-guarantee-'))
  chmodSync(dir, 0o755) // the checks run as another uid load the copy's dist/ (test/helpers/users.ts)
  for (const f of COPIED) cpSync(join(ROOT, f), join(dir, f), { recursive: true })
  for (const f of LINKED) if (existsSync(join(ROOT, f))) symlinkSync(join(ROOT, f), join(dir, f))
  rmSync(join(dir, 'dist', 'src', 'cli', 'noa.cjs'), { force: true })
  rmSync(join(dir, 'dist', 'src', 'cli', 'noa.cjs.cache'), { force: true })
  return dir
}

function applyEdits(dir, m) {
  for (const e of m.edits) {
    const file = join(dir, 'dist', 'src', e.file)
    const text = readFileSync(file, 'utf8')
    const n = text.split(e.from).length - 1
    if (n !== 1)
      throw new Error(`${m.id}: its code is found ${n} times in dist/src/${e.file}, not once: ${e.from}`)
    writeFileSync(file, text.replace(e.from, e.to))
  }
}

/** Runs the named test in `dir`; returns its status from vitest's JSON report. */
function runTest(dir, m) {
  const out = join(mkdtempSync(join(tmpdir(), 'noa-guarantee-report-')), 'vitest-report.json')
  const r = spawnSync(
    process.execPath,
    [
      join(dir, 'node_modules', 'vitest', 'vitest.mjs'),
      'run',
      m.test,
      '--testNamePattern',
      m.name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'),
      '--reporter=json',
      `--outputFile=${out}`,
    ],
    { cwd: dir, encoding: 'utf8', env: { ...process.env, ...(m.env ?? {}) }, maxBuffer: 1 << 28 },
  )
  if (!existsSync(out)) return { status: 'error', detail: `${r.stdout}\n${r.stderr}`.slice(-2000) }
  const report = JSON.parse(readFileSync(out, 'utf8'))
  const tests = report.testResults.flatMap((f) => f.assertionResults)
  const ran = tests.filter((t) => t.status === 'passed' || t.status === 'failed')
  if (ran.length === 0) return { status: 'none', detail: `no test matched ${m.name} in ${m.test}` }
  const failed = ran.filter((t) => t.status === 'failed')
  return {
    status: failed.length > 0 ? 'failed' : 'passed',
    detail: failed.map((t) => `${t.fullName}: ${(t.failureMessages[0] ?? '').split('\n')[0]}`).join('\n'),
    tests: ran.map((t) => t.fullName),
  }
}

const AREAS = [
  ['D', 'Durability and bounds of the engine'],
  ['J', 'Journal replay after a crash (the crash-state explorer)'],
  ['T', 'Journal trust: a planted journal never writes'],
  ['H', 'A root others can write into'],
  ['G', 'Garbage collection'],
  ['R', 'Replication'],
  ['A', 'Framework adapters'],
  ['F', 'Formats and compatibility'],
  ['V', 'The daemon (`noa serve`)'],
]
const START = '<!-- guarantees:start (node scripts/guarantees/check.mjs --write-doc) -->'
const END = '<!-- guarantees:end -->'

function cell(text) {
  return text.replaceAll('|', '\\|').replaceAll('\n', ' ')
}

function tables() {
  const out = []
  for (const [prefix, title] of AREAS) {
    const rows = MUTANTS.filter((m) => m.id.split('-')[0] === prefix)
    if (rows.length === 0) continue
    out.push(`### ${title}`, '', '| id | guarantee | test | mutant | |', '|---|---|---|---|---|')
    for (const m of rows) {
      const status = m.pending ? 'mutant pending' : m.self ? 'killed (the test applies it)' : 'killed'
      const mutant = m.pending ? `none yet: ${m.pending}` : m.mutant
      out.push(
        `| \`${m.id}\` | ${cell(CLAIMS[m.id] ?? '')} | \`${m.test}\` › ${cell(m.name)} | ${cell(mutant)} | ${status} |`,
      )
    }
    out.push('')
  }
  return out.join('\n')
}

function writeDoc() {
  const text = readFileSync(DOC, 'utf8')
  const a = text.indexOf(START)
  const b = text.indexOf(END)
  if (a < 0 || b < a) throw new Error(`${DOC} has no ${START} … ${END} block`)
  writeFileSync(DOC, `${text.slice(0, a + START.length)}\n\n${tables()}\n${text.slice(b)}`)
}

const args = process.argv.slice(2)
if (args.includes('--write-doc')) writeDoc()
const problems = checkDoc()
for (const m of MUTANTS) if (!CLAIMS[m.id]) problems.push(`${m.id}: no claim in CLAIMS`)
if (args.includes('--doc') || args.includes('--write-doc')) {
  for (const p of problems) console.log(p)
  console.log(problems.length === 0 ? `docs/guarantees.md and the list agree (${MUTANTS.length} ids)` : '')
  process.exitCode = problems.length === 0 ? 0 : 1
} else {
  if (!existsSync(join(ROOT, 'dist', 'src', 'index.js'))) throw new Error('no build: run npm run build first')
  const ids = args.filter((a) => !a.startsWith('--'))
  const chosen = ids.length > 0 ? MUTANTS.filter((m) => ids.includes(m.id)) : MUTANTS
  const results = []
  const baselines = new Map()
  const t0 = performance.now()
  const withCrash = args.includes('--crash')
  for (const m of chosen) {
    if (m.pending) {
      results.push({ id: m.id, ok: true, line: `${m.id}: mutant pending (${m.pending}); test ${m.test}` })
      continue
    }
    if (m.self) {
      if (!withCrash) {
        results.push({
          id: m.id,
          ok: true,
          line: `${m.id}: its test applies "${m.mutant}" itself: run with --crash`,
        })
        continue
      }
      const started = performance.now()
      const r = runTest(ROOT, m)
      const ok = r.status === 'passed'
      const line = `${m.id}: ${ok ? 'killed' : `NOT KILLED (${r.status})`} "${m.mutant}" (the test applies it) ${ok ? '' : r.detail} [${((performance.now() - started) / 1000).toFixed(0)} s]`
      console.log(line)
      results.push({ id: m.id, ok, line })
      continue
    }
    const started = performance.now()
    const base = copyCheckout()
    let line
    let ok = false
    try {
      const key = `${m.test}#${m.name}#${JSON.stringify(m.env ?? {})}`
      const before = baselines.get(key) ?? runTest(base, m)
      baselines.set(key, before)
      if (before.status !== 'passed') {
        line = `${m.id}: the test does not pass on the real build (${before.status}): ${before.detail}`
      } else {
        applyEdits(base, m)
        const after = runTest(base, m)
        ok = after.status === 'failed'
        line = ok
          ? `${m.id}: killed "${m.mutant}": ${after.detail.split('\n')[0]}`
          : `${m.id}: SURVIVED "${m.mutant}" (${after.status}) ${after.detail}`
      }
    } catch (err) {
      line = `${m.id}: ${err.message}`
    } finally {
      rmSync(base, { recursive: true, force: true })
    }
    line += ` [${((performance.now() - started) / 1000).toFixed(0)} s]`
    console.log(line)
    results.push({ id: m.id, ok, line })
  }
  for (const p of problems) console.log(p)
  const bad = results.filter((r) => !r.ok)
  console.log(
    `${chosen.length - bad.length}/${chosen.length} guarantees pinned (each mutant killed by its test), ${problems.length} doc problems, ${((performance.now() - t0) / 60000).toFixed(1)} min`,
  )
  process.exitCode = bad.length === 0 && problems.length === 0 ? 0 : 1
}
