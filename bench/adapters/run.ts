/**
 * `npm run bench:adapters`: NoaSaver beside LangGraph's SqliteSaver on a file (WAL), in the same
 * run, on the same disk. Every trial is a fresh process (case.ts); the contenders of a workload
 * are interleaved round by round; figures are medians with min–max, and ratios against noa
 * from the same rounds.
 *
 * Then a long chat's bytes on disk (chat.ts): a 200-turn LangGraph chat through each saver, and
 * through NoaSaver with retention: { keepLast: 10 } and without, gc after (retention.ts).
 *
 *   node dist/bench/adapters/run.js [--quick] [--rounds N] [--seconds S] [--chat-only] [--turns N]
 */

import { spawnSync } from 'node:child_process'
import { cpus, release, tmpdir } from 'node:os'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import type { CaseResult } from '../cases.js'
import { interleave, median, runCase } from '../run.js'
import { requirePeer } from './peer.js'

const CASE = fileURLToPath(new URL('./case.js', import.meta.url))
const CHAT = fileURLToPath(new URL('./chat.js', import.meta.url))
const RETENTION = fileURLToPath(new URL('./retention.js', import.meta.url))
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

/** What chat.ts prints. */
interface ChatResult {
  seconds: number
  bytes: number
  messageBytes: number
  turn20: number
  turnLast: number
  avg11to20: number
  avgLast10: number
}

function spread(xs: number[], digits: number): string {
  const f = (x: number) =>
    x.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })
  return xs.length > 1 ? `${f(median(xs))} (${f(Math.min(...xs))}–${f(Math.max(...xs))})` : f(median(xs))
}

/** The long chat (chat.ts) through each saver: bytes on disk, and how they grow per turn. */
function chatTable(turns: number): string[] {
  process.stderr.write(`a ${turns}-turn LangGraph chat\n`)
  const r: Record<string, ChatResult> = {}
  for (const id of ['noa', 'sqlite']) {
    process.stderr.write(`  ${id}`)
    const x = runCase(`adapters-chat-${id}`, turns, {
      script: CHAT,
      args: [id],
      timeoutMs: 30 * 60_000,
    }) as unknown as ChatResult
    r[id] = x
    process.stderr.write(` (${x.seconds.toFixed(1)} s)\n`)
  }
  const kb = (x: number) => `${(x / 1000).toLocaleString('en-US', { maximumFractionDigits: 1 })} KB`
  const mb = (x: number) => `${(x / 1e6).toFixed(2)} MB`
  const noa = r.noa as ChatResult
  const sqlite = r.sqlite as ChatResult
  const out = [
    `A ${turns}-turn LangGraph chat (StateGraph: a messages channel growing by one ${noa.messageBytes}-byte message a turn, and a counter), one thread:`,
    '',
    `| saver | bytes on disk after ${turns} turns | vs SQLite | turn 20 adds | turn ${turns} adds | turns 11–20, per turn | turns ${turns - 9}–${turns}, per turn | growth ratio |`,
    '|---|---:|---:|---:|---:|---:|---:|---:|',
  ]
  for (const [label, x] of [
    ['NoaSaver (everything under its root)', noa],
    ['SqliteSaver (database after a WAL checkpoint)', sqlite],
  ] as const) {
    const ratio = x.avgLast10 / x.avg11to20
    out.push(
      `| ${label} | ${mb(x.bytes)} | ${(x.bytes / sqlite.bytes).toFixed(3)}× | ${kb(x.turn20)} | ${kb(x.turnLast)} | ${kb(x.avg11to20)} | ${kb(x.avgLast10)} | ${ratio.toFixed(2)}× |`,
    )
  }
  out.push(
    '',
    `Goals (issue 33): noa at most 1/10 of SQLite (${(noa.bytes / sqlite.bytes).toFixed(3)}×), and its turn ${turns} within 1.5× of its turn 20 (per turn, averaged over 10 turns: ${(noa.avgLast10 / noa.avg11to20).toFixed(2)}×).`,
  )
  return out
}

/** The same chat through NoaSaver with and without `retention: { keepLast: 10 }`, gc after (retention.ts). */
function retentionTable(turns: number): string[] {
  process.stderr.write(`the ${turns}-turn chat with retention\n`)
  const r = spawnSync(process.execPath, [RETENTION, '--turns', String(turns)], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  if (r.status !== 0) throw new Error(`retention.js exited ${r.status}`)
  return [
    `The ${turns}-turn chat through NoaSaver, with and without retention: { keepLast: 10 }, each mark followed by gc (grace 0):`,
    '',
    ...r.stdout.trimEnd().split('\n'),
  ]
}

function main(): void {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      rounds: { type: 'string' },
      seconds: { type: 'string' },
      'chat-only': { type: 'boolean', default: false },
      turns: { type: 'string' },
    },
    strict: true,
  })
  const turns = Number(values.turns ?? 200)
  if (!(Number.isSafeInteger(turns) && turns >= 20)) throw new Error('--turns must be an integer >= 20')
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
  const only = values['chat-only']
  const machine = `${cpus().length} × ${cpus()[0]?.model.trim()}, Linux ${release()}, Node ${process.version}, temp files in ${tmpdir()}`
  if (only) lines.push(`Measured ${started.toISOString().slice(0, 10)} on ${machine}.`)
  else {
    lines.push(
      `Measured ${started.toISOString().slice(0, 10)} on ${machine}; ${rounds} interleaved round(s) of ${seconds} s, medians (min–max).`,
      '',
      '| workload | contender | checkpoints/s | vs noa | step p50 ms | vs noa | step p99 ms |',
      '|---|---|---:|---:|---:|---:|---:|',
    )
  }
  for (const w of only ? [] : WORKLOADS) {
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
  if (!only) {
    lines.push(
      '',
      'A step is put + putWrites + getTuple. "vs noa" above 1× means noa is ahead by that factor.',
    )
    for (const id of CONTENDERS) lines.push(`- ${LABEL[id]}: ${how.get(id) ?? '?'}`)
  }
  lines.push('', ...chatTable(turns), '', ...retentionTable(turns))
  lines.push(
    '',
    `Command: npm run bench:adapters${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`,
  )
  console.log(lines.join('\n'))
}

main()
