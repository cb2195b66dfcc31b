/**
 * The owner's commit round and its checkpoint header (src/workers/owner-commit.ts: inlineRound,
 * roundDone, writeHeader, headerDone), each at a step the other journal tests pass through
 * without looking: a lone round whose journal fdatasync fails on the worker thread, an atomic
 * batch whose round fails, the frame of an atomic batch held until the other owner's logs are
 * durable (and released once they are), files written beside entries synced with their new
 * folders before their frame is freed, a header that fails or waits, and a header whose tail is
 * the very end of the journal. What is checked is what a user sees: acks and errors, the bytes
 * of the logs and of the journal's header on disk, status() counters, and the I/O trace.
 */
import {
  closeSync,
  existsSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  rmSync,
  writeFileSync,
} from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { readEntries } from '../../dist/src/engine/index.js'
import { DATA_START, newestHeader, SECTOR } from '../../dist/src/engine/journal-format.js'
import { AgentLog, type EntryInput } from '../../dist/src/index.js'
import { blobOf, tempDir } from '../helpers/index.js'

const FAULTY = new URL('../fixtures/faulty-io.mjs', import.meta.url).href
const CHECKPOINT_IO = new URL('../fixtures/checkpoint-io.mjs', import.meta.url).href

/** 256 KiB: 504 sectors of frames; a checkpoint starts once more than 128 of them are live. */
const JOURNAL = 256 << 10
const FILL = JOURNAL / 4

type Status = Awaited<ReturnType<AgentLog['status']>>[number]

function write(i: number, path = `src/f${i}.ts`): EntryInput {
  return { op: 'write', path, blob: blobOf(i) }
}

async function seqs(file: string): Promise<number[]> {
  const out: number[] = []
  for await (const e of readEntries(file)) out.push(e.seq)
  return out
}

/** Waits for `ok` (checked every 5 ms), `what` naming it when it never comes. */
async function until<T>(
  what: string,
  get: () => Promise<T> | T,
  ok: (v: T) => boolean,
  ms = 10_000,
): Promise<T> {
  const end = Date.now() + ms
  for (;;) {
    const v = await get()
    if (ok(v)) return v
    if (Date.now() > end) throw new Error(`${what}: never happened (last: ${JSON.stringify(v)})`)
    await new Promise((r) => setTimeout(r, 5)) // a bound on the wait, not a synchronisation
  }
}

/** Two commits on every worker (straight to the files: no journal yet), then its journal. */
async function warm(log: AgentLog, workspaces: string[]): Promise<void> {
  await Promise.all(workspaces.map((ws) => log.append(ws, write(0, 'warm'))))
  await Promise.all(workspaces.map((ws) => log.append(ws, write(0, 'warm'))))
  await until(
    'the journal allocated',
    () => log.status(),
    (s) => s.every((x) => x.journal?.state === 'ready'),
  )
}

/** The status of the owner that holds `ws` open. */
async function ownerOf(log: AgentLog, ws: string): Promise<Status> {
  const s = (await log.status()).find((x) => x.workspaces.includes(ws))
  if (!s) throw new Error(`no owner holds ${ws}`)
  return s
}

/**
 * Entries to `ws` making one journal frame of exactly `sectors` sectors: 7 deletes whose lines
 * (`{"seq":N,"op":"delete","path":"…","ts":T}\n`, 55 bytes and the path and seq digits) with
 * the frame's header (32) and the log's record header (32 and the name) end mid-way into the
 * last sector.
 */
function frameOf(ws: string, sectors: number): EntryInput[] {
  const k = 7
  const target = sectors * SECTOR - SECTOR / 2 - 64 - ws.length
  const path = 'p'.repeat(Math.floor(target / k) - 55 - 2)
  return Array.from({ length: k }, () => ({ op: 'delete', path }))
}

/** The journal's newest valid header, read from its file. */
function header(path: string) {
  const fd = openSync(path, 'r')
  try {
    const a = Buffer.alloc(SECTOR)
    const b = Buffer.alloc(SECTOR)
    readSync(fd, a, 0, SECTOR, 0)
    readSync(fd, b, 0, SECTOR, SECTOR)
    return newestHeader(a, b)
  } finally {
    closeSync(fd)
  }
}

/**
 * Lone appends to `ws` until one runs on the worker thread (inlineRound: only when nothing else
 * is in flight on the owner), `inline` being the count before; a checkpoint's fdatasync started
 * by the age bound meanwhile may send one to the pool, never all.
 */
async function inlineAgain(log: AgentLog, ws: string, inline: number): Promise<void> {
  for (let i = 0; i < 20; i++) {
    await log.append(ws, write(100 + i))
    if ((await ownerOf(log, ws)).inlineCommits > inline) return
  }
  throw new Error(`20 lone appends to ${ws}, none on the worker thread: something stays in flight`)
}

function lines(file: string): string[] {
  return existsSync(file) ? readFileSync(file, 'utf8').trim().split('\n') : []
}

describe('a round that fails', () => {
  it('a lone round whose journal fdatasync fails on the worker thread: rejected, nothing written to the log, the workspace poisoned', async () => {
    const root = tempDir()
    const trace = join(root, 'trace')
    // Journal sync 1 is its allocation's; 2 is the first round's.
    const log = await AgentLog.open({
      root,
      workers: 1,
      ioModule: FAULTY,
      ioOptions: { trace, on: 'journal', failSyncAt: 2, code: 'EIO' },
    })
    const file = join(root, 'agent-logs', 'a.log')
    try {
      await warm(log, ['a'])
      const before = (await ownerOf(log, 'a')).inlineCommits
      const err = await log.append('a', write(1)).catch((e) => e)
      expect(err).toMatchObject({ code: 'EIO', syscall: 'fdatasync' })
      const status = await ownerOf(log, 'a')
      expect(err.path).toBe(status.journal?.path)
      // It was the lone round on the worker thread (inlineRound), not the pool's.
      expect(status.inlineCommits).toBe(before + 1)
      // The failed round never wrote the log: after the failed sync, only the cut back to the
      // acknowledged size and its fdatasync.
      const ops = lines(trace)
      const failed = ops.findIndex((o) => o.startsWith('fdatasync-fail journal'))
      expect(failed).toBeGreaterThan(0)
      expect(ops.slice(failed + 1).filter((o) => o.startsWith('write '))).toEqual([])
      expect(await seqs(file)).toEqual([1, 2])
      expect((await log.append('a', write(2)).catch((e) => e)).code).toBe('NOA_WORKSPACE_POISONED')
      await log.recover('a')
      expect((await log.append('a', write(3))).seq).toBe(3)
    } finally {
      await log.close()
    }
    expect(await seqs(file)).toEqual([1, 2, 3])
  })

  it('an atomic batch whose round fails is refused with the error, and nothing of it reaches the logs', async () => {
    const root = tempDir()
    const log = await AgentLog.open({
      root,
      workers: 1,
      ioModule: FAULTY,
      ioOptions: { on: 'journal', failSyncAt: 2, code: 'EIO' },
    })
    try {
      await warm(log, ['a', 'b'])
      const err = await log.appendAtomic({ a: [write(1)], b: [write(2), write(3)] }).catch((e) => e)
      expect(err).toMatchObject({ code: 'EIO', syscall: 'fdatasync' })
      // Another workspace goes on.
      expect((await log.append('c', write(1))).seq).toBe(1)
    } finally {
      await log.close()
    }
    expect(await seqs(join(root, 'agent-logs', 'a.log'))).toEqual([1, 2])
    expect(await seqs(join(root, 'agent-logs', 'b.log'))).toEqual([1, 2])
  })
})

describe('atomic batches and their frame', () => {
  /** Workspace names owned by different workers (the owner is a stable hash of the name). */
  function acrossWorkers(log: AgentLog): [string, string] {
    const byOwner = new Map<number, string>()
    const index = log as unknown as { ownerOf(ws: string): unknown; owners: unknown[] }
    for (let i = 0; byOwner.size < 2 && i < 1000; i++) {
      const ws = `atom${i}`
      byOwner.set(index.owners.indexOf(index.ownerOf(ws)), ws)
    }
    return [...byOwner.values()] as [string, string]
  }

  it('on one owner: its frame is freed like any other, and a clean close leaves no journal', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1, journalSize: JOURNAL })
    try {
      await warm(log, ['a', 'b'])
      await log.appendAtomic({ a: [write(1)], b: [write(2)] })
      // Past a quarter of the journal: a checkpoint frees everything, the atomic frame too.
      for (let i = 0; i < 3; i++) await log.appendMany('a', frameOf('a', 56))
      await until(
        'every frame freed',
        () => ownerOf(log, 'a'),
        (s) => s.journal?.frames === 0,
      )
      expect((await ownerOf(log, 'a')).checkpoints).toBeGreaterThan(0)
    } finally {
      await log.close()
    }
    expect(readdirSync(root).sort()).toEqual(['agent-logs', 'checksums'])
    expect(await seqs(join(root, 'agent-logs', 'b.log'))).toEqual([1, 2, 3])
  })

  it('across owners: the committing owner frees its frame once the other owner says its part is durable', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 2, journalSize: JOURNAL })
    try {
      const [a, b] = acrossWorkers(log)
      await warm(log, [a, b])
      await log.appendAtomic({ [a]: [write(1)], [b]: [write(2)] })
      for (let i = 0; i < 3; i++) await log.appendMany(a, frameOf(a, 56))
      // The first checkpoint may come before the other owner's answer; a later one (the age
      // bound) frees the frame once it is in.
      await until(
        'the atomic frame freed',
        () => ownerOf(log, a),
        (s) => s.journal?.frames === 0,
      )
    } finally {
      await log.close()
    }
    expect(readdirSync(root).sort()).toEqual(['agent-logs', 'checksums'])
  })

  it("across owners: the frame stays while the other owner's part is not durable, through every checkpoint", async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 2, journalSize: JOURNAL, ioModule: CHECKPOINT_IO })
    const [a, b] = acrossWorkers(log)
    await log.close()
    // The same root again, with the other owner's fdatasync of its log failing.
    const again = await AgentLog.open({
      root,
      workers: 2,
      journalSize: JOURNAL,
      ioModule: CHECKPOINT_IO,
      ioOptions: { failSyncOf: `/${b}.log` },
    })
    try {
      await warm(again, [a, b])
      await again.appendAtomic({ [a]: [write(1)], [b]: [write(2)] })
      const before = (await ownerOf(again, a)).checkpoints
      for (let i = 0; i < 3; i++) await again.appendMany(a, frameOf(a, 56))
      // Small rounds until a second checkpoint starts (so the first one is done), or the
      // frames are freed after all.
      const s = await until(
        'two checkpoints',
        async () => {
          await again.append(a, write(9))
          return ownerOf(again, a)
        },
        (x) => x.checkpoints >= before + 2 || (x.journal?.used ?? 0) <= FILL,
      )
      // Nothing was freed: the atomic frame is first, and everything after it stays too.
      expect(s.journal?.used ?? 0).toBeGreaterThan(FILL)
      expect(s.journal?.frames).toBe(s.rounds)
    } finally {
      await again.close()
    }
  })
})

describe('files written beside entries', () => {
  it('a checkpoint syncs them, their folders and the folders above new ones before it frees their frame', async () => {
    const root = tempDir()
    const trace = join(root, 'trace')
    const log = await AgentLog.open({
      root,
      workers: 1,
      journalSize: JOURNAL,
      ioModule: CHECKPOINT_IO,
      ioOptions: { trace },
    })
    try {
      await warm(log, ['a'])
      await log.append('a', write(1), {
        files: [
          { path: 'p/q/f1', data: Buffer.from('one') },
          { path: 'p/q/f2', data: Buffer.from('two') },
        ],
      })
      for (let i = 0; i < 3; i++) await log.appendMany('a', frameOf('a', 56))
      await until(
        'every frame freed',
        () => ownerOf(log, 'a'),
        (s) => s.journal?.frames === 0,
      )
      const opened = lines(trace).filter((l) => l.startsWith('open'))
      expect(opened).toEqual(
        expect.arrayContaining([
          `openRead ${join(root, 'p', 'q', 'f1')}`,
          `openRead ${join(root, 'p', 'q', 'f2')}`,
          `openDir ${join(root, 'p', 'q')}`,
          // p and p/q were made for them: the entries naming them, in root and in p.
          `openDir ${join(root, 'p')}`,
          `openDir ${root}`,
        ]),
      )
    } finally {
      await log.close()
    }
  })
})

describe('the checkpoint header', () => {
  it('names the new tail on disk at each checkpoint, and the start of the data region when the tail is the very end', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1, journalSize: JOURNAL })
    try {
      await warm(log, ['a'])
      const path = (await ownerOf(log, 'a')).journal?.path as string
      // 9 frames of 56 sectors fill the 504 sectors of frames exactly; every third passes a
      // quarter of the journal and starts a checkpoint, which frees everything written.
      for (let n = 1; n <= 9; n++) {
        await log.appendMany('a', frameOf('a', 56))
        if (n === 1) expect((await ownerOf(log, 'a')).journal?.used).toBe(56 * SECTOR)
        if (n % 3 !== 0) continue
        await until(
          `the checkpoint after frame ${n}`,
          () => ownerOf(log, 'a'),
          (s) => s.journal?.frames === 0,
        )
        const tail = n === 9 ? DATA_START : DATA_START + n * 56 * SECTOR
        expect(header(path)).toMatchObject({ tailLsn: n + 1, tailOffset: tail })
      }
      // The next frame goes back to the start. And the header is done with (nothing in
      // flight): lone appends run on the worker thread again.
      const before = await ownerOf(log, 'a')
      expect(before.wraps).toBe(0)
      await log.append('a', write(1))
      expect((await ownerOf(log, 'a')).wraps).toBe(1)
      await inlineAgain(log, 'a', before.inlineCommits)
    } finally {
      await log.close()
    }
  })

  it('a header write that fails frees nothing: the frames stay live for the next checkpoint', async () => {
    const root = tempDir()
    const trace = join(root, 'trace')
    const log = await AgentLog.open({
      root,
      workers: 1,
      journalSize: JOURNAL,
      ioModule: CHECKPOINT_IO,
      ioOptions: { trace, failHeaders: true },
    })
    try {
      await warm(log, ['a'])
      for (let i = 0; i < 3; i++) await log.appendMany('a', frameOf('a', 56))
      await until(
        'a header write failed',
        () => lines(trace),
        (l) => l.some((x) => x.endsWith(' failed')),
      )
      const s = await ownerOf(log, 'a')
      expect(s.checkpoints).toBeGreaterThan(0)
      expect(s.journal?.frames).toBe(3)
      expect(s.journal?.used).toBe(3 * 56 * SECTOR)
    } finally {
      await log.close()
    }
    expect(await seqs(join(root, 'agent-logs', 'a.log'))).toEqual(Array.from({ length: 23 }, (_, i) => i + 1))
  })

  it('rounds go on while a header is being written, and the header, once done, frees what it names', async () => {
    const root = tempDir()
    const hold = join(root, 'hold')
    const log = await AgentLog.open({
      root,
      workers: 1,
      journalSize: JOURNAL,
      ioModule: CHECKPOINT_IO,
      ioOptions: { holdHeaders: hold },
    })
    try {
      await warm(log, ['a'])
      writeFileSync(hold, '')
      for (let i = 0; i < 3; i++) await log.appendMany('a', frameOf('a', 56))
      await until(
        'a header held',
        () => existsSync(`${hold}.held`),
        (x) => x,
      )
      // Two rounds while the header is in flight (on the pool, not the worker thread).
      const inline = (await ownerOf(log, 'a')).inlineCommits
      expect((await log.append('a', write(1))).seq).toBe(24)
      expect((await log.append('a', write(2))).seq).toBe(25)
      expect((await ownerOf(log, 'a')).inlineCommits).toBe(inline)
      expect((await ownerOf(log, 'a')).journal?.frames).toBe(5)
      rmSync(hold)
      // Done: the three frames it names are freed, the two rounds' stay.
      await until(
        'the held header done',
        () => ownerOf(log, 'a'),
        (s) => s.journal?.frames === 2,
      )
      // Nothing in flight any more: lone appends run on the worker thread again.
      await inlineAgain(log, 'a', inline)
    } finally {
      await log.close()
    }
  })
})
