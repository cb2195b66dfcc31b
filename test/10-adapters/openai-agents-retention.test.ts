/**
 * NoaSession's retention (the oldest items go after each addItems; what is kept reads back, in
 * a fresh object too, and what went is gone from the store after `noa gc`), and the tombstone
 * clearSession leaves: a session object, in another process or this one, that read the items
 * before the clear has its next change refused until it reads again.
 */
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { AgentInputItem } from '@openai/agents'
import { describe, expect, it } from 'vitest'
import { NoaSession } from '../../dist/src/openai-agents/index.js'
import { SteppedChild } from '../helpers/child.js'
import { runCli, tempDir } from '../helpers/index.js'
import { startDaemon } from '../helpers/serve.js'

const OA = fileURLToPath(new URL('./fixtures/oa-steps.mjs', import.meta.url))
const CLEAR = fileURLToPath(new URL('./fixtures/oa-clear.mjs', import.meta.url))

const user = (text: string): AgentInputItem => ({ type: 'message', role: 'user', content: text })

function itemWrites(root: string, ws: string): Map<string, string> {
  // item text → its blob, from the session's log
  const r = runCli(['log', ws, '--root', root])
  expect(r.status, r.stderr).toBe(0)
  const out = new Map<string, string>()
  for (const line of r.stdout.trim().split('\n')) {
    const e = JSON.parse(line) as { op: string; path?: string; blob?: string }
    if (e.op !== 'write' || !e.path?.startsWith('items/')) continue
    const got = runCli(['blob', 'get', e.blob as string, '--root', root])
    out.set((JSON.parse(got.stdout) as { content: string }).content, e.blob as string)
  }
  return out
}

describe('NoaSession retention', () => {
  it('keepLast: the oldest items go; the kept ones read back, and gc frees the rest', async () => {
    const root = join(tempDir('noa-oa-ret-'), 'noa')
    const s = new NoaSession({ root, sessionId: 'chat', retention: { keepLast: 3 } })
    try {
      for (let i = 0; i < 8; i++) await s.addItems([user(`m${i}`)])
      expect(await s.getItems()).toEqual(['m5', 'm6', 'm7'].map(user))
      await s.addItems([user('m8'), user('m9')])
      expect(await s.getItems()).toEqual(['m7', 'm8', 'm9'].map(user))
    } finally {
      await s.close()
    }
    const ws = s.workspace
    const blobs = itemWrites(root, ws)
    expect(blobs.size).toBe(10)
    expect(runCli(['gc', '--yes', '--grace', '0', '--root', root]).status).toBe(0)
    for (const [text, blob] of blobs) {
      const kept = ['m7', 'm8', 'm9'].includes(text)
      expect(runCli(['blob', 'get', blob, '--root', root]).status, text).toBe(kept ? 0 : 1)
    }
    expect(runCli(['verify', ws, '--objects', '--root', root]).status).toBe(0)
    const again = new NoaSession({ root, sessionId: 'chat', retention: { keepLast: 3 } })
    try {
      expect(await again.getItems()).toEqual(['m7', 'm8', 'm9'].map(user))
      await again.addItems([user('m10')])
      expect(await again.getItems()).toEqual(['m8', 'm9', 'm10'].map(user))
    } finally {
      await again.close()
    }
  })

  it('keepWithinMs: items older than the window go (their age from the log, in a fresh object too)', async () => {
    const root = join(tempDir('noa-oa-ret-'), 'noa')
    const a = new NoaSession({ root, sessionId: 'w' })
    try {
      await a.addItems([user('old-1'), user('old-2')])
    } finally {
      await a.close()
    }
    await new Promise((r) => setTimeout(r, 20))
    const b = new NoaSession({ root, sessionId: 'w', retention: { keepWithinMs: 10 } })
    try {
      await b.addItems([user('new')])
      expect(await b.getItems()).toEqual([user('new')])
    } finally {
      await b.close()
    }
  })

  it('is off by default, and a bad policy is refused by name', async () => {
    const root = join(tempDir('noa-oa-ret-'), 'noa')
    const s = new NoaSession({ root, sessionId: 'all' })
    try {
      for (let i = 0; i < 6; i++) await s.addItems([user(`m${i}`)])
      expect(await s.getItems()).toHaveLength(6)
    } finally {
      await s.close()
    }
    for (const [retention, field] of [
      [{ keepLast: 0 }, 'retention.keepLast'],
      [{ keepWithinMs: 0 }, 'retention.keepWithinMs'],
      [{}, 'retention'],
      [{ last: 2 }, 'last'],
    ] as const) {
      expect(() => new NoaSession({ root, retention: retention as unknown as { keepLast: number } })).toThrow(
        expect.objectContaining({ code: 'NOA_BAD_OPTION', details: expect.objectContaining({ field }) }),
      )
    }
  })
})

describe('NoaSession clearSession tombstone', () => {
  it('a session in another process that read before a clear (by a third process) has its addItems refused', async () => {
    const root = join(tempDir('noa-oa-tomb-'), 'noa')
    const d = await startDaemon(root)
    const a = new SteppedChild(OA, [root, 'chat', 'A', '5', '3'])
    await a.next('open')
    a.go()
    await a.next('pause') // three items added
    const c = new SteppedChild(CLEAR, [root, 'chat'])
    await c.next('done')
    await c.done()
    a.go()
    expect(await a.exited).not.toBe(0)
    await expect(a.done()).rejects.toThrow(/was cleared \(clearSession\) by another writer/)
    const s = new NoaSession({ root, sessionId: 'chat' })
    try {
      expect(await s.getItems()).toEqual([])
      await s.addItems([user('anew')])
      expect(await s.getItems()).toEqual([user('anew')])
    } finally {
      await s.close()
    }
    await d.stop()
  })

  it('in one process: the object that read before the clear is refused (which reads it again)', async () => {
    const root = join(tempDir('noa-oa-tomb-'), 'noa')
    const a = new NoaSession({ root, sessionId: 'x' })
    const b = new NoaSession({ root, sessionId: 'x' })
    const c = new NoaSession({ root, sessionId: 'x' })
    try {
      await a.addItems([user('one')])
      expect(await b.getItems()).toEqual([user('one')])
      expect(await c.getItems()).toEqual([user('one')])
      await a.clearSession()
      await expect(b.addItems([user('late')])).rejects.toMatchObject({
        code: 'NOA_CONFLICT',
        details: { cleared: true },
      })
      await expect(c.popItem()).rejects.toMatchObject({ code: 'NOA_CONFLICT' })
      expect(await a.getItems()).toEqual([])
      expect(await b.getItems()).toEqual([])
      await b.addItems([user('after')])
      expect(await a.getItems()).toEqual([user('after')])
    } finally {
      await a.close()
      await b.close()
      await c.close()
    }
  })
})
