/**
 * A lone append to a worker owner: at the end of its turn the caller's thread waits for the ack
 * in the owner's ack slot (shared memory, Atomics.wait) instead of a message back. Whichever side
 * takes the slot's word first decides whether the ack goes through the slot or through the port,
 * never both and never neither: an ack that takes longer than the wait, a failure, and appends
 * that are not alone all come by the port, each once.
 */
import { describe, expect, it } from 'vitest'
import { readEntries } from '../../dist/src/engine/index.js'
import { AgentLog, type NoaError } from '../../dist/src/index.js'
import { BLOB, tempDir } from '../helpers/index.js'
import { commitGate, until } from '../helpers/serve.js'

const entry = (i: number) => ({ op: 'write' as const, path: `p${i}`, blob: BLOB })

async function logged(root: string, ws: string): Promise<number[]> {
  const seqs: number[] = []
  for await (const e of readEntries(`${root}/agent-logs/${ws}.log`)) seqs.push(e.seq)
  return seqs
}

async function slotAcks(log: AgentLog): Promise<number> {
  return (await log.status()).reduce((n, s) => n + s.slotAcks, 0)
}

// A worker owner's slot: the lone lane (which would commit these on this thread) is off.
describe("a lone append's ack through the ack slot", () => {
  it('serial appends to a worker owner are acknowledged through it, each with its seq and ts, every one in the log', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1, loneInThread: false })
    const acks = []
    try {
      for (let i = 0; i < 200; i++) acks.push(await log.append('a', entry(i)))
      expect(await slotAcks(log)).toBeGreaterThan(0)
    } finally {
      await log.close()
    }
    expect(acks.map((a) => a.seq)).toEqual(Array.from({ length: 200 }, (_, i) => i + 1))
    for (let i = 1; i < acks.length; i++) expect(acks[i]?.ts).toBeGreaterThan(acks[i - 1]?.ts as number)
    expect(await logged(root, 'a')).toEqual(acks.map((a) => a.seq))
  })

  it('an ack that takes longer than the wait comes by the port, once its commit is done', async () => {
    const root = tempDir()
    const gate = commitGate(true)
    const log = await AgentLog.open({ root, ...gate.log })
    try {
      const before = await slotAcks(log)
      let acked = false
      const p = log.append('a', entry(1)).then((a) => {
        acked = true
        return a
      })
      await until('the commit held', () => gate.held() >= 1)
      // The caller's thread gave up waiting (it runs this test), and the commit has not run.
      expect(acked).toBe(false)
      gate.release()
      expect((await p).seq).toBe(1)
      expect(await slotAcks(log)).toBe(before)
      expect((await log.append('a', entry(2))).seq).toBe(2)
    } finally {
      gate.release()
      await log.close()
    }
    expect(await logged(root, 'a')).toEqual([1, 2])
  })

  it('after a wait that ran out, the next 16 lone appends do not wait; then they do again', async () => {
    const root = tempDir()
    const gate = commitGate(true)
    const log = await AgentLog.open({ root, ...gate.log })
    try {
      const p = log.append('a', entry(0))
      await until('the commit held', () => gate.held() >= 1)
      gate.release()
      await p
      const before = await slotAcks(log)
      for (let i = 1; i <= 16; i++) await log.append('a', entry(i))
      expect(await slotAcks(log)).toBe(before)
      // Then through the slot again (a commit that once more takes longer skips 16 more).
      for (let i = 17; i < 17 + 20 * 17 && (await slotAcks(log)) === before; i++)
        await log.append('a', entry(i))
      expect(await slotAcks(log)).toBeGreaterThan(before)
    } finally {
      gate.release()
      await log.close()
    }
  })

  it('a lone append that fails is refused by name, and the next one is acknowledged', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1, loneInThread: false })
    try {
      expect((await log.append('a', entry(1))).seq).toBe(1)
      const err = (await log.append('a', entry(2), { ifLastSeq: 5 }).catch((e: unknown) => e)) as NoaError
      expect(err.code).toBe('NOA_SEQ_MISMATCH')
      expect((await log.append('a', entry(3))).seq).toBe(2)
    } finally {
      await log.close()
    }
    expect(await logged(root, 'a')).toEqual([1, 2])
  })

  it('appends that are not alone (others outstanding) are all acknowledged by the port', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1, loneInThread: false })
    try {
      await log.append('w0', entry(0))
      const before = await slotAcks(log)
      for (let round = 0; round < 5; round++) {
        const acks = await Promise.all(Array.from({ length: 20 }, (_, i) => log.append(`w${i}`, entry(i))))
        expect(acks.length).toBe(20)
      }
      expect(await slotAcks(log)).toBe(before)
    } finally {
      await log.close()
    }
    expect(await logged(root, 'w0')).toEqual([1, 2, 3, 4, 5, 6])
  })
})
