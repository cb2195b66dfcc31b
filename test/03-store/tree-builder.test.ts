/**
 * TreeBuilder from an empty tree, as a full replay uses it: blobs are kept in slots rewritten in
 * place and the pack is written from the sorted paths, folder by folder, in two walks. These
 * check it against the folder-by-folder build (the one an incremental snapshot uses) byte for
 * byte, and against a plain map for every value a caller can set.
 */
import { createHash } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { buildPack, encodedPack } from '../../dist/src/store/pack-build.js'
import { packFromSorted } from '../../dist/src/store/pack-walk.js'
import { EMPTY_FLAT_TREE, EMPTY_TREE, Tree, TreeBuilder } from '../../dist/src/store/tree.js'

const hex = (s: string) => createHash('sha256').update(s).digest('hex')

/** Paths whose byte order is easy to get wrong: a file beside a folder of the same name, `-`
 * and `0` around `/`, U+E000 and up against astral characters (UTF-16 sorts them the other way),
 * and two folders with the same files (one folder object, stored once). */
const TRICKY = [
  'a',
  'a/b',
  'a-b',
  'a0',
  'a/b/c/d/e.txt',
  'a/b/c/d/f.txt',
  'a/b.c',
  'b/x',
  'b/y',
  'c/x',
  'c/y',
  'z/\u{e000}',
  'z/\u{1f600}',
  'z/\u{ffff}',
  'z/é/ü',
  'z/é0',
  'deep/1/2/3/4/5/6/7/8/9/leaf',
  'deep/1/2/3/other',
  'deep/1/x',
  'x',
]

function legacyPackBytes(entries: Map<string, string>): Buffer {
  return encodedPack(buildPack(undefined, entries.entries(), null))
}

describe('TreeBuilder on an empty tree', () => {
  it('builds the same pack, byte for byte, as the folder-by-folder build, for tricky paths', () => {
    const b = new TreeBuilder(EMPTY_TREE)
    const model = new Map<string, string>()
    for (const [i, p] of TRICKY.entries()) {
      // b/ and c/ hold the same names and blobs: one folder object.
      const blob = p.startsWith('b/') || p.startsWith('c/') ? hex(p.slice(2)) : hex(`${i}`)
      b.set(p, blob)
      model.set(p, blob)
    }
    const pack = b.buildPack(null)
    expect(encodedPack(pack).equals(legacyPackBytes(model))).toBe(true)
    const sorted = [...model].sort(([x], [y]) => Buffer.compare(Buffer.from(x), Buffer.from(y)))
    expect(pack.id).toBe(packFromSorted(sorted).id)
    expect([...Tree.ofPack(pack).entries()]).toEqual(sorted)
  })

  it('matches the folder-by-folder build over many random writes, deletes and renames', () => {
    let seed = 7
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31
      return seed % n
    }
    const names = ['src', 'lib', 'a', 'a-b', 'é', '\u{1f600}', 'x.ts', 'y']
    const path = () =>
      Array.from({ length: 1 + rand(4) }, () => names[rand(names.length)] as string).join('/')
    const b = new TreeBuilder(EMPTY_TREE)
    const model = new Map<string, string>()
    for (let i = 0; i < 3000; i++) {
      const p = path()
      const r = rand(10)
      if (r < 6) {
        // A path that is a prefix folder of another is allowed too (`a` and `a/b`).
        const blob = hex(`${i}`)
        b.set(p, blob)
        model.set(p, blob)
      } else if (r < 8) {
        if (model.has(p)) {
          b.remove(p)
          model.delete(p)
        }
      } else {
        const to = path()
        const blob = b.get(p)
        expect(blob).toBe(model.get(p))
        if (blob !== undefined && to !== p) {
          b.remove(p)
          b.set(to, blob)
          model.delete(p)
          model.set(to, blob)
        }
      }
      expect(b.has(p)).toBe(model.has(p))
    }
    expect(new Map(b.touched())).toEqual(model)
    expect(b.touchedCount).toBe(model.size)
    expect(encodedPack(b.buildPack(null)).equals(legacyPackBytes(model))).toBe(true)
    // The flat listing and a copy over another empty base say the same.
    expect(Tree.decode('', b.encode()).toMap()).toEqual(model)
    expect(encodedPack(b.withBase(EMPTY_FLAT_TREE).buildPack(null)).equals(legacyPackBytes(model))).toBe(true)
  })

  it('keeps a value that is not 64 ASCII characters exactly, and check refuses it', () => {
    const odd = `${'a'.repeat(63)}š` // 64 UTF-16 units; its low byte alone would read as hex
    const b = new TreeBuilder(EMPTY_TREE)
    b.set('p', hex('1'))
    b.set('p', odd)
    expect(b.get('p')).toBe(odd)
    expect([...b.touched()]).toEqual([['p', odd]])
    expect(() => b.buildPack(null)).toThrow(/is not 64 lowercase hex/)
    b.set('p', hex('2')) // back to a blob: the odd value is gone with it
    expect(b.get('p')).toBe(hex('2'))
    expect(b.buildPack(null).id).toBe(packFromSorted([['p', hex('2')]]).id)
    const upper = hex('3').toUpperCase()
    b.set('q', upper)
    expect(b.get('q')).toBe(upper)
    expect(() => b.check()).toThrow(/is not 64 lowercase hex/)
  })

  it('reuses the slot of a removed path without the old blob showing through', () => {
    const b = new TreeBuilder(EMPTY_TREE)
    for (let i = 0; i < 40000; i++) b.set(`f${i}`, hex(`${i}`)) // three pages of slots
    for (let i = 0; i < 40000; i += 2) b.remove(`f${i}`)
    for (let i = 0; i < 20000; i++) b.set(`g${i}`, hex(`g${i}`))
    for (let i = 0; i < 40000; i++) expect(b.get(`f${i}`)).toBe(i % 2 === 0 ? undefined : hex(`${i}`))
    for (let i = 0; i < 20000; i++) expect(b.get(`g${i}`)).toBe(hex(`g${i}`))
    expect(b.touchedCount).toBe(40000)
  })

  it('over a non-empty base, records removals and reads through to the base', () => {
    const base = Tree.ofPack(
      packFromSorted([
        ['a/x', hex('x')],
        ['b', hex('b')],
      ]),
    )
    const b = new TreeBuilder(base)
    expect(b.get('a/x')).toBe(hex('x'))
    b.remove('a/x')
    expect(b.has('a/x')).toBe(false)
    expect([...b.touched()]).toEqual([['a/x', null]])
    b.set('a/x', hex('y'))
    expect(b.get('a/x')).toBe(hex('y'))
    const built = Tree.ofPack(b.buildPack(null))
    expect([...built.entries()]).toEqual([
      ['a/x', hex('y')],
      ['b', hex('b')],
    ])
  })
})
