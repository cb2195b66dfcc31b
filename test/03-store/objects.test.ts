import { createHash } from 'node:crypto'
import { chmodSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { describe, expect, it, onTestFinished } from 'vitest'
import { AgentLog, ObjectStore, SnapshotEngine } from '../../dist/src/index.js'
import { comparePaths, diffTrees, Tree, TreeBuilder } from '../../dist/src/store/index.js'
import { blobOf, runCli, tempDir } from '../helpers/index.js'
import { refusal } from '../helpers/snapshot.js'

const hashOf = (data: string | Buffer) => createHash('sha256').update(data).digest('hex')

/** Overwrites an object file in place (objects are read-only files). */
function damage(file: string, edit: (b: Buffer) => Buffer): void {
  chmodSync(file, 0o644)
  writeFileSync(file, edit(readFileSync(file)))
}

function allFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).sort()
}

describe('object store', () => {
  it('stores bytes, strings and streams under their SHA-256, read-only, with no temp files left', async () => {
    const root = tempDir()
    const store = new ObjectStore(root)
    const big = Buffer.alloc(3 * 1024 * 1024 + 17, 'noa')
    const ids = [
      await store.putBlob(Buffer.from('hello')),
      await store.putBlob('héllo'),
      await store.putBlob(Readable.from([big.subarray(0, 1000), big.subarray(1000)])),
      await store.putBlob(Readable.from([])),
    ]
    expect(ids).toEqual([hashOf('hello'), hashOf('héllo'), hashOf(big), hashOf('')])
    expect((await store.getBlob(ids[2] as string)).equals(big)).toBe(true)
    expect((await store.getBlob(ids[3] as string)).length).toBe(0)
    const file = join(root, 'objects', ids[0]?.slice(0, 2) as string, ids[0]?.slice(2) as string)
    expect(readFileSync(file, 'utf8')).toBe('hello')
    expect(statSync(file).mode & 0o777).toBe(0o444)
    expect(allFiles(join(root, 'objects')).filter((f) => f.includes('tmp'))).toEqual([])
  })

  it('does not rewrite an object it has, and replaces one of the wrong size', async () => {
    const root = tempDir()
    const store = new ObjectStore(root)
    const id = await store.putBlob('same')
    const file = store.pathOf(id)
    const before = statSync(file)
    expect(await store.putBlob(Readable.from(['sa', 'me']))).toBe(id)
    expect(statSync(file).ino).toBe(before.ino)
    damage(file, () => Buffer.from('truncated!'))
    await store.putBlob('same')
    expect((await store.getBlob(id)).toString()).toBe('same')
  })

  it('refuses unknown and malformed hashes, and names a corrupted object', async () => {
    const root = tempDir()
    const store = new ObjectStore(root)
    const missing = await refusal(store.getBlob(blobOf(7)))
    expect(missing.code).toBe('NOA_NOT_FOUND')
    expect(missing.message).toContain(blobOf(7))
    const bad = await refusal(store.getBlob('ABC'))
    expect(bad.code).toBe('NOA_BAD_ARGUMENT')
    const id = await store.putBlob('precious')
    damage(store.pathOf(id), (b) => {
      b[0] = 0x50
      return b
    })
    const corrupt = await refusal(new ObjectStore(root).getBlob(id))
    expect(corrupt.code).toBe('NOA_CORRUPT_OBJECT')
    expect(corrupt.message).toContain(`blob ${id} is corrupt`)
    expect(corrupt.details.object).toBe(id)
  })

  it('names a corrupted tree or snapshot record in the API and the CLI, and snapshots refuse to build on it', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1 })
    onTestFinished(() => log.close().then(() => undefined))
    const engine = new SnapshotEngine({ log })
    await log.appendMany('ws', [{ op: 'write', path: 'a', blob: blobOf(1) }])
    const s = await engine.snapshot('ws')
    const store = new ObjectStore(root)
    damage(store.pathOf(s.tree), (b) => Buffer.concat([b, Buffer.from('x\0')]))
    const fresh = new SnapshotEngine({ root })
    const treeErr = await refusal(fresh.tree(s.snapshotId as string))
    expect(treeErr.code).toBe('NOA_CORRUPT_OBJECT')
    expect(treeErr.message).toContain(`tree ${s.tree} is corrupt`)
    const cli = runCli(['tree', s.snapshotId as string, '--root', root])
    expect(cli.status).toBe(1)
    expect(cli.stderr).toContain(`tree ${s.tree} is corrupt`)
    await log.append('ws', { op: 'write', path: 'b', blob: blobOf(2) })
    const snapErr = await refusal(new SnapshotEngine({ log }).snapshot('ws'))
    expect(snapErr.code).toBe('NOA_CORRUPT_OBJECT')
    expect(snapErr.message).toContain(s.tree)
    expect((await fresh.listSnapshots('ws')).length).toBe(1) // nothing was added

    const recordFile = store.pathOf((s.snapshotId as string).slice(4))
    damage(recordFile, (b) => Buffer.from(b.toString().replace('"ws"', '"wx"')))
    const recErr = await refusal(new SnapshotEngine({ root }).tree(s.snapshotId as string))
    expect(recErr.code).toBe('NOA_CORRUPT_OBJECT')
    expect(recErr.message).toContain(`snapshot ${s.snapshotId} is corrupt`)
    const list = runCli(['snapshots', 'ws', '--root', root])
    expect(list.status).toBe(1)
    expect(list.stderr).toContain(`workspace ws seq 2 names snapshot ${s.snapshotId}`)
  })

  it('noa blob put and get, from a file or stdin', () => {
    const root = tempDir()
    const file = join(root, 'f.bin')
    const data = Buffer.from([0, 1, 2, 255, 10, 13])
    writeFileSync(file, data)
    const put = runCli(['blob', 'put', file, '--root', root])
    expect(put.status).toBe(0)
    expect(put.stdout).toBe(`${hashOf(data)}\n`)
    const get = runCli(['blob', 'get', hashOf(data), '--root', root])
    expect(get.stdoutBytes.equals(data)).toBe(true)
    const piped = runCli(['blob', 'put', '-', '--root', root], { input: 'from stdin' })
    expect(piped.stdout).toBe(`${hashOf('from stdin')}\n`)
    const unknown = runCli(['blob', 'get', blobOf(3), '--root', root])
    expect(unknown.status).toBe(1)
    expect(unknown.stderr).toMatch(/noa blob: blob 0{63}3 not found/)
    expect(runCli(['blob', 'put', join(root, 'nope'), '--root', root]).status).toBe(1)
    expect(runCli(['blob', 'take', 'x', '--root', root]).status).toBe(2)
  })
})

describe('trees stored per folder', () => {
  /** 20 folders of 5 files, then `snapshots - 1` more snapshots each changing one file of d3. */
  async function chain(snapshots: number) {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1 })
    onTestFinished(() => log.close().then(() => undefined))
    const engine = new SnapshotEngine({ log })
    await log.appendMany(
      'ws',
      Array.from({ length: 100 }, (_, i) => ({
        op: 'write' as const,
        path: `src/d${i % 20}/f${i}`,
        blob: blobOf(i),
      })),
    )
    const ids = [await engine.snapshot('ws')]
    for (let i = 1; i < snapshots; i++) {
      await log.appendMany('ws', [{ op: 'write', path: 'src/d3/f3', blob: blobOf(1000 + i) }])
      ids.push(await engine.snapshot('ws'))
    }
    return { root, engine, store: new ObjectStore(root), ids }
  }

  const head = (store: ObjectStore, id: string) => readFileSync(store.pathOf(id)).toString('latin1')

  it('write only the folders on the changed paths, reuse the rest by hash, and read back exactly', async () => {
    const { root, store, ids } = await chain(4)
    for (const s of ids) expect(head(store, s.tree).startsWith('noa-tree-pack 2\n')).toBe(true)
    // The first pack holds every folder (root, src, d0…d19); each later one the root, src and
    // d3, and names once the pack the 19 folders it kept are in (the first), with one hint
    // byte per record of src.
    expect(head(store, ids[0]?.tree as string).split('\n')[1]).toBe('22 0 1 0')
    for (const s of ids.slice(1)) expect(head(store, s.tree).split('\n')[1]).toBe('3 1 1 20')
    const fresh = new SnapshotEngine({ root })
    for (const [k, s] of ids.entries()) {
      const tree = await fresh.tree(s.snapshotId as string)
      expect(tree.id).toBe(s.tree)
      expect(tree.size).toBe(100)
      expect(tree.get('src/d3/f3')).toBe(blobOf(k === 0 ? 3 : 1000 + k))
      expect(tree.get('src/d4/f4')).toBe(blobOf(4))
      expect(tree.get('src/d4')).toBeUndefined()
    }
    const full = await new SnapshotEngine({ root }).replay('ws', { fromScratch: true })
    expect(full.tree.id).toBe(ids.at(-1)?.tree)
    const objects = await store.treeObjects(ids.at(-1)?.tree as string)
    expect(new Set(objects)).toEqual(new Set([ids.at(-1)?.tree, ids[0]?.tree]))
  })

  it('name the tree and the folder when a pack is damaged or a pack it refers to is missing', async () => {
    const { root, store, ids } = await chain(2)
    const [first, second] = ids as unknown as [{ tree: string }, { snapshotId: string; tree: string }]
    damage(store.pathOf(first.tree), (b) =>
      Buffer.from(b.toString('latin1').replace(`f5\0${blobOf(5)}`, `f5\0${blobOf(6)}`), 'latin1'),
    )
    const err = await refusal(new SnapshotEngine({ root }).tree(second.snapshotId).then((t) => t.size))
    expect(err.code).toBe('NOA_CORRUPT_OBJECT')
    expect(err.message).toMatch(
      new RegExp(`tree ${first.tree} .*is corrupt: its folder [0-9a-f]{64} hashes to`),
    )
    const cli = runCli(['verify', 'ws', '--objects', '--root', root])
    expect(cli.status).toBe(1)
    expect(cli.stdout + cli.stderr).toContain(`tree ${first.tree}`)
    rmSync(store.pathOf(first.tree), { force: true })
    const gone = await refusal(new SnapshotEngine({ root }).tree(second.snapshotId).then((t) => t.size))
    expect(gone.code).toBe('NOA_NOT_FOUND')
    expect(gone.message).toMatch(
      new RegExp(`tree ${first.tree} \\(holding folder [0-9a-f]{64} of tree ${second.tree}\\) not found`),
    )
  })
})

describe('trees', () => {
  const paths = ['b', 'a/b', 'a.b', 'a', 'é', '\uffff', '😀', 'a\nb', 'a b', 'Z', 'a/b/c']

  it('sort paths by their UTF-8 bytes', () => {
    const byBytes = [...paths].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y)))
    expect([...paths].sort(comparePaths)).toEqual(byBytes)
    expect(comparePaths('\uffff', '😀')).toBeLessThan(0) // UTF-16 order would say the opposite
  })

  it('encode canonically whatever the order of changes, and look paths up as bytes', () => {
    const one = new TreeBuilder()
    const two = new TreeBuilder()
    for (const [i, p] of paths.entries()) one.set(p, blobOf(i))
    for (const p of [...paths].reverse()) two.set(p, blobOf(paths.indexOf(p)))
    two.set('gone', blobOf(99))
    two.remove('gone')
    const bytes = one.encode()
    expect(two.encode().equals(bytes)).toBe(true)
    const tree = Tree.decode(hashOf(bytes), bytes)
    expect(tree.size).toBe(paths.length)
    for (const [i, p] of paths.entries()) expect(tree.get(p)).toBe(blobOf(i))
    expect(tree.get('a/')).toBeUndefined()
    expect(tree.get('c')).toBeUndefined()

    // On a base: changes are merged into the base's bytes; the result equals a fresh encoding.
    const next = new TreeBuilder(tree)
    next.set('a', blobOf(50))
    next.remove('a/b')
    next.set('0 first', blobOf(51))
    next.set('zz last', blobOf(52))
    next.remove('😀')
    const expected = new Map(tree.entries())
    expected.set('a', blobOf(50))
    expected.delete('a/b')
    expected.set('0 first', blobOf(51))
    expected.set('zz last', blobOf(52))
    expected.delete('😀')
    const fresh = new TreeBuilder()
    for (const [p, b] of expected) fresh.set(p, b)
    const merged = next.encode()
    expect(merged.equals(fresh.encode())).toBe(true)
    const after = Tree.decode(hashOf(merged), merged)
    expect(diffTrees(tree, after).map((c) => [c.path, c.before !== null, c.after !== null])).toEqual([
      ['0 first', false, true],
      ['a', true, true],
      ['a/b', true, false],
      ['zz last', false, true],
      ['😀', true, false],
    ])
  })

  it('refuse malformed tree bytes and lone surrogates', () => {
    expect(() => Tree.decode('x', Buffer.from('not a tree'))).toThrow(/not a tree/)
    expect(() => Tree.decode('x', Buffer.from(`noa-tree 1\na\0${'0'.repeat(63)}\n`))).toThrow(
      /malformed record/,
    )
    const t = new TreeBuilder()
    t.set('bad\ud800', blobOf(1))
    expect(() => t.encode()).toThrow(/lone UTF-16 surrogate/)
  })
})
