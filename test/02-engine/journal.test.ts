/**
 * The commit journal: one write + one fdatasync of a preallocated file per round for all of a
 * worker's files, checkpoints that make the files durable and free the journal, and what a
 * failure at each step does.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { readEntries } from '../../dist/src/engine/index.js'
import { AgentLog, type EntryInput } from '../../dist/src/index.js'
import { blobOf, tempDir } from '../helpers/index.js'

const FAULTY = new URL('../fixtures/faulty-io.mjs', import.meta.url).href

function write(i: number, path = `src/f${i}.ts`): EntryInput {
  return { op: 'write', path, blob: blobOf(i) }
}

async function seqs(file: string): Promise<number[]> {
  const out: number[] = []
  for await (const e of readEntries(file)) out.push(e.seq)
  return out
}

/** A worker allocates its journal (in the background) at its second commit; wait for it. */
async function journalReady(log: AgentLog): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const status = await log.status()
    if (status.every((s) => s.journal?.state === 'ready')) return
    const failed = status.find((s) => s.journal?.state === 'failed')
    if (failed) throw new Error(`journal failed: ${failed.journal?.error}`)
    await new Promise((r) => setTimeout(r, 10))
  }
  throw new Error('journal not ready')
}

/** Two commits on every worker (straight to the files: no journal yet), then its journal. */
async function warm(log: AgentLog, workspaces: string[]): Promise<void> {
  await Promise.all(workspaces.map((ws) => log.append(ws, write(0, 'warm'))))
  await Promise.all(workspaces.map((ws) => log.append(ws, write(0, 'warm'))))
  await journalReady(log)
}

// A worker's journal: every workspace stays on its worker (no lone lane; see lone-lane.test.ts).
describe('commit journal', () => {
  it('commits many workspaces in one round, and leaves only the logs after a clean close', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1, loneInThread: false })
    const names = Array.from({ length: 100 }, (_, i) => `ws${i}`)
    try {
      await warm(log, names)
      const before = (await log.status())[0]
      expect(existsSync(join(root, 'journal'))).toBe(true)
      await Promise.all(names.map((ws, i) => log.append(ws, write(i))))
      const after = (await log.status())[0] as NonNullable<Awaited<ReturnType<AgentLog['status']>>[number]>
      // 100 appends of one event-loop turn: one message to the worker, one round.
      expect(after.rounds - (before?.rounds ?? 0)).toBe(1)
      expect(after.entries - (before?.entries ?? 0)).toBe(100)
    } finally {
      await log.close()
    }
    expect(readdirSync(root).sort()).toEqual(['agent-logs', 'checksums'])
    for (const ws of names) expect(await seqs(join(root, 'agent-logs', `${ws}.log`))).toEqual([1, 2, 3])
  })

  it('wraps around a small journal, checkpointing as it goes, and loses nothing', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 2, loneInThread: false, journalSize: 256 << 10 })
    const names = Array.from({ length: 8 }, (_, i) => `w${i}`)
    try {
      await warm(log, names)
      for (let round = 0; round < 200; round++) {
        await Promise.all(
          names.map((ws, i) => log.appendMany(ws, [write(round * 10 + i), write(round * 10 + i + 1)])),
        )
      }
      const status = await log.status()
      // 256 KiB holds far less than 200 rounds of 8 workspaces: it must have been reused.
      expect(status.reduce((n, s) => n + s.checkpoints, 0)).toBeGreaterThan(0)
      for (const s of status) expect(s.wraps).toBeGreaterThan(0)
      for (const s of status) expect(s.journal?.used ?? 0).toBeLessThan(256 << 10)
    } finally {
      await log.close()
    }
    for (const ws of names) {
      const file = join(root, 'agent-logs', `${ws}.log`)
      expect(await seqs(file)).toEqual(Array.from({ length: 402 }, (_, i) => i + 1))
    }
    expect(existsSync(join(root, 'journal'))).toBe(false)
  })

  it('a batch too large for a frame goes straight to its file, in order with the rest', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1, loneInThread: false, journalSize: 256 << 10 })
    try {
      await warm(log, ['big'])
      const before = (await log.status())[0]?.directCommits ?? 0
      const many = Array.from({ length: 2000 }, (_, i) => write(i)) // ~260 KB: over a 32 KB frame
      const [small, acks] = await Promise.all([log.append('big', write(1)), log.appendMany('big', many)])
      expect(small.seq).toBe(3)
      expect(acks[0]?.seq).toBe(4)
      expect(((await log.status())[0]?.directCommits ?? 0) - before).toBe(1)
    } finally {
      await log.close()
    }
    expect(await seqs(join(root, 'agent-logs', 'big.log'))).toEqual(
      Array.from({ length: 2003 }, (_, i) => i + 1),
    )
  })
})

describe('commit journal faults', () => {
  it('EIO on the journal fdatasync rejects the round and poisons its workspaces, and only them', async () => {
    const root = tempDir()
    // Sync 1 of the journal is its allocation's; sync 2 is the first round's.
    const log = await AgentLog.open({
      root,
      workers: 1,
      loneInThread: false,
      ioModule: FAULTY,
      ioOptions: { on: 'journal', failSyncAt: 2, code: 'EIO' },
    })
    try {
      await warm(log, ['a', 'b'])
      const [ea, eb] = await Promise.all([
        log.append('a', write(1)).catch((e) => e),
        log.append('b', write(1)).catch((e) => e),
      ])
      expect(ea).toMatchObject({ code: 'EIO', syscall: 'fdatasync' })
      expect(eb).toMatchObject({ code: 'EIO', syscall: 'fdatasync' })
      expect((await log.append('a', write(2)).catch((e) => e)).code).toBe('NOA_WORKSPACE_POISONED')
      // A workspace that was not in the failed round is not affected; the next round reuses
      // the failed frame's place, so the journal has no hole.
      expect((await log.append('c', write(1))).seq).toBe(1)
      await log.recover('a')
      expect((await log.append('a', write(3))).seq).toBe(3)
    } finally {
      await log.close()
    }
    expect(await seqs(join(root, 'agent-logs', 'a.log'))).toEqual([1, 2, 3])
    expect(readdirSync(root).sort()).toEqual(['agent-logs', 'checksums'])
  })

  it('a log write that fails after the journal sync: acknowledged (durable), written again on recover', async () => {
    const root = tempDir()
    // Writes 1 and 2 are the warm-up's direct commits; 3 is the journal round's write to the log.
    const log = await AgentLog.open({
      root,
      workers: 1,
      loneInThread: false,
      ioModule: FAULTY,
      ioOptions: { failWriteAt: 3, code: 'ENOSPC', partial: true },
    })
    const file = join(root, 'agent-logs', 'w.log')
    try {
      await warm(log, ['w'])
      const ack = await log.append('w', write(1))
      expect(ack.seq).toBe(3)
      // Not in the file yet (the write failed and its partial line was cut), but in the journal.
      expect(await seqs(file)).toEqual([1, 2])
      const refused = await log.append('w', write(2)).catch((e) => e)
      expect(refused.code).toBe('NOA_WORKSPACE_POISONED')
      expect(refused.message).toContain('durable in the journal')
      await log.recover('w')
      expect(await seqs(file)).toEqual([1, 2, 3])
      expect((await log.append('w', write(3))).seq).toBe(4)
      expect((await log.verify('w')).ok).toBe(true)
    } finally {
      await log.close()
    }
    expect(await seqs(file)).toEqual([1, 2, 3, 4])
  })

  it('a failed checkpoint fdatasync keeps the records in the journal until the workspace is reopened', async () => {
    const root = tempDir()
    // File syncs 1 and 2 are the warm-up's direct commits; 3 is the first checkpoint's.
    const log = await AgentLog.open({
      root,
      workers: 1,
      loneInThread: false,
      ioModule: FAULTY,
      ioOptions: { on: 'file', failSyncAt: 3, code: 'EIO' },
    })
    const file = join(root, 'agent-logs', 'w.log')
    try {
      await warm(log, ['w'])
      for (let i = 1; i <= 3; i++) expect((await log.append('w', write(i))).seq).toBe(i + 2)
      // The checkpoint runs within a second (the age bound); then the workspace is poisoned.
      let refused: { code?: string } = {}
      for (let i = 0; i < 300 && refused.code !== 'NOA_WORKSPACE_POISONED'; i++) {
        await new Promise((r) => setTimeout(r, 20))
        refused = await log.append('w', write(9)).then(
          () => ({}),
          (e) => e,
        )
      }
      expect(refused.code).toBe('NOA_WORKSPACE_POISONED')
      const appended = (await seqs(file)).length // entries acknowledged before the failure
      await log.recover('w')
      expect((await log.verify('w')).ok).toBe(true)
      expect(await seqs(file)).toEqual(Array.from({ length: appended }, (_, i) => i + 1))
      expect((await log.append('w', write(10))).seq).toBe(appended + 1)
    } finally {
      await log.close()
    }
    expect(existsSync(join(root, 'journal'))).toBe(false)
    expect(readFileSync(file, 'utf8').endsWith('\n')).toBe(true)
  })
})

describe('appendAtomic', () => {
  /** Workspace names owned by different workers (the owner is a stable hash of the name). */
  function acrossWorkers(log: AgentLog, n: number): string[] {
    const byOwner = new Map<number, string>()
    const index = log as unknown as { ownerOf(ws: string): unknown; owners: unknown[] }
    for (let i = 0; byOwner.size < n && i < 1000; i++) {
      const ws = `atom${i}`
      byOwner.set(index.owners.indexOf(index.ownerOf(ws)), ws)
    }
    return [...byOwner.values()]
  }

  it('commits entries to workspaces on different workers as one, in order with plain appends', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 2, loneInThread: false })
    try {
      const [a, b] = acrossWorkers(log, 2) as [string, string]
      await warm(log, [a, b])
      const before = await log.append(a, write(1))
      const acks = await log.appendAtomic({ [a]: [write(2), write(3)], [b]: [write(4)] })
      const after = await log.append(b, write(5))
      expect(acks[a]?.map((x) => x.seq)).toEqual([before.seq + 1, before.seq + 2])
      expect(acks[b]?.map((x) => x.seq)).toEqual([3])
      expect(after.seq).toBe(4)
      // Many at once, interleaved with plain appends to the same workspaces.
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          i % 2 === 0
            ? log.appendAtomic({ [a]: [write(i)], [b]: [write(i), write(i + 1)] })
            : log.append(a, write(i)),
        ),
      )
      expect(results.length).toBe(20)
    } finally {
      await log.close()
    }
    for (const ws of readdirSync(join(root, 'agent-logs'))) {
      const got = await seqs(join(root, 'agent-logs', ws))
      expect(got).toEqual(Array.from({ length: got.length }, (_, i) => i + 1))
    }
    expect(readdirSync(root).sort()).toEqual(['agent-logs', 'checksums'])
  })

  it('refuses the whole batch when one entry is invalid or one workspace cannot be held', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 2, loneInThread: false })
    try {
      const [a, b] = acrossWorkers(log, 2) as [string, string]
      await warm(log, [a, b])
      const bad = await log
        .appendAtomic({ [a]: [write(1)], [b]: [{ op: 'write', path: '../x', blob: blobOf(1) }] })
        .catch((e) => e)
      expect(bad.code).toBe('NOA_BAD_ENTRY')
      expect(bad.message).toContain(`${b} entry 1`)
      // A workspace another process holds: the other part is given up, nothing is written.
      const other = await AgentLog.open({
        root: join(root),
        workers: 1,
        loneInThread: false,
        durability: 'fdatasync',
      })
      try {
        await other.append('held', write(1))
        const err = await log.appendAtomic({ [a]: [write(2)], held: [write(2)] }).catch((e) => e)
        expect(err.code).toBe('NOA_WORKSPACE_LOCKED')
      } finally {
        await other.close()
      }
      expect((await log.append(a, write(3))).seq).toBe(3) // a's seqs were given back
    } finally {
      await log.close()
    }
  })

  it('a close while batches are in flight lets them finish, then leaves only the logs', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 2, loneInThread: false })
    const [a, b] = acrossWorkers(log, 2) as [string, string]
    await warm(log, [a, b])
    // Called in the same turn as close: their steps (commit, apply) are sent while it closes.
    const batches = [1, 2, 3].map((i) => log.appendAtomic({ [a]: [write(i)], [b]: [write(i), write(i + 1)] }))
    const closed = log.close()
    const acks = await Promise.all(batches)
    await closed
    expect(acks.map((x) => x[b]?.map((y) => y.seq))).toEqual([
      [3, 4],
      [5, 6],
      [7, 8],
    ])
    expect(await seqs(join(root, 'agent-logs', `${a}.log`))).toEqual([1, 2, 3, 4, 5])
    expect(await seqs(join(root, 'agent-logs', `${b}.log`))).toEqual([1, 2, 3, 4, 5, 6, 7, 8])
    expect(readdirSync(root).sort()).toEqual(['agent-logs', 'checksums'])
    expect((await log.appendAtomic({ [a]: [write(9)] }).catch((e) => e)).code).toBe('NOA_CLOSED')
  })

  it('needs the commit journal', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1, loneInThread: false, durability: 'fdatasync' })
    try {
      const err = await log.appendAtomic({ a: [write(1)] }).catch((e) => e)
      expect(err.code).toBe('NOA_BAD_OPTION')
      expect(existsSync(join(root, 'agent-logs', 'a.log'))).toBe(true) // opened, nothing written
      expect(await seqs(join(root, 'agent-logs', 'a.log'))).toEqual([])
    } finally {
      await log.close()
    }
  })
})
