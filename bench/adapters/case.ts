/**
 * One trial of the adapter benchmark, in a fresh process:
 *
 *   node dist/bench/adapters/case.js <serial|100threads> <noa|noa-workers|sqlite|sqlite-full> <dir> <seconds>
 *
 * A graph step is what LangGraph's loop asks of its saver per superstep: `put` of the next
 * checkpoint (three channels, two of them new), `putWrites` of the task that ran (two writes),
 * `getTuple` of the thread's latest checkpoint. Prints one JSON line: steps (= checkpoints) per
 * second and the p50/p99 of a step's latency.
 */
import { join } from 'node:path'
import type { BaseCheckpointSaver, Checkpoint } from '@langchain/langgraph-checkpoint'
import { emptyCheckpoint, uuid6 } from '@langchain/langgraph-checkpoint'
import { NoaSaver } from '../../src/langgraph/index.js'
import { requirePeer } from './peer.js'

interface Sqlite {
  prepare(sql: string): { run(): unknown }
  pragma(p: string, o?: { simple: boolean }): unknown
  close(): void
}

export interface Contender {
  open(dir: string): Promise<{ saver: BaseCheckpointSaver; close(): Promise<void>; how: string }>
}

function sqliteContender(synchronous: 'default' | 'FULL'): Contender {
  return {
    async open(dir) {
      const { SqliteSaver } = requirePeer('@langchain/langgraph-checkpoint-sqlite') as {
        SqliteSaver: { fromConnString(path: string): BaseCheckpointSaver & { db: Sqlite; setup(): void } }
      }
      const saver = SqliteSaver.fromConnString(join(dir, 'checkpoints.db'))
      saver.setup() // journal_mode=WAL, as SqliteSaver does on first use
      if (synchronous === 'FULL') saver.db.pragma('synchronous = FULL')
      const how = `WAL, synchronous=${String(saver.db.pragma('synchronous', { simple: true }))}`
      return { saver, how, close: async () => saver.db.close() }
    },
  }
}

function noaContender(workers?: number): Contender {
  return {
    async open(dir) {
      // (No object-store folders to make first: the saver's objects go to its object logs.)
      const saver = await NoaSaver.open({
        root: join(dir, 'noa'),
        ...(workers === undefined ? {} : { workers }),
      })
      const owner =
        workers === undefined ? "the owner on the caller's thread" : `${workers} owner worker threads`
      return {
        saver,
        how: `objects appended to the owner's object log beside the entries, one journal fdatasync per commit for both (${owner})`,
        close: () => saver.close(),
      }
    },
  }
}

export const CONTENDERS: Record<string, Contender> = {
  /** As the saver opens by default: the owner on the caller's thread (workers: 0). */
  noa: noaContender(),
  /** The same with two owner worker threads (AgentLog's own default): a hand-off each way per commit. */
  'noa-workers': noaContender(2),
  /** SqliteSaver as it ships: WAL with better-sqlite3's default synchronous (NORMAL: no fsync per commit). */
  sqlite: sqliteContender('default'),
  /** The same with synchronous=FULL: each transaction's commit fsyncs the WAL (durable like noa). */
  'sqlite-full': sqliteContender('FULL'),
}

const MESSAGE = 'm'.repeat(400)

/** One graph step on `thread`; returns the config of the checkpoint it put. */
async function step(
  saver: BaseCheckpointSaver,
  thread: string,
  n: number,
  parent: string | undefined,
): Promise<string> {
  const checkpoint: Checkpoint = emptyCheckpoint()
  checkpoint.id = uuid6(n)
  checkpoint.channel_values = { messages: [`${MESSAGE}${n}`], count: n, system: 'You are terse.' }
  checkpoint.channel_versions = { messages: n + 1, count: n + 1, system: 1 }
  checkpoint.versions_seen = { agent: { messages: n } }
  const config = await saver.put(
    { configurable: { thread_id: thread, checkpoint_ns: '', checkpoint_id: parent } },
    checkpoint,
    { source: 'loop', step: n, parents: {} },
    n === 0 ? { messages: 1, count: 1, system: 1 } : { messages: n + 1, count: n + 1 },
  )
  await saver.putWrites(
    config,
    [
      ['messages', [`reply ${n}`]],
      ['count', n + 1],
    ],
    `task-${n}`,
  )
  const latest = await saver.getTuple({ configurable: { thread_id: thread } })
  if (latest?.checkpoint.id !== checkpoint.id) throw new Error(`step ${n} of ${thread}: getTuple missed it`)
  return checkpoint.id
}

function percentile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN
}

async function main(): Promise<void> {
  const [workload, contender, dir, secondsArg] = process.argv.slice(2)
  const c = CONTENDERS[contender as string]
  if (!c || (workload !== 'serial' && workload !== '100threads') || !dir) {
    throw new Error('usage: case.js <serial|100threads> <noa|noa-workers|sqlite|sqlite-full> <dir> <seconds>')
  }
  const seconds = Number(secondsArg ?? 3)
  const threads = workload === 'serial' ? 1 : 100
  const { saver, close, how } = await c.open(dir)
  try {
    const parents: Array<string | undefined> = Array.from({ length: threads }, () => undefined)
    const counts = new Array<number>(threads).fill(0)
    const one = async (k: number) => {
      parents[k] = await step(saver, `thread-${k}`, counts[k] as number, parents[k])
      counts[k] = (counts[k] as number) + 1
    }
    // Warm-up: every thread exists (workspace created, file opened) before the clock starts.
    await Promise.all(Array.from({ length: threads }, (_, k) => one(k)))
    const latencies: number[] = []
    const start = performance.now()
    const end = start + seconds * 1000
    await Promise.all(
      Array.from({ length: threads }, async (_, k) => {
        while (performance.now() < end) {
          const t = performance.now()
          await one(k)
          latencies.push(performance.now() - t)
        }
      }),
    )
    const elapsed = (performance.now() - start) / 1000
    latencies.sort((a, b) => a - b)
    console.log(
      JSON.stringify({
        rate: latencies.length / elapsed,
        p50: percentile(latencies, 0.5),
        p99: percentile(latencies, 0.99),
        entries: latencies.length,
        how,
      }),
    )
  } finally {
    await close()
  }
}

await main()
