/**
 * Bytes on disk of a long LangGraph chat (issue 33's goal), in a fresh process per contender:
 *
 *   node dist/bench/adapters/chat.js <noa|sqlite> <dir> [turns]
 *
 * A real LangGraph graph (StateGraph, compiled with the saver as its checkpointer): a `messages`
 * channel (messagesStateReducer) that grows by one ~1.5 KB message per turn, and a small
 * `count` channel a node increments. Each turn is one `invoke` on one thread, which puts the
 * checkpoints LangGraph puts (input, then the node's step) and their writes.
 *
 * Bytes are what the files hold (st_size summed) and what the disk gives them (st_blocks):
 * for noa every file under its root except the commit journal (preallocated, overwritten in
 * place, removed at close: measured apart); for SQLite the database after a WAL checkpoint
 * (TRUNCATE), when the WAL is empty. Prints one JSON line.
 */
import { existsSync, mkdirSync, readdirSync, rmSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { type BaseMessage, HumanMessage } from '@langchain/core/messages'
import { Annotation, END, messagesStateReducer, START, StateGraph } from '@langchain/langgraph'
import type { BaseCheckpointSaver } from '@langchain/langgraph-checkpoint'
import { NoaSaver } from '../../src/langgraph/index.js'
import { requirePeer } from './peer.js'

interface Sizes {
  bytes: number
  blocks: number
  files: number
}

/** Sizes of the files below `dir` (skipping folders named in `skip`). */
function sizeOf(dir: string, skip: ReadonlySet<string> = new Set()): Sizes {
  const out: Sizes = { bytes: 0, blocks: 0, files: 0 }
  if (!existsSync(dir)) return out
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name)
      if (e.isDirectory()) {
        if (!skip.has(p)) walk(p)
      } else {
        const st = statSync(p)
        out.bytes += st.size
        out.blocks += st.blocks * 512
        out.files++
      }
    }
  }
  walk(dir)
  return out
}

/** ~1.5 KB of text that differs from turn to turn (words from a fixed pseudo-random stream). */
function message(turn: number): string {
  const words = ['agent', 'tool', 'result', 'memory', 'plan', 'step', 'context', 'token', 'reply', 'state']
  let x = (turn * 2654435761) >>> 0 || 1
  const out: string[] = [`Turn ${turn}:`]
  let len = 0
  while (len < 1500) {
    x ^= x << 13
    x >>>= 0
    x ^= x >>> 17
    x ^= x << 5
    x >>>= 0
    const w = `${words[x % words.length]}${x % 997}`
    out.push(w)
    len += w.length + 1
  }
  return out.join(' ')
}

const State = Annotation.Root({
  messages: Annotation<BaseMessage[]>({ reducer: messagesStateReducer, default: () => [] }),
  count: Annotation<number>({ reducer: (_a, b) => b, default: () => 0 }),
})

async function main(): Promise<void> {
  const [contender, dir, turnsArg] = process.argv.slice(2)
  const turns = Number(turnsArg ?? 200)
  if ((contender !== 'noa' && contender !== 'sqlite') || !dir || !(turns >= 20)) {
    throw new Error('usage: chat.js <noa|sqlite> <dir> [turns >= 20]')
  }
  rmSync(dir, { recursive: true, force: true })
  mkdirSync(dir, { recursive: true })
  let saver: BaseCheckpointSaver
  let measure: () => Sizes
  let close: () => Promise<Sizes>
  const root = join(dir, 'noa')
  if (contender === 'noa') {
    const noa = await NoaSaver.open({ root })
    saver = noa
    const skip = new Set([join(root, 'journal')])
    measure = () => sizeOf(root, skip)
    close = async () => {
      await noa.close()
      return sizeOf(root)
    }
  } else {
    const { SqliteSaver } = requirePeer('@langchain/langgraph-checkpoint-sqlite') as {
      SqliteSaver: {
        fromConnString(path: string): BaseCheckpointSaver & {
          db: { pragma(p: string): unknown; close(): void }
        }
      }
    }
    const sqlite = SqliteSaver.fromConnString(join(dir, 'checkpoints.db'))
    saver = sqlite
    const file = join(dir, 'checkpoints.db')
    measure = () => {
      sqlite.db.pragma('wal_checkpoint(TRUNCATE)')
      return sizeOf(dir)
    }
    close = async () => {
      sqlite.db.pragma('wal_checkpoint(TRUNCATE)')
      sqlite.db.close()
      const st = statSync(file)
      return { bytes: st.size, blocks: st.blocks * 512, files: 1 }
    }
  }
  const graph = new StateGraph(State)
    .addNode('tally', (s: typeof State.State) => ({ count: s.count + 1 }))
    .addEdge(START, 'tally')
    .addEdge('tally', END)
    .compile({ checkpointer: saver })
  const config = { configurable: { thread_id: 'chat' } }
  const after: number[] = [] // bytes after each turn (index = turn)
  after.push(measure().bytes)
  const start = performance.now()
  for (let turn = 1; turn <= turns; turn++) {
    await graph.invoke({ messages: [new HumanMessage({ content: message(turn), id: `m${turn}` })] }, config)
    after.push(measure().bytes)
  }
  const seconds = (performance.now() - start) / 1000
  const state = await graph.getState(config)
  const values = state.values as typeof State.State
  if (values.messages.length !== turns || values.count !== turns) {
    throw new Error(`state after ${turns} turns: ${values.messages.length} messages, count ${values.count}`)
  }
  if (values.messages[turns - 1]?.content !== message(turns))
    throw new Error('the last message did not load back')
  const final = await close()
  const turn = (n: number) => (after[n] as number) - (after[n - 1] as number)
  const window = (n: number) => ((after[n] as number) - (after[n - 10] as number)) / 10
  console.log(
    JSON.stringify({
      contender,
      turns,
      seconds,
      bytes: final.bytes,
      blocks: final.blocks,
      files: final.files,
      turn20: turn(20),
      turnLast: turn(turns),
      avg11to20: window(20),
      avgLast10: window(turns),
      messageBytes: Buffer.byteLength(message(turns)),
      at: { 20: after[20], 100: after[Math.min(100, turns)], [turns]: after[turns] },
    }),
  )
}

await main()
