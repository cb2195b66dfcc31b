/**
 * NoaSession's commit, both ways, in this process (fast, for the mutation run of its write path:
 * scripts/mutation/modules.mjs): in process the items' blobs go with the entries into the
 * owner's object log; through a daemon (`noa serve`, here in this process too) two sessions on
 * one id that change it at once are ordered by the daemon, the one that lost building its change
 * again on the other's, and each sees the other's items.
 */
import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import type { AgentInputItem } from '@openai/agents'
import { describe, expect, it, onTestFinished } from 'vitest'
import { STORE_APPEND } from '../../dist/src/engine/checks.js'
import { AgentLog } from '../../dist/src/index.js'
import { NoaSession } from '../../dist/src/openai-agents/index.js'
import { Daemon, RemoteAgentLog } from '../../dist/src/serve/index.js'
import { objectIds } from '../helpers/gc.js'
import { runCli, tempDir } from '../helpers/index.js'
import { commitGate, until } from '../helpers/serve.js'

const user = (text: string): AgentInputItem => ({ type: 'message', role: 'user', content: text })
const texts = (items: AgentInputItem[]) => items.map((i) => (i as { content: string }).content)

function logOf(root: string, ws: string): Array<Record<string, unknown>> {
  const r = runCli(['log', ws, '--root', root])
  expect(r.status, r.stderr).toBe(0)
  return r.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
}

/** A daemon on a fresh root, in this process, its commits held while `gate` says so; two clients of it. */
async function served() {
  const root = tempDir('noa-oa-commit-')
  const gate = commitGate()
  const d = await Daemon.start({ root, log: gate.log })
  const clients = [await RemoteAgentLog.connect({ root }), await RemoteAgentLog.connect({ root })]
  onTestFinished(async () => {
    gate.release()
    for (const c of clients) await c.close()
    await d.drain()
  })
  return { root, gate, d, clients: clients as [RemoteAgentLog, RemoteAgentLog] }
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

describe("NoaSession's commit", () => {
  it("in process: the items' blobs go into the owner's object log with the entries, not each a file of its own", async () => {
    const root = tempDir('noa-oa-commit-')
    const log = await AgentLog.open({ root, workers: 0 })
    const s = new NoaSession({ log, sessionId: 'packed' })
    try {
      await s.addItems([user('one'), user('two')])
      await s.addItems([user('three')])
      expect(await s.popItem()).toEqual(user('three'))
      expect(texts(await s.getItems())).toEqual(['one', 'two'])
    } finally {
      await s.close()
      await log.close()
    }
    expect(objectIds(root)).toEqual([])
    expect(readdirSync(join(root, 'object-logs')).filter((n) => n.endsWith('.olog'))).toHaveLength(1)
    const again = new NoaSession({ root, sessionId: 'packed' })
    try {
      expect(texts(await again.getItems())).toEqual(['one', 'two'])
    } finally {
      await again.close()
    }
  })

  it('in process: the workspace is locked before the items are read, so no other process appends between the read and the append', async () => {
    const root = tempDir('noa-oa-commit-')
    const log = await AgentLog.open({ root, workers: 0 })
    const s = new NoaSession({ log, sessionId: 'locked' })
    // Another process tries to append between this change's read and its append.
    let other: ReturnType<typeof runCli> | null = null
    const storeAppend = log[STORE_APPEND].bind(log)
    log[STORE_APPEND] = ((...args: Parameters<typeof storeAppend>) => {
      other ??= runCli(['append', 'oa.locked', '--root', root], { input: '{"op":"delete","path":"other"}\n' })
      return storeAppend(...args)
    }) as typeof storeAppend
    try {
      await s.addItems([user('one')])
    } finally {
      await s.close()
      await log.close()
    }
    expect(other).not.toBeNull()
    const refused = other as unknown as ReturnType<typeof runCli>
    expect(refused.status).not.toBe(0)
    expect(refused.stderr).toContain('workspace oa.locked is locked by process')
    expect(logOf(root, 'oa.locked').map((e) => e.op)).toEqual(['write'])
  })

  it('through a daemon: one after the other, each change builds on the last, and a new session reads them', async () => {
    const { root, clients } = await served()
    const s = new NoaSession({ log: clients[0], sessionId: 'one-writer' })
    await s.addItems([user('one'), user('two')])
    await s.addItems([user('three')])
    expect(await s.popItem()).toEqual(user('three'))
    await s.addItems([user('four')])
    expect(texts(await s.getItems())).toEqual(['one', 'two', 'four'])
    const other = new NoaSession({ log: clients[1], sessionId: 'one-writer' })
    expect(texts(await other.getItems())).toEqual(['one', 'two', 'four'])
    await s.clearSession()
    expect(await other.getItems()).toEqual([])
    await s.addItems([user('five')])
    expect(texts(await other.getItems())).toEqual(['five'])
    const log = logOf(root, 'oa.one-writer')
    expect(log.map((e) => e.seq)).toEqual(log.map((_, i) => i + 1))
  })

  it('through a daemon: two sessions that add at once are both taken, the one that lost built again after the other', async () => {
    const { root, gate, clients } = await served()
    const a = new NoaSession({ log: clients[0], sessionId: 'shared' })
    const b = new NoaSession({ log: clients[1], sessionId: 'shared' })
    await a.addItems([user('first')])
    expect(texts(await b.getItems())).toEqual(['first'])
    // a's change is at the daemon, its commit held; b builds on the log without it.
    gate.hold()
    const held = gate.held()
    const fromA = a.addItems([user('from a')])
    await until("a's commit to be held", () => gate.held() > held)
    const b2 = countLost(clients[1])
    const fromB = b.addItems([user('from b')])
    await until("b's append to be sent", () => b2.sent() > 0)
    gate.release()
    await Promise.all([fromA, fromB])
    expect(b2.lost()).toBeGreaterThan(0) // b's first try lost, and it went on
    expect(texts(await a.getItems())).toEqual(['first', 'from a', 'from b'])
    expect(texts(await b.getItems())).toEqual(['first', 'from a', 'from b'])
    const writes = logOf(root, 'oa.shared').filter((e) => e.op === 'write')
    expect(writes.map((e) => e.path)).toEqual([
      'items/000000000001',
      'items/000000000002',
      'items/000000000003',
    ])
    // b's pop takes the last item, whoever added it; a sees it gone.
    expect(await b.popItem()).toEqual(user('from b'))
    expect(texts(await a.getItems())).toEqual(['first', 'from a'])
  })

  it('through a daemon: a change the daemon refuses for another reason than a lost race is refused, not tried again', async () => {
    const { d, clients } = await served()
    const s = new NoaSession({ log: clients[0], sessionId: 'refused' })
    await s.addItems([user('one')])
    const drained = d.drain()
    const err = (await s.addItems([user('two')]).catch((e: unknown) => e)) as { code?: string }
    await drained
    expect(['NOA_SHUTTING_DOWN', 'NOA_DAEMON_LOST']).toContain(err.code)
  })
})
