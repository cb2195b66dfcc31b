/**
 * A LangGraph graph end to end on NoaSaver: an interrupt in one process, the resume in another,
 * time travel inside the thread, a fork into a new thread (through the saver and through the
 * `noa` command), and the graph's history seen by `noa snapshots`, `noa tree` and `noa verify`.
 */
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Command } from '@langchain/langgraph'
import { describe, expect, it } from 'vitest'
import { NoaSaver } from '../../dist/src/langgraph/index.js'
import { runCli, tempDir } from '../helpers/index.js'

const GRAPH = fileURLToPath(new URL('./fixtures/lg-graph.mjs', import.meta.url))
/** The part of a compiled graph these tests use. */
interface Graph {
  invoke(input: unknown, config: object): Promise<unknown>
  getState(config: object): Promise<unknown>
  getStateHistory(
    config: object,
  ): AsyncIterable<{ next: string[]; config: object; metadata?: { step?: number } }>
  updateState(config: object, values: unknown): Promise<object>
}
const { buildGraph, view } = (await import(GRAPH)) as {
  buildGraph(saver: NoaSaver): Graph
  view(state: unknown): GraphView
}

interface GraphView {
  values: { log: string[]; approved?: string }
  next: string[]
  interrupts: unknown[]
  checkpoint_id: string
  history?: Array<{ step: number; next: string[] }>
}

function runGraph(root: string, action: string, thread: string, arg?: string): GraphView {
  const r = spawnSync(process.execPath, [GRAPH, root, action, thread, ...(arg === undefined ? [] : [arg])], {
    encoding: 'utf8',
  })
  if (r.status !== 0) throw new Error(`lg-graph ${action} failed (${r.status}): ${r.stderr}`)
  return JSON.parse(r.stdout.trim().split('\n').pop() as string) as GraphView
}

describe('a LangGraph graph on NoaSaver', () => {
  it('interrupts in one process and resumes in another', () => {
    const root = join(tempDir('noa-lg-graph-'), 'noa')
    const first = runGraph(root, 'start', 'ticket-42')
    expect(first.next).toEqual(['ask'])
    expect(first.interrupts).toEqual([{ question: 'go ahead?' }])
    expect(first.values.log).toEqual(['start', 'plan(1)'])

    const resumed = runGraph(root, 'resume', 'ticket-42', 'yes')
    expect(resumed.next).toEqual([])
    expect(resumed.values).toEqual({ log: ['start', 'plan(1)', 'ask:yes', 'act:yes'], approved: 'yes' })
    // input, plan, ask, act, end: every step is there, newest first.
    expect(resumed.history?.map((h) => h.step)).toEqual([3, 2, 1, 0, -1])

    // The graph's steps are the workspace's snapshots, and the log verifies.
    const snaps = JSON.parse(
      runCli(['snapshots', 'lg.ticket-42', '--root', root, '--json']).stdout,
    ) as Array<{
      message: string
      kind: string
    }>
    expect(snaps).toHaveLength(5)
    expect(
      snaps.every(
        (s) => s.kind === 'snapshot' && /^checkpoint \S+ \(step -?\d+, (input|loop)\)$/.test(s.message),
      ),
    ).toBe(true)
    expect(runCli(['verify', 'lg.ticket-42', '--root', root]).status).toBe(0)
  })

  it('travels back in time inside the thread, and forks a thread through the saver and through noa fork', async () => {
    const root = join(tempDir('noa-lg-fork-'), 'noa')
    runGraph(root, 'start', 'main')
    runGraph(root, 'resume', 'main', 'yes')

    const saver = await NoaSaver.open({ root })
    try {
      const graph = buildGraph(saver)
      const main = { configurable: { thread_id: 'main' } }
      const history = []
      for await (const s of graph.getStateHistory(main)) history.push(s)
      const beforeAsk = history.find((s) => s.next.includes('ask'))
      expect(beforeAsk).toBeDefined()
      const askConfig = beforeAsk?.config as { configurable: { checkpoint_id: string } }

      // LangGraph's own time travel: a branch of the same thread from the checkpoint before ask.
      const branch = await graph.updateState(askConfig, { log: ['edited'] })
      await graph.invoke(null, branch)
      await graph.invoke(new Command({ resume: 'no' }), main)
      const branched = view(await graph.getState(main))
      expect(branched.values).toEqual({
        log: ['start', 'plan(1)', 'edited', 'ask:no', 'act:no'],
        approved: 'no',
      })

      // A fork into a thread of its own, at the same checkpoint: it waits at the interrupt.
      await saver.fork(askConfig, 'main-retry')
      const retry = { configurable: { thread_id: 'main-retry' } }
      const atFork = view(await graph.getState(retry))
      expect(atFork.next).toEqual(['ask'])
      expect(atFork.values.log).toEqual(['start', 'plan(1)'])
      const retryHistory = []
      for await (const s of graph.getStateHistory(retry)) retryHistory.push(s.metadata?.step)
      expect(retryHistory).toEqual([1, 0, -1]) // the history up to the fork point came along
      await graph.invoke(new Command({ resume: 'later' }), retry)
      expect(view(await graph.getState(retry)).values.log).toEqual([
        'start',
        'plan(1)',
        'ask:later',
        'act:later',
      ])

      // The main thread is untouched by what happened on the fork.
      expect(view(await graph.getState(main)).values.approved).toBe('no')
    } finally {
      await saver.close()
    }

    // noa fork at the snapshot made with the checkpoint before ask: a thread LangGraph resumes.
    const snaps = JSON.parse(runCli(['snapshots', 'lg.main', '--root', root, '--json']).stdout) as Array<{
      snapshotId: string
      message: string
    }>
    const atAsk = snaps.filter((s) => s.message.includes('(step 1, loop)')).pop() // the first branch's
    expect(atAsk).toBeDefined()
    const tree = runCli(['tree', atAsk?.snapshotId as string, '--root', root])
    expect(tree.stdout).toMatch(/^checkpoints\/[0-9a-f-]+\t[0-9a-f]{64}$/m)
    expect(
      runCli(['fork', 'lg.from-cli', '--from', atAsk?.snapshotId as string, '--root', root]).status,
    ).toBe(0)
    const fromCli = runGraph(root, 'resume', 'from-cli', 'cli')
    expect(fromCli.values.log).toEqual(['start', 'plan(1)', 'ask:cli', 'act:cli'])
  })
})
