/**
 * Replay is total: every entry append accepts has a defined effect (a delete or rename of a
 * missing path changes nothing, and the snapshot records it), snapshots and merges with nothing
 * new write nothing, and blobs that are not stored are found before they surprise anyone.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  AgentLog,
  type EntryInput,
  type NoEffect,
  ObjectStore,
  SnapshotEngine,
} from '../../dist/src/index.js'
import { encodeSnapshotRecord, sha256 } from '../../dist/src/store/index.js'
import { blobOf, runCli, tempDir } from '../helpers/index.js'
import { files, refusal, setup } from '../helpers/snapshot.js'

const w = (path: string, n: number): EntryInput => ({ op: 'write', path, blob: blobOf(n) })
const d = (path: string): EntryInput => ({ op: 'delete', path })
const mv = (from: string, to: string): EntryInput => ({ op: 'rename', from, to })

describe('total replay', () => {
  it('gives deletes and renames of missing paths no effect, records them, and renames onto a path replace it', async () => {
    const { log, engine } = await setup()
    await log.appendMany('ws', [w('a', 1), d('zzz'), mv('nope', 'x'), w('b', 2), mv('a', 'b'), d('a')])
    const s = await engine.snapshot('ws', { message: 'm' })
    expect(s.created).toBe(true)
    expect(s.noEffect).toEqual([
      { seq: 2, reason: 'delete-missing', path: 'zzz' },
      { seq: 3, reason: 'rename-missing', path: 'nope' },
      { seq: 6, reason: 'delete-missing', path: 'a' },
    ])
    expect(s.entriesReplayed).toBe(3)
    expect(await files(engine, s.snapshotId as string)).toEqual({ b: blobOf(1) }) // the seed's tree[to] = tree.remove(from)
    const record = await engine.getSnapshot(s.snapshotId as string)
    expect(record.noEffect).toEqual([
      { seq: 2, reason: 'delete-missing' },
      { seq: 3, reason: 'rename-missing' },
      { seq: 6, reason: 'delete-missing' },
    ])
    // Kept on disk under its own key, the log's lines unchanged.
    const raw = readFileSync(engine.store.pathOf((s.snapshotId as string).slice(4)), 'utf8')
    expect(raw).toContain(
      '"no_effect":[{"seq":2,"reason":"delete-missing"},{"seq":3,"reason":"rename-missing"}',
    )
    expect((await engine.listSnapshots('ws'))[0]?.noEffect).toEqual(record.noEffect)
    // A full replay agrees, and the workspace goes on.
    const full = await engine.replay('ws', { fromScratch: true })
    expect(full.tree.id).toBe(s.tree)
    expect(full.noEffect.map((n) => n.seq)).toEqual([2, 3, 6])
    await log.append('ws', w('c', 3))
    const next = await engine.snapshot('ws')
    expect(next).toMatchObject({ created: true, parent: s.snapshotId, noEffect: [], entriesReplayed: 1 })
  })

  it('a lone entry without effect is still a snapshot (so it is recorded); strict refuses it', async () => {
    const { log, engine } = await setup()
    await log.append('ws', w('a', 1))
    const s1 = await engine.snapshot('ws')
    await log.append('ws', d('gone'))
    const strict = await refusal(engine.snapshot('ws', { strict: true }))
    expect(strict.code).toBe('NOA_REPLAY')
    expect(strict.message).toBe('workspace ws seq 3: cannot delete "gone": no such path')
    const s2 = await engine.snapshot('ws')
    expect(s2).toMatchObject({
      created: true,
      tree: s1.tree,
      noEffect: [{ seq: 3, reason: 'delete-missing' }],
    })
  })

  it('records without the new fields (made before them) read as before, and encode to the same bytes', async () => {
    const root = tempDir()
    const store = new ObjectStore(root)
    const input = {
      workspace: 'ws',
      tree: sha256('t'),
      since: 0,
      seq: 3,
      message: 'old',
      ts: 1717592400000000,
    }
    const old = `noa-snapshot 1\n{"workspace":"ws","tree":"${input.tree}","since":0,"seq":3,"message":"old","ts":1717592400000000}\n`
    expect(encodeSnapshotRecord(input).toString()).toBe(old) // no new field, no new bytes: ids unchanged
    const [hash] = await store.putObjects([Buffer.from(old)])
    const record = await store.getSnapshot(`noa_${hash}`)
    expect(record).toEqual({ id: `noa_${hash}`, ...input })
    expect(record.noEffect).toBeUndefined()
    // A reader meeting a key it does not know ignores it (as older readers ignore no_effect).
    const newer = old.replace('"message"', '"future":[1],"message"')
    const [h2] = await store.putObjects([Buffer.from(newer)])
    expect((await store.getSnapshot(`noa_${h2}`)).message).toBe('old')
  })
})

describe('nothing new', () => {
  it('snapshot says so and writes nothing; --allow-empty writes one (API and CLI)', async () => {
    const { root, log, engine } = await setup()
    const empty = await engine.snapshot('ws-empty-check').catch((e) => e)
    expect(empty.code).toBe('NOA_NOT_FOUND')
    await log.append('ws', w('a', 1))
    const s = await engine.snapshot('ws')
    const file = join(root, 'agent-logs', 'ws.log')
    const before = readFileSync(file)
    const again = await engine.snapshot('ws')
    expect(again).toMatchObject({ created: false, snapshotId: s.snapshotId, tree: s.tree, entry: null })
    expect(readFileSync(file)).toEqual(before)
    await log.close()
    const cli = runCli(['snapshot', 'ws', '--root', root])
    expect(cli.status).toBe(0)
    expect(cli.stdout).toBe(`${s.snapshotId}\n`)
    expect(cli.stderr).toBe(
      `noa snapshot: nothing new in ws since ${s.snapshotId} (seq 2); no snapshot written (--allow-empty writes one anyway)\n`,
    )
    expect(readFileSync(file)).toEqual(before)
    const forced = runCli(['snapshot', 'ws', '--allow-empty', '--json', '--root', root])
    expect(JSON.parse(forced.stdout)).toMatchObject({ created: true, parent: s.snapshotId, tree: s.tree })
  })

  it('merge with nothing new is already up to date and writes nothing', async () => {
    const { root, log, engine } = await setup()
    await log.append('main', w('a', 1))
    const base = await engine.snapshot('main')
    await engine.fork('feat', base.snapshotId as string)
    const files0 = () => ['main', 'feat'].map((ws) => readFileSync(join(root, 'agent-logs', `${ws}.log`)))
    // A fork with no work of its own brings nothing.
    let before = files0()
    const r0 = await engine.merge('main', ['feat'])
    expect(r0).toMatchObject({ created: false, snapshotId: base.snapshotId, entry: null, conflicts: [] })
    expect(files0()).toEqual(before)
    await log.append('feat', w('b', 2))
    const r1 = await engine.merge('main', ['feat'])
    expect(r1.created).toBe(true)
    before = files0()
    const r2 = await engine.merge('main', ['feat'])
    expect(r2).toMatchObject({ created: false, snapshotId: r1.snapshotId })
    expect(files0()).toEqual(before)
    // The target's own new entries do not make a merge (they wait for its next snapshot).
    await log.append('main', w('c', 3))
    expect((await engine.merge('main', ['feat'])).created).toBe(false)
  })
})

describe('blobs that are not stored', () => {
  it('noa append refuses a write whose blob is not stored, naming the line; --no-blob-check lets it in', async () => {
    const root = tempDir()
    const stored = runCli(['blob', 'put', '-', '--root', root], { input: 'hello\n' }).stdout.trim()
    const input = `${JSON.stringify({ op: 'write', path: 'ok', blob: stored })}\n${JSON.stringify(w('missing', 7))}\n`
    const r = runCli(['append', 'ws', '--root', root], { input })
    expect(r.status).toBe(1)
    expect(r.stderr).toBe(
      `noa append: stdin:2: blob ${blobOf(7)} (for "missing") is not in the object store; store it first with noa blob put, or pass --no-blob-check; nothing was written\n`,
    )
    expect(runCli(['log', 'ws', '--root', root]).status).toBe(1) // no log was even created
    expect(runCli(['append', 'ws', '--no-blob-check', '--root', root], { input }).status).toBe(0)
    // The snapshot names the blob and the seq that wrote it; verify --objects too.
    const s = runCli(['snapshot', 'ws', '--root', root])
    expect(s.status).toBe(0)
    expect(s.stderr).toBe(
      `noa snapshot: warning: missing is blob ${blobOf(7)}, not in the object store (written at seq 2 of ws)\n`,
    )
    const json = JSON.parse(runCli(['snapshot', 'ws', '--json', '--allow-empty', '--root', root]).stdout)
    expect(json.missingBlobs).toEqual([]) // only blobs new since the parent are looked up
    const v = runCli(['verify', '--objects', '--root', root])
    expect(v.status).toBe(1)
    expect(v.stderr).toMatch(
      new RegExp(
        `^ {2}snapshot noa_[0-9a-f]{64} holds "missing" as blob ${blobOf(7)}, which is not in the object store \\(written at seq 2 of ws\\)$`,
        'm',
      ),
    )
    expect(runCli(['verify', '--root', root]).status).toBe(0) // without --objects, blobs are not looked up
  })

  it('a snapshot takes blobs this process stored as stored, and still names one gc removed or one never stored', async () => {
    const { root, log, engine } = await setup()
    const other = new ObjectStore(root) // another store of the same folder: what it wrote counts
    const kept = await other.putBlob('kept')
    await log.append('ws', { op: 'write', path: 'kept', blob: kept })
    const collected = await other.putBlob('collected') // named by no entry yet: gc may take it
    const gc = await new SnapshotEngine({ root }).gc({ dryRun: false, graceMs: 0 })
    expect(gc.removed).toBe(1)
    expect(other.has(collected)).toBe(false)
    await log.appendMany('ws', [{ op: 'write', path: 'collected', blob: collected }, w('never', 5)])
    const s = await engine.snapshot('ws')
    expect(s.missingBlobs.map((m) => [m.path, m.seq])).toEqual([
      ['collected', 2],
      ['never', 3],
    ])
    // A fresh process knows nothing stored: it looks each one up, and says the same.
    await log.appendMany('ws', [w('never2', 6), { op: 'write', path: 'kept2', blob: kept }])
    await log.close()
    const cli = runCli(['snapshot', 'ws', '--json', '--root', root])
    expect(cli.status).toBe(0)
    expect(JSON.parse(cli.stdout).missingBlobs.map((m: { path: string }) => m.path)).toEqual(['never2'])
  })

  it('log.append checks blobs on request through the objects the log was opened with', async () => {
    const root = tempDir()
    const store = new ObjectStore(root)
    const blob = await store.putBlob('content')
    const log = await AgentLog.open({ root, workers: 1, objects: store })
    try {
      await log.append('ws', { op: 'write', path: 'a', blob }, { checkBlobs: true })
      const err = await refusal(log.append('ws', w('b', 9), { checkBlobs: true }))
      expect(err.code).toBe('NOA_MISSING_BLOB')
      expect(err.message).toMatch(/^entry: blob 0{63}9 \(for "b"\) is not in the object store/)
      const many = await refusal(
        log.appendMany('ws', [w('c', 1), { op: 'write', path: 'd', blob }], { checkBlobs: true }),
      )
      expect(many.message).toMatch(/^entry 1: blob/)
      await log.append('ws', w('b', 9)) // off unless asked for
      expect((await log.verify('ws')).lastSeq).toBe(2)
      const bad = await refusal(log.append('ws', w('b', 9), { checkBlob: true } as never))
      expect(bad.code).toBe('NOA_BAD_OPTION')
    } finally {
      await log.close()
    }
    const strictLog = await AgentLog.open({ root, workers: 1, objects: store, checkBlobs: true })
    try {
      expect((await refusal(strictLog.append('ws', w('e', 5)))).code).toBe('NOA_MISSING_BLOB')
      await strictLog.append('ws', w('e', 5), { checkBlobs: false })
    } finally {
      await strictLog.close()
    }
    const plain = await AgentLog.open({ root, workers: 1 })
    try {
      expect((await refusal(plain.append('ws', w('e', 5), { checkBlobs: true }))).code).toBe('NOA_BAD_OPTION')
    } finally {
      await plain.close()
    }
    await expect(AgentLog.open({ root, checkBlobs: true })).rejects.toMatchObject({ code: 'NOA_BAD_OPTION' })
  })
})

describe('property: random accepted entries always snapshot, fork and merge', () => {
  const PATHS = ['a', 'b', 'src/a', 'src/b', 'é', 'z z']
  type Op = { kind: number; path: number; other: number; blob: number }
  const op = fc.record({
    kind: fc.nat(9),
    path: fc.nat(PATHS.length - 1),
    other: fc.nat(PATHS.length - 1),
    blob: fc.nat(5),
  })

  /** Applies ops to a model; returns the entries and the no-effect seqs it expects. */
  function play(model: Map<string, string>, ops: Op[], firstSeq: number) {
    const entries: EntryInput[] = []
    const noEffect: Array<{ seq: number; reason: NoEffect['reason'] }> = []
    for (const o of ops) {
      const seq = firstSeq + entries.length
      const path = PATHS[o.path] as string
      const other = PATHS[o.other] as string
      if (o.kind < 5) {
        const blob = blobOf(o.blob)
        model.set(path, blob)
        entries.push({ op: 'write', path, blob })
      } else if (o.kind < 7) {
        if (!model.delete(path)) noEffect.push({ seq, reason: 'delete-missing' })
        entries.push({ op: 'delete', path })
      } else {
        if (path === other) continue // append refuses from === to
        const blob = model.get(path)
        if (blob === undefined) noEffect.push({ seq, reason: 'rename-missing' })
        else {
          model.delete(path)
          model.set(other, blob)
        }
        entries.push({ op: 'rename', from: path, to: other })
      }
    }
    return { entries, noEffect }
  }

  it('and each record lists exactly the entries a model finds without effect', async () => {
    const { log, engine } = await setup()
    // Blobs 0..2 are stored, 3..5 are not.
    for (let n = 0; n < 3; n++) {
      const path = engine.store.pathOf(blobOf(n))
      await engine.store.write([{ id: blobOf(n), data: Buffer.from(`blob ${n}`), exact: false }])
      expect(readFileSync(path, 'utf8')).toBe(`blob ${n}`)
    }
    let run = 0
    await fc.assert(
      fc.asyncProperty(
        fc.array(op, { maxLength: 20 }),
        fc.array(op, { maxLength: 20 }),
        fc.array(op, { maxLength: 20 }),
        async (mainOps, featOps, mainLater) => {
          const main = `m${run}`
          const feat = `f${run++}`
          const model = new Map<string, string>()
          const first = play(model, mainOps, 1)
          if (first.entries.length > 0) await log.appendMany(main, first.entries)
          else await log.openWorkspace(main)
          const s = await engine.snapshot(main, { allowEmpty: true })
          expect((await engine.getSnapshot(s.snapshotId as string)).noEffect ?? []).toEqual(first.noEffect)
          expect(Object.fromEntries((await engine.tree(s.snapshotId as string)).entries())).toEqual(
            Object.fromEntries(model),
          )
          const unstored = [...model]
            .filter(([, b]) => !engine.store.has(b))
            .map(([p]) => p)
            .sort()
          expect(s.missingBlobs.map((m) => m.path).sort()).toEqual(unstored)
          // Fork, work on both sides, merge: never refused.
          await engine.fork(feat, s.snapshotId as string)
          const featModel = new Map(model)
          const onFeat = play(featModel, featOps, 2)
          if (onFeat.entries.length > 0) await log.appendMany(feat, onFeat.entries)
          const later = play(model, mainLater, s.seq + 2)
          if (later.entries.length > 0) await log.appendMany(main, later.entries)
          const m = await engine.merge(main, [feat])
          if (!m.created) {
            expect(onFeat.entries.length).toBe(0)
            return
          }
          const record = await engine.getSnapshot(m.snapshotId as string)
          expect(record.noEffect ?? []).toEqual(later.noEffect)
          const source = m.sources[0]
          if (source?.created) {
            expect((await engine.getSnapshot(source.snapshotId as string)).noEffect ?? []).toEqual(
              onFeat.noEffect,
            )
          }
          // The merged tree holds every path either side changed, as one of them left it.
          const merged = Object.fromEntries((await engine.tree(m.snapshotId as string)).entries())
          for (const p of PATHS) {
            const sides = new Set([model.get(p), featModel.get(p)])
            expect(sides.has(merged[p])).toBe(true)
          }
        },
      ),
      { numRuns: 30 },
    )
  })
})
