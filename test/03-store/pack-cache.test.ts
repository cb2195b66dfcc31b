/**
 * The packs an ObjectStore keeps decoded between reads stay within a byte budget
 * (`packCacheBytes`), so a host that keeps one engine open and takes snapshot after snapshot
 * does not keep every pack it ever built. A pack let go is read from its file again when a
 * later snapshot or read needs one of its folders: the trees and their ids are the same.
 */
import { spawnSync } from 'node:child_process'
import { statSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, expect, it, onTestFinished } from 'vitest'
import { AgentLog, ObjectStore, SnapshotEngine } from '../../dist/src/index.js'
import { blobOf, DIST, tempDir } from '../helpers/index.js'

/** A seeded stream of numbers in [0, n). */
function seeded(seed: number): (n: number) => number {
  let a = seed >>> 0
  return (n) => {
    a = (Math.imul(a, 1664525) + 1013904223) >>> 0
    return a % n
  }
}

/**
 * The cache's byte count, summed the slow way: every pack it keeps, as it is now. The store
 * keeps a running sum instead (each pack tells it how it grows): the two must agree.
 */
function summedHeld(store: ObjectStore): number {
  const packs = (store as unknown as { packs: Map<string, { heldBytes: number }> }).packs
  let total = 0
  for (const p of packs.values()) total += p.heldBytes
  return total
}

describe('pack cache', () => {
  it('rejects a budget that is not a byte count', () => {
    const root = tempDir()
    for (const bad of [-1, 1.5, Number.NaN, '1' as unknown as number]) {
      expect(() => new ObjectStore(root, { packCacheBytes: bad })).toThrow(
        /packCacheBytes must be an integer >= 0/,
      )
    }
  })

  it('a long-lived engine keeps its packs within the budget and builds and reads every snapshot as a fresh engine does', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 0 })
    onTestFinished(() => log.close().then(() => undefined))
    const budget = 64 << 10
    const store = new ObjectStore(root, { packCacheBytes: budget })
    const engine = new SnapshotEngine({ log, store })
    const next = seeded(7)
    const model = new Map<string, string>()
    let n = 0
    const write = async (count: number) => {
      const entries = Array.from({ length: count }, () => {
        const i = next(3000)
        return { op: 'write' as const, path: `src/p${i % 6}/m${i % 40}/f${i}.ts`, blob: blobOf(++n) }
      })
      await log.appendMany('ws', entries)
      for (const e of entries) model.set(e.path, e.blob)
    }
    await write(3000)
    const made: Array<{ id: string; tree: string; files: Map<string, string> }> = []
    const first = await engine.snapshot('ws')
    made.push({ id: first.snapshotId as string, tree: first.tree, files: new Map(model) })
    const held: number[] = []
    for (let k = 0; k < 12; k++) {
      await write(120)
      const s = await engine.snapshot('ws')
      made.push({ id: s.snapshotId as string, tree: s.tree, files: new Map(model) })
      held.push(store.cachedPackBytes)
      expect(store.cachedPackBytes).toBe(summedHeld(store))
    }
    // Each increment's pack is tens of KB: kept by count, twelve of them would be far past the
    // budget; kept by bytes, the newest one or two.
    const packBytes = made.slice(1).map((m) => statSync(store.pathOf(m.tree)).size)
    expect(Math.min(...packBytes)).toBeGreaterThan(budget / 8)
    for (const h of held) expect(h).toBeLessThanOrEqual(budget + 2 * Math.max(...packBytes))
    // The warm engine, whose older packs were let go, reads every snapshot right.
    for (const m of made) {
      expect(new Map((await engine.tree(m.id)).entries())).toEqual(m.files)
      // Packs read again, their folders read since: the running count is still the sum.
      expect(store.cachedPackBytes).toBe(summedHeld(store))
    }
    // The increments it built on packs read again are the trees a full replay makes.
    const full = await new SnapshotEngine({ root }).replay('ws', { fromScratch: true })
    expect(full.tree.id).toBe(made.at(-1)?.tree)
    // A store that only reads: every pack from its file, each folder parsed as it is read.
    const reader = new ObjectStore(root, { packCacheBytes: budget })
    const cold = new SnapshotEngine({ log, store: reader })
    for (const m of made) {
      expect(new Map((await cold.tree(m.id)).entries())).toEqual(m.files)
      expect(reader.cachedPackBytes).toBe(summedHeld(reader))
    }
    for (const m of made) expect((await new SnapshotEngine({ root }).tree(m.id)).id).toBe(m.tree)
  })

  it('a budget of 0 keeps only the newest pack, and every tree still reads', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 0 })
    onTestFinished(() => log.close().then(() => undefined))
    const store = new ObjectStore(root, { packCacheBytes: 0 })
    const engine = new SnapshotEngine({ log, store })
    const model = new Map<string, string>()
    const made: Array<{ id: string; files: Map<string, string> }> = []
    for (let k = 0; k < 6; k++) {
      const entries = Array.from({ length: 40 }, (_, i) => ({
        op: 'write' as const,
        path: `a${(i + k) % 4}/b${(i * 7 + k) % 5}/f${i % 9}`,
        blob: blobOf(1000 * k + i + 1),
      }))
      await log.appendMany('ws', entries)
      for (const e of entries) model.set(e.path, e.blob)
      const s = await engine.snapshot('ws')
      made.push({ id: s.snapshotId as string, files: new Map(model) })
    }
    for (const m of made) expect(new Map((await engine.tree(m.id)).entries())).toEqual(m.files)
    expect(store.cachedPackBytes).toBe(summedHeld(store))
    const full = await new SnapshotEngine({ root }).replay('ws', { fromScratch: true })
    expect(new Map(full.tree.entries())).toEqual(model)
  })

  it("a host's memory stops growing with the snapshots it takes (a process of its own, gc between)", () => {
    const root = tempDir()
    const index = pathToFileURL(join(DIST, 'index.js')).href
    // 40 increments of 200 scattered writes on 4,000 paths; external memory after a full gc at
    // the 10th and the 40th. Each pack is ~150 KB, and its build wrote it in 1 MB chunks too:
    // keeping them all grew this process by tens of MB.
    const script = `
      const { AgentLog, ObjectStore, SnapshotEngine } = await import(${JSON.stringify(index)})
      const root = ${JSON.stringify(root)}
      const log = await AgentLog.open({ root, workers: 0 })
      const store = new ObjectStore(root, { packCacheBytes: 1 << 20 })
      const engine = new SnapshotEngine({ log, store })
      let a = 11, n = 0
      const next = (m) => ((a = (Math.imul(a, 1664525) + 1013904223) >>> 0), a % m)
      const blob = () => (++n).toString(16).padStart(64, '0')
      const write = (count) => log.appendMany('ws', Array.from({ length: count }, () => {
        const i = next(4000)
        return { op: 'write', path: 'src/p' + (i % 8) + '/m' + (i % 50) + '/f' + i + '.ts', blob: blob() }
      }))
      const used = () => { globalThis.gc(); globalThis.gc(); const m = process.memoryUsage(); return m.arrayBuffers }
      await write(4000)
      await engine.snapshot('ws')
      const at = {}
      for (let k = 1; k <= 40; k++) {
        await write(200)
        await engine.snapshot('ws')
        if (k === 10 || k === 40) at[k] = used()
      }
      await log.close()
      console.log(JSON.stringify({ at10: at[10], at40: at[40], held: store.cachedPackBytes }))
    `
    const r = spawnSync(process.execPath, ['--expose-gc', '--input-type=module', '-e', script], {
      encoding: 'utf8',
    })
    expect(r.stderr).toBe('')
    expect(r.status).toBe(0)
    const got = JSON.parse(r.stdout) as { at10: number; at40: number; held: number }
    expect(got.held).toBeLessThanOrEqual(2 << 20)
    expect(got.at40 - got.at10).toBeLessThan(6 << 20)
  })
})
