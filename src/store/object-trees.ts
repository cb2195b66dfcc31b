/**
 * Trees (objects.ts, a layer of the store's class): a tree is named by the hash of its canonical
 * encoding (tree.ts). A folder tree is stored as packs (pack*.ts), read synchronously a folder at
 * a time and kept decoded in a cache bounded by count and bytes; a flat tree of the format before
 * may be a delta over a base tree, rebuilt from its chain (at most MAX_DELTA_DEPTH deltas over a
 * whole tree) and checked against its name.
 */
import { closeSync, fstatSync, readSync } from 'node:fs'
import { Errors } from '../engine/errors.js'
import { openFileSync, READ } from '../engine/files.js'
import { ObjectBlobs } from './object-blobs.js'
import {
  checkObjectId,
  isNotFound,
  isSystemError,
  readFully,
  type StoredObject,
  sha256,
} from './object-files.js'
import type { Dir, Pack } from './pack.js'
import { encodedPack } from './pack-build.js'
import { decodePack } from './pack-decode.js'
import { PACK_HEADER } from './pack-v1.js'
import { PACK2_HEADER } from './pack-v2.js'
import { packFromSorted } from './pack-walk.js'
import { TREE_HEADER, Tree, TreeBuilder } from './tree.js'

const TREE_CACHE = 4
const TREE_DELTA_HEADER = 'noa-tree-delta 1\n'
/**
 * Longest chain of flat deltas the format before wrote before storing a tree whole again (a
 * longer chain is read as damage).
 */
export const MAX_DELTA_DEPTH = 4
/** Blob field of a delta record that removes the path. */
const REMOVED = '-'.repeat(64)
/** Packs kept decoded (each holds the folders read from it), at most. */
const PACK_CACHE = 256
/** A pack up to this size is read whole at once; a larger one a folder at a time. */
const WHOLE_PACK = 1 << 20

export abstract class ObjectTrees extends ObjectBlobs {
  /**
   * Bytes the packs kept decoded hold now (Pack.heldBytes summed; see ObjectStoreOptions): a
   * running sum each pack keeps up to date as it grows (Pack.countIn), not a walk of the cache.
   */
  get cachedPackBytes(): number {
    return this.packMeter.bytes
  }

  /**
   * How to store a tree just built by `built` (its changes over its base): the folders on the
   * changed paths, in one pack named by the new root (pack-build.ts). `bytes`, the flat listing, is
   * only used when there is no builder (every folder is new then).
   */
  treeObject(bytes: Buffer | null, built?: TreeBuilder): StoredObject {
    let pack: Pack
    if (built) {
      let builder = built
      if (built.base.format === 'flat' && !built.base.isEmpty) {
        // A flat view of a folder tree this store holds (a caller that decoded the listing
        // under the tree's id): build on the stored folders instead, so only changes are new.
        const stored = this.folderTreeSync(built.base.id)
        if (stored) builder = built.withBase(stored)
      }
      pack = builder.buildPack(this)
    } else {
      pack = packFromSorted(Tree.decode('', bytes as Buffer).entries())
    }
    this.pending.set(pack.id, pack)
    return { id: pack.id, data: packBytes(pack), exact: false }
  }

  /**
   * The tree of a pack treeObject built, before it is stored: what the next change builds on
   * (its folders in memory, so nothing is encoded or read back).
   */
  builtTree(id: string): Tree {
    const pack = this.pending.get(id) ?? this.packs.get(id)
    if (!pack) throw new Error(`tree ${id} was not built by treeObject`)
    return Tree.ofPack(pack)
  }

  /** Stores a tree built by `built` (see treeObject); returns its id. */
  async putTree(bytes: Buffer | null, built?: TreeBuilder): Promise<string> {
    const object = this.treeObject(bytes, built)
    await this.write([object])
    this.stored(object.id)
    return object.id
  }

  /**
   * Stores a tree as it is (a tree rebuilt from a log: its own format, so that its id is the one
   * its record names).
   */
  async putWholeTree(tree: Tree): Promise<void> {
    if (tree.format === 'flat') {
      await this.write([{ id: tree.id, data: tree.bytes, exact: true }])
      return
    }
    const pack = packFromSorted(tree.entries())
    if (pack.id !== tree.id) throw new Error(`tree ${tree.id} re-encodes as ${pack.id}`)
    await this.write([{ id: pack.id, data: encodedPack(pack), exact: false }])
  }

  /** Records that a tree from treeObject is now stored, and keeps it for the next reads. */
  stored(id: string, bytes?: Buffer): void {
    const pack = this.pending.get(id)
    this.pending.delete(id)
    if (pack) {
      this.rememberPack(pack)
      this.remember(Tree.ofBuiltPack(pack))
    } else if (bytes) {
      this.remember(Tree.decode(id, bytes))
    }
  }

  /** PackSource: a stored pack, read synchronously (its index now, its folders when used). */
  pack(id: string, from?: { tree: string; folder: string }): Pack {
    this.opened?.add(id)
    // A pack built for a commit still in flight: a later tree of the same commit builds on it.
    const built = this.pending.get(id)
    if (built) return built
    const cached = this.packs.get(id)
    if (cached) {
      this.packs.delete(id)
      this.packs.set(id, cached)
      return cached
    }
    const what = from ? `tree ${id} (holding folder ${from.folder} of tree ${from.tree})` : `tree ${id}`
    const file = this.pathOf(id)
    let fd: number
    try {
      fd = this.openObject(id, what)
    } catch (err) {
      const all = isNotFound(err) ? this.logged(id) : null
      if (all === null) throw err
      const pack = decodePack(
        id,
        all,
        () => all,
        this,
        (o, n) => sliceOf(all, o, n, what, id),
        what,
        all.length,
      )
      this.rememberPack(pack)
      return pack
    }
    let pack: Pack
    try {
      const size = fstatSync(fd).size
      const readAt = (offset: number, length: number): Buffer => {
        const buf = Buffer.allocUnsafe(length)
        const got = readFully(fd, buf, offset)
        if (got < length) {
          throw Errors.CORRUPT_OBJECT(`${what} is corrupt: ${file} ends at byte ${offset + got}`, {
            object: id,
            file,
          })
        }
        return buf
      }
      if (size <= WHOLE_PACK) {
        const all = readAt(0, size)
        pack = decodePack(
          id,
          all,
          () => all,
          this,
          (o, n) => sliceOf(all, o, n, what, id),
          what,
          size,
        )
      } else {
        const head = readAt(0, Math.min(size, 64 << 10))
        let index = head
        pack = decodePack(
          id,
          head,
          (n) => {
            index = readAt(0, Math.min(size, n))
            return index
          },
          this,
          (o, n) => this.readRange(id, o, n, what),
          what,
          size,
        )
      }
    } finally {
      closeSync(fd)
    }
    this.rememberPack(pack)
    return pack
  }

  /**
   * Bytes [offset, offset + length) of an object file (a folder of a large pack). A snapshot
   * reads hundreds of folders from the same few packs in one synchronous run: the file stays
   * open until that run is over (an open per folder cost more than the reads).
   */
  private readRange(id: string, offset: number, length: number, what: string): Buffer {
    const file = this.pathOf(id)
    let fd = this.rangeFds.get(id)
    if (fd === undefined) {
      // The folder was checked when the pack holding this range was opened.
      fd = this.openObject(id, what, false)
      if (this.rangeFds.size === 0) setImmediate(() => this.closeRangeFds())
      this.rangeFds.set(id, fd)
    }
    const buf = Buffer.allocUnsafe(length)
    if (readFully(fd, buf, offset) < length) {
      throw Errors.CORRUPT_OBJECT(`${what} is corrupt: ${file} is too short`, {
        object: id,
        file,
      })
    }
    return buf
  }

  private closeRangeFds(): void {
    for (const fd of this.rangeFds.values()) closeSync(fd)
    this.rangeFds.clear()
  }

  /**
   * Keeps a pack decoded, letting the least recently used ones go past PACK_CACHE packs or the
   * byte budget. The total is the meter's (every cached pack adds its growth to it as it
   * happens), so an insert costs the packs it lets go, not a sum over up to PACK_CACHE packs
   * (which, once per commit, was ~3% of a small LangGraph checkpoint's time).
   */
  private rememberPack(pack: Pack): void {
    const had = this.packs.get(pack.id)
    if (had !== undefined) {
      this.packs.delete(pack.id)
      if (had !== pack) had.uncount(this.packMeter)
    }
    this.packs.set(pack.id, pack)
    pack.countIn(this.packMeter)
    while (
      this.packs.size > 1 &&
      (this.packs.size > PACK_CACHE || this.packMeter.bytes > this.packCacheBytes)
    ) {
      const [id, oldest] = this.packs.entries().next().value as [string, Pack]
      oldest.uncount(this.packMeter)
      this.packs.delete(id)
    }
  }

  /** The folder tree stored under `id`, or null when there is none (or it is another kind of object). */
  private folderTreeSync(id: string): Tree | null {
    const cached = this.trees.get(id)
    if (cached) return cached.format === 'dirs' ? cached : null
    if (this.packs.has(id)) return Tree.ofPack(this.pack(id))
    if (this.sizeOf(id) < 0 || !this.isPack(id)) return null
    try {
      return Tree.ofPack(this.pack(id))
    } catch {
      return null
    }
  }

  /** Whether the object file starts with the pack header. */
  private isPack(id: string): boolean {
    const head = Buffer.alloc(PACK_HEADER.length)
    let fd: number
    try {
      fd = openFileSync(this.pathOf(id), READ, { what: 'object' })
    } catch (err) {
      const logged = isSystemError(err, 'ENOENT') ? this.logged(id) : null
      if (logged === null) return false
      logged.copy(head, 0, 0, Math.min(head.length, logged.length))
      fd = -1
    }
    if (fd >= 0) {
      try {
        readFully(fd, head, 0)
      } finally {
        closeSync(fd)
      }
    }
    const magic = head.toString('latin1')
    return magic === PACK2_HEADER || magic === PACK_HEADER
  }

  async getTree(id: string): Promise<Tree> {
    checkObjectId(id, 'tree id')
    const cached = this.trees.get(id)
    if (cached) {
      this.trees.delete(id)
      this.trees.set(id, cached)
      return cached
    }
    // Follow the chain of deltas down to a whole tree (or one in the cache).
    const deltas: Array<{ id: string; bytes: Buffer; body: number; base: string }> = []
    let at = id
    let base: Tree | undefined
    for (;;) {
      base = this.trees.get(at)
      if (base) break
      const what = at === id ? `tree ${id}` : `tree ${at} (in the delta chain of tree ${id})`
      if (at === id && this.isPack(at)) {
        const tree = Tree.ofPack(this.pack(id))
        this.remember(tree)
        return tree
      }
      const bytes = await this.readRaw(at, what)
      if (bytes.subarray(0, TREE_HEADER.length).toString('latin1') === TREE_HEADER) {
        this.check(at, bytes, what)
        base = Tree.decode(at, bytes, what)
        break
      }
      const delta = parseDeltaHeader(bytes)
      if (!delta || deltas.length > MAX_DELTA_DEPTH * 4) {
        throw Errors.CORRUPT_OBJECT(`${what} is not a tree (${this.pathOf(at)})`, {
          object: at,
          file: this.pathOf(at),
        })
      }
      deltas.push({ id: at, bytes, body: delta.body, base: delta.base })
      at = delta.base
    }
    if (deltas.length === 0) {
      this.remember(base)
      return base
    }
    const builder = new TreeBuilder(base)
    for (let i = deltas.length - 1; i >= 0; i--) {
      const d = deltas[i] as (typeof deltas)[number]
      applyDelta(builder, d.bytes, d.body, d.id)
    }
    const bytes = builder.encode()
    const actual = sha256(bytes)
    if (actual !== id) {
      throw Errors.CORRUPT_OBJECT(
        `tree ${id} is corrupt: rebuilt from its delta chain (${deltas.map((d) => d.id).join(' <- ')}) it hashes to ${actual}`,
        { object: id, file: this.pathOf(id) },
      )
    }
    const tree = Tree.decode(id, bytes)
    this.remember(tree)
    return tree
  }

  /**
   * The objects a stored tree is made of. A folder tree: its pack, then every other pack a
   * reader opens to find its folders (all its folders are read and checked, and every folder
   * those packs hold, so damage where no path leads is found too). A flat tree: its own object,
   * then the bases of its delta chain down to a whole tree (headers only). A missing one is
   * NOA_NOT_FOUND naming it.
   */
  async treeObjects(id: string): Promise<string[]> {
    checkObjectId(id, 'tree id')
    if (this.isPack(id)) {
      // The walk is synchronous: no other read can add to the set while it runs.
      const packs = new Set<string>()
      this.opened = packs
      try {
        // Every reference is followed, not every folder once: the same folder named in two
        // places may be found through two packs, and a reader may take either way.
        const seen = new Set<Dir>()
        const walk = (dir: Dir) => {
          seen.add(dir)
          packs.add(dir.pack.id)
          const r = dir.records
          for (let i = 0; i < r.size; i++) {
            if (!r.isDirAt(i)) continue
            const child = dir.childAt(i)
            if (!seen.has(child)) walk(child)
          }
        }
        walk(this.pack(id).root)
        for (const p of packs) {
          const pack = this.pack(p)
          if (this.checkedPacks.has(pack)) continue
          pack.checkAll()
          this.checkedPacks.add(pack)
        }
      } finally {
        this.opened = null
      }
      return [id, ...[...packs].filter((p) => p !== id)]
    }
    const out: string[] = []
    let at = id
    const head = Buffer.allocUnsafe(TREE_DELTA_HEADER.length + 64 + 48)
    for (;;) {
      out.push(at)
      const file = this.pathOf(at)
      let n: number
      let fd: number
      try {
        fd = openFileSync(file, READ, { what: 'object' })
      } catch (err) {
        if (isSystemError(err, 'ENOENT')) {
          const what = at === id ? `tree ${id}` : `tree ${at} (in the delta chain of tree ${id})`
          throw Errors.NOT_FOUND(`${what} not found (no ${file})`, { object: at, file })
        }
        throw err
      }
      try {
        n = readSync(fd, head, 0, head.length, 0)
      } finally {
        closeSync(fd)
      }
      const delta = parseDeltaHeader(head.subarray(0, n))
      if (!delta || out.length > MAX_DELTA_DEPTH * 4) return out
      at = delta.base
    }
  }

  /** Keeps a tree just built (whose bytes are known to hash to its id) for the next reads. */
  remember(tree: Tree): void {
    this.trees.set(tree.id, tree)
    while (this.trees.size > TREE_CACHE) this.trees.delete(this.trees.keys().next().value as string)
  }
}

function parseDeltaHeader(
  bytes: Buffer,
): { base: string; depth: number; records: number; body: number } | null {
  if (bytes.subarray(0, TREE_DELTA_HEADER.length).toString('latin1') !== TREE_DELTA_HEADER) return null
  const nl = bytes.indexOf(0x0a, TREE_DELTA_HEADER.length)
  if (nl < 0) return null
  const m = /^([0-9a-f]{64}) (\d+) (\d+)$/.exec(bytes.toString('latin1', TREE_DELTA_HEADER.length, nl))
  if (!m) return null
  return { base: m[1] as string, depth: Number(m[2]), records: Number(m[3]), body: nl + 1 }
}

/** Applies a delta's records (`path NUL blob-or-dashes LF`, the tree framing) to a builder. */
function applyDelta(builder: TreeBuilder, bytes: Buffer, from: number, id: string): void {
  let pos = from
  while (pos < bytes.length) {
    const z = bytes.indexOf(0, pos)
    if (z <= pos || z + 66 > bytes.length || bytes[z + 65] !== 0x0a) {
      throw Errors.CORRUPT_OBJECT(`tree delta ${id}: malformed record at byte ${pos}`, {
        object: id,
      })
    }
    const path = bytes.toString('utf8', pos, z)
    const blob = bytes.toString('latin1', z + 1, z + 65)
    if (blob === REMOVED) builder.remove(path)
    else builder.set(path, blob)
    pos = z + 66
  }
}

/**
 * The stored form of a tree's pack: as built, or (a tree that did not change, whose pack was read)
 * every folder of it in one new pack of the same name.
 */
function packBytes(pack: Pack): Buffer {
  try {
    return encodedPack(pack)
  } catch {
    return encodedPack(packFromSorted(Tree.ofPack(pack).entries()))
  }
}

function sliceOf(all: Buffer, offset: number, length: number, what: string, id: string): Buffer {
  if (offset + length > all.length) {
    throw Errors.CORRUPT_OBJECT(`${what} is corrupt: its index points past its end`, {
      object: id,
    })
  }
  return all.subarray(offset, offset + length)
}
