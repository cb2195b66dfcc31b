/**
 * NoaSaver's commit, both ways, in this process (fast, for the mutation run of its commit path:
 * scripts/mutation/modules.mjs): in process the checkpoint's objects go with its entries into
 * the owner's object log; through a daemon (`noa serve`, here in this process too) two savers
 * that put to one thread at once are ordered by the daemon, the one that lost building its
 * commit again on the other's, and both checkpoints are there.
 */
import { chmodSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { emptyCheckpoint, uuid6 } from '@langchain/langgraph-checkpoint'
import { describe, expect, it, onTestFinished } from 'vitest'
import { readWorkspace } from '../../dist/src/engine/index.js'
import { AgentLog, ObjectStore, SnapshotEngine } from '../../dist/src/index.js'
import { NoaSaver } from '../../dist/src/langgraph/index.js'
import { Daemon, RemoteAgentLog } from '../../dist/src/serve/index.js'
import { objectIds } from '../helpers/gc.js'
import { runCli, tempDir } from '../helpers/index.js'
import { commitGate, until } from '../helpers/serve.js'

function checkpoint(values: Record<string, unknown> = {}) {
  const c = emptyCheckpoint()
  c.id = uuid6(-2)
  c.channel_values = values
  c.channel_versions = Object.fromEntries(Object.keys(values).map((k) => [k, 1]))
  return c
}

const meta = (step: number) => ({ source: 'loop' as const, step, parents: {} })
const thread = (id: string) => ({ configurable: { thread_id: id } })

async function listed(saver: NoaSaver, id: string): Promise<string[]> {
  const out: string[] = []
  for await (const t of saver.list(thread(id))) out.push(t.checkpoint.id)
  return out.sort()
}

/** The incremental head agrees with a replay of the whole log (the saver's snapshot records are right). */
async function expectConsistent(root: string, ws: string) {
  const engine = new SnapshotEngine({ root })
  const incremental = await engine.replay(ws)
  const scratch = await engine.replay(ws, { fromScratch: true })
  expect(incremental.tree.id).toBe(scratch.tree.id)
  expect(runCli(['verify', ws, '--root', root]).status).toBe(0)
}

/** Counts the appends sent through `log`, and those the daemon refused because another client appended first. */
function countLost(log: RemoteAgentLog): { sent: () => number; lost: () => number } {
  let sent = 0
  let lost = 0
  const appendMany = log.appendMany.bind(log)
  log.appendMany = (async (...args: Parameters<typeof appendMany>) => {
    sent++
    try {
      return await appendMany(...args)
    } catch (err) {
      if ((err as { code?: string }).code === 'NOA_SEQ_MISMATCH') lost++
      throw err
    }
  }) as typeof log.appendMany
  return { sent: () => sent, lost: () => lost }
}

describe("NoaSaver's commit", () => {
  it("in process: a checkpoint's objects go into the owner's object log with its entries, not each a file of its own", async () => {
    const root = tempDir('noa-lg-commit-')
    const log = await AgentLog.open({ root, workers: 0, objects: new ObjectStore(root) })
    const saver = await NoaSaver.open({ log })
    const first = checkpoint({ a: 1 })
    const second = checkpoint({ a: 2 })
    try {
      const config = await saver.put(thread('t'), first, meta(0), { a: 1 })
      await saver.putWrites(config, [['a', 3]], 'task-1')
      await saver.put(thread('t'), second, meta(1), { a: 2 })
    } finally {
      await saver.close()
      await log.close()
    }
    expect(objectIds(root)).toEqual([])
    expect(readdirSync(join(root, 'object-logs')).filter((n) => n.endsWith('.olog'))).toHaveLength(1)
    const again = await NoaSaver.open({ root })
    try {
      expect((await again.getTuple(thread('t')))?.checkpoint.channel_values).toEqual({ a: 2 })
      expect(await listed(again, 't')).toEqual([first.id, second.id].sort())
    } finally {
      await again.close()
    }
    await expectConsistent(root, 'lg.t')
  })

  it('through a daemon: two savers that put to one thread at once are both taken, the one that lost built again after the other', async () => {
    const root = tempDir('noa-lg-commit-')
    const gate = commitGate()
    const d = await Daemon.start({ root, log: gate.log })
    const connect = () => RemoteAgentLog.connect({ root, objects: new ObjectStore(root) })
    const clients: [RemoteAgentLog, RemoteAgentLog] = [await connect(), await connect()]
    const [a, b] = [await NoaSaver.open({ log: clients[0] }), await NoaSaver.open({ log: clients[1] })] as [
      NoaSaver,
      NoaSaver,
    ]
    onTestFinished(async () => {
      gate.release()
      await a.close()
      await b.close()
      for (const c of clients) await c.close()
      await d.drain()
    })
    const first = checkpoint({ v: 0 })
    await a.put(thread('shared'), first, meta(0), { v: 1 })
    expect((await b.getTuple(thread('shared')))?.checkpoint.id).toBe(first.id)
    // a's commit is at the daemon, held; b builds on the log without it.
    gate.hold()
    const held = gate.held()
    const fromA = checkpoint({ v: 'a' })
    const fromB = checkpoint({ v: 'b' })
    const putA = a.put(thread('shared'), fromA, meta(1), { v: 2 })
    await until("a's commit to be held", () => gate.held() > held)
    const b2 = countLost(clients[1])
    const putB = b.put(thread('shared'), fromB, meta(1), { v: 2 })
    await until("b's append to be sent", () => b2.sent() > 0)
    gate.release()
    await Promise.all([putA, putB])
    expect(b2.lost()).toBeGreaterThan(0) // b's first try lost, and it went on
    for (const s of [a, b]) expect(await listed(s, 'shared')).toEqual([first.id, fromA.id, fromB.id].sort())
    expect((await a.getTuple(thread('shared')))?.checkpoint.channel_values).toEqual({ v: 'b' })
    // Each goes on from the log as it is now.
    const next = checkpoint({ v: 'c' })
    await a.put(thread('shared'), next, meta(2), { v: 3 })
    expect((await b.getTuple(thread('shared')))?.checkpoint.id).toBe(next.id)
    await expectConsistent(root, 'lg.shared')
  })

  it('through a daemon: a commit the daemon refuses for another reason than a lost race is refused, not tried again', async () => {
    const root = tempDir('noa-lg-commit-')
    const d = await Daemon.start({ root })
    const log = await RemoteAgentLog.connect({ root, objects: new ObjectStore(root) })
    const saver = await NoaSaver.open({ log })
    onTestFinished(async () => {
      await saver.close()
      await log.close()
      await d.drain()
    })
    await saver.put(thread('t'), checkpoint({ v: 1 }), meta(0), { v: 1 })
    const drained = d.drain()
    const err = (await saver
      .put(thread('t'), checkpoint({ v: 2 }), meta(1), { v: 2 })
      .catch((e: unknown) => e)) as {
      code?: string
    }
    await drained
    expect(['NOA_SHUTTING_DOWN', 'NOA_DAEMON_LOST']).toContain(err.code)
  })

  it('a put whose parent checkpoint cannot be read back is refused, and nothing of it is written', async () => {
    const root = tempDir('noa-lg-commit-')
    const d = await Daemon.start({ root })
    const connect = () => RemoteAgentLog.connect({ root, objects: new ObjectStore(root) })
    const clients: [RemoteAgentLog, RemoteAgentLog] = [await connect(), await connect()]
    const writer = await NoaSaver.open({ log: clients[0] })
    const fresh = await NoaSaver.open({ log: clients[1] })
    onTestFinished(async () => {
      await writer.close()
      await fresh.close()
      for (const c of clients) await c.close()
      await d.drain()
    })
    const first = checkpoint({ v: 1 })
    const config = await writer.put(thread('t'), first, meta(0), { v: 1 })
    const logged = async () => {
      const out: Array<{ op: string; path?: string; blob?: string }> = []
      for await (const e of readWorkspace(root, 'lg.t'))
        out.push(e as { op: string; path?: string; blob?: string })
      return out
    }
    const before = await logged()
    const record = before.find((e) => e.op === 'write' && e.path === `checkpoints/${first.id}`)
      ?.blob as string
    // The parent's record, damaged on disk (a saver that never read it has it in no cache).
    const file = new ObjectStore(root).pathOf(record)
    chmodSync(file, 0o644)
    writeFileSync(file, 'not the record any more')
    await expect(fresh.put(config, checkpoint({ v: 2 }), meta(1), { v: 2 })).rejects.toMatchObject({
      code: 'NOA_CORRUPT_OBJECT',
    })
    expect(await logged()).toHaveLength(before.length)
  })

  it('deleteThread on a thread whose log holds no checkpoint writes nothing', async () => {
    const root = tempDir('noa-lg-commit-')
    const log = await AgentLog.open({ root, workers: 0, objects: new ObjectStore(root) })
    const saver = await NoaSaver.open({ log })
    try {
      await log.append('lg.bare', { op: 'delete', path: 'notes' }) // another writer's entry, no checkpoint
      await saver.deleteThread('bare')
      const entries = []
      for await (const e of readWorkspace(root, 'lg.bare')) entries.push(e)
      expect(entries).toMatchObject([{ seq: 1, op: 'delete', path: 'notes' }])
    } finally {
      await saver.close()
      await log.close()
    }
  })
})
