/**
 * The flat tree format (one `noa-tree 1` object per tree, and `noa-tree-delta 1` chains over
 * one) is what roots written before per-directory trees hold. test/fixtures/flat-trees/root was
 * written by that code and is committed as it was: every read of it must give what that code
 * read (expected.json, written by it too), so a later change cannot break old roots silently.
 */
import { cpSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { AgentLog, ObjectStore, SnapshotEngine } from '../../dist/src/index.js'
import { verifyStore } from '../../dist/src/store/verify.js'
import { ROOT_DIR, runCli, tempDir } from '../helpers/index.js'

const FIXTURE = join(ROOT_DIR, 'test', 'fixtures', 'flat-trees')
const ids = JSON.parse(readFileSync(join(FIXTURE, 'ids.json'), 'utf8')) as Record<string, string>
interface Expected {
  snapshots: Record<
    string,
    { id: string; workspace: string; tree: string; seq: number; files: Record<string, string> }
  >
  now: Record<string, { parent: string | null; seq: number; files: Record<string, string> }>
  history: Record<string, Array<{ id: string; kind: string; parents: string[] }>>
  diff: { changes: unknown[] }
}
const expected = JSON.parse(readFileSync(join(FIXTURE, 'expected.json'), 'utf8')) as Expected

/** A writable copy of the fixture root (the committed one is never touched). */
function copyRoot(): string {
  const root = join(tempDir(), 'root')
  cpSync(join(FIXTURE, 'root'), root, { recursive: true })
  return root
}

function headers(root: string): Record<string, number> {
  const out: Record<string, number> = {}
  const dir = join(root, 'objects')
  for (const shard of readdirSync(dir)) {
    for (const name of readdirSync(join(dir, shard))) {
      const head = readFileSync(join(dir, shard, name))
        .subarray(0, 20)
        .toString('latin1')
        .split('\n')[0] as string
      const kind = head.startsWith('noa-') ? head : 'blob'
      out[kind] = (out[kind] ?? 0) + 1
    }
  }
  return out
}

describe('a root written with flat trees', () => {
  it('is still the flat format (whole trees and delta chains)', () => {
    expect(headers(join(FIXTURE, 'root'))).toEqual({
      blob: 40,
      'noa-snapshot 1': 9,
      'noa-tree 1': 3,
      'noa-tree-delta 1': 6,
    })
  })

  it('reads every snapshot, head and history as the code that wrote it did', async () => {
    const root = copyRoot()
    const engine = new SnapshotEngine({ root })
    for (const [name, want] of Object.entries(expected.snapshots)) {
      const record = await engine.getSnapshot(ids[name] as string)
      expect(record.tree, name).toBe(want.tree)
      const tree = await engine.tree(want.id)
      expect(tree.id, name).toBe(want.tree)
      expect(Object.fromEntries(tree.entries()), name).toEqual(want.files)
      expect(tree.size).toBe(Object.keys(want.files).length)
    }
    for (const [ws, want] of Object.entries(expected.now)) {
      const s = await engine.replay(ws)
      expect({ parent: s.parent, seq: s.seq, files: Object.fromEntries(s.tree.entries()) }).toEqual(want)
      const full = await engine.replay(ws, { fromScratch: true })
      expect(Object.fromEntries(full.tree.entries())).toEqual(want.files)
      expect(full.tree.id).toBe(s.tree.id)
      const history = (await engine.history(ws)).map((n) => ({
        id: n.snapshotId,
        kind: n.kind,
        parents: n.parents,
      }))
      expect(history).toEqual(expected.history[ws])
    }
    expect(JSON.parse(JSON.stringify(await engine.diff(ids.s0 as string, ids.s6 as string)))).toEqual(
      expected.diff,
    )
  })

  it('verifies with its objects, and gc keeps every one of them', async () => {
    const root = copyRoot()
    const engine = new SnapshotEngine({ root })
    for (const ws of ['main', 'feat']) expect(await verifyStore(engine, ws, { objects: true })).toEqual([])
    const cli = runCli(['verify', '--objects', '--root', root])
    expect(cli.stderr).toBe('')
    expect(cli.status).toBe(0)
    // The code that wrote it reached 39 objects: 9 records, 9 tree objects, 21 blobs (19 blobs
    // stored were never named).
    const gc = await engine.gc({ graceMs: 0 })
    expect({ reachable: gc.reachable, removed: gc.removed, missing: gc.missing }).toEqual({
      reachable: 39,
      removed: 19,
      missing: 0,
    })
  })

  it('fails verify --objects when a whole flat tree or a link of a delta chain is damaged', () => {
    for (const kind of ['noa-tree 1', 'noa-tree-delta 1']) {
      const root = copyRoot()
      const dir = join(root, 'objects')
      const victim = readdirSync(dir)
        .flatMap((shard) => readdirSync(join(dir, shard)).map((name) => join(dir, shard, name)))
        .find((f) => readFileSync(f).toString('latin1').startsWith(`${kind}\n`)) as string
      const bytes = readFileSync(victim)
      // A hex digit of a blob hash changed: the framing still parses, only the hash tells.
      const at = bytes.lastIndexOf(0x0a, bytes.length - 2) - 1
      bytes[at] = bytes[at] === 0x30 ? 0x31 : 0x30
      writeFileSync(victim, bytes)
      const cli = runCli(['verify', '--objects', '--root', root])
      expect(cli.status, kind).toBe(1)
      expect(cli.stderr, kind).toMatch(/tree [0-9a-f]{64}.* (is corrupt|hashes to)/)
    }
  })

  it('takes new snapshots, forks, merges and checkouts on top of the old trees', async () => {
    const root = copyRoot()
    const store = new ObjectStore(root)
    const log = await AgentLog.open({ root, objects: store, workers: 0 })
    try {
      const engine = new SnapshotEngine({ log, store })
      const blob = await store.putBlob('new content\n')
      await log.appendMany('main', [
        { op: 'write', path: 'src/a/f1.ts', blob },
        { op: 'delete', path: 'a' },
      ])
      const s = await engine.snapshot('main', { message: 'on top' })
      const want: Record<string, string> = { ...expected.now.main?.files, 'src/a/f1.ts': blob }
      delete want.a
      expect(
        Object.fromEntries((await new SnapshotEngine({ root }).tree(s.snapshotId as string)).entries()),
      ).toEqual(want)
      await engine.fork('again', ids.s3 as string)
      await log.append('again', { op: 'write', path: 'x/y', blob })
      const m = await engine.merge('main', ['again'], { message: 'merge again' })
      const merged = Object.fromEntries((await engine.tree(m.snapshotId as string)).entries())
      expect(merged['x/y']).toBe(blob)
      expect(merged['src/a/f1.ts']).toBe(blob)
      const out = join(tempDir(), 'co')
      await engine.checkout(s.snapshotId as string, out) // ("a" is gone: the old trees also hold "a/b")
      expect(readFileSync(join(out, 'src', 'b', 'g1.ts'), 'utf8')).toMatch(/^content of file /)
      expect(readFileSync(join(out, 'src', 'a', 'f1.ts'), 'utf8')).toBe('new content\n')
      for (const ws of ['main', 'feat', 'again']) {
        expect(await verifyStore(engine, ws, { objects: true })).toEqual([])
      }
      const gc = await engine.gc({ graceMs: 0 })
      expect(gc.missing).toBe(0)
      expect(gc.removed).toBe(19) // the blobs never named, as before
    } finally {
      await log.close()
    }
  })
})
