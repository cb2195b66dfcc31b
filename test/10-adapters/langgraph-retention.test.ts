/**
 * NoaSaver's retention: each put drops the checkpoints the policy no longer keeps; what is kept
 * is listed and loads (in this saver and in a fresh one), what is dropped is gone from the
 * store after `noa gc`; off by default; a bad policy is refused by name.
 */

import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { emptyCheckpoint, uuid6 } from '@langchain/langgraph-checkpoint'
import { describe, expect, it } from 'vitest'
import { NoaSaver } from '../../dist/src/langgraph/index.js'
import { runCli, tempDir } from '../helpers/index.js'

type Saver = Awaited<ReturnType<typeof NoaSaver.open>>

/** `n` steps of a thread: each put has the previous as parent, a growing `messages` channel, and a task's writes. */
async function steps(saver: Saver, thread: string, n: number, from = 0, pause = 0): Promise<string[]> {
  const ids: string[] = []
  let parent: string | undefined
  const before = await saver.getTuple({ configurable: { thread_id: thread } })
  parent = before?.checkpoint.id
  for (let step = from; step < from + n; step++) {
    if (pause > 0) await sleep(pause)
    const c = emptyCheckpoint()
    c.id = uuid6(step)
    c.channel_values = {
      messages: Array.from({ length: step + 1 }, (_, i) => `message ${i} ${'x'.repeat(600)}`),
      n: step,
    }
    c.channel_versions = { messages: step + 1, n: step + 1 }
    const config = await saver.put(
      {
        configurable: { thread_id: thread, checkpoint_ns: '', ...(parent ? { checkpoint_id: parent } : {}) },
      },
      c,
      { source: 'loop', step, parents: {} },
      { messages: step + 1, n: step + 1 },
    )
    await saver.putWrites(config, [['n', step + 1]], `task-${step}`)
    ids.push(c.id)
    parent = c.id
  }
  return ids
}

async function listed(saver: Saver, thread: string): Promise<string[]> {
  const out: string[] = []
  for await (const t of saver.list({ configurable: { thread_id: thread } })) out.push(t.checkpoint.id)
  return out
}

async function recordBlobs(root: string, thread: string): Promise<Map<string, string>> {
  // checkpoint id → its record's blob, from the thread's log (every record ever written)
  const r = runCli(['log', NoaSaver.workspaceOf(thread), '--root', root])
  expect(r.status, r.stderr).toBe(0)
  const out = new Map<string, string>()
  for (const line of r.stdout.trim().split('\n')) {
    const e = JSON.parse(line) as { op: string; path?: string; blob?: string }
    if (e.op === 'write' && e.path?.startsWith('checkpoints/')) out.set(e.path.slice(12), e.blob as string)
  }
  return out
}

/** Whether the store holds a blob, asked of a fresh process (`noa blob get`). */
function stored(root: string, blob: string): boolean {
  return runCli(['blob', 'get', blob, '--root', root]).status === 0
}

function gc(root: string): void {
  const r = runCli(['gc', '--yes', '--grace', '0', '--root', root])
  expect(r.status, r.stderr).toBe(0)
}

async function expectLoads(saver: Saver, thread: string, ids: string[]): Promise<void> {
  for (const id of ids) {
    const t = await saver.getTuple({ configurable: { thread_id: thread, checkpoint_id: id } })
    if (!t) throw new Error(`checkpoint ${id} is not there`)
    expect(t.checkpoint.id).toBe(id)
    const step = (t.metadata as { step: number }).step
    expect(t.checkpoint.channel_values.n).toBe(step)
    expect((t.checkpoint.channel_values.messages as string[]).length).toBe(step + 1)
  }
}

describe('NoaSaver retention', () => {
  it('keepLast: each put drops the oldest; the kept ones list and load, the dropped ones are gone after gc', async () => {
    const root = join(tempDir('noa-lg-ret-'), 'noa')
    const saver = await NoaSaver.open({ root, retention: { keepLast: 4 } })
    let ids: string[]
    try {
      ids = await steps(saver, 't', 12)
      const kept = ids.slice(-4).reverse()
      expect(await listed(saver, 't')).toEqual(kept)
      await expectLoads(saver, 't', kept)
      for (const id of ids.slice(0, -4)) {
        expect(await saver.getTuple({ configurable: { thread_id: 't', checkpoint_id: id } })).toBeUndefined()
      }
      // The newest still has the writes made against it.
      const head = await saver.getTuple({ configurable: { thread_id: 't' } })
      expect(head?.pendingWrites).toEqual([['task-11', 'n', 12]])
    } finally {
      await saver.close()
    }
    const blobs = await recordBlobs(root, 't')
    expect(stored(root, blobs.get(ids[0] as string) as string)).toBe(true) // until gc
    gc(root)
    for (const id of ids.slice(0, -4)) expect(stored(root, blobs.get(id) as string)).toBe(false)
    for (const id of ids.slice(-4)) expect(stored(root, blobs.get(id) as string)).toBe(true)
    expect(runCli(['verify', NoaSaver.workspaceOf('t'), '--objects', '--root', root]).status).toBe(0)
    // A fresh saver, without a policy of its own, reads the drops from the log: the same four,
    // loading (from the object log gc wrote again, which this process did not know).
    const again = await NoaSaver.open({ root })
    try {
      expect(await listed(again, 't')).toEqual(ids.slice(-4).reverse())
      await expectLoads(again, 't', ids.slice(-4))
      // The thread goes on from its newest checkpoint.
      const more = await steps(again, 't', 2, 12)
      expect((await listed(again, 't')).slice(0, 2)).toEqual(more.reverse())
    } finally {
      await again.close()
    }
  })

  it('is off by default: every checkpoint stays', async () => {
    const root = join(tempDir('noa-lg-ret-'), 'noa')
    const saver = await NoaSaver.open({ root })
    try {
      const ids = await steps(saver, 't', 8)
      expect(await listed(saver, 't')).toEqual([...ids].reverse())
    } finally {
      await saver.close()
    }
    gc(root)
    const again = await NoaSaver.open({ root })
    try {
      expect((await listed(again, 't')).length).toBe(8)
    } finally {
      await again.close()
    }
  })

  it('keepWithinMs: checkpoints older than the window go, the newest always stays; with keepLast, either rule keeps', async () => {
    const root = join(tempDir('noa-lg-ret-'), 'noa')
    const short = await NoaSaver.open({ root, retention: { keepWithinMs: 1 } })
    try {
      const ids = await steps(short, 'a', 4, 0, 5)
      expect(await listed(short, 'a')).toEqual([ids[3]])
    } finally {
      await short.close()
    }
    const both = await NoaSaver.open({ root, retention: { keepLast: 2, keepWithinMs: 3_600_000 } })
    try {
      const ids = await steps(both, 'b', 5)
      expect(await listed(both, 'b')).toEqual([...ids].reverse())
    } finally {
      await both.close()
    }
  })

  it('a snapshot prune of a thread (noa snapshot prune) drops its checkpoints for the saver too', async () => {
    const root = join(tempDir('noa-lg-ret-'), 'noa')
    const saver = await NoaSaver.open({ root })
    let ids: string[]
    try {
      ids = await steps(saver, 't', 6)
    } finally {
      await saver.close()
    }
    const r = runCli(['snapshot', 'prune', NoaSaver.workspaceOf('t'), '--keep-last', '2', '--root', root])
    expect(r.status, r.stderr).toBe(0)
    gc(root)
    const again = await NoaSaver.open({ root })
    try {
      expect(await listed(again, 't')).toEqual(ids.slice(-2).reverse())
      await expectLoads(again, 't', ids.slice(-2))
    } finally {
      await again.close()
    }
  })

  it('a fork of a thread forgets what its base drops after the fork: it lists and loads after gc', async () => {
    const root = join(tempDir('noa-lg-ret-'), 'noa')
    const saver = await NoaSaver.open({ root, retention: { keepLast: 3 } })
    let base: string[]
    try {
      base = await steps(saver, 'base', 4)
      await saver.fork({ configurable: { thread_id: 'base', checkpoint_id: base[3] } }, 'child')
      expect(await listed(saver, 'child')).toEqual(base.slice(1).reverse())
      base.push(...(await steps(saver, 'base', 5, 4)))
    } finally {
      await saver.close()
    }
    gc(root)
    const again = await NoaSaver.open({ root })
    try {
      // The base kept its last three; the child keeps the checkpoint it was forked at.
      expect(await listed(again, 'base')).toEqual(base.slice(-3).reverse())
      expect(await listed(again, 'child')).toEqual([base[3]])
      await expectLoads(again, 'child', [base[3] as string])
    } finally {
      await again.close()
    }
  })

  it('refuses a bad policy by name, before anything is opened', async () => {
    const root = join(tempDir('noa-lg-ret-'), 'noa')
    for (const [retention, field] of [
      [{ keepLast: 0 }, 'retention.keepLast'],
      [{ keepLast: 2.5 }, 'retention.keepLast'],
      [{ keepWithinMs: -1 }, 'retention.keepWithinMs'],
      [{ keepWithinMs: '1h' }, 'retention.keepWithinMs'],
      [{}, 'retention'],
      [10, 'retention'],
      [{ keepLats: 3 }, 'keepLats'],
    ] as const) {
      await expect(
        NoaSaver.open({ root, retention: retention as unknown as { keepLast: number } }),
      ).rejects.toMatchObject({ code: 'NOA_BAD_OPTION', details: { field } })
    }
  })

  it("noa compact refuses a thread's workspace, which the saver reads whole, and changes nothing", async () => {
    const root = join(tempDir(), 'noa')
    const saver = await NoaSaver.open({ root })
    const ids = await steps(saver, 't', 3)
    await saver.close()
    const ws = NoaSaver.workspaceOf('t')
    const before = runCli(['log', ws, '--root', root]).stdout
    const r = runCli(['compact', ws, '--root', root])
    expect(r.status).toBe(2)
    expect(r.stderr).toContain(`workspace ${ws} holds a LangGraph thread`)
    expect(runCli(['log', ws, '--root', root]).stdout).toBe(before)
    const again = await NoaSaver.open({ root })
    try {
      expect(await listed(again, 't')).toEqual([...ids].reverse())
    } finally {
      await again.close()
    }
  })
})
