import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import type { Ack, EntryInput, MergeConflict } from '../../dist/src/index.js'
import { blobOf, runCli, tempDir } from '../helpers/index.js'
import { files, refusal, setup } from '../helpers/snapshot.js'

/**
 * Every file under root with its bytes: "nothing was written" means this is unchanged. The
 * commit journal is left out: it is the engine's own, there while a log is open (and allocated
 * in the background), gone after a clean close.
 */
function snapshotOfDisk(root: string): Record<string, string> {
  const out: Record<string, string> = {}
  for (const f of readdirSync(root, { recursive: true, encoding: 'utf8', withFileTypes: false })) {
    if (f === 'journal' || f.startsWith('journal/')) continue
    try {
      out[f] = readFileSync(join(root, f)).toString('base64')
    } catch {
      out[f] = '<dir>'
    }
  }
  return out
}

function logLines(root: string, ws: string): Array<Record<string, unknown>> {
  return readFileSync(join(root, 'agent-logs', `${ws}.log`), 'utf8')
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l))
}

const w = (path: string, n: number): EntryInput => ({ op: 'write', path, blob: blobOf(n) })
const d = (path: string): EntryInput => ({ op: 'delete', path })
const mv = (from: string, to: string): EntryInput => ({ op: 'rename', from, to })

/** main with files a, b, c; feature workspaces forked from that snapshot. */
async function forked(names: string[]) {
  const ctx = await setup()
  await ctx.log.appendMany('main', [w('a', 1), w('b', 2), w('c', 3)])
  const base = await ctx.engine.snapshot('main', { message: 'base' })
  for (const n of names) await ctx.engine.fork(n, base.snapshotId as string)
  return { ...ctx, base: base.snapshotId }
}

describe('merge', () => {
  it('merges disjoint changes of several sources and the target, recording one merge entry per source', async () => {
    const { root, log, engine, base } = await forked(['f1', 'f2'])
    await log.appendMany('f1', [w('a', 10), w('new1', 11)])
    await log.appendMany('f2', [d('b'), mv('c', 'c2')])
    await log.appendMany('main', [w('m', 12)])
    const f1 = await engine.snapshot('f1', { message: 'f1 done' })
    const r = await engine.merge('main', ['f1', 'f2'])
    expect(r.base).toBe(base)
    expect(r.conflicts).toEqual([])
    expect(r.sources).toEqual([
      { workspace: 'f1', snapshotId: f1.snapshotId, created: false },
      { workspace: 'f2', snapshotId: expect.stringMatching(/^noa_/), created: true },
    ])
    expect(await files(engine, r.snapshotId as string)).toEqual({
      a: blobOf(10),
      new1: blobOf(11),
      c2: blobOf(3),
      m: blobOf(12),
    })
    const lines = logLines(root, 'main').slice(-3)
    expect(lines.map((l) => Object.keys(l))).toEqual([
      ['seq', 'op', 'from_workspace', 'from_snapshot', 'base', 'ts'],
      ['seq', 'op', 'from_workspace', 'from_snapshot', 'base', 'ts'],
      ['seq', 'op', 'snapshot_id', 'parent', 'message', 'ts'],
    ])
    expect(lines[0]).toMatchObject({ op: 'merge', from_workspace: 'f1', from_snapshot: f1.snapshotId, base })
    expect(lines[1]).toMatchObject({
      op: 'merge',
      from_workspace: 'f2',
      from_snapshot: r.sources[1]?.snapshotId,
    })
    expect(lines[2]).toMatchObject({ op: 'snapshot', snapshot_id: r.snapshotId, parent: base })
    const record = await engine.getSnapshot(r.snapshotId as string)
    expect(record).toMatchObject({
      workspace: 'main',
      parent: base,
      base,
      merged: r.sources.map((s) => s.snapshotId),
    })
    // f2's state was not a snapshot: the merge made one, in f2's own log.
    const f2Last = logLines(root, 'f2').at(-1)
    expect(f2Last).toMatchObject({ op: 'snapshot', snapshot_id: r.sources[1]?.snapshotId, parent: base })
    expect((await engine.listSnapshots('main'))[0]).toMatchObject({
      kind: 'merge',
      snapshotId: r.snapshotId,
    })
    expect((await engine.replay('main', { fromScratch: true })).tree.id).toBe(r.tree)
    // The target goes on from the merge.
    await log.append('main', w('after', 13))
    const next = await engine.snapshot('main')
    expect(next).toMatchObject({ parent: r.snapshotId, entriesReplayed: 1 })
  })

  it('reports every conflict with each side, and lets the later change win (lww)', async () => {
    const { engine, log } = await forked(['f1', 'f2'])
    const a1 = (await log.appendMany('f1', [w('a', 20), d('b'), w('same', 5), d('c')])) as Ack[]
    const a2 = (await log.appendMany('f2', [w('a', 30), w('b', 31), w('same', 5), d('c')])) as Ack[]
    const r = await engine.merge('main', ['f1', 'f2'])
    expect(r.conflicts).toEqual([
      {
        path: 'a',
        sides: [
          { workspace: 'f1', op: 'write', blob: blobOf(20), ts: a1[0]?.ts, seq: a1[0]?.seq },
          { workspace: 'f2', op: 'write', blob: blobOf(30), ts: a2[0]?.ts, seq: a2[0]?.seq },
        ],
        winner: 'f2',
      },
      {
        path: 'b',
        sides: [
          { workspace: 'f1', op: 'delete', blob: null, ts: a1[1]?.ts, seq: a1[1]?.seq },
          { workspace: 'f2', op: 'write', blob: blobOf(31), ts: a2[1]?.ts, seq: a2[1]?.seq },
        ],
        winner: 'f2',
      },
    ])
    // Equal changes (the same blob written, the same file deleted twice) are no conflict.
    expect(await files(engine, r.snapshotId as string)).toEqual({
      a: blobOf(30),
      b: blobOf(31),
      same: blobOf(5),
    })

    // The other way round: the target's later delete wins over a source's earlier write.
    await log.append('f1', w('a', 40))
    await log.append('main', d('a'))
    const again = await engine.merge('main', ['f1'])
    expect(again.conflicts.map((c) => [c.path, c.winner, c.sides.map((s) => s.op)])).toEqual([
      ['a', 'main', ['write', 'delete']],
    ])
    expect((await files(engine, again.snapshotId as string)).a).toBeUndefined()
  })

  it('with --on-conflict fail writes nothing, anywhere, and lists the conflicts', async () => {
    const { root, engine, log } = await forked(['f1', 'f2'])
    await log.appendMany('f1', [w('a', 20), w('x', 1)])
    await log.appendMany('f2', [w('a', 30), mv('b', 'x')])
    const before = snapshotOfDisk(root)
    const err = await refusal(engine.merge('main', ['f1', 'f2'], { onConflict: 'fail' }))
    expect(err.code).toBe('NOA_CONFLICT')
    expect(err.message).toBe('2 conflicting paths ("a", "x"); nothing was written')
    expect((err.details.conflicts as MergeConflict[]).map((c) => c.path)).toEqual(['a', 'x'])
    expect(snapshotOfDisk(root)).toEqual(before)
    // Without conflicts, fail merges like lww.
    await log.appendMany('f2', [w('a', 20), w('x', 1)])
    const ok = await engine.merge('main', ['f1', 'f2'], { onConflict: 'fail' })
    expect(ok.conflicts).toEqual([])
  })

  it('moves the base forward: a second merge brings only what is new', async () => {
    const { engine, log, base } = await forked(['f1'])
    await log.appendMany('f1', [w('a', 10)])
    const m1 = await engine.merge('main', ['f1'])
    const f1Snap = m1.sources[0]?.snapshotId as string
    await log.appendMany('main', [w('a', 11)]) // the target edits what it merged
    await log.appendMany('f1', [w('z', 12)])
    const m2 = await engine.merge('main', ['f1'])
    expect(m2.base).toBe(f1Snap) // not the fork base any more
    expect(m2.conflicts).toEqual([]) // f1's old change to a is not seen again
    expect(await files(engine, m2.snapshotId as string)).toMatchObject({ a: blobOf(11), z: blobOf(12) })
    expect(m1.base).toBe(base)
    // Merging the target back into the source: the source gets the target's edits.
    const back = await engine.merge('f1', ['main'])
    expect(back.conflicts).toEqual([])
    expect(await files(engine, back.snapshotId as string)).toEqual(
      await files(engine, m2.snapshotId as string),
    )
  })

  it('follows nested forks through their parent workspace and does not report inherited changes', async () => {
    const { engine, log } = await forked(['a'])
    await log.appendMany('a', [w('x', 1), w('y', 2)])
    const aSnap = await engine.snapshot('a')
    await engine.fork('b', aSnap.snapshotId as string)
    await log.appendMany('b', [w('from-b', 3)])
    await log.appendMany('a', [w('x', 4)]) // a changes x again after b was forked
    const r = await engine.merge('main', ['a', 'b'])
    expect(r.conflicts).toEqual([])
    expect(await files(engine, r.snapshotId as string)).toMatchObject({
      x: blobOf(4),
      y: blobOf(2),
      'from-b': blobOf(3),
    })
    // b alone brings a's earlier work too (its history runs through a's log).
    const { engine: e2, log: l2 } = await forked(['a'])
    await l2.appendMany('a', [w('x', 1)])
    const s = await e2.snapshot('a')
    await e2.fork('b', s.snapshotId as string)
    await l2.appendMany('b', [w('y', 2)])
    const only = await e2.merge('main', ['b'])
    expect(await files(e2, only.snapshotId as string)).toMatchObject({ x: blobOf(1), y: blobOf(2) })
  })

  it('merges workspaces with no common snapshot from the empty tree, without base', async () => {
    const { root, engine, log } = await setup()
    await log.appendMany('one', [w('a', 1)])
    await log.appendMany('two', [w('b', 2)])
    const r = await engine.merge('one', ['two'])
    expect(r.base).toBeNull()
    expect(await files(engine, r.snapshotId as string)).toEqual({ a: blobOf(1), b: blobOf(2) })
    await log.append('one', w('c', 3))
    const scratch = await engine.replay('one', { fromScratch: true }) // restarts at the merge
    expect(scratch).toMatchObject({ parent: r.snapshotId, entriesReplayed: 1 })
    expect(Object.fromEntries(scratch.tree.entries())).toEqual({ a: blobOf(1), b: blobOf(2), c: blobOf(3) })
    const merge = logLines(root, 'one').find((l) => l.op === 'merge')
    expect(Object.keys(merge as object)).toEqual(['seq', 'op', 'from_workspace', 'from_snapshot', 'ts'])
  })

  it('refuses bad requests, and replay errors with strict, before writing anything', async () => {
    const { root, engine, log } = await forked(['f1'])
    await log.appendMany('f1', [d('a'), d('a')])
    const before = snapshotOfDisk(root)
    const replay = await refusal(engine.merge('main', ['f1'], { strict: true }))
    expect(replay.code).toBe('NOA_REPLAY')
    expect(replay.message).toBe('workspace f1 seq 3: cannot delete "a": no such path')
    const cases: Array<[string, string[], string, RegExp]> = [
      ['main', [], 'NOA_BAD_ARGUMENT', /at least one source/],
      ['main', ['main'], 'NOA_BAD_ARGUMENT', /is the target; it cannot be a source/],
      ['main', ['f1', 'f1'], 'NOA_BAD_ARGUMENT', /named twice/],
      ['main', ['nope'], 'NOA_NOT_FOUND', /workspace nope has no log/],
      ['../x', ['f1'], 'NOA_BAD_WORKSPACE', /workspace name/],
    ]
    for (const [target, sources, code, message] of cases) {
      const err = await refusal(engine.merge(target, sources))
      expect(err.code).toBe(code)
      expect(err.message).toMatch(message)
    }
    const policy = await refusal(engine.merge('main', ['f1'], { onConflict: 'ours' as 'lww' }))
    expect(policy.code).toBe('NOA_BAD_OPTION')
    expect(snapshotOfDisk(root)).toEqual(before)
  })

  it('property: non-conflicting sources merge to the base plus every change in any order; conflicts are all reported', async () => {
    const { log, engine } = await setup()
    let run = 0
    let withConflicts = 0
    const names = ['p0', 'p1', 'p2', 'p3', 'p4', 'q/a', 'q/b']
    const op = fc.record({ kind: fc.nat(9), path: fc.nat(6), other: fc.nat(6), blob: fc.nat(3) })
    const source = fc.array(op, { maxLength: 8 })
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(fc.nat(6), { maxLength: 5 }),
        fc.array(source, { minLength: 1, maxLength: 3 }),
        async (initial, sources) => {
          const id = run++
          const main = `m${id}`
          const baseFiles = new Map(initial.map((i) => [names[i] as string, blobOf(100 + i)]))
          if (baseFiles.size > 0) {
            await log.appendMany(
              main,
              [...baseFiles].map(([path, blob]) => ({ op: 'write', path, blob })),
            )
          } else await log.openWorkspace(main)
          const base = (await engine.snapshot(main, { allowEmpty: true })).snapshotId as string
          // Each source: its own valid ops on its own copy of the base; remember which entry last
          // touched each path (its ack gives ts and seq).
          const net: Array<Map<string, { value: string | null; ts: number; ws: string; seq: number }>> = []
          const wsNames: string[] = []
          await Promise.all(
            sources.map(async (ops, k) => {
              const ws = `s${id}-${k}`
              wsNames[k] = ws
              await engine.fork(ws, base)
              const state = new Map(baseFiles)
              const entries: EntryInput[] = []
              const touched: string[][] = []
              for (const o of ops) {
                const live = [...state.keys()]
                if (o.kind < 5 || live.length === 0) {
                  const path = names[o.path] as string
                  state.set(path, blobOf(o.blob))
                  entries.push(w(path, o.blob))
                  touched.push([path])
                } else if (o.kind < 7) {
                  const path = live[o.path % live.length] as string
                  state.delete(path)
                  entries.push(d(path))
                  touched.push([path])
                } else {
                  const from = live[o.path % live.length] as string
                  const to = names[o.other] as string
                  if (state.has(to)) continue
                  state.set(to, state.get(from) as string)
                  state.delete(from)
                  entries.push(mv(from, to))
                  touched.push([from, to])
                }
              }
              const acks = entries.length > 0 ? await log.appendMany(ws, entries) : []
              const last = new Map<string, { ts: number; seq: number }>()
              acks.forEach((a, i) => {
                for (const p of touched[i] as string[]) last.set(p, a)
              })
              const changes = new Map<string, { value: string | null; ts: number; ws: string; seq: number }>()
              for (const p of new Set([...baseFiles.keys(), ...state.keys()])) {
                const value = state.get(p) ?? null
                if (value !== (baseFiles.get(p) ?? null)) {
                  const at = last.get(p) as { ts: number; seq: number }
                  changes.set(p, { value, ts: at.ts, ws, seq: at.seq })
                }
              }
              net[k] = changes
            }),
          )
          // The model: conflicts are paths changed to different values; the rest apply in any order.
          const expected = new Map(baseFiles)
          const conflicting = new Set<string>()
          const byPath = new Map<
            string,
            Array<{ value: string | null; ts: number; ws: string; seq: number }>
          >()
          for (const changes of net) {
            for (const [p, c] of changes) byPath.set(p, [...(byPath.get(p) ?? []), c])
          }
          for (const [p, cs] of byPath) {
            if (cs.some((c) => c.value !== cs[0]?.value)) conflicting.add(p)
            const winner = [...cs]
              .sort((x, y) => x.ts - y.ts || (x.ws < y.ws ? -1 : 1) || x.seq - y.seq)
              .at(-1)
            if (winner?.value === null) expected.delete(p)
            else expected.set(p, winner?.value as string)
          }
          // Two targets at the base, merged with the sources in opposite orders.
          await engine.fork(`t${id}a`, base)
          await engine.fork(`t${id}b`, base)
          if (conflicting.size > 0) {
            withConflicts++
            const err = await refusal(engine.merge(`t${id}a`, wsNames, { onConflict: 'fail' }))
            expect(err.code).toBe('NOA_CONFLICT')
          }
          const ra = await engine.merge(`t${id}a`, wsNames)
          const rb = await engine.merge(`t${id}b`, [...wsNames].reverse())
          expect(ra.base).toBe(base)
          expect(rb.base).toBe(base)
          expect(ra.conflicts.map((c) => c.path).sort()).toEqual([...conflicting].sort())
          expect(rb.conflicts.map((c) => c.path).sort()).toEqual([...conflicting].sort())
          for (const c of ra.conflicts) {
            expect(new Set(c.sides.map((s) => s.workspace))).toEqual(
              new Set(net.flatMap((m, k) => (m.has(c.path) ? [wsNames[k]] : []))),
            )
          }
          expect(ra.tree).toBe(rb.tree)
          expect(await files(engine, ra.snapshotId as string)).toEqual(Object.fromEntries(expected))
        },
      ),
      { numRuns: 30 },
    )
    expect(withConflicts).toBeGreaterThan(0) // both halves of the property were exercised
    expect(withConflicts).toBeLessThan(run)
  })
})

describe('noa merge (CLI)', () => {
  it('prints the snapshot id and conflicts; --json; fail exits 1 with the conflicts listed', async () => {
    const root = tempDir()
    const cli = (args: string[], input?: string) => runCli([...args, '--root', root], { input })
    const jsonl = (entries: EntryInput[]) => entries.map((e) => JSON.stringify(e)).join('\n')
    cli(['append', 'main', '--no-blob-check'], jsonl([w('a', 1), w('b', 2)]))
    const base = cli(['snapshot', 'main']).stdout.trim()
    cli(['fork', 'f1', '--from', base])
    cli(['fork', 'f2', '--from', base])
    cli(['append', 'f1', '--no-blob-check'], jsonl([w('a', 3)]))
    cli(['append', 'f2', '--no-blob-check'], jsonl([w('a', 4), w('c', 5)]))
    const fail = cli(['merge', 'main', 'f1', 'f2', '--on-conflict', 'fail'])
    expect(fail.status).toBe(1)
    expect(fail.stderr).toBe('noa merge: 1 conflicting path ("a"); nothing was written\n')
    expect(fail.stdout).toMatch(
      /^conflict a \(kept f2\)\n {2}f1\twrite\t0{63}3\tts \d+\tseq 2\n {2}f2\twrite\t0{63}4\tts \d+\tseq 2\n$/,
    )
    const failJson = JSON.parse(cli(['merge', 'main', 'f1', 'f2', '--on-conflict', 'fail', '--json']).stdout)
    expect(failJson).toMatchObject({ snapshotId: null, base, conflicts: [{ path: 'a', winner: 'f2' }] })
    const ok = cli(['merge', 'main', 'f1', 'f2', '--json'])
    expect(ok.status).toBe(0)
    const out = JSON.parse(ok.stdout)
    expect(Object.keys(out)).toEqual([
      'created',
      'snapshotId',
      'base',
      'conflicts',
      'sources',
      'entriesReplayed',
      'noEffect',
    ])
    expect(out).toMatchObject({
      base,
      conflicts: [{ path: 'a', sides: [{ workspace: 'f1' }, { workspace: 'f2' }] }],
    })
    expect(cli(['tree', out.snapshotId]).stdout).toBe(`a\t${blobOf(4)}\nb\t${blobOf(2)}\nc\t${blobOf(5)}\n`)
    cli(['append', 'f1', '--no-blob-check'], jsonl([w('z', 6)]))
    const plain = cli(['merge', 'main', 'f1'])
    expect(plain.status).toBe(0)
    expect(plain.stdout).toMatch(/^noa_[0-9a-f]{64}\n$/)
    const again = cli(['merge', 'main', 'f1'])
    expect(again.status).toBe(0)
    expect(again.stdout).toBe(plain.stdout) // the head, which already is the merged state
    expect(again.stderr).toBe('noa merge: already up to date: f1 bring nothing new into main\n')
    expect(cli(['merge', 'main', 'nope']).status).toBe(1)
    expect(cli(['merge', 'main']).status).toBe(2)
    expect(cli(['merge', 'main', 'f1', '--on-conflict', 'ours']).status).toBe(2)
  })
})
