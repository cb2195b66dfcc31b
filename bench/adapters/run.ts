/**
 * `npm run bench:adapters`: NoaSaver beside LangGraph's SqliteSaver on a file (WAL), in the same
 * run, on the same disk. Every trial is a fresh process (case.ts); the contenders of a workload
 * are interleaved round by round; figures are medians with min–max, and ratios against noa
 * from the same rounds.
 *
 *   node dist/bench/adapters/run.js [--quick] [--rounds N] [--seconds S]
 */
import { cpus, release, tmpdir } from 'node:os'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import type { CaseResult } from '../cases.js'
import { interleave, median, runCase } from '../run.js'
import { requirePeer } from './peer.js'

const CASE = fileURLToPath(new URL('./case.js', import.meta.url))
const CONTENDERS = ['noa', 'noa-workers', 'sqlite', 'sqlite-full']
const LABEL: Record<string, string> = {
  noa: 'NoaSaver',
  'noa-workers': 'NoaSaver, two owner worker threads (workers: 2)',
  sqlite: 'SqliteSaver as shipped',
  'sqlite-full': 'SqliteSaver, synchronous=FULL',
}
const WORKLOADS = [
  { id: 'serial', title: 'one thread, one step at a time' },
  { id: '100threads', title: '100 threads stepping at once' },
]

type Result = CaseResult & { how?: string }

function spread(xs: number[], digits: number): string {
  const f = (x: number) =>
    x.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })
  return xs.length > 1 ? `${f(median(xs))} (${f(Math.min(...xs))}–${f(Math.max(...xs))})` : f(median(xs))
}

function main(): void {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      rounds: { type: 'string' },
      seconds: { type: 'string' },
    },
    strict: true,
  })
  const rounds = Number(values.rounds ?? (values.quick ? 1 : 3))
  const seconds = Number(values.seconds ?? (values.quick ? 1 : 5))
  if (!(rounds >= 1 && seconds > 0)) throw new Error('--rounds and --seconds must be positive')
  try {
    requirePeer.resolve('@langchain/langgraph-checkpoint-sqlite')
  } catch {
    throw new Error(
      'SqliteSaver is not installed: run `npm run bench:adapters`, which installs it into bench/peers/node_modules',
    )
  }
  const started = new Date()
  const lines: string[] = []
  const how = new Map<string, string>()
  lines.push(
    `Measured ${started.toISOString().slice(0, 10)} on ${cpus().length} × ${cpus()[0]?.model.trim()}, Linux ${release()}, Node ${process.version}, temp files in ${tmpdir()}; ${rounds} interleaved round(s) of ${seconds} s, medians (min–max).`,
    '',
    '| workload | contender | checkpoints/s | vs noa | step p50 ms | vs noa | step p99 ms |',
    '|---|---|---:|---:|---:|---:|---:|',
  )
  for (const w of WORKLOADS) {
    process.stderr.write(`${w.title}\n`)
    const results = interleave(CONTENDERS, rounds, seconds, (id) =>
      runCase(`adapters-${w.id}-${id}`, seconds, { script: CASE, args: [w.id, id], settle: true }),
    ) as Map<string, Result[]>
    const noa = results.get('noa') ?? []
    for (const id of CONTENDERS) {
      const rs = results.get(id) ?? []
      const rate = rs.map((r) => r.rate as number)
      const p50 = rs.map((r) => r.p50 as number)
      const p99 = rs.map((r) => r.p99 as number)
      if (rs[0]?.how) how.set(id, rs[0].how)
      // Ratios per round (same round, same disk state), then their median.
      const rateRatio = median(rs.map((r, i) => (noa[i]?.rate as number) / (r.rate as number)))
      const p50Ratio = median(rs.map((r, i) => (r.p50 as number) / (noa[i]?.p50 as number)))
      const vs = (x: number) => (id === 'noa' ? '—' : `${x.toFixed(2)}×`)
      lines.push(
        `| ${w.title} | ${LABEL[id]} | ${spread(rate, 0)} | ${vs(rateRatio)} | ${spread(p50, 3)} | ${vs(p50Ratio)} | ${spread(p99, 3)} |`,
      )
    }
  }
  lines.push('', 'A step is put + putWrites + getTuple. "vs noa" above 1× means noa is ahead by that factor.')
  for (const id of CONTENDERS) lines.push(`- ${LABEL[id]}: ${how.get(id) ?? '?'}`)
  lines.push(
    '',
    `Command: npm run bench:adapters${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`,
  )
  console.log(lines.join('\n'))
}

main()
