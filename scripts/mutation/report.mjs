#!/usr/bin/env node
/**
 * The scores and the surviving mutants of docs/mutation.md, from Stryker's incremental results
 * (test/mutation/<slug>.json, committed: the last `npm run test:mutation` of each module).
 *
 *   node scripts/mutation/report.mjs              (prints them)
 *   node scripts/mutation/report.mjs --write-doc  (writes them between the doc's markers)
 *   node scripts/mutation/report.mjs --check      (exits 1 when the doc is not what it would write)
 *
 * Score: (killed + timed out) / (killed + timed out + survived + no coverage), as Stryker counts
 * it; mutants that do not compile (the TypeScript checker) and ignored ones are not in it.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { MODULES } from './modules.mjs'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const DOC = `${ROOT}docs/mutation.md`
const START = '<!-- mutation:start (node scripts/mutation/report.mjs --write-doc) -->'
const END = '<!-- mutation:end -->'

const cell = (s) => s.replace(/\|/g, '\\|').replace(/\s+/g, ' ').trim()
const short = (s, n = 70) => (s.length > n ? `${s.slice(0, n - 1)}…` : s)

function report() {
  const scores = [
    '| module | killed | timed out | survived | no coverage | not compiling | score |',
    '|---|---:|---:|---:|---:|---:|---:|',
  ]
  const survivors = []
  for (const m of MODULES) {
    const file = `${ROOT}test/mutation/${m.slug}.json`
    if (!existsSync(file)) {
      scores.push(`| \`${m.slug}\` | not run yet | | | | | |`)
      continue
    }
    const count = { Killed: 0, Timeout: 0, Survived: 0, NoCoverage: 0, CompileError: 0 }
    const left = []
    for (const [path, f] of Object.entries(JSON.parse(readFileSync(file, 'utf8')).files)) {
      const lines = f.source.split('\n')
      for (const x of f.mutants) {
        count[x.status] = (count[x.status] ?? 0) + 1
        if (x.status !== 'Survived' && x.status !== 'NoCoverage') continue
        const at = x.location.start
        const code = (lines[at.line - 1] ?? '').trim()
        left.push({
          where: `${path}:${at.line}`,
          line: at.line,
          path,
          text: `| \`${path}:${at.line}\` | ${x.status === 'NoCoverage' ? 'no test reaches it' : 'survived'} | ${x.mutatorName} | \`${cell(short(code))}\` | \`${cell(short(x.replacement ?? '', 50))}\` |`,
        })
      }
    }
    const caught = count.Killed + count.Timeout
    const all = caught + count.Survived + count.NoCoverage
    const score = all === 0 ? '–' : `${((100 * caught) / all).toFixed(1)}%`
    scores.push(
      `| \`${m.slug}\`: ${m.name} | ${count.Killed} | ${count.Timeout} | ${count.Survived} | ${count.NoCoverage} | ${count.CompileError} | ${score} |`,
    )
    if (left.length === 0) continue
    left.sort((a, b) => a.path.localeCompare(b.path) || a.line - b.line)
    survivors.push(
      '',
      `### \`${m.slug}\` (${left.length})`,
      '',
      '| where | | mutator | the line | replaced by |',
      '|---|---|---|---|---|',
      ...left.map((l) => l.text),
    )
  }
  return [
    START,
    '',
    '## Scores',
    '',
    ...scores,
    '',
    '## Mutants not killed',
    '',
    'Each is either a test still to write or an equivalent mutant (one no behaviour can tell',
    'apart); [Judged so far](#judged-so-far) has the ones looked at.',
    ...survivors,
    '',
    END,
  ].join('\n')
}

const doc = readFileSync(DOC, 'utf8')
const a = doc.indexOf(START)
const b = doc.indexOf(END)
if (a < 0 || b < 0) throw new Error(`docs/mutation.md has no ${START} … ${END} markers`)
const written = doc.slice(0, a) + report() + doc.slice(b + END.length)
if (process.argv.includes('--write-doc')) writeFileSync(DOC, written)
else if (process.argv.includes('--check')) {
  if (written !== doc) {
    console.error(
      'docs/mutation.md is not what test/mutation/*.json say: node scripts/mutation/report.mjs --write-doc',
    )
    process.exit(1)
  }
  console.log('docs/mutation.md and test/mutation/*.json agree')
} else console.log(report())
