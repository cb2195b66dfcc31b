/**
 * Building a tree's pack from a base tree and path changes (buildPack): the changed paths
 * grouped by folder, each folder on a changed path rebuilt in place from its base's bytes
 * (rebuild), and the new folders gathered and encoded as one pack (PackBuilder), which keeps
 * its encoding to be stored (encodedPack).
 */
import type { Dir, Pack, PackSource } from './pack.js'
import { type BuiltFolder, justBuilt, PackV2 } from './pack-v2.js'
import { comparePaths, DIR_HEAD, keyBytes, LF, NUL, SLASH, sha256hex, TAIL } from './tree-records.js'

/**
 * A pack being built: the folders made so far, and the packs their kept subfolders are in,
 * numbered as the pack will list them.
 */
export class PackBuilder {
  readonly folders = new Map<string, BuiltFolder>()
  /** The folders' source numbers and record ends, back to back (see SizedFolder). */
  hints = new Uint32Array(4096)
  private hintsUsed = 0
  ends = new Uint32Array(4096)
  private endsUsed = 0
  private readonly sourceNo = new Map<string, number>()
  /** Per base pack: its own source numbers (0 = itself) mapped to this pack's, -1 until asked. */
  private readonly mapped = new Map<Pack, Int32Array>()
  private chunk: Buffer = Buffer.allocUnsafe(0)
  private used = 0

  /**
   * Adds a folder of `count` records, its source numbers at `hintAt` of `hints` (-1: none), its
   * record ends at `endAt` of `ends` (-1: not known); returns its id. Both are kept as reserved.
   */
  add(bytes: Buffer, count = 0, hintAt = -1, endAt = -1): string {
    const id = sha256hex(bytes)
    if (hintAt >= 0) this.hintsUsed = hintAt + count
    if (endAt >= 0) this.endsUsed = endAt + count
    if (!this.folders.has(id)) {
      this.folders.set(id, { id, bytes, length: bytes.length, hintAt, count, endAt, k: -1, offset: 0 })
    }
    return id
  }

  /** Room for `n` record ends; returns where they go in `ends` (kept only by add). */
  endRoom(n: number): number {
    if (this.endsUsed + n > this.ends.length) {
      const bigger = new Uint32Array(Math.max(2 * this.ends.length, this.endsUsed + n))
      bigger.set(this.ends.subarray(0, this.endsUsed))
      this.ends = bigger
    }
    return this.endsUsed
  }

  /** Room for `n` source numbers, zeroed; returns where they go in `hints` (kept only by add). */
  hintRoom(n: number): number {
    if (this.hintsUsed + n > this.hints.length) {
      const bigger = new Uint32Array(Math.max(2 * this.hints.length, this.hintsUsed + n))
      bigger.set(this.hints.subarray(0, this.hintsUsed))
      this.hints = bigger
    }
    this.hints.fill(0, this.hintsUsed, this.hintsUsed + n)
    return this.hintsUsed
  }

  /** This pack's number for the pack that `pack` numbers `local` (0: `pack` itself). */
  sourceOf(pack: Pack, local: number): number {
    let map = this.mapped.get(pack)
    if (!map) {
      map = new Int32Array(pack.sources.length + 1).fill(-1)
      this.mapped.set(pack, map)
    }
    let no = map[local] as number
    if (no < 0) {
      const id = local === 0 ? pack.id : (pack.sources[local - 1] as string)
      no = this.sourceNo.get(id) ?? this.sourceNo.size + 1
      this.sourceNo.set(id, no)
      map[local] = no
    }
    return no
  }

  /**
   * Room for `n` bytes of a folder being written: folders are written back to back into
   * chunks (one allocation for many folders), then copied into the pack once.
   */
  room(n: number): Buffer {
    if (this.used + n > this.chunk.length) {
      this.chunk = Buffer.allocUnsafe(Math.max(n, Math.min(1 << 20, 2 * this.chunk.length + (64 << 10))))
      this.used = 0
    }
    return this.chunk
  }

  get at(): number {
    return this.used
  }

  /** Keeps bytes [at, end) of the current chunk (the folder just written). */
  keep(end: number): void {
    this.used = end
  }

  finish(rootId: string, source: PackSource | null, what: string): Pack {
    const list = [...this.folders.values()]
    const bytes = PackV2.encodeSized(list, this.hints, [...this.sourceNo.keys()], (out) => {
      for (const f of list) {
        out.set(f.bytes as Buffer, f.offset)
        f.bytes = null
      }
    })
    const pack = packOf(bytes, rootId, source, what)
    pack.adopt(this.folders, this.ends)
    return pack
  }
}

export function packOf(bytes: Buffer, rootId: string, source: PackSource | null, what: string): PackV2 {
  justBuilt.add(bytes)
  const pack = PackV2.decode(rootId, bytes, () => bytes, source, null, what, bytes.length)
  justBuilt.delete(bytes)
  built.set(pack, bytes)
  return pack
}

/** The encodings of packs just built (to store them without encoding again). */
const built = new WeakMap<Pack, Buffer>()

/** The stored form of a pack this process built. */
export function encodedPack(pack: Pack): Buffer {
  const bytes = built.get(pack)
  if (!bytes) throw new Error(`pack ${pack.id} was read, not built: it is stored already`)
  return bytes
}

/** Path → blob changes grouped by folder: the folder's own files, and its subfolders that change. */
interface Node {
  files: Map<string, string | null>
  dirs: Map<string, Node>
}

function newNode(): Node {
  return { files: new Map(), dirs: new Map() }
}

/** Groups changed paths by folder. */
function groupChanges(changes: Iterable<[string, string | null]>): Node {
  const root = newNode()
  for (const [path, value] of changes) {
    let node = root
    let from = 0
    for (;;) {
      const slash = path.indexOf('/', from)
      if (slash < 0) break
      const name = path.slice(from, slash)
      let next = node.dirs.get(name)
      if (!next) {
        next = newNode()
        node.dirs.set(name, next)
      }
      node = next
      from = slash + 1
    }
    node.files.set(path.slice(from), value)
  }
  return root
}

interface Edit {
  /** A file's name, or a subfolder's name and `/`. */
  key: string
  /** Its blob or subfolder id; null: removed. */
  value: string | null
  /** A subfolder's changes (null: a file). */
  sub: Node | null
  /** Where the key is, or would be, among the base's records. */
  at: number
  /** Whether the base has a record of that key. */
  found: boolean
  /** A subfolder that came back to what it was: nothing to write. */
  same: boolean
}

const editOrder = (a: Edit, b: Edit) => comparePaths(a.key, b.key)

/**
 * The folder `base` (undefined: none yet) with the changes of `node` applied; its new id, or
 * null when it ends up empty. The folder is written in place: runs of the base's records it
 * keeps are copied as bytes (with their record ends, and for kept subfolders the number of the
 * pack that holds them), the changed records between them written from their strings.
 */
function rebuild(base: Dir | undefined, node: Node, out: PackBuilder, isRoot: boolean): string | null {
  const edits: Edit[] = []
  for (const [name, value] of node.files)
    edits.push({ key: name, value, sub: null, at: 0, found: false, same: false })
  for (const [name, sub] of node.dirs)
    edits.push({ key: `${name}/`, value: null, sub, at: 0, found: false, same: false })
  if (edits.length > 1) edits.sort(editOrder)
  const r = base && base.size > 0 ? base.records : undefined
  const n = r ? r.size : 0
  // Each key is looked for once, in key order (a search from the last one found), and each
  // subfolder is rebuilt on the base's folder of that name found there.
  let changed = 0
  let i = 0
  for (const e of edits) {
    if (r) {
      const key = keyBytes(e.key)
      e.at = r.lowerBound(key, i)
      e.found = r.isAt(e.at, key)
      i = e.at
    }
    if (e.sub) {
      const childBase = e.found ? (base as Dir).childAt(e.at) : undefined
      e.value = rebuild(childBase, e.sub, out, false)
      e.same = childBase !== undefined && e.value === childBase.id // changed back to what it was
    }
    if (!e.same) changed++
  }
  if (changed === 0 && base) return base.id
  // At most the base's bytes and every edit as a new record (UTF-8: ≤ 3 bytes per UTF-16 unit).
  let bound = (r ? r.bytes.length : 0) + DIR_HEAD.length
  for (const e of edits) bound += 3 * e.key.length + TAIL
  const buf = out.room(bound)
  const start = out.at
  buf.set(DIR_HEAD, start)
  let pos = start + DIR_HEAD.length
  const room = n + edits.length
  const e0 = out.endRoom(room)
  const ends = out.ends
  let h0 = -1
  let count = 0
  const keep = (from: number, to: number) => {
    if (to <= from || !r || !base) return
    const src = r.start(from)
    const shift = pos - start - src
    pos += r.bytes.copy(buf, pos, src, r.start(to))
    const b = r.bytes
    const rends = r.ends
    for (let k = from; k < to; k++, count++) {
      const z = rends[k] as number
      ends[e0 + count] = z + shift
      if (b[z - 1] === SLASH) {
        if (h0 < 0) h0 = out.hintRoom(room)
        out.hints[h0 + count] = out.sourceOf(base.pack, base.pack.localSourceAt(base, k))
      }
    }
  }
  i = 0
  for (const e of edits) {
    if (e.same) continue // its record is kept with the run it is in
    if (r) {
      keep(i, e.at)
      i = e.found ? e.at + 1 : e.at
    }
    if (e.value === null) continue
    pos += buf.write(e.key, pos, 'utf8')
    ends[e0 + count++] = pos - start
    buf[pos++] = NUL
    pos += buf.write(e.value, pos, 'latin1')
    buf[pos++] = LF
  }
  keep(i, n)
  if (count === 0 && !isRoot) return null
  const bytes = buf.subarray(start, pos)
  if (base && bytes.length === base.records.bytes.length && bytes.equals(base.records.bytes)) return base.id
  out.keep(pos)
  return out.add(bytes, count, h0, e0)
}

/**
 * A tree built from `base` (a folder tree, or undefined: empty) and path changes: the new
 * folders in a pack (named by the new root), naming the packs of the subfolders kept from the base.
 */
export function buildPack(
  base: Dir | undefined,
  changes: Iterable<[string, string | null]>,
  source: PackSource | null,
): Pack {
  const out = new PackBuilder()
  const rootId = rebuild(base, groupChanges(changes), out, true) as string
  // Nothing changed: the base's own pack (a tree's root is its pack's).
  if (!out.folders.has(rootId)) return (base as Dir).pack
  return out.finish(rootId, source, `tree ${rootId}`)
}
