/**
 * `npm start`: every layer of noa on a temporary root, in about 10 seconds, through the public
 * API alone (what `noa`, `noa/transcript`, `noa/memory` and `noa/context` give):
 * 1. agents append to their own workspaces at once, each awaiting every ack, with live figures;
 *    then every log is reopened (recovery) and verified in full;
 * 2. a snapshot, a fork of it, edits on both sides and a merge with one reported conflict;
 * 3. a session transcript appended durably, resumed, and continued where it left off;
 * 4. memory notes saved and recalled;
 * 5. a context compression of part of that transcript, with its archive.
 * It ends with a summary table and where the files are (removed unless --keep). Ctrl-C (SIGINT)
 * or SIGTERM stops it at the next step: the logs are closed, the root removed unless --keep, and
 * it says so; a second signal ends it at once.
 *
 *   node dist/src/demo.js [--agents 8] [--seconds 6] [--keep]
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { parseArgs } from 'node:util'
import { ContextSession, formatTokens } from './context/index.js'
import {
  loadTranscript,
  type Message,
  messages,
  resume,
  TranscriptWriter,
  transcriptPath,
} from './entries/transcript.js'
import { AgentLog, type EntryInput, ObjectStore, SnapshotEngine } from './index.js'
import { MemoryStore } from './memory/index.js'

interface Agent {
  workspace: string
  files: string[]
  n: number
}

interface Options {
  agents: number
  seconds: number
  keep: boolean
}

interface Row {
  layer: string
  did: string
  figure: string
  ms: number
}

const out = process.stdout
const live = Boolean(process.stderr.isTTY)
const fmt = (n: number) => Math.round(n).toLocaleString('en-US')

function say(line = ''): void {
  out.write(`${line}\n`)
}

/** The first SIGINT or SIGTERM received: the demo stops at its next step. */
let interrupted: NodeJS.Signals | null = null

class Interrupted extends Error {}

/** Where a phase may stop: between its steps, never inside an append. */
function step(): void {
  if (interrupted) throw new Interrupted(interrupted)
}

/** Writes, deletes and renames of the agent's own files (never of a path it does not have). */
function nextEntry(agent: Agent, blobs: readonly string[]): EntryInput {
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
  return { op: 'write', path, blob: blobs[Math.floor(Math.random() * blobs.length)] as string }
}

function quantile(sorted: Float64Array, q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))] ?? 0
}

async function timed<T>(fn: () => Promise<T>): Promise<[T, number]> {
  step()
  const t = performance.now()
  const v = await fn()
  step()
  return [v, performance.now() - t]
}

/** 1. Agents append concurrently; live figures on a terminal. */
async function appendPhase(root: string, o: Options, blobs: readonly string[]) {
  say(`1. log: ${o.agents} agents append to their own workspaces for ${o.seconds} s, each awaiting every ack`)
  const log = await AgentLog.open({ root })
  const latencies: number[] = []
  let done = 0
  let stop = false
  const started = performance.now()
  let window = { at: started, done: 0 }
  const ticker = setInterval(() => {
    const now = performance.now()
    const rate = ((done - window.done) / (now - window.at)) * 1000
    window = { at: now, done }
    const recent = Float64Array.from(latencies.slice(-5000)).sort()
    process.stderr.write(
      `\r\x1b[K   ${((now - started) / 1000).toFixed(1)} s  ${fmt(done)} entries durable  ${fmt(rate)} entries/s  p99 ${quantile(recent, 0.99).toFixed(2)} ms`,
    )
  }, 250)
  if (!live) clearInterval(ticker)
  const agents: Agent[] = Array.from({ length: o.agents }, (_, i) => ({
    workspace: `agent-${String(i + 1).padStart(3, '0')}`,
    files: [],
    n: 0,
  }))
  const timer = setTimeout(() => {
    stop = true
  }, o.seconds * 1000)
  await Promise.all(
    agents.map(async (agent) => {
      while (!stop && !interrupted) {
        const t = performance.now()
        await log.append(agent.workspace, nextEntry(agent, blobs))
        latencies.push(performance.now() - t)
        done++
      }
    }),
  )
  clearTimeout(timer)
  clearInterval(ticker)
  const elapsed = (performance.now() - started) / 1000
  if (live) process.stderr.write('\r\x1b[K')
  await log.close()
  const sorted = Float64Array.from(latencies).sort()
  const p50 = quantile(sorted, 0.5)
  const p99 = quantile(sorted, 0.99)
  say(
    `   ${fmt(done)} entries durable in ${elapsed.toFixed(1)} s: ${fmt(done / elapsed)} entries/s, latency p50 ${p50.toFixed(2)} ms, p99 ${p99.toFixed(2)} ms`,
  )
  return { agents, done, elapsed, p99 }
}

/** Reopening recovers each log from its tail; verify then reads every line. */
async function recoverPhase(log: AgentLog, agents: readonly Agent[], expected: number) {
  let entries = 0
  let bytes = 0
  let ok = true
  for (const agent of agents) {
    await log.recover(agent.workspace)
    const report = await log.verify(agent.workspace)
    ok &&= report.ok
    entries += report.entries
    bytes += report.bytes
  }
  ok &&= entries === expected
  say(
    `   reopened and verified every log: ${ok ? 'ok' : 'FAILED'}, ${fmt(entries)} entries in ${agents.length} logs, ${(bytes / Math.max(1, entries)).toFixed(1)} bytes per entry`,
  )
  return { ok, entries }
}

/** 2. Snapshot, fork, edits on both sides, merge with one conflict. */
async function storePhase(log: AgentLog, objects: ObjectStore, main: string) {
  say(`2. store: snapshot ${main}, fork it, change README.md on both sides, merge`)
  const engine = new SnapshotEngine({ log })
  await log.append(main, { op: 'write', path: 'README.md', blob: await objects.putBlob('# demo\n') })
  const s = await engine.snapshot(main, { message: 'after the agents ran' })
  const id = s.snapshotId as string // there are new entries: a snapshot was written
  const tree = await engine.tree(id)
  say(`   snapshot ${id.slice(0, 16)}…: ${fmt(tree.size)} files, ${fmt(s.entriesReplayed)} entries replayed`)
  await engine.fork('feature', id, { message: 'try a feature' })
  await log.append(main, { op: 'write', path: 'README.md', blob: await objects.putBlob('# demo\n\nmain\n') })
  const featureReadme = await objects.putBlob('# demo\n\nfeature\n')
  await log.appendMany('feature', [
    { op: 'write', path: 'README.md', blob: featureReadme },
    { op: 'write', path: 'docs/feature.md', blob: await objects.putBlob('A new page.\n') },
  ])
  const m = await engine.merge(main, ['feature'], { message: 'merge feature' })
  const merged = await engine.tree(m.snapshotId as string)
  for (const c of m.conflicts) {
    say(
      `   conflict: ${c.path} changed by ${c.sides.map((x) => x.workspace).join(' and ')}; ${c.winner} wins (last writer)`,
    )
  }
  const ok =
    m.conflicts.length === 1 &&
    m.conflicts[0]?.winner === 'feature' &&
    merged.get('README.md') === featureReadme &&
    merged.get('docs/feature.md') !== undefined
  say(
    `   merge ${(m.snapshotId as string).slice(0, 16)}…: ${fmt(merged.size)} files, ${m.conflicts.length} conflict reported`,
  )
  return { ok, conflicts: m.conflicts.length, files: merged.size }
}

/** A long-ish turn, so that the compressed range is over the default 5,000-character minimum. */
function code(lines: number): string {
  return Array.from({ length: lines }, (_, i) => `export const value${i} = compute(${i}) // step ${i}`).join(
    '\n',
  )
}

const CONVERSATION: Array<[Message, { input_tokens: number; output_tokens: number }?]> = [
  [{ role: 'user', content: [{ type: 'text', text: 'Tidy src/app.ts: it has grown by hand.' }] }],
  [
    {
      role: 'assistant',
      content: [
        { type: 'text', text: 'Reading the file first.' },
        { type: 'tool_use', id: 'toolu_read_1', name: 'Read', input: '{"path":"src/app.ts"}' },
      ],
    },
    { input_tokens: 812, output_tokens: 40 },
  ],
  [
    {
      role: 'user',
      content: [
        {
          type: 'tool_result',
          tool_use_id: 'toolu_read_1',
          content: [{ type: 'text', text: code(80) }],
          is_error: false,
        },
      ],
    },
  ],
  [
    {
      role: 'assistant',
      content: [
        { type: 'text', text: `Here is the tidied file:\n\n${code(40)}\n\nEvery value is computed once.` },
      ],
    },
    { input_tokens: 3120, output_tokens: 900 },
  ],
  [{ role: 'user', content: [{ type: 'text', text: 'Good. Now add a test for value3.' }] }],
  [
    { role: 'assistant', content: [{ type: 'text', text: 'Added test/app.test.ts checking value3.' }] },
    { input_tokens: 4200, output_tokens: 120 },
  ],
]

/** 3. A transcript appended durably (through the log's owners), resumed, and continued. */
async function transcriptPhase(log: AgentLog, dir: string) {
  say('3. transcript: a session recorded durably, resumed, and continued after its last record')
  const sessionId = 'demo-session'
  const w = new TranscriptWriter({ dir, sessionId, log })
  for (const [message, usage] of CONVERSATION) await w.recordMessage(message, usage)
  await w.close()
  const r = await resume(dir, sessionId)
  const next = new TranscriptWriter({ dir, sessionId, log, parentUuid: r.parentUuid })
  const added = await next.recordMessage({
    role: 'user',
    content: [{ type: 'text', text: 'Continue, please.' }],
  })
  await next.close()
  const ok = r.messages.length === CONVERSATION.length && added.parent_uuid === r.parentUuid
  say(
    `   ${CONVERSATION.length} messages written, resumed ${r.messages.length} (${fmt(Number(r.usage.input_tokens))} input tokens), the next record chains after ${r.parentUuid?.slice(0, 8)}…`,
  )
  return { ok, sessionId, records: CONVERSATION.length + 1 }
}

/** 4. Memory notes saved, then recalled by relevance. */
function memoryPhase(dir: string) {
  say('4. memory: three notes saved, then recalled for a question')
  const store = new MemoryStore(dir)
  store.save({
    name: 'Deploy steps',
    description: 'how we ship a release',
    type: 'project',
    content: 'Run `make deploy`, then tag the release.',
  })
  store.save({
    name: 'Code style',
    description: 'formatting rules of this repository',
    type: 'feedback',
    content: 'Two spaces, no semicolons.',
  })
  store.save({
    name: 'On call',
    description: 'who to page at night',
    type: 'reference',
    content: 'The rota.',
  })
  const query = 'how do we ship a release'
  const hits = store.recall(query, 3)
  const top = hits[0]
  say(`   recall "${query}": ${hits.map((h) => `${h.note.name} (${h.score.toFixed(2)})`).join(', ')}`)
  return { ok: top?.note.name === 'Deploy steps', notes: store.scan().length, top }
}

/** 5. Part of the transcript compressed into a tier-1 block, its raw content archived. */
async function contextPhase(transcripts: string, baseDir: string, sessionId: string) {
  say('5. context: messages m00002–m00005 of the session compressed into a summary block')
  const t = await loadTranscript(transcriptPath(transcripts, sessionId))
  const { messages: msgs } = messages(t.records)
  const session = ContextSession.open({ baseDir, sessionId })
  const c = session.compress(msgs, [
    {
      startRef: 'm00002',
      endRef: 'm00005',
      summary: 'Read src/app.ts (80 lines) and rewrote it so that every value is computed once.',
      topic: 'tidy src/app.ts',
    },
  ])
  const block = c.result.blocksCreated[0]
  if (block) {
    say(
      `   block ${block.blockId} (tier ${block.tier}): ${formatTokens(c.beforeTokens)} → ${formatTokens(c.afterTokens)} tokens, archive ${relative(baseDir, block.archivePath)}`,
    )
  } else say(`   refused: ${c.result.errors.join('; ')}`)
  const shown = session.view(msgs).length
  return { ok: block !== undefined && c.saved, before: c.beforeTokens, after: c.afterTokens, block, shown }
}

function table(rows: readonly Row[]): string {
  const head = ['layer', 'what it did', 'figure', 'time']
  const cells = rows.map((r) => [r.layer, r.did, r.figure, `${fmt(r.ms)} ms`])
  const widths = head.map((h, i) => Math.max(h.length, ...cells.map((c) => (c[i] as string).length)))
  const line = (c: readonly string[]) =>
    `  ${c.map((x, i) => (i === 3 ? x.padStart(widths[i] as number) : x.padEnd(widths[i] as number))).join('  ')}`.trimEnd()
  return [line(head), ...cells.map(line)].join('\n')
}

export async function demo(o: Options): Promise<boolean> {
  const root = mkdtempSync(join(tmpdir(), 'noa-demo-'))
  const onSignal = (signal: NodeJS.Signals) => {
    if (interrupted) {
      process.stderr.write(`\nnoa demo: ${signal} again: exiting now; ${root} is left behind\n`)
      process.exit(128 + (signal === 'SIGINT' ? 2 : 15))
    }
    interrupted = signal
    process.stderr.write(`${live ? '\r\x1b[K' : ''}noa demo: ${signal}: stopping at the next step\n`)
  }
  process.on('SIGINT', onSignal)
  process.on('SIGTERM', onSignal)
  try {
    return await run(o, root)
  } finally {
    process.removeListener('SIGINT', onSignal)
    process.removeListener('SIGTERM', onSignal)
  }
}

async function run(o: Options, root: string): Promise<boolean> {
  const began = performance.now()
  say(`noa demo: every layer on a temporary root (${root})`)
  const objects = new ObjectStore(root)
  const blobs = await Promise.all(
    Array.from({ length: 32 }, (_, i) => objects.putBlob(`// file version ${i}\n${code(i % 8)}\n`)),
  )
  const rows: Row[] = []
  let ok = true
  try {
    const [a, appendMs] = await timed(() => appendPhase(root, o, blobs))
    rows.push({
      layer: 'log',
      did: `${o.agents} agents appended, each awaiting its ack`,
      figure: `${fmt(a.done)} entries, ${fmt(a.done / a.elapsed)}/s, p99 ${a.p99.toFixed(2)} ms`,
      ms: appendMs,
    })
    const log = await AgentLog.open({ root })
    try {
      const [r, recoverMs] = await timed(() => recoverPhase(log, a.agents, a.done))
      ok &&= r.ok
      rows.push({
        layer: 'recovery',
        did: 'reopened and verified every log',
        figure: `${r.ok ? 'ok' : 'FAILED'}: ${fmt(r.entries)} entries`,
        ms: recoverMs,
      })
      const main = (a.agents[0] as Agent).workspace
      const [s, storeMs] = await timed(() => storePhase(log, objects, main))
      ok &&= s.ok
      rows.push({
        layer: 'store',
        did: 'snapshot, fork, merge',
        figure: `${s.conflicts} conflict reported, ${fmt(s.files)} files merged`,
        ms: storeMs,
      })
      const [t, transcriptMs] = await timed(() => transcriptPhase(log, join(root, 'transcripts')))
      ok &&= t.ok
      rows.push({
        layer: 'transcript',
        did: 'appended durably, resumed, continued',
        figure: `${t.records} records, chain ${t.ok ? 'intact' : 'BROKEN'}`,
        ms: transcriptMs,
      })
      const [m, memoryMs] = await timed(async () => memoryPhase(join(root, 'memory')))
      ok &&= m.ok
      rows.push({
        layer: 'memory',
        did: 'saved and recalled',
        figure: `${m.notes} notes, top hit "${m.top?.note.name ?? 'none'}"`,
        ms: memoryMs,
      })
      const [c, contextMs] = await timed(() =>
        contextPhase(join(root, 'transcripts'), join(root, 'context'), t.sessionId),
      )
      ok &&= c.ok
      rows.push({
        layer: 'context',
        did: 'compressed m00002–m00005',
        figure: `${formatTokens(c.before)} → ${formatTokens(c.after)} tokens, ${c.block ? `block ${c.block.blockId}` : 'no block'}`,
        ms: contextMs,
      })
    } finally {
      await log.close()
    }
  } catch (err) {
    ok = false
    if (!(err instanceof Interrupted)) process.stderr.write(`noa demo: ${(err as Error).stack ?? err}\n`)
  }
  if (interrupted) {
    if (o.keep) process.stderr.write(`noa demo: stopped by ${interrupted}; its files are kept in ${root}\n`)
    else {
      rmSync(root, { recursive: true, force: true })
      process.stderr.write(
        `noa demo: stopped by ${interrupted}; removed its temporary root ${root} (npm start -- --keep keeps it)\n`,
      )
    }
    return false
  }
  say()
  say(
    `summary (${((performance.now() - began) / 1000).toFixed(1)} s${ok ? '' : ', SOMETHING FAILED: see above'})`,
  )
  say(table(rows))
  say()
  if (o.keep) {
    say(`files kept in ${root}:`)
    say('  agent-logs/ (a log per workspace), objects/ (blobs, trees, snapshot records),')
    say('  transcripts/, memory/, context/ (the agent runtime files, in Norma v0.4.3 formats); look with:')
    say(`  noa workspaces --root ${root}`)
    say(`  noa snapshots agent-001 --root ${root}`)
    say(`  noa transcript show ${join(root, 'transcripts', 'demo-session.jsonl')}`)
    say(`  noa memory list --dir ${join(root, 'memory')}`)
    say(`  noa context state ${join(root, 'context')} demo-session`)
  } else {
    rmSync(root, { recursive: true, force: true })
    say(`files were in ${root} (removed; npm start -- --keep keeps them)`)
  }
  return ok
}

const USAGE = `usage: npm start -- [--agents N] [--seconds S] [--keep]

A demo of every layer on a temporary root, in about 10 seconds: agents append to their own
workspaces at once (live figures on a terminal), the logs are recovered and verified, a
snapshot is forked and merged back with one conflict, a transcript is recorded and resumed,
memory notes are saved and recalled, and part of the session is compressed. It ends with a
summary table and where the files are. Ctrl-C (or SIGTERM) stops it at the next step and
removes its temporary root, unless --keep.

options:
  --agents N   concurrent agents, one workspace each (default: 8)
  --seconds S  how long they append (default: 6)
  --keep       keep the temporary root and say what is in it
  -h, --help   print this help and exit
`

function options() {
  try {
    return parseArgs({
      options: {
        agents: { type: 'string', default: '8' },
        seconds: { type: 'string', default: '6' },
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
  if (values) process.stderr.write(`noa demo: --agents must be an integer >= 1 and --seconds > 0\n${USAGE}`)
  process.exitCode = 2
} else if (!(await demo({ agents, seconds, keep: values.keep ?? false }))) {
  // Stopped by a signal: the shell's code for it (130 for SIGINT), as if it had killed the demo.
  process.exitCode = interrupted ? 128 + (interrupted === 'SIGINT' ? 2 : 15) : 1
}
