/**
 * NoaSaver beyond the conformance suite: how threads map to workspaces, deleteThread, retried
 * writes, operations batched into one commit, a log changed under the saver, a copied
 * checkpoint, and refusals.
 */
import { symlinkSync } from 'node:fs'
import { join } from 'node:path'
import { emptyCheckpoint, uuid6 } from '@langchain/langgraph-checkpoint'
import { describe, expect, it } from 'vitest'
import { readWorkspace } from '../../dist/src/engine/index.js'
import { AgentLog, NoaError, ObjectStore, SnapshotEngine } from '../../dist/src/index.js'
import { NoaSaver } from '../../dist/src/langgraph/index.js'
import { runCli, tempDir } from '../helpers/index.js'

type Saver = Awaited<ReturnType<typeof NoaSaver.open>>

function checkpoint(values: Record<string, unknown> = {}, versions?: Record<string, number>) {
  const c = emptyCheckpoint()
  c.id = uuid6(-2)
  c.channel_values = values
  c.channel_versions = versions ?? Object.fromEntries(Object.keys(values).map((k) => [k, 1]))
  return c
}

const meta = (step: number, extra: Record<string, unknown> = {}) => ({
  source: 'loop' as const,
  step,
  parents: {},
  ...extra,
})

async function withSaver<T>(fn: (saver: Saver, root: string) => Promise<T>): Promise<T> {
  const root = join(tempDir('noa-lg-saver-'), 'noa')
  const saver = await NoaSaver.open({ root })
  try {
    return await fn(saver, root)
  } finally {
    await saver.close()
  }
}

async function entries(root: string, ws: string) {
  const out = []
  for await (const e of readWorkspace(root, ws)) out.push(e)
  return out
}

/** The incremental head agrees with a replay of the whole log (the saver's snapshot records are right). */
async function expectConsistent(root: string, ws: string) {
  const engine = new SnapshotEngine({ root })
  const incremental = await engine.replay(ws)
  const scratch = await engine.replay(ws, { fromScratch: true })
  expect(incremental.tree.id).toBe(scratch.tree.id)
  expect(runCli(['verify', ws, '--root', root]).status).toBe(0)
}

describe('NoaSaver', () => {
  it("opens the root's log with the owner on the caller's thread unless told otherwise", async () => {
    const workersOf = (saver: Saver) =>
      (saver as unknown as { log: { options: { workers: number } } }).log.options.workers
    for (const [given, expected] of [
      [undefined, 0],
      [2, 2],
    ] as const) {
      const root = join(tempDir('noa-lg-workers-'), 'noa')
      const saver = await NoaSaver.open({ root, ...(given === undefined ? {} : { workers: given }) })
      try {
        expect(workersOf(saver)).toBe(expected)
        const config = await saver.put(
          { configurable: { thread_id: 't', checkpoint_ns: '' } },
          checkpoint({ a: 1 }),
          meta(0),
          { a: 1 },
        )
        expect((await saver.getTuple(config))?.checkpoint.channel_values).toEqual({ a: 1 })
      } finally {
        await saver.close()
      }
    }
  })

  it('keeps any thread id, lists threads by their ids, and hashes only ids too long for a name', async () => {
    await withSaver(async (saver, root) => {
      const ids = ['plain-1', 'with space/and slash', 'ünïcode ✓', 'x'.repeat(400)]
      for (const [i, thread_id] of ids.entries()) {
        await saver.put({ configurable: { thread_id } }, checkpoint({ n: i }), meta(i), { n: 1 })
      }
      const seen = new Map<string, unknown>()
      for await (const t of saver.list({ configurable: {} })) {
        seen.set(t.config.configurable?.thread_id, t.checkpoint.channel_values.n)
      }
      expect(new Map(ids.map((id, i) => [id, i]))).toEqual(seen)
      expect(NoaSaver.workspaceOf('with space/and slash')).toBe('lg.with_20space_2fand_20slash')
      const long = NoaSaver.workspaceOf('x'.repeat(400))
      expect(long).toMatch(/^lgh\.[0-9a-f]{64}$/)
      expect((await entries(root, long)).some((e) => e.op === 'write' && e.path === 'thread')).toBe(true)
      // A fresh saver finds the long id again from the workspace.
      const other = await NoaSaver.open({ root })
      const found = []
      for await (const t of other.list({ configurable: {} })) found.push(t.config.configurable?.thread_id)
      await other.close()
      expect(found.sort()).toEqual([...ids].sort())
    })
  })

  it('deleteThread forgets the thread for LangGraph, keeps its history in noa, and the id can be reused', async () => {
    await withSaver(async (saver, root) => {
      const config = await saver.put({ configurable: { thread_id: 'gone' } }, checkpoint({ a: 1 }), meta(0), {
        a: 1,
      })
      await saver.putWrites(config, [['a', 2]], 'task-1')
      await saver.put({ configurable: { thread_id: 'kept' } }, checkpoint(), meta(0), {})
      await saver.deleteThread('gone')
      expect(await saver.getTuple({ configurable: { thread_id: 'gone' } })).toBeUndefined()
      expect(await saver.getTuple(config)).toBeUndefined()
      expect(await saver.getTuple({ configurable: { thread_id: 'kept' } })).toBeDefined()
      const listed = []
      for await (const t of saver.list({ configurable: {} })) listed.push(t.config.configurable?.thread_id)
      expect(listed).toEqual(['kept'])

      const snaps = JSON.parse(runCli(['snapshots', 'lg.gone', '--root', root, '--json']).stdout)
      expect(snaps.map((s: { message: string }) => s.message)).toEqual([
        'deleteThread',
        expect.stringMatching(/^checkpoint .* \(step 0, loop\)$/),
      ])
      const tree = runCli(['tree', snaps[0].snapshotId, '--root', root]).stdout
      expect(tree).toMatch(/^deleted\t/)

      // Deleting a thread that never was writes nothing.
      await saver.deleteThread('never')
      expect(runCli(['workspaces', '--root', root, '--json']).stdout).not.toContain('lg.never')

      const again = await saver.put({ configurable: { thread_id: 'gone' } }, checkpoint({ b: 1 }), meta(0), {
        b: 1,
      })
      expect((await saver.getTuple(again))?.checkpoint.channel_values).toEqual({ b: 1 })
      expect((await saver.getTuple(again))?.pendingWrites).toEqual([])
      await expectConsistent(root, 'lg.gone')
    })
  })

  it('keeps the first regular writes of a retried task, replaces special ones, and writes nothing for a pure retry', async () => {
    await withSaver(async (saver, root) => {
      const config = await saver.put({ configurable: { thread_id: 't' } }, checkpoint(), meta(0), {})
      await saver.putWrites(
        config,
        [
          ['x', 'first'],
          ['y', 'first'],
        ],
        'task-a',
        'path-b',
      )
      await saver.putWrites(config, [['z', 'other task']], 'task-b', 'path-a')
      await saver.putWrites(
        config,
        [
          ['x', 'retry'],
          ['y', 'retry'],
          ['w', 'new'],
        ],
        'task-a',
        'path-b',
      )
      const before = (await entries(root, 'lg.t')).length
      await saver.putWrites(
        config,
        [
          ['x', 'retry'],
          ['y', 'retry'],
        ],
        'task-a',
        'path-b',
      )
      expect((await entries(root, 'lg.t')).length).toBe(before)
      await saver.putWrites(config, [['__error__', 'boom 1']], 'task-c')
      await saver.putWrites(config, [['__error__', 'boom 2']], 'task-c')
      const t = await saver.getTuple(config)
      // Ordered by (task path, task id, idx): the write without a path first.
      expect(t?.pendingWrites).toEqual([
        ['task-c', '__error__', 'boom 2'],
        ['task-b', 'z', 'other task'],
        ['task-a', 'x', 'first'],
        ['task-a', 'y', 'first'],
        ['task-a', 'w', 'new'],
      ])
    })
  })

  it('commits operations that arrive together as one batch, each put with its snapshot', async () => {
    await withSaver(async (saver, root) => {
      const c1 = checkpoint({ a: 'one' })
      const c2 = checkpoint({ a: 'one', b: 'two' }, { a: 1, b: 1 })
      const first = saver.put({ configurable: { thread_id: 'b' } }, c1, meta(0), { a: 1 })
      const second = saver.put({ configurable: { thread_id: 'b', checkpoint_id: c1.id } }, c2, meta(1), {
        b: 1,
      })
      const [cfg1, cfg2] = await Promise.all([first, second])
      await Promise.all([
        saver.putWrites(cfg2, [['a', 'w1']], 'p1'),
        saver.putWrites(cfg2, [['b', 'w2']], 'p2'),
        saver.putWrites(cfg1, [['a', 'old']], 'p0'),
      ])
      // The second put carried `a` over from the first, which was in the same commit.
      expect((await saver.getTuple(cfg2))?.checkpoint.channel_values).toEqual({ a: 'one', b: 'two' })
      expect((await saver.getTuple(cfg2))?.pendingWrites).toHaveLength(2)
      expect((await saver.getTuple(cfg1))?.pendingWrites).toEqual([['p0', 'a', 'old']])
      const log = await entries(root, 'lg.b')
      expect(log.filter((e) => e.op === 'snapshot')).toHaveLength(2)
      await expectConsistent(root, 'lg.b')
    })
  })

  it('notices a log changed under it (another writer while it did not hold the lock) and snapshots on top of it', async () => {
    const root = join(tempDir('noa-lg-foreign-'), 'noa')
    const log = await AgentLog.open({ root, objects: new ObjectStore(root) })
    const saver = await NoaSaver.open({ log })
    try {
      const c1 = await saver.put({ configurable: { thread_id: 'f' } }, checkpoint({ a: 1 }), meta(0), {
        a: 1,
      })
      await log.release('lg.f')
      const notes = runCli(['blob', 'put', '-', '--root', root], { input: 'by hand\n' }).stdout.trim()
      expect(notes).toMatch(/^[0-9a-f]{64}$/)
      expect(
        runCli(['append', 'lg.f', '--root', root], {
          input: `{"op":"write","path":"notes.md","blob":"${notes}"}\n`,
        }).status,
      ).toBe(0)
      expect(runCli(['snapshot', 'lg.f', '-m', 'by hand', '--root', root]).status).toBe(0)
      // An entry that changes nothing: the saver's next record says so, as noa snapshot would.
      const noop = runCli(['append', 'lg.f', '--root', root], { input: '{"op":"delete","path":"gone.md"}\n' })
      const noopSeq = JSON.parse(noop.stdout).seq
      const c2 = await saver.put(c1, checkpoint({ a: 1 }), meta(1), {})
      expect((await saver.getTuple(c2))?.checkpoint.channel_values).toEqual({ a: 1 })
      const engine = new SnapshotEngine({ root })
      const head = await engine.head('lg.f')
      expect((await engine.tree(head?.record.id as string)).get('notes.md')).toBe(notes)
      expect(head?.record.parent).toBe((await engine.listSnapshots('lg.f'))[1]?.snapshotId)
      expect(head?.record.noEffect).toEqual([{ seq: noopSeq, reason: 'delete-missing' }])
      await expectConsistent(root, 'lg.f')
    } finally {
      await saver.close()
      await log.close()
    }
  })

  it("sees another saver's checkpoints in the same process, and another process's after a release", async () => {
    const root = join(tempDir('noa-lg-held-'), 'noa')
    const log = await AgentLog.open({ root, objects: new ObjectStore(root) })
    const first = await NoaSaver.open({ log })
    const second = await NoaSaver.open({ log })
    try {
      const c1 = await first.put({ configurable: { thread_id: 'a' } }, checkpoint({ v: 1 }), meta(0), {
        v: 1,
      })
      // The other saver, through the same log (so under the same lock): the first reads it on its next look.
      await second.getTuple({ configurable: { thread_id: 'a' } })
      const c2 = await second.put(c1, checkpoint({ v: 2 }, { v: 2 }), meta(1), { v: 2 })
      const seen = await first.getTuple({ configurable: { thread_id: 'a' } })
      expect(seen?.checkpoint.id).toBe(c2.configurable?.checkpoint_id)
      expect(seen?.checkpoint.channel_values).toEqual({ v: 2 })
      // After the first saver's own put, the lock is let go and another process appends.
      const c3 = await first.put(c2, checkpoint({ v: 3 }, { v: 3 }), meta(2), { v: 3 })
      await log.release('lg.a')
      const foreign = runCli(['append', 'lg.a', '--root', root], {
        input: '{"op":"delete","path":"by-hand.md"}\n',
      })
      expect(foreign.stderr).toBe('')
      const seq = JSON.parse(foreign.stdout).seq as number
      // Both savers' next checkpoints build on it: the records list it as changing nothing.
      const c4 = await first.put(c3, checkpoint({ v: 4 }, { v: 4 }), meta(3), { v: 4 })
      expect((await second.getTuple({ configurable: { thread_id: 'a' } }))?.checkpoint.id).toBe(
        c4.configurable?.checkpoint_id,
      )
      const head = await new SnapshotEngine({ root }).head('lg.a')
      expect(head?.record.noEffect).toEqual([{ seq, reason: 'delete-missing' }])
      await expectConsistent(root, 'lg.a')
    } finally {
      await first.close()
      await second.close()
      await log.close()
    }
  })

  it('repairs its snapshot chain when another writer in the process appends during its commit', async () => {
    const root = join(tempDir('noa-lg-race-'), 'noa')
    const log = await AgentLog.open({ root, objects: new ObjectStore(root) })
    const saver = await NoaSaver.open({ log })
    try {
      const c1 = await saver.put({ configurable: { thread_id: 'r' } }, checkpoint({ a: 1 }), meta(0), {
        a: 1,
      })
      // Someone appends to the thread's workspace after the saver read the log, before its entries go.
      // (filesFor runs just before the saver appends: an append made there is queued first.)
      const filesFor = saver.store.filesFor.bind(saver.store)
      let intruder: Promise<unknown> = Promise.resolve()
      saver.store.filesFor = (objects) => {
        saver.store.filesFor = filesFor
        intruder = log.append('lg.r', { op: 'write', path: 'intruder', blob: '1'.repeat(64) })
        return filesFor(objects)
      }
      await expect(saver.put(c1, checkpoint({ a: 2 }, { a: 2 }), meta(1), { a: 2 })).rejects.toMatchObject({
        code: 'NOA_CONFLICT',
      })
      await intruder
      await expectConsistent(root, 'lg.r')
      const c3 = await saver.put(c1, checkpoint({ a: 3 }, { a: 3 }), meta(2), { a: 3 })
      expect((await saver.getTuple(c3))?.checkpoint.channel_values).toEqual({ a: 3 })
      await expectConsistent(root, 'lg.r')
      const head = await new SnapshotEngine({ root }).head('lg.r')
      expect((await new SnapshotEngine({ root }).tree(head?.record.id as string)).get('intruder')).toBe(
        '1'.repeat(64),
      )
    } finally {
      await saver.close()
      await log.close()
    }
  })

  it("keeps through noa gc everything a thread reads back: large values and every checkpoint's writes", async () => {
    const root = join(tempDir('noa-lg-gc-'), 'noa')
    const big = (c: string) => c.repeat(10_000)
    const configs: Array<Awaited<ReturnType<Saver['put']>>> = []
    let saver = await NoaSaver.open({ root })
    try {
      let config = await saver.put(
        { configurable: { thread_id: 'g' } },
        checkpoint({ m: big('a'), n: 1 }),
        meta(0),
        {
          m: 1,
          n: 1,
        },
      )
      for (let step = 1; step <= 3; step++) {
        configs.push(config)
        await saver.putWrites(
          config,
          [
            ['m', big(`w${step}`)],
            ['n', step],
          ],
          `task-${step}`,
        )
        // `n` changes each step, `m` every other one: the others are carried from the parent.
        const values = { m: big(step % 2 === 0 ? String(step) : 'a'), n: step + 1 }
        config = await saver.put(
          config,
          checkpoint(values, { m: step % 2 === 0 ? step : 1, n: step + 1 }),
          meta(step),
          {
            ...(step % 2 === 0 ? { m: step } : {}),
            n: step + 1,
          },
        )
      }
      configs.push(config)
      await saver.putWrites(config, [['m', big('z')]], 'task-last')
    } finally {
      await saver.close()
    }
    const read = async (s: Saver) =>
      Promise.all(
        configs.map(async (c) => {
          const t = await s.getTuple(c)
          return [t?.checkpoint.channel_values, t?.pendingWrites]
        }),
      )
    saver = await NoaSaver.open({ root })
    const before = await read(saver)
    await saver.close()
    expect(before[1]?.[1]).toEqual([
      ['task-2', 'm', big('w2')],
      ['task-2', 'n', 2],
    ])
    const gc = runCli(['gc', '--yes', '--grace', '0s', '--root', root, '--json'])
    expect(gc.status).toBe(0)
    // The objects superseded within a commit go (a tree is stored as a delta of its parent's).
    expect(runCli(['verify', 'lg.g', '--objects', '--root', root]).status).toBe(0)
    saver = await NoaSaver.open({ root })
    try {
      expect(await read(saver)).toEqual(before)
      const history = []
      for await (const t of saver.list({ configurable: { thread_id: 'g' } })) history.push(t.metadata?.step)
      expect(history).toEqual([3, 2, 1, 0])
      // Each snapshot holds its step's record, the large values it names and the writes that led to it.
      const snaps = JSON.parse(runCli(['snapshots', 'lg.g', '--root', root, '--json']).stdout)
      const tree = runCli(['tree', snaps[1].snapshotId, '--root', root]).stdout
      expect(tree.match(/^checkpoints\//gm)).toHaveLength(1)
      expect(tree.match(/^writes\/[^\t]+\/task-2\t/gm)).toHaveLength(1)
      expect(tree.match(/^values\/[0-9a-f]{64}\t/gm)).toHaveLength(2) // m of the step, m of task-2
    } finally {
      await saver.close()
    }
    await expectConsistent(root, 'lg.g')
  })

  it('stores large values as blobs of their own, shared by the checkpoints that carry them', async () => {
    await withSaver(async (saver, root) => {
      const big = 'y'.repeat(10_000)
      const c1 = checkpoint({ big, small: 1 })
      const cfg1 = await saver.put({ configurable: { thread_id: 'big' } }, c1, meta(0), { big: 1, small: 1 })
      const c2 = checkpoint({ big, small: 2 }, { big: 1, small: 2 })
      const cfg2 = await saver.put(cfg1, c2, meta(1), { small: 2 })
      expect((await saver.getTuple(cfg2))?.checkpoint.channel_values).toEqual({ big, small: 2 })
      const log = await entries(root, 'lg.big')
      const blobs = log.flatMap((e) =>
        e.op === 'write' && e.path.startsWith('checkpoints/') ? [e.blob] : [],
      )
      const records = await Promise.all(
        blobs.map(async (b) => JSON.parse(runCli(['blob', 'get', b, '--root', root]).stdout)),
      )
      const refs = records.map((r) => r.channels.big.value.blob)
      expect(refs[0]).toMatch(/^[0-9a-f]{64}$/)
      expect(refs[1]).toBe(refs[0])
      expect(JSON.parse(runCli(['blob', 'get', refs[0], '--root', root]).stdout)).toBe(big)
      // The value is a file beside the records naming it, written once while they carry it.
      const values = log.filter((e) => e.op === 'write' && e.path.startsWith('values/'))
      expect(values).toEqual([expect.objectContaining({ path: `values/${refs[0]}`, blob: refs[0] })])
    })
  })

  it('rebuilds a copied checkpoint (LangGraph puts it with no new versions, under its parent)', async () => {
    await withSaver(async (saver) => {
      const c1 = checkpoint({ a: 'v1' })
      const cfg1 = await saver.put({ configurable: { thread_id: 'copy' } }, c1, meta(0), { a: 1 })
      const c2 = checkpoint({ a: 'v2' }, { a: 2 })
      await saver.put(cfg1, c2, meta(1), { a: 2 })
      const copy = { ...c2, id: uuid6(-2) }
      const cfg3 = await saver.put(cfg1, copy, meta(2, { source: 'fork' }), {})
      expect((await saver.getTuple(cfg3))?.checkpoint.channel_values).toEqual({ a: 'v2' })
    })
  })

  it('lists with nested metadata filters, before, limit 0, and one checkpoint id', async () => {
    await withSaver(async (saver) => {
      const ids: string[] = []
      let cfg = { configurable: { thread_id: 'l' } } as Parameters<Saver['put']>[0]
      for (let i = 0; i < 4; i++) {
        const c = checkpoint()
        ids.push(c.id)
        cfg = await saver.put(cfg, c, meta(i, { tags: { kind: i % 2 ? 'odd' : 'even' } }), {})
      }
      const list = async (options: Parameters<Saver['list']>[1], extra = {}) => {
        const out = []
        for await (const t of saver.list({ configurable: { thread_id: 'l', ...extra } }, options))
          out.push(t.checkpoint.id)
        return out
      }
      expect(await list({})).toEqual([...ids].reverse())
      expect(await list({ filter: { tags: { kind: 'odd' } } })).toEqual([ids[3], ids[1]])
      expect(await list({ filter: { step: 2, source: 'loop' } })).toEqual([ids[2]])
      expect(await list({ before: { configurable: { checkpoint_id: ids[2] } }, limit: 1 })).toEqual([ids[1]])
      expect(await list({ limit: 0 })).toEqual([])
      expect(await list({}, { checkpoint_id: ids[1] })).toEqual([ids[1]])
      expect(await list({}, { checkpoint_ns: 'sub' })).toEqual([])
    })
    // A root nothing was written to has no threads yet (and no folder).
    const fresh = await NoaSaver.open({ root: join(tempDir('noa-lg-empty-'), 'not-yet') })
    const none = []
    for await (const t of fresh.list({ configurable: {} })) none.push(t)
    expect(none).toEqual([])
    expect(await fresh.getTuple({ configurable: { thread_id: 'x' } })).toBeUndefined()
    await fresh.close()
  })

  it('refuses bad configs and options with NoaErrors that name them', async () => {
    await withSaver(async (saver) => {
      const c = checkpoint()
      await expect(saver.put({}, c, meta(0), {})).rejects.toThrow(/config.configurable is missing/)
      await expect(saver.put({ configurable: {} }, c, meta(0), {})).rejects.toThrow(/thread_id is missing/)
      await expect(saver.put({ configurable: { thread_id: 5 } }, c, meta(0), {})).rejects.toThrow(
        /thread_id must be a non-empty string, got number/,
      )
      await expect(saver.put({ configurable: { thread_id: 'x\udc00' } }, c, meta(0), {})).rejects.toThrow(
        /lone UTF-16 surrogate/,
      )
      await expect(
        saver.put({ configurable: { thread_id: 'x' } }, { ...c, id: '' }, meta(0), {}),
      ).rejects.toThrow(/checkpoint.id must be a non-empty string/)
      await expect(saver.putWrites({ configurable: { thread_id: 'x' } }, [], 't')).rejects.toThrow(
        /checkpoint_id is missing/,
      )
      await expect(
        saver.putWrites({ configurable: { thread_id: 'x', checkpoint_id: 'c' } }, [], ''),
      ).rejects.toThrow(/task id must be a non-empty string/)
      // A path too long for a log entry is refused alone, not with what was submitted beside it.
      const [tooLong, fine] = await Promise.allSettled([
        saver.put(
          { configurable: { thread_id: 'x', checkpoint_ns: 'n'.repeat(5000) } },
          checkpoint(),
          meta(0),
          {},
        ),
        saver.put({ configurable: { thread_id: 'x' } }, checkpoint(), meta(0), {}),
      ])
      expect(tooLong).toMatchObject({ status: 'rejected', reason: { code: 'NOA_BAD_ENTRY' } })
      expect(String((tooLong as PromiseRejectedResult).reason)).toMatch(
        /checkpoint path: longer than 4096 bytes/,
      )
      expect(fine.status).toBe('fulfilled')
      const bad = saver.list({ configurable: {} }, { limt: 1 } as never)
      await expect(bad.next()).rejects.toThrow(/unknown list option limt/)
      await expect(saver.fork({ configurable: { thread_id: 'none' } }, 'y')).rejects.toMatchObject({
        code: 'NOA_NOT_FOUND',
      })
      expect(await saver.getTuple({ configurable: {} })).toBeUndefined()
    })
    // A thread log that is a symlink planted in the root is refused by name, never followed.
    await withSaver(async (saver, root) => {
      await saver.put({ configurable: { thread_id: 'real' } }, checkpoint(), meta(0), {})
      symlinkSync(join(root, 'agent-logs', 'lg.real.log'), join(root, 'agent-logs', 'lg.planted.log'))
      await expect(saver.getTuple({ configurable: { thread_id: 'planted' } })).rejects.toMatchObject({
        code: 'NOA_NOT_REGULAR_FILE',
        message: expect.stringContaining('lg.planted.log'),
      })
    })
    await expect(NoaSaver.open({ rot: 'x' } as never)).rejects.toThrow(/unknown NoaSaver option rot/)
    // A log of one's own must check the records the saver names in its snapshot entries.
    const own = join(tempDir('noa-lg-own-'), 'noa')
    const bare = await AgentLog.open({ root: own })
    const elsewhere = await AgentLog.open({ root: own, objects: new ObjectStore(join(own, 'other')) })
    try {
      await expect(NoaSaver.open({ log: bare })).rejects.toMatchObject({
        code: 'NOA_BAD_OPTION',
        message: expect.stringContaining('objects: new ObjectStore(root)'),
      })
      await expect(NoaSaver.open({ log: elsewhere })).rejects.toMatchObject({ code: 'NOA_BAD_OPTION' })
    } finally {
      await Promise.all([bare.close(), elsewhere.close()])
    }
    const root = join(tempDir('noa-lg-closed-'), 'noa')
    const saver = await NoaSaver.open({ root })
    await saver.close()
    await expect(
      saver.put({ configurable: { thread_id: 'x' } }, checkpoint(), meta(0), {}),
    ).rejects.toBeInstanceOf(NoaError)
  })
})
