/**
 * Replicated acks (issue 34): 100 submitters, each awaiting its ack, over 1 workspace and over
 * 100, for a few seconds each, with
 *
 * - local durability (replication off): the goal is to stay within 2× of it;
 * - `replicate: { durability: 'replicated' }` (noa: group-committed messages);
 * - the same with one entry per message (ackTuning), the alternative the group commit beat;
 * - the client's own publish loop: each append awaited, then its line published with js.publish,
 *   Nats-Msg-Id and the expected last subject sequence chained per workspace, the ack awaited
 *   (what a host writes by hand today; the goal is to be ahead of it).
 *
 * Run by bench/replicate.ts (`node dist/bench/replicate.js`, part of `npm run bench`) on an R3
 * stream of a three-server cluster it starts on loopback (and on R1, the single server).
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import { connect } from '@nats-io/transport-node'
import { AgentLog } from '../src/engine/agent-log.js'
import { type EntryInput, encodeBody, formatLine } from '../src/engine/entry.js'
import { ackTuning } from '../src/replicate/acks.js'
import { initStream } from '../src/replicate/stream.js'
import type { BenchRow } from './table.js'

const BLOB = 'ab'.repeat(32)

function entryFor(i: number): EntryInput {
  return { op: 'write', path: `src/agents/module-${i % 997}/component-${i % 31}/file-${i}.ts`, blob: BLOB }
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2
}

type Mode = 'local' | 'replicated' | 'one-per-message' | 'client-loop'

interface Target {
  url: string
  replicas: number
}

let runs = 0

/** 100 submitters over `workspaces` workspaces for `seconds`, in `mode`: entries/s. */
async function rate(
  dir: string,
  t: Target,
  mode: Mode,
  workspaces: number,
  seconds: number,
): Promise<number> {
  const root = mkdtempSync(join(dir, `acks-${mode}-`))
  const tag = `${process.pid}_${runs++}`
  const prefix = `acks${tag}`
  const stream = `ACKS${tag}`
  if (mode !== 'local') await initStream({ nats: t.url, prefix, stream, replicas: t.replicas })
  ackTuning.maxEntriesPerMessage = mode === 'one-per-message' ? 1 : Number.POSITIVE_INFINITY
  const log = await AgentLog.open({
    root,
    workers: 2,
    ...(mode === 'replicated' || mode === 'one-per-message'
      ? { replicate: { nats: t.url, prefix, stream, durability: 'replicated' as const } }
      : {}),
  })
  const nc = mode === 'client-loop' ? await connect({ servers: t.url.split(',') }) : null
  const js = nc ? jetstream(nc) : null
  // Per workspace: the chain of publishes (in seq order) and the last stream sequence.
  const chains = new Map<string, { tail: Promise<void>; last: number }>()
  try {
    let n = 0
    let stop = false
    const timer = setTimeout(() => {
      stop = true
    }, seconds * 1000)
    const started = performance.now()
    await Promise.all(
      Array.from({ length: 100 }, async (_, w) => {
        const ws = `ws-${w % workspaces}`
        for (let i = 0; !stop; i++) {
          const entry = entryFor(i)
          const ack = await log.append(ws, entry)
          if (js) {
            const line = formatLine(ack.seq, encodeBody(entry), ack.ts).slice(0, -1)
            let c = chains.get(ws)
            if (!c) {
              c = { tail: Promise.resolve(), last: 0 }
              chains.set(ws, c)
            }
            const chain = c
            chain.tail = chain.tail.then(async () => {
              const pub = await js.publish(`${prefix}.${ws}`, line, {
                msgID: `${ws}:${ack.seq}`,
                expect: { lastSubjectSequence: chain.last },
              })
              chain.last = pub.seq
            })
            await chain.tail
          }
          n++
        }
      }),
    )
    clearTimeout(timer)
    return (n / (performance.now() - started)) * 1000
  } finally {
    await log.close()
    await nc?.close()
    ackTuning.maxEntriesPerMessage = Number.POSITIVE_INFINITY
    if (mode !== 'local') {
      const c = await connect({ servers: t.url.split(',') })
      await (await jetstreamManager(c)).streams.delete(stream).catch(() => {})
      await c.close()
    }
    rmSync(root, { recursive: true, force: true })
  }
}

/** Rows for one server set (R1: one server; R3: three), `rounds` interleaved rounds, medians. */
export async function acksBench(
  dir: string,
  t: Target,
  options: { rounds: number; seconds: number },
): Promise<BenchRow[]> {
  const modes: Mode[] = ['local', 'replicated', 'one-per-message', 'client-loop']
  const shapes = [
    { label: '1 workspace × 100 submitters', workspaces: 1 },
    { label: '100 workspaces × 1 submitter', workspaces: 100 },
  ]
  const got = new Map<string, number[]>()
  for (let round = 0; round < options.rounds; round++) {
    process.stderr.write(`  replicated acks R${t.replicas}, round ${round + 1}/${options.rounds}\n`)
    for (const s of shapes) {
      for (const m of modes) {
        const key = `${s.workspaces}/${m}`
        const list = got.get(key) ?? []
        list.push(await rate(dir, t, m, s.workspaces, options.seconds))
        got.set(key, list)
      }
    }
  }
  const med = (w: number, m: Mode) => median(got.get(`${w}/${m}`) ?? [0])
  const rows: BenchRow[] = []
  for (const s of shapes) {
    const w = s.workspaces
    const r = `R${t.replicas}`
    rows.push({
      workload: `replicated acks (${r}), ${s.label}`,
      unit: 'entries/s',
      noa: med(w, 'replicated'),
      baseline: med(w, 'local'),
      baselineName: 'same workload, local durability (goal: within 2×)',
      higherIsBetter: true,
    })
    rows.push({
      workload: `replicated acks (${r}), ${s.label}`,
      unit: 'entries/s',
      noa: med(w, 'replicated'),
      baseline: med(w, 'client-loop'),
      baselineName: "append, then the client's js.publish, same headers, ack awaited (goal: ahead)",
      higherIsBetter: true,
    })
    rows.push({
      workload: `replicated acks (${r}), ${s.label}`,
      unit: 'entries/s',
      noa: med(w, 'replicated'),
      baseline: med(w, 'one-per-message'),
      baselineName: 'the same with one entry per message (no group commit)',
      higherIsBetter: true,
    })
  }
  return rows
}
