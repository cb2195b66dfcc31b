/**
 * `npm start`: the built-in demo. Simulated agents append to their own workspaces in a temporary
 * root for a few seconds, each awaiting every ack (so every entry counted is durable); then the
 * logs are recovered and verified, and the figures printed.
 *
 *   node dist/src/demo.js [--agents 8] [--seconds 3] [--keep]
 */
import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { AgentLog } from './engine/agent-log.js'
import type { EntryInput } from './engine/entry.js'

interface Agent {
  workspace: string
  files: string[]
  n: number
}

function nextEntry(agent: Agent): EntryInput {
  const r = Math.random()
  if (agent.files.length > 4 && r < 0.1) {
    const path = agent.files.splice(Math.floor(Math.random() * agent.files.length), 1)[0] as string
    return { op: 'delete', path }
  }
  if (agent.files.length > 4 && r < 0.2) {
    const i = Math.floor(Math.random() * agent.files.length)
    const from = agent.files[i] as string
    const to = `src/moved/${agent.workspace}-${agent.n++}.ts`
    agent.files[i] = to
    return { op: 'rename', from, to }
  }
  const path = `src/${agent.workspace}/file-${agent.n++ % 50}.ts`
  if (!agent.files.includes(path)) agent.files.push(path)
  return { op: 'write', path, blob: randomBytes(32).toString('hex') }
}

function quantile(sorted: Float64Array, q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))] ?? 0
}

export async function demo(options: { agents: number; seconds: number; keep: boolean }): Promise<void> {
  const root = mkdtempSync(join(tmpdir(), 'noa-demo-'))
  const out = process.stdout
  out.write(`noa demo: ${options.agents} agents, one workspace each, ${options.seconds} s, root ${root}\n`)
  const log = await AgentLog.open({ root })
  const latencies: number[] = []
  let done = 0
  let stop = false
  const started = performance.now()
  const progress = setInterval(() => {
    const s = (performance.now() - started) / 1000
    const line = `  ${s.toFixed(1)} s  ${done} entries durable  ${Math.round(done / s)} entries/s`
    if (process.stderr.isTTY) process.stderr.write(`\r${line}   `)
    else process.stderr.write(`${line}\n`)
  }, 500)
  const agents: Agent[] = Array.from({ length: options.agents }, (_, i) => ({
    workspace: `agent-${String(i + 1).padStart(3, '0')}`,
    files: [],
    n: 0,
  }))
  const timer = setTimeout(() => {
    stop = true
  }, options.seconds * 1000)
  await Promise.all(
    agents.map(async (agent) => {
      while (!stop) {
        const t = performance.now()
        await log.append(agent.workspace, nextEntry(agent))
        latencies.push(performance.now() - t)
        done++
      }
    }),
  )
  clearTimeout(timer)
  clearInterval(progress)
  const elapsed = (performance.now() - started) / 1000
  if (process.stderr.isTTY) process.stderr.write('\n')
  await log.close()

  // Reopen: recovery reads each tail, then a full verify of every log.
  const again = await AgentLog.open({ root })
  let bytes = 0
  let entries = 0
  let ok = true
  for (const agent of agents) {
    await again.recover(agent.workspace)
    const report = await again.verify(agent.workspace)
    ok &&= report.ok
    bytes += report.bytes
    entries += report.entries
  }
  await again.close()

  const sorted = Float64Array.from(latencies).sort()
  out.write(
    [
      `entries durable:  ${done} in ${elapsed.toFixed(2)} s`,
      `throughput:       ${Math.round(done / elapsed)} entries/s (${options.agents} agents, each awaiting its ack)`,
      `latency:          p50 ${quantile(sorted, 0.5).toFixed(3)} ms, p99 ${quantile(sorted, 0.99).toFixed(3)} ms`,
      `bytes per entry:  ${(bytes / Math.max(1, entries)).toFixed(1)}`,
      `recover + verify: ${ok && entries === done ? `ok, ${entries} entries in ${agents.length} logs` : 'FAILED'}`,
      '',
    ].join('\n'),
  )
  if (options.keep) out.write(`kept ${root}\n`)
  else rmSync(root, { recursive: true, force: true })
  if (!ok || entries !== done) process.exitCode = 1
}

const USAGE = `usage: npm start -- [--agents N] [--seconds S] [--keep]

Simulated agents append to their own workspaces in a temporary root, each awaiting every ack;
then the logs are recovered and verified, and the figures printed.

options:
  --agents N   concurrent agents, one workspace each (default: 8)
  --seconds S  how long they append (default: 3)
  --keep       keep the temporary root and print where it is
  -h, --help   print this help and exit
`

function options() {
  try {
    return parseArgs({
      options: {
        agents: { type: 'string', default: '8' },
        seconds: { type: 'string', default: '3' },
        keep: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
      strict: true,
    }).values
  } catch (err) {
    process.stderr.write(`noa demo: ${(err as Error).message}\n${USAGE}`)
    return undefined
  }
}

const values = options()
const agents = Number(values?.agents)
const seconds = Number(values?.seconds)
if (values?.help) {
  process.stdout.write(USAGE)
} else if (!values || !Number.isInteger(agents) || agents < 1 || !(seconds > 0)) {
  if (values) process.stderr.write(USAGE)
  process.exitCode = 2
} else {
  await demo({ agents, seconds, keep: values.keep ?? false })
}
