/**
 * The lone lane (AgentLogOptions.loneInThread, on by default with workers): a workspace appended
 * to while nothing else of the log is in flight is owned by an owner in the caller's thread; as
 * soon as appends overlap it moves to its worker (released there first: its log made durable and
 * closed), and back after a quiet spell. Every move keeps every ack, in order, exactly once.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { readEntries } from '../../dist/src/engine/index.js'
import { AgentLog, type NoaError } from '../../dist/src/index.js'
import { BLOB, tempDir } from '../helpers/index.js'

const entry = (i: number) => ({ op: 'write' as const, path: `p${i}`, blob: BLOB })

async function logged(root: string, ws: string): Promise<string[]> {
  const paths: string[] = []
  for await (const e of readEntries(join(root, 'agent-logs', `${ws}.log`))) {
    expect(e.seq).toBe(paths.length + 1)
    paths.push((e as { path: string }).path)
  }
  return paths
}

/** The commits each owner made: the workers first, the caller's thread's last (its index is the pool's size). */
async function commitsByOwner(log: AgentLog): Promise<Map<number, number>> {
  return new Map((await log.status()).map((s) => [s.index, s.entries]))
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

describe('the lone lane', () => {
  it("one agent awaiting each append commits on the caller's thread: no worker is started", async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 2 })
    try {
      for (let i = 0; i < 50; i++) expect((await log.append('a', entry(i))).seq).toBe(i + 1)
      expect(log.laneStatus()).toEqual({ lane: 'local', inThread: 1, moves: 0 })
      const status = await log.status()
      expect(status.map((s) => s.index)).toEqual([2]) // only the caller's thread's owner ran
      expect(status[0]?.entries).toBe(50)
      expect(status[0]?.inlineCommits).toBeGreaterThan(0)
    } finally {
      await log.close()
    }
    expect(await logged(root, 'a')).toEqual(Array.from({ length: 50 }, (_, i) => `p${i}`))
  })

  it('overlapping appends move the workspace to its worker, and a quiet spell brings it back; every ack in order, once', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 2, laneQuietMs: 50 })
    const expected: string[] = []
    let n = 0
    const next = () => {
      const e = entry(n++)
      expected.push(e.path)
      return e
    }
    try {
      for (let round = 0; round < 3; round++) {
        for (let i = 0; i < 10; i++) await log.append('a', next())
        expect(log.laneStatus()?.inThread).toBe(1)
        // A burst: the first is committed by the caller's thread, the rest wait for the move.
        const burst = Array.from({ length: 40 }, () => next())
        const acks = await Promise.all(burst.map((e) => log.append('a', e)))
        expect(acks.map((a) => a.seq)).toEqual(acks.map((_, i) => (acks[0]?.seq as number) + i))
        expect(log.laneStatus()).toMatchObject({ lane: 'pool', inThread: 0, moves: round * 2 + 1 })
        await sleep(80)
      }
      for (let i = 0; i < 10; i++) await log.append('a', next())
      expect(log.laneStatus()).toMatchObject({ lane: 'local', inThread: 1, moves: 6 })
      const commits = await commitsByOwner(log)
      expect(commits.get(2)).toBeGreaterThan(0) // the caller's thread
      expect((commits.get(0) ?? 0) + (commits.get(1) ?? 0)).toBeGreaterThan(0) // a worker
    } finally {
      await log.close()
    }
    expect(await logged(root, 'a')).toEqual(expected)
  })

  it('compare-and-append across a move: the expected seqs hold on the owner the workspace moved to', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 2, laneQuietMs: 20 })
    try {
      const first = await log.append('a', entry(0), { ifLastSeq: 0 })
      expect(first.seq).toBe(1)
      const [two, three, stale] = await Promise.allSettled([
        log.append('a', entry(1), { ifLastSeq: 1 }),
        log.append('a', entry(2), { ifLastSeq: 2 }),
        log.append('a', entry(3), { ifLastSeq: 1 }),
      ])
      expect(two.status === 'fulfilled' && two.value.seq).toBe(2)
      expect(three.status === 'fulfilled' && three.value.seq).toBe(3)
      expect(stale.status === 'rejected' && (stale.reason as NoaError).code).toBe('NOA_SEQ_MISMATCH')
      await sleep(40)
      expect((await log.append('a', entry(4), { ifLastSeq: 3 })).seq).toBe(4)
      expect(log.laneStatus()?.moves).toBe(2)
    } finally {
      await log.close()
    }
    expect(await logged(root, 'a')).toEqual(['p0', 'p1', 'p2', 'p4'])
  })

  it('a close while a move is under way commits the appends that waited for it', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 2 })
    await log.append('a', entry(0))
    const burst = Array.from({ length: 20 }, (_, i) => log.append('a', entry(i + 1)))
    const closed = log.close()
    const acks = await Promise.all(burst)
    await closed
    expect(acks.map((a) => a.seq)).toEqual(Array.from({ length: 20 }, (_, i) => i + 2))
    expect((await logged(root, 'a')).length).toBe(21)
  })

  it('a burst of new workspaces goes to the workers as it is, with no move and one open each', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 2 })
    try {
      await Promise.all(Array.from({ length: 30 }, (_, i) => log.append(`w${i}`, entry(i))))
      expect(log.laneStatus()).toEqual({ lane: 'pool', inThread: 0, moves: 0 })
      const status = await log.status()
      expect(status.every((s) => s.index < 2)).toBe(true) // the caller's thread's owner never started
    } finally {
      await log.close()
    }
  })

  it('requests wait for a move: open, release, recover and compact reach the owner the workspace is on', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 2, laneQuietMs: 20 })
    try {
      await log.append('a', entry(0))
      const burst = Promise.all(Array.from({ length: 10 }, (_, i) => log.append('a', entry(i + 1))))
      const opened = log.openWorkspace('a')
      const recovered = log.recover('a')
      await burst
      expect((await opened).lastSeq).toBeGreaterThanOrEqual(1)
      expect((await recovered).lastSeq).toBe(11)
      expect(await log.release('a')).toBe(true)
      await sleep(40)
      expect((await log.append('a', entry(11))).seq).toBe(12)
      expect(
        await log.appendAtomic({ a: [entry(12)], b: [entry(0)] }).then((r) => [r.a?.[0]?.seq, r.b?.[0]?.seq]),
      ).toEqual([13, 1])
    } finally {
      await log.close()
    }
    expect((await logged(root, 'a')).length).toBe(13)
  })

  it('loneInThread: false keeps every workspace on its worker; bad values are refused by name', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1, loneInThread: false })
    try {
      for (let i = 0; i < 5; i++) await log.append('a', entry(i))
      expect(log.laneStatus()).toBeNull()
      expect((await log.status()).map((s) => s.index)).toEqual([0])
    } finally {
      await log.close()
    }
    await expect(AgentLog.open({ root, loneInThread: 'yes' as unknown as boolean })).rejects.toThrow(
      /loneInThread/,
    )
    await expect(AgentLog.open({ root, laneQuietMs: -1 })).rejects.toThrow(/laneQuietMs/)
    expect(readFileSync(join(root, 'agent-logs', 'a.log'), 'utf8').split('\n').length).toBe(6)
  })
})
