/**
 * Bounded growth with a retention policy (issue 33): a 200-turn LangGraph chat (a `messages`
 * channel that grows by one ~1.5 KB message a turn, and a turn counter) through NoaSaver, with
 * `retention: { keepLast: 10 }` and without, then `noa gc --yes --grace 0` (the saver closed
 * first: gc leaves a live writer's object log alone). Bytes on disk: every regular file under
 * the root, by kind (noa du). Measured after 50, 100 and 200 turns, each in a fresh root.
 *
 *   npm run build && node dist/bench/adapters/retention.js [--turns N]
 *
 * Before chunked objects: each checkpoint stores its `messages` value whole.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { Annotation, StateGraph } from '@langchain/langgraph'
import type { Retention } from '../../src/adapters/retention.js'
import { NoaSaver } from '../../src/langgraph/index.js'
import { diskUsage } from '../../src/store/du.js'
import { SnapshotEngine } from '../../src/store/snapshot.js'

const State = Annotation.Root({
  messages: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
  turns: Annotation<number>({ reducer: (_a, b) => b, default: () => 0 }),
})

/** A ~1.5 KB message that differs from turn to turn. */
function message(turn: number): string {
  let s = `turn ${turn}: `
  let x = turn * 2654435761
  while (s.length < 1536) {
    x = (x * 1103515245 + 12345) >>> 0
    s += `${x.toString(36)} `
  }
  return s.slice(0, 1536)
}

async function chat(root: string, turns: number, from: number, retention?: Retention): Promise<void> {
  const saver = await NoaSaver.open({ root, ...(retention ? { retention } : {}) })
  try {
    const graph = new StateGraph(State)
      .addNode('reply', (s) => ({ messages: [message(s.turns)], turns: s.turns + 1 }))
      .addEdge('__start__', 'reply')
      .addEdge('reply', '__end__')
      .compile({ checkpointer: saver })
    const config = { configurable: { thread_id: 'chat' } }
    for (let t = from; t < turns; t++) await graph.invoke({}, config)
    const state = await graph.getState(config)
    if ((state.values as { turns: number }).turns !== turns) throw new Error('the chat lost a turn')
  } finally {
    await saver.close()
  }
}

function kib(n: number): string {
  return `${(n / 1024).toLocaleString('en-US', { maximumFractionDigits: 1 })} KiB`
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { turns: { type: 'string', default: '200' } }, strict: true })
  const total = Number(values.turns)
  const marks = [50, 100, 200].filter((n) => n < total).concat(total)
  const lines = [
    `| policy | turns | on disk after gc | log | checksums | objects (loose + packs) | checkpoints kept | freed by gc |`,
    `|---|---:|---:|---:|---:|---:|---:|---:|`,
  ]
  for (const retention of [undefined, { keepLast: 10 }] as const) {
    const dir = mkdtempSync(join(tmpdir(), 'noa-bench-retention-'))
    const root = join(dir, 'noa')
    try {
      let done = 0
      for (const mark of marks) {
        await chat(root, mark, done, retention)
        done = mark
        const engine = new SnapshotEngine({ root })
        const gc = await engine.gc({ dryRun: false, graceMs: 0 })
        const du = await diskUsage(engine)
        const saver = await NoaSaver.open({ root })
        let kept = 0
        for await (const _ of saver.list({ configurable: { thread_id: 'chat' } })) kept++
        await saver.close()
        const c = du.categories
        lines.push(
          `| ${retention ? 'keepLast: 10' : 'none'} | ${mark} | ${kib(du.total)} | ${kib(c.logs)} | ${kib(c.checksums)} | ${kib(c.objects + c.packs)} | ${kept} | ${kib(gc.removedBytes + gc.logBytes)} |`,
        )
        console.error(lines[lines.length - 1])
      }
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }
  console.log(lines.join('\n'))
}

await main()
