/**
 * Tree packs. noa writes `noa-tree-pack 2` (the packs a pack takes folders from listed once, a
 * hint per record naming which one holds each kept subfolder, tables under a hash) and reads
 * `noa-tree-pack 1` (a ref line per kept subfolder) as well: test/fixtures/packs-v1/root was
 * written by the code that wrote v1 packs and is committed as it was, with what it read
 * (expected.json), so a later change cannot break such roots silently.
 */
import { cpSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import fc from 'fast-check'
import { describe, expect, it, onTestFinished } from 'vitest'
import { AgentLog, ObjectStore, SnapshotEngine } from '../../dist/src/index.js'
import { packFromSorted } from '../../dist/src/store/pack-walk.js'
import { comparePaths, TreeBuilder } from '../../dist/src/store/tree.js'
import { verifyStore } from '../../dist/src/store/verify.js'
import { blobOf, ROOT_DIR, runCli, tempDir } from '../helpers/index.js'

const FIXTURE = join(ROOT_DIR, 'test', 'fixtures', 'packs-v1')
const ids = JSON.parse(readFileSync(join(FIXTURE, 'ids.json'), 'utf8')) as Record<string, string>
const expected = JSON.parse(readFileSync(join(FIXTURE, 'expected.json'), 'utf8')) as {
  snapshots: Record<string, { id: string; tree: string; files: Record<string, string> }>
  now: Record<string, { parent: string | null; seq: number; files: Record<string, string> }>
  gc: { reachable: number; removed: number; missing: number }
}

function copyRoot(): string {
  const root = join(tempDir(), 'root')
  cpSync(join(FIXTURE, 'root'), root, { recursive: true })
  return root
}

function objectFiles(root: string): string[] {
  const dir = join(root, 'objects')
  return readdirSync(dir).flatMap((shard) => readdirSync(join(dir, shard)).map((n) => join(dir, shard, n)))
}

function packHeaders(root: string): Record<string, number> {
  const out: Record<string, number> = {}
  for (const f of objectFiles(root)) {
    const head = readFileSync(f).subarray(0, 16).toString('latin1')
    if (head.startsWith('noa-tree-pack ')) out[head.trim()] = (out[head.trim()] ?? 0) + 1
  }
  return out
}

/** The regions of a v2 pack, from its counts line. */
function regions(bytes: Buffer) {
  const nl = bytes.indexOf(0x0a, 16)
  const [inline, sources, width, hints] = bytes.toString('latin1', 16, nl).split(' ').map(Number) as number[]
  const hash = nl + 1
  const src = hash + 32
  const index = src + (sources as number) * 32
  const hintAt = index + (inline as number) * 40
  const data = hintAt + (hints as number)
  return { inline, sources, width, hints, counts: 16, hash, src, index, hintAt, data }
}

/** `snapshots` snapshots of 12 folders in 3 areas; each later one changes two files. */
async function chain(snapshots: number) {
  const root = tempDir()
  const log = await AgentLog.open({ root, workers: 0 })
  onTestFinished(() => log.close().then(() => undefined))
  const engine = new SnapshotEngine({ log })
  const store = new ObjectStore(root)
  const model = new Map<string, string>()
  // Stored blobs, so that verify --objects has nothing to say but about the trees.
  const blob = (n: number) => store.putBlob(`content ${n}\n`)
  const write = async (entries: Array<{ path: string; blob: string }>) => {
    await log.appendMany(
      'ws',
      entries.map((e) => ({ op: 'write' as const, ...e })),
    )
    for (const e of entries) model.set(e.path, e.blob)
  }
  const first: Array<{ path: string; blob: string }> = []
  for (let i = 0; i < 96; i++) first.push({ path: `p/a${i % 3}/m${i % 12}/f${i}`, blob: await blob(i) })
  await write(first)
  const made = [{ ...(await engine.snapshot('ws')), files: new Map(model) }]
  for (let k = 1; k < snapshots; k++) {
    await write([
      { path: `p/a${k % 3}/m${k % 12}/f${k}`, blob: await blob(1000 + k) },
      { path: `p/a${(k + 1) % 3}/m${(k * 5) % 12}/new${k}`, blob: await blob(2000 + k) },
    ])
    made.push({ ...(await engine.snapshot('ws')), files: new Map(model) })
  }
  return { root, engine, store, made, write, blob }
}

describe('tree packs (v2)', () => {
  it('round trip: each pack names the packs it takes folders from once, and a fresh engine reads every snapshot of the chain', async () => {
    const { root, store, made } = await chain(8)
    for (const [k, s] of made.entries()) {
      const bytes = readFileSync(store.pathOf(s.tree))
      expect(bytes.subarray(0, 16).toString('latin1')).toBe('noa-tree-pack 2\n')
      const r = regions(bytes)
      if (k === 0) {
        // root, p, 3 areas, 12 modules; nothing kept from elsewhere
        expect([r.inline, r.sources, r.hints]).toEqual([17, 0, 0])
        continue
      }
      // The folders on the two changed paths are new; everything else is named by its pack,
      // each such pack once.
      expect(r.inline).toBeLessThanOrEqual(8)
      expect(r.sources).toBeGreaterThanOrEqual(1)
      expect(r.sources).toBeLessThanOrEqual(k)
      const sources = Array.from({ length: r.sources as number }, (_, i) =>
        bytes.toString('hex', r.src + i * 32, r.src + i * 32 + 32),
      )
      expect(new Set(sources).size).toBe(sources.length)
      for (const p of sources) expect(made.slice(0, k).map((m) => m.tree)).toContain(p)
    }
    // Every engine is fresh: each reads its packs from disk, one hop per folder.
    for (const s of made) {
      const tree = await new SnapshotEngine({ root }).tree(s.snapshotId as string)
      expect(tree.id).toBe(s.tree)
      expect(new Map(tree.entries())).toEqual(s.files)
      expect(tree.get('p/a1/m1/f1')).toBe(s.files.get('p/a1/m1/f1'))
      expect(tree.get('p/a1')).toBeUndefined()
    }
    const full = await new SnapshotEngine({ root }).replay('ws', { fromScratch: true })
    expect(full.tree.id).toBe(made.at(-1)?.tree)
    // A fresh process reads the chain too, and verify checks every pack.
    const cli = runCli(['tree', made.at(-1)?.snapshotId as string, '--root', root])
    expect(cli.status).toBe(0)
    expect(cli.stdout.trim().split('\n').length).toBe(made.at(-1)?.files.size)
    const verify = runCli(['verify', 'ws', '--objects', '--root', root])
    expect(verify.stderr).toBe('')
    expect(verify.status).toBe(0)
  })

  it('gc keeps every pack a reachable tree reads from, and removes the packs only pruned snapshots needed', async () => {
    const { root, engine, store, made, write, blob } = await chain(6)
    // Three more that each change the same file: each of their packs holds only the folders on
    // that path, which the next one makes again.
    for (let k = 0; k < 3; k++) {
      await write([{ path: 'p/a0/m0/f0', blob: await blob(3000 + k) }])
      const files = new Map(made.at(-1)?.files)
      files.set('p/a0/m0/f0', await blob(3000 + k))
      made.push({ ...(await engine.snapshot('ws')), files })
    }
    await engine.prune('ws', { keepLast: 2 })
    const kept = made.slice(-2)
    const needed = new Set<string>()
    for (const s of kept) for (const id of await new ObjectStore(root).treeObjects(s.tree)) needed.add(id)
    // The kept trees read folders from packs of pruned snapshots (the first holds most of them).
    expect(needed.has(made[0]?.tree as string)).toBe(true)
    const gc = await new SnapshotEngine({ root }).gc({ dryRun: false, graceMs: 0 })
    expect(gc.missing).toBe(0)
    for (const id of needed) expect(store.has(id), id).toBe(true)
    const gone = made.slice(0, -2).filter((s) => !needed.has(s.tree) && !store.has(s.tree))
    expect(gone.length).toBeGreaterThan(0)
    for (const s of kept) {
      const tree = await new SnapshotEngine({ root }).tree(s.snapshotId as string)
      expect(new Map(tree.entries())).toEqual(s.files)
    }
    expect(await verifyStore(new SnapshotEngine({ root }), 'ws', { objects: true })).toEqual([])
  })

  it('a tree that comes back to one stored before reads back in the engine that made it', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 0 })
    onTestFinished(() => log.close().then(() => undefined))
    const engine = new SnapshotEngine({ log })
    await log.appendMany(
      'ws',
      Array.from({ length: 20 }, (_, i) => ({
        op: 'write' as const,
        path: `d${i % 4}/f${i}`,
        blob: blobOf(i),
      })),
    )
    const s0 = await engine.snapshot('ws')
    await log.append('ws', { op: 'write', path: 'd1/f1', blob: blobOf(99) })
    await engine.snapshot('ws')
    await log.append('ws', { op: 'write', path: 'd1/f1', blob: blobOf(1) })
    const back = await engine.snapshot('ws')
    expect(back.tree).toBe(s0.tree)
    await log.append('ws', { op: 'write', path: 'd2/f2', blob: blobOf(98) })
    const next = await engine.snapshot('ws')
    for (const e of [engine, new SnapshotEngine({ root })]) {
      const t = await e.tree(next.snapshotId as string)
      expect(t.get('d0/f0')).toBe(blobOf(0))
      expect(t.get('d1/f1')).toBe(blobOf(1))
      expect(t.get('d2/f2')).toBe(blobOf(98))
      expect(t.size).toBe(20)
    }
  })

  it('a folder rebuilt in place from its base has the id a whole build gives, and reads back in a fresh store', async () => {
    // Names that sort apart as bytes and as UTF-16 (U+FF5E, U+1F600), a file beside a folder of
    // the same name, and names that are prefixes of each other.
    const NAMES = ['a', 'a b', 'ab', 'b', 'é', '～', '😀', 'a.txt']
    const name = fc.constantFrom(...NAMES)
    const path = fc.array(name, { minLength: 1, maxLength: 4 }).map((p) => p.join('/'))
    const change = fc.tuple(path, fc.option(fc.nat(50), { nil: null }))
    const root = tempDir()
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(change, { maxLength: 30 }), { minLength: 1, maxLength: 5 }),
        async (rounds) => {
          const store = new ObjectStore(root)
          const model = new Map<string, string>()
          let tree = await store.getTree((await store.putTree(null, new TreeBuilder())) as string)
          for (const batch of rounds) {
            const builder = new TreeBuilder(tree)
            for (const [p, n] of batch) {
              // A path cannot be a file and hold files: drop what the change would shadow.
              for (const k of [...model.keys()]) {
                if (k.startsWith(`${p}/`) || p.startsWith(`${k}/`)) {
                  model.delete(k)
                  builder.remove(k)
                }
              }
              if (n === null) {
                if (model.delete(p)) builder.remove(p)
              } else {
                model.set(p, blobOf(n))
                builder.set(p, blobOf(n))
              }
            }
            const id = await store.putTree(null, builder)
            const sorted = [...model].sort((x, y) => comparePaths(x[0], y[0]))
            expect(id).toBe(packFromSorted(sorted).id)
            tree = await store.getTree(id)
            expect([...tree.entries()]).toEqual(sorted)
            const fresh = await new ObjectStore(root).getTree(id)
            expect([...fresh.entries()]).toEqual(sorted)
            for (const [p, b] of sorted) expect(fresh.get(p)).toBe(b)
          }
        },
      ),
      { numRuns: 60 },
    )
  })

  it('a pack of thousands of folders, built on in the engine that made it and read back fresh, lists what a whole build does', async () => {
    // More folders and records than the builder's first pools hold (4,096 record ends and
    // source numbers), so they grow while folders are written, and later builds read the
    // folders of the pack just built from those pools, not from a parse.
    const root = tempDir()
    const store = new ObjectStore(root)
    const model = new Map<string, string>()
    const builder = new TreeBuilder()
    for (let i = 0; i < 6000; i++) {
      const path = `d${i % 7}/m${i % 5000}/f${i}`
      model.set(path, blobOf(i))
      builder.set(path, blobOf(i))
    }
    let id = (await store.putTree(null, builder)) as string
    let tree = await store.getTree(id)
    for (let round = 1; round <= 3; round++) {
      const next = new TreeBuilder(tree)
      // Every folder changes in round 1; then a scattered part, with removals and new folders.
      for (let i = 0; i < 6000; i += round === 1 ? 1 : 2 * round - 1) {
        const path = `d${i % 7}/m${i % 5000}/f${i}`
        if (round === 3 && i % 2 === 0 && model.has(path)) {
          model.delete(path)
          next.remove(path)
        } else {
          model.set(path, blobOf(round * 10_000 + i))
          next.set(path, blobOf(round * 10_000 + i))
        }
        const added = `d${i % 7}/n${round}-${i % 40}/g${i}`
        model.set(added, blobOf(i))
        next.set(added, blobOf(i))
      }
      id = (await store.putTree(null, next)) as string
      const sorted = [...model].sort((x, y) => comparePaths(x[0], y[0]))
      expect(id).toBe(packFromSorted(sorted).id)
      tree = await store.getTree(id)
      expect([...tree.entries()]).toEqual(sorted)
      const fresh = await new ObjectStore(root).getTree(id)
      expect([...fresh.entries()]).toEqual(sorted)
    }
  })

  it('verify --objects finds one flipped byte anywhere in a pack', async () => {
    const { root, store, made } = await chain(3)
    const victim = store.pathOf(made[2]?.tree as string)
    const good = readFileSync(victim)
    const r = regions(good)
    expect(r.hints).toBeGreaterThan(0)
    const places: Record<string, number> = {
      counts: r.counts + 1,
      hash: r.hash + 5,
      source: r.src + 3,
      index: r.index + 40 + 10,
      length: r.index + 32 + 3,
      hint: r.hintAt + (r.hints as number) - 1,
      // a hex digit of a hash in the last folder: the framing still parses, only its id tells
      data: good.length - 3,
    }
    for (const [where, at] of Object.entries(places)) {
      const bytes = Buffer.from(good)
      bytes[at] = where === 'data' ? (bytes[at] === 0x30 ? 0x31 : 0x30) : (bytes[at] as number) ^ 0x01
      writeFileSync(victim, bytes)
      const cli = runCli(['verify', 'ws', '--objects', '--root', root])
      expect(cli.status, where).toBe(1)
      expect(cli.stdout + cli.stderr, where).toContain(`tree ${made[2]?.tree}`)
      expect(cli.stdout + cli.stderr, where).toMatch(/corrupt|not a tree pack/)
    }
    writeFileSync(victim, good)
    expect(runCli(['verify', 'ws', '--objects', '--root', root]).status).toBe(0)
  })
})

describe('a root written with v1 packs', () => {
  it('is still v1 packs', () => {
    expect(packHeaders(join(FIXTURE, 'root'))).toEqual({ 'noa-tree-pack 1': 6 })
  })

  it('reads every snapshot and head as the code that wrote it did, verifies, and gc keeps every object', async () => {
    const root = copyRoot()
    const engine = new SnapshotEngine({ root })
    for (const [name, want] of Object.entries(expected.snapshots)) {
      const tree = await engine.tree(ids[name] as string)
      expect(tree.id, name).toBe(want.tree)
      expect(Object.fromEntries(tree.entries()), name).toEqual(want.files)
    }
    for (const [ws, want] of Object.entries(expected.now)) {
      const s = await engine.replay(ws)
      expect({ parent: s.parent, seq: s.seq, files: Object.fromEntries(s.tree.entries()) }).toEqual(want)
    }
    for (const ws of ['main', 'feat']) expect(await verifyStore(engine, ws, { objects: true })).toEqual([])
    const gc = await engine.gc({ graceMs: 0 })
    expect({ reachable: gc.reachable, removed: gc.removed, missing: gc.missing }).toEqual(expected.gc)
  })

  it('takes v2 snapshots on top that a fresh engine and gc follow into the v1 packs', async () => {
    const root = copyRoot()
    const store = new ObjectStore(root)
    const log = await AgentLog.open({ root, objects: store, workers: 0 })
    onTestFinished(() => log.close().then(() => undefined))
    const engine = new SnapshotEngine({ log, store })
    const blob = await store.putBlob('new content\n')
    await log.appendMany('main', [{ op: 'write', path: 'src/d2/new.ts', blob }])
    const s = await engine.snapshot('main', { message: 'on top' })
    expect(readFileSync(store.pathOf(s.tree)).subarray(0, 16).toString('latin1')).toBe('noa-tree-pack 2\n')
    await log.appendMany('main', [{ op: 'write', path: 'src/d4/other.ts', blob }])
    const t = await engine.snapshot('main', { message: 'again' })
    const want: Record<string, string> = {
      ...expected.now.main?.files,
      'src/d2/new.ts': blob,
      'src/d4/other.ts': blob,
    }
    await log.close()
    const gc = await new SnapshotEngine({ root }).gc({ dryRun: false, graceMs: 0 })
    expect(gc.missing).toBe(0)
    const fresh = new SnapshotEngine({ root })
    expect(Object.fromEntries((await fresh.tree(t.snapshotId as string)).entries())).toEqual(want)
    for (const [name, w] of Object.entries(expected.snapshots)) {
      expect(Object.fromEntries((await fresh.tree(ids[name] as string)).entries()), name).toEqual(w.files)
    }
    const cli = runCli(['verify', '--objects', '--root', root])
    expect(cli.stderr).toBe('')
    expect(cli.status).toBe(0)
  })

  it('fails verify --objects when a folder of a v1 pack is damaged', () => {
    const root = copyRoot()
    const victim = objectFiles(root).find((f) =>
      readFileSync(f).subarray(0, 16).toString('latin1').startsWith('noa-tree-pack 1\n'),
    ) as string
    const bytes = readFileSync(victim)
    const at = bytes.length - 3
    bytes[at] = bytes[at] === 0x30 ? 0x31 : 0x30
    writeFileSync(victim, bytes)
    const cli = runCli(['verify', '--objects', '--root', root])
    expect(cli.status).toBe(1)
    expect(cli.stderr).toMatch(/tree [0-9a-f]{64}.*is corrupt/)
  })
})
