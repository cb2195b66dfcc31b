/**
 * The adapters on a root `noa serve` owns, in programs that import nothing of noa but the
 * adapter: their writes go through the daemon (their process holds no lock on the root and has
 * no commit journal of its own), the CLI appends to the same workspace meanwhile, and two
 * processes on one thread or session are serialized by the daemon: neither is refused, and
 * every write of both is there afterwards.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { AgentInputItem } from '@openai/agents'
import { describe, expect, it } from 'vitest'
import { SnapshotEngine } from '../../dist/src/index.js'
import { NoaSaver } from '../../dist/src/langgraph/index.js'
import { NoaSession } from '../../dist/src/openai-agents/index.js'
import { locksOf, SteppedChild } from '../helpers/child.js'
import { runCli, tempDir } from '../helpers/index.js'
import { startDaemon } from '../helpers/serve.js'

const LG = fileURLToPath(new URL('./fixtures/lg-steps.mjs', import.meta.url))
const OA = fileURLToPath(new URL('./fixtures/oa-steps.mjs', import.meta.url))

const user = (text: string): AgentInputItem => ({ type: 'message', role: 'user', content: text })

function logOf(root: string, ws: string): Array<Record<string, unknown>> {
  const r = runCli(['log', ws, '--root', root])
  expect(r.status, r.stderr).toBe(0)
  return r.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
}

/**
 * Nothing of the root is held by the process `pid`: no lock at all (on Linux, /proc/locks says),
 * and no commit journal (an AgentLog opened in process writes through one named by its pid).
 */
function expectNothingHeld(root: string, pid: number): void {
  const locks = locksOf(pid, existsSync('/proc/locks') ? readFileSync('/proc/locks', 'utf8') : null)
  if (locks !== null) expect(locks).toEqual([])
  const journals = existsSync(join(root, 'journal')) ? readdirSync(join(root, 'journal')) : []
  expect(journals.filter((f) => f.startsWith(`${pid}-`))).toEqual([])
}

/** The snapshots the saver wrote agree with a replay of the thread's log from scratch. */
async function expectConsistent(root: string, ws: string): Promise<void> {
  const v = runCli(['verify', ws, '--root', root])
  expect(v.status, v.stdout + v.stderr).toBe(0)
  const engine = new SnapshotEngine({ root })
  const incremental = await engine.replay(ws)
  const scratch = await engine.replay(ws, { fromScratch: true })
  expect(incremental.tree.id).toBe(scratch.tree.id)
}

async function expectSteps(saver: NoaSaver, thread: string, tag: string, ids: string[]): Promise<void> {
  for (const [step, id] of ids.entries()) {
    const t = await saver.getTuple({ configurable: { thread_id: thread, checkpoint_id: id } })
    expect(t?.checkpoint.channel_values).toEqual({ who: tag, step })
    expect((t?.metadata as Record<string, unknown> | undefined)?.who).toBe(tag)
    expect(t?.pendingWrites).toEqual([[`task-${tag}-${step}`, 'step', step + 1]])
  }
}

describe('the adapters through noa serve', () => {
  it('NoaSaver in a program that imports only noa/langgraph writes through the daemon; the CLI appends to the thread meanwhile', async () => {
    const root = tempDir('noa-lg-serve-')
    const d = await startDaemon(root)
    const c = new SteppedChild(LG, [root, 'chat-1', 'A', '6', '3'])
    await c.next('open')
    c.go()
    await c.next('pause') // three steps put, the saver open
    expectNothingHeld(root, c.pid)
    // Before, the saver's process held the workspace: NOA_WORKSPACE_LOCKED here.
    const r = runCli(['append', 'lg.chat-1', '--root', root], { input: '{"op":"delete","path":"notes"}\n' })
    expect(r.status, r.stderr).toBe(0)
    const cliSeq = (JSON.parse(r.stdout) as { seq: number }).seq
    c.go()
    const { ids } = (await c.next('done')) as unknown as { ids: string[] }
    await c.done()

    // The CLI's entry is between the third and the fourth step, and the saver went on after it.
    const log = logOf(root, 'lg.chat-1')
    const cpSeq = (id: string) =>
      log.find((e) => e.op === 'write' && e.path === `checkpoints/${id}`)?.seq as number
    expect(log.find((e) => e.seq === cliSeq)).toMatchObject({ op: 'delete', path: 'notes' })
    expect(cpSeq(ids[2] as string)).toBeLessThan(cliSeq)
    expect(cpSeq(ids[3] as string)).toBeGreaterThan(cliSeq)
    // The next step's snapshot lists the CLI's entry, which changed nothing, as noa snapshot does.
    const snaps = JSON.parse(runCli(['snapshots', 'lg.chat-1', '--root', root, '--json']).stdout) as Array<{
      seq: number
      noEffect: Array<{ seq: number }>
    }>
    const after = snaps.filter((s) => s.seq > cliSeq).sort((a, b) => a.seq - b.seq)[0]
    expect(after?.noEffect.map((n) => n.seq)).toEqual([cliSeq])

    const saver = await NoaSaver.open({ root })
    try {
      expect(ids).toHaveLength(6)
      await expectSteps(saver, 'chat-1', 'A', ids)
      const latest = await saver.getTuple({ configurable: { thread_id: 'chat-1' } })
      expect(latest?.checkpoint.id).toBe(ids[5])
    } finally {
      await saver.close()
    }
    await expectConsistent(root, 'lg.chat-1')
    expect((await d.stop()).code).toBe(0)
  })

  it('serializes two processes stepping one thread through the daemon: neither is refused, every write of both is there', async () => {
    const root = tempDir('noa-lg-serve2-')
    const d = await startDaemon(root)
    const steps = 25
    const a = new SteppedChild(LG, [root, 'shared', 'A', String(steps)])
    const b = new SteppedChild(LG, [root, 'shared', 'B', String(steps)])
    await Promise.all([a.next('open'), b.next('open')])
    a.go()
    b.go()
    const [da, db] = (await Promise.all([
      a.next('done', 120_000),
      b.next('done', 120_000),
    ])) as unknown as Array<{
      ids: string[]
    }>
    await Promise.all([a.done(), b.done()])
    const idsA = da?.ids ?? []
    const idsB = db?.ids ?? []
    expect(idsA).toHaveLength(steps)
    expect(idsB).toHaveLength(steps)

    // They did run at once: the log has the two processes' checkpoints interleaved.
    const tagOf = new Map<string, string>([
      ...idsA.map((id): [string, string] => [id, 'A']),
      ...idsB.map((id): [string, string] => [id, 'B']),
    ])
    const order = logOf(root, 'lg.shared')
      .filter((e) => e.op === 'write' && String(e.path).startsWith('checkpoints/'))
      .map((e) => tagOf.get(String(e.path).slice('checkpoints/'.length)))
    expect(order).toHaveLength(2 * steps)
    const switches = order.filter((t, i) => i > 0 && t !== order[i - 1]).length
    expect(switches).toBeGreaterThanOrEqual(2)

    const saver = await NoaSaver.open({ root })
    try {
      await expectSteps(saver, 'shared', 'A', idsA)
      await expectSteps(saver, 'shared', 'B', idsB)
      const listed: string[] = []
      for await (const t of saver.list({ configurable: { thread_id: 'shared' } }))
        listed.push(t.checkpoint.id)
      expect(listed.sort()).toEqual([...idsA, ...idsB].sort())
    } finally {
      await saver.close()
    }
    await expectConsistent(root, 'lg.shared')
    expect((await d.stop()).code).toBe(0)
  })

  it('NoaSession in a program that imports only noa/openai-agents writes through the daemon; an item the CLI adds meanwhile is in its history', async () => {
    const root = tempDir('noa-oa-serve-')
    const d = await startDaemon(root)
    const c = new SteppedChild(OA, [root, 'support-1', 'A', '4', '2'])
    await c.next('open')
    c.go()
    await c.next('pause') // two items added, the session open
    expectNothingHeld(root, c.pid)
    const blob = runCli(['blob', 'put', '-', '--root', root, '--json'], {
      input: JSON.stringify(user('from the CLI')),
    })
    expect(blob.status, blob.stderr).toBe(0)
    const hash = (JSON.parse(blob.stdout) as { blob: string }).blob
    const r = runCli(['append', 'oa.support-1', '--root', root], {
      input: `${JSON.stringify({ op: 'write', path: 'items/000000000003', blob: hash })}\n`,
    })
    expect(r.status, r.stderr).toBe(0)
    c.go()
    const { items } = (await c.next('done')) as unknown as { items: AgentInputItem[] }
    await c.done()
    const want = [user('A-0'), user('A-1'), user('from the CLI'), user('A-2'), user('A-3')]
    expect(items).toEqual(want)
    const s = new NoaSession({ root, sessionId: 'support-1' })
    try {
      expect(await s.getItems()).toEqual(want)
    } finally {
      await s.close()
    }
    const v = runCli(['verify', 'oa.support-1', '--root', root])
    expect(v.status, v.stderr).toBe(0)
    expect((await d.stop()).code).toBe(0)
  })

  it('serializes two processes adding to one session through the daemon: neither is refused, every item of both is there in its order', async () => {
    const root = tempDir('noa-oa-serve2-')
    const d = await startDaemon(root)
    const steps = 30
    const a = new SteppedChild(OA, [root, 'shared', 'A', String(steps)])
    const b = new SteppedChild(OA, [root, 'shared', 'B', String(steps)])
    await Promise.all([a.next('open'), b.next('open')])
    a.go()
    b.go()
    await Promise.all([a.next('done', 120_000), b.next('done', 120_000)])
    await Promise.all([a.done(), b.done()])

    const s = new NoaSession({ root, sessionId: 'shared' })
    let texts: string[]
    try {
      texts = (await s.getItems()).map((i) => (i as { content: string }).content)
    } finally {
      await s.close()
    }
    expect(texts).toHaveLength(2 * steps)
    expect(new Set(texts).size).toBe(2 * steps)
    for (const tag of ['A', 'B']) {
      expect(texts.filter((t) => t.startsWith(`${tag}-`))).toEqual(
        Array.from({ length: steps }, (_, i) => `${tag}-${i}`),
      )
    }
    const switches = texts.filter((t, i) => i > 0 && t[0] !== texts[i - 1]?.[0]).length
    expect(switches).toBeGreaterThanOrEqual(2) // they did add at once
    // One item a position, the positions gapless: no write of one process replaced the other's.
    const writes = logOf(root, 'oa.shared').filter((e) => e.op === 'write')
    expect(writes.map((e) => e.path)).toEqual(
      Array.from({ length: 2 * steps }, (_, i) => `items/${String(i + 1).padStart(12, '0')}`),
    )
    expect((await d.stop()).code).toBe(0)
  })
})
