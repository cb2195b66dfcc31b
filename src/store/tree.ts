/**
 * Trees: path → blob maps (seed: スナップショット計算), in two formats.
 *
 * Folder trees (pack.ts and the pack-*.ts beside it, what noa writes): one object per folder,
 * git-style, the tree named by its root folder; an incremental snapshot re-encodes only the
 * folders on the changed paths.
 *
 * Flat trees (what noa wrote before, still read): one object, the header `noa-tree 1\n`, then
 * one record per file, sorted by the UTF-8 bytes of the path (the same as code point order):
 *
 *     <path bytes> NUL <64 lowercase hex> LF
 *
 * A path may hold any character but NUL (entry.ts refuses NUL), so the NUL ends the path even
 * when the path contains a newline, and every record ends 65 bytes after its NUL. Sorted
 * records with no escaping make the encoding canonical (equal trees hash equal).
 *
 * A `Tree` in memory is either; both list the same files in the same order. A folder tree is
 * read lazily (a lookup reads the folders on its path); the flat listing (`pathAt`, `entries`,
 * `bytes`, …) of a folder tree is made on first use, by one walk of its folders.
 */
import { createHash } from 'node:crypto'
import { Errors } from '../engine/errors.js'
import type { Dir, Pack, PackSource } from './pack.js'
import { buildPack } from './pack-build.js'
import { packFromSorted, packFromSortedTwice, type SortedFiles } from './pack-walk.js'
import { comparePaths, Records } from './tree-records.js'

export { comparePaths }

export const TREE_HEADER = 'noa-tree 1\n'
const HEADER = Buffer.from(TREE_HEADER, 'latin1')
const BLOB_RE = /^[0-9a-f]{64}$/
const WIDE_UNIT = /[\ud800-\uffff]/
const HEX = new Uint8Array(256)
for (const c of '0123456789abcdef') HEX[c.charCodeAt(0)] = 1
/** A path removed from the base (TreeBuilder's slot for it). */
const REMOVED = -1
/** TreeBuilder's blob slots per page: 16384 × 64 bytes, a megabyte. */
const PAGE_BITS = 14
const PAGE_SLOTS = 1 << PAGE_BITS

/** Node's own latin1 codecs (what `toString`/`write` call after their argument checks); not in @types/node. */
type SliceBuffer = Buffer & {
  latin1Slice(start: number, end: number): string
  latin1Write(s: string, offset: number, length: number): number
}

/** A lone surrogate cannot be written as UTF-8: such a path would silently change in a tree. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

export function isWellFormedPath(path: string): boolean {
  return !LONE_SURROGATE.test(path)
}

/**
 * An immutable tree: a flat tree's records, or a folder tree's root (with the flat listing made
 * when first asked for).
 */
export class Tree {
  private flat: Records | null
  private rootDir: Dir | null
  /** A pack whose root folder is this tree's root, not read yet (see ofBuiltPack). */
  private rootIn: Pack | null = null

  private constructor(
    readonly id: string,
    flat: Records | null,
    root: Dir | null,
  ) {
    this.flat = flat
    this.rootDir = root
  }

  /** The root folder of a folder tree (null: a flat tree). */
  get root(): Dir | null {
    if (this.rootIn !== null) {
      this.rootDir = this.rootIn.root
      this.rootIn = null
    }
    return this.rootDir
  }

  /**
   * Checks the framing of flat tree bytes (the caller has checked their hash) and indexes them.
   * `what` names the object in errors.
   */
  static decode(id: string, bytes: Buffer, what = `tree ${id}`): Tree {
    return new Tree(id, Records.parse(bytes, HEADER, what, id), null)
  }

  /** The folder tree whose root is the pack's root folder. */
  static ofPack(pack: Pack): Tree {
    return new Tree(pack.id, null, pack.root)
  }

  /**
   * The same, its root folder read when first used: for a tree just stored from a pack the
   * store built (or had read already), kept for the next reads, which a LangGraph commit (it
   * builds the next tree from its own listing) never makes. Damage there, if any, is then found
   * by the read that needs it, not after a commit that already went in.
   */
  static ofBuiltPack(pack: Pack): Tree {
    const tree = new Tree(pack.id, null, null)
    tree.rootIn = pack
    return tree
  }

  static readonly EMPTY_BYTES: Buffer = HEADER

  /** 'dirs': stored per folder (noa's format); 'flat': one object (the format before). */
  get format(): 'dirs' | 'flat' {
    return this.rootIn !== null || this.rootDir !== null ? 'dirs' : 'flat'
  }

  get isEmpty(): boolean {
    return this.root ? this.root.size === 0 : (this.flat as Records).size === 0
  }

  /** The flat listing (made once for a folder tree: one walk of its folders). */
  private listing(): Records {
    if (this.flat) return this.flat
    const parts: Buffer[] = [HEADER]
    const walk = (dir: Dir, prefix: string) => {
      const r = dir.records
      for (let i = 0; i < r.size; i++) {
        if (r.isDirAt(i)) walk(dir.childAt(i), prefix + r.keyAt(i))
        else if (prefix === '') parts.push(r.recordBytes(i, i + 1))
        else parts.push(Buffer.from(prefix, 'utf8'), r.recordBytes(i, i + 1))
      }
    }
    walk(this.root as Dir, '')
    this.flat = Records.parse(Buffer.concat(parts), HEADER, `tree ${this.id}`, this.id)
    return this.flat
  }

  /** The flat encoding of the files (for a flat tree, the stored bytes). */
  get bytes(): Buffer {
    return this.listing().bytes
  }

  /** Number of files. */
  get size(): number {
    return this.listing().size
  }

  pathAt(i: number): string {
    return this.listing().keyAt(i)
  }

  blobAt(i: number): string {
    return this.listing().blobAt(i)
  }

  /** First record index in [lo, size) whose path is ≥ `path`. */
  lowerBound(path: Uint8Array, lo = 0): number {
    return this.listing().lowerBound(path, lo)
  }

  get(path: string): string | undefined {
    if (this.flat) return this.flat.find(Buffer.from(path, 'utf8'))
    let dir = this.root as Dir
    let from = 0
    for (;;) {
      const slash = path.indexOf('/', from)
      if (slash < 0) return dir.file(path.slice(from))
      const next = dir.child(path.slice(from, slash))
      if (!next) return undefined
      dir = next
      from = slash + 1
    }
  }

  /** Whether record i's path is exactly `path`. */
  isAt(i: number, path: Uint8Array): boolean {
    return this.listing().isAt(i, path)
  }

  has(path: string): boolean {
    return this.get(path) !== undefined
  }

  /** Bytes of records [from, to) of the flat listing (a zero-copy view). */
  recordBytes(from: number, to: number): Buffer {
    return this.listing().recordBytes(from, to)
  }

  *entries(): Generator<[path: string, blob: string]> {
    const r = this.listing()
    for (let i = 0; i < r.size; i++) yield [r.keyAt(i), r.blobAt(i)]
  }

  toMap(): Map<string, string> {
    return new Map(this.entries())
  }
}

/** The empty flat tree (the format before; its id is the one old records name). */
export const EMPTY_FLAT_TREE: Tree = Tree.decode(
  createHash('sha256').update(Tree.EMPTY_BYTES).digest('hex'),
  Tree.EMPTY_BYTES,
)

/** The empty tree, as noa writes it (a root folder with nothing in it). */
export const EMPTY_TREE: Tree = Tree.ofPack(packFromSorted([]))

/**
 * A tree being changed: a base tree plus the paths set (to a blob) or removed (null) since.
 * Reads go to the changes first, then to the base by binary search, so replaying n entries on
 * a parent's tree costs O(n log size), and `encode` copies the untouched runs of the base.
 */
export class TreeBuilder {
  readonly base: Tree
  /**
   * Path → the slot of its blob in `pages` (REMOVED: removed from the base). A replay sets the
   * same paths over and over: a blob kept as a string per path would be promoted to the old
   * generation and left as garbage by the next write of that path, and with 100k paths that
   * garbage, not the tree, sets the peak heap. A slot is rewritten in place instead.
   */
  private readonly changes = new Map<string, number>()
  /**
   * 64 latin1 bytes per slot (the blob's characters, which are ASCII, see `set`), in pages of
   * PAGE_SLOTS: a page is added when one fills, never copied, so a tree of 100k paths holds no
   * second, half-size copy when it grows. The first page starts small and doubles (a builder of
   * a few paths should not cost a megabyte; under 4 KiB it is a slice of Node's buffer pool, not
   * an allocation of its own).
   */
  private pages: SliceBuffer[] = [Buffer.allocUnsafe(64 * 16) as SliceBuffer]
  private slots = 0
  private readonly free: number[] = []
  /** Values that are not 64 ASCII characters, by slot, kept as given (`check` refuses them). */
  private odd: Map<number, string> | null = null
  private readonly baseEmpty: boolean

  constructor(base: Tree = EMPTY_TREE) {
    this.base = base
    this.baseEmpty = base.isEmpty
  }

  private blobAt(slot: number): string {
    if (this.odd !== null) {
      const v = this.odd.get(slot)
      if (v !== undefined) return v
    }
    const at = (slot & (PAGE_SLOTS - 1)) * 64
    return (this.pages[slot >>> PAGE_BITS] as SliceBuffer).latin1Slice(at, at + 64)
  }

  private newSlot(): number {
    const reused = this.free.pop()
    if (reused !== undefined) return reused
    const slot = this.slots++
    const page = slot >>> PAGE_BITS
    if (page === this.pages.length) {
      this.pages.push(Buffer.allocUnsafe(PAGE_SLOTS * 64) as SliceBuffer)
    } else if (page === 0 && slot * 64 >= (this.pages[0] as SliceBuffer).length) {
      const first = this.pages[0] as SliceBuffer
      const bigger = Buffer.allocUnsafe(first.length * 2) as SliceBuffer
      first.copy(bigger, 0, 0, slot * 64)
      this.pages[0] = bigger
    }
    return slot
  }

  private freeSlot(slot: number): void {
    this.odd?.delete(slot)
    this.free.push(slot)
  }

  get(path: string): string | undefined {
    const v = this.changes.get(path)
    if (v !== undefined) return v === REMOVED ? undefined : this.blobAt(v)
    return this.baseEmpty ? undefined : this.base.get(path)
  }

  has(path: string): boolean {
    const v = this.changes.get(path)
    if (v !== undefined) return v !== REMOVED
    return !this.baseEmpty && this.base.has(path)
  }

  set(path: string, blob: string): void {
    let slot = this.changes.get(path)
    if (slot === undefined || slot === REMOVED) {
      slot = this.newSlot()
      this.changes.set(path, slot)
    } else this.odd?.delete(slot)
    // 64 characters in 64 UTF-8 bytes are ASCII, which latin1 keeps exactly; anything else (no
    // blob a log holds) is kept as the string it is.
    if (blob.length === 64 && Buffer.byteLength(blob, 'utf8') === 64) {
      ;(this.pages[slot >>> PAGE_BITS] as SliceBuffer).latin1Write(blob, (slot & (PAGE_SLOTS - 1)) * 64, 64)
    } else {
      this.odd ??= new Map()
      this.odd.set(slot, blob)
    }
  }

  /** Removes a path; the caller has checked that it exists. */
  remove(path: string): void {
    const slot = this.changes.get(path)
    if (slot !== undefined && slot !== REMOVED) this.freeSlot(slot)
    if (this.baseEmpty) this.changes.delete(path)
    else this.changes.set(path, REMOVED)
  }

  /** Paths touched since the base, with their value now (null: removed). */
  *touched(): IterableIterator<[string, string | null]> {
    for (const [k, v] of this.changes) yield [k, v === REMOVED ? null : this.blobAt(v)]
  }

  get touchedCount(): number {
    return this.changes.size
  }

  /** The same changes over another base holding the same files (a folder form of a flat view). */
  withBase(base: Tree): TreeBuilder {
    const b = new TreeBuilder(base)
    for (const [k, v] of this.touched()) {
      if (v === null) b.changes.set(k, REMOVED)
      else b.set(k, v)
    }
    return b
  }

  /** Refuses paths and blobs that cannot be stored in a tree (replay checks little per entry). */
  check(): void {
    for (const [k, slot] of this.changes) {
      // A slot holds ASCII: BLOB_RE on it is a look at its bytes (no string made for each).
      if (
        isWellFormedPath(k) &&
        (slot === REMOVED || (this.odd?.get(slot) === undefined && this.isHex(slot)))
      )
        continue
      const v = slot === REMOVED ? null : this.blobAt(slot)
      if (!isWellFormedPath(k)) {
        throw Errors.REPLAY(
          `path ${JSON.stringify(k)} holds a lone UTF-16 surrogate and cannot be stored in a tree`,
          { path: k },
        )
      }
      if (v && !BLOB_RE.test(v)) {
        throw Errors.CORRUPT_LOG(
          `path ${JSON.stringify(k)}: blob ${JSON.stringify(v)} is not 64 lowercase hex (from a log? noa verify finds the line)`,
          { path: k },
        )
      }
    }
  }

  /**
   * The tree as it stands, stored per folder: the folders that changed, in a pack named by the
   * new root, naming the pack of each folder it keeps from the base. On a flat base (the format
   * before) every folder is new. `source` finds the packs named (the object store).
   */
  buildPack(source: PackSource | null): Pack {
    this.check()
    const base = this.base
    // From nothing (a full replay), every folder is new: one pass over the sorted paths writes
    // each folder once, instead of grouping every path into a map per folder first. (With no
    // change at all, the base's own pack, as below.)
    if (this.baseEmpty && this.changes.size > 0) {
      const keys = this.sortedKeys()
      return packFromSortedTwice(() => this.filesOf(keys))
    }
    if (base.root) return buildPack(base.root, this.touched(), source)
    return packFromSorted(Tree.decode('', this.encode()).entries())
  }

  /** Whether a slot holds 64 lowercase hex digits. */
  private isHex(slot: number): boolean {
    const page = this.pages[slot >>> PAGE_BITS] as Buffer
    const from = (slot & (PAGE_SLOTS - 1)) * 64
    for (let i = from; i < from + 64; i++) if (HEX[page[i] as number] === 0) return false
    return true
  }

  /** A touched path's value now (null: removed). */
  private valueOf(path: string): string | null {
    const v = this.changes.get(path) as number
    return v === REMOVED ? null : this.blobAt(v)
  }

  /** The paths touched, in byte order. */
  private sortedKeys(): string[] {
    const keys = [...this.changes.keys()]
    // Without a unit at or above U+D800 the code unit order (the built-in sort, compared
    // natively) is the code point order; comparePaths differs only between such units.
    if (keys.some((k) => WIDE_UNIT.test(k))) keys.sort(comparePaths)
    else keys.sort()
    return keys
  }

  /** The files at sorted touched paths `keys` (the base is empty), blobs copied from their slots. */
  private filesOf(keys: readonly string[]): SortedFiles {
    let i = 0
    let page: Buffer = Buffer.alloc(0)
    let at = 0
    let odd = ''
    return {
      next: () => {
        while (i < keys.length) {
          const k = keys[i++] as string
          const slot = this.changes.get(k) as number
          if (slot === REMOVED) continue
          const v = this.odd?.get(slot)
          if (v !== undefined) {
            if (v === '') continue // as encode: an empty value is no file
            odd = v
          } else {
            odd = ''
            page = this.pages[slot >>> PAGE_BITS] as Buffer
            at = (slot & (PAGE_SLOTS - 1)) * 64
          }
          return k
        }
        return undefined
      },
      blobBytes: () => (odd === '' ? 64 : odd.length * 3),
      writeBlob: (out, to) => (odd === '' ? page.copy(out, to, at, at + 64) : out.write(odd, to, 'utf8')),
    }
  }

  /** The flat canonical bytes of the tree as it stands (the listing; trees are stored per folder). */
  encode(): Buffer {
    this.check()
    const keys = this.sortedKeys()
    const base = this.base
    if (this.baseEmpty) {
      let text = TREE_HEADER
      for (const k of keys) {
        const v = this.valueOf(k)
        if (v) text += `${k}\0${v}\n`
      }
      return Buffer.from(text, 'utf8')
    }
    const parts: Buffer[] = [HEADER]
    let pending = '' // new records between two copied runs of the base
    let i = 0
    const n = base.size
    for (const k of keys) {
      const key = Buffer.from(k, 'utf8')
      const j = base.lowerBound(key, i)
      if (j > i) {
        if (pending) parts.push(Buffer.from(pending, 'utf8'))
        pending = ''
        parts.push(base.recordBytes(i, j))
      }
      const v = this.valueOf(k)
      if (v) pending += `${k}\0${v}\n`
      i = base.isAt(j, key) ? j + 1 : j
    }
    if (pending) parts.push(Buffer.from(pending, 'utf8'))
    if (i < n) parts.push(base.recordBytes(i, n))
    return Buffer.concat(parts)
  }
}

export interface TreeChange {
  path: string
  /** Blob before (null: absent). */
  before: string | null
  /** Blob after (null: absent). */
  after: string | null
}

/**
 * Paths whose blob differs between two trees, in path order. Two folder trees are compared
 * folder by folder, skipping every subtree whose id is the same on both sides; otherwise one
 * merge pass over both listings.
 */
export function diffTrees(a: Tree, b: Tree): TreeChange[] {
  const out: TreeChange[] = []
  if (a.root && b.root) {
    diffDirs(a.root, b.root, '', out)
    return out
  }
  let i = 0
  let j = 0
  while (i < a.size || j < b.size) {
    if (j >= b.size) {
      out.push({ path: a.pathAt(i), before: a.blobAt(i), after: null })
      i++
      continue
    }
    if (i >= a.size) {
      out.push({ path: b.pathAt(j), before: null, after: b.blobAt(j) })
      j++
      continue
    }
    const pa = a.pathAt(i)
    const pb = b.pathAt(j)
    const c = comparePaths(pa, pb)
    if (c < 0) {
      out.push({ path: pa, before: a.blobAt(i), after: null })
      i++
    } else if (c > 0) {
      out.push({ path: pb, before: null, after: b.blobAt(j) })
      j++
    } else {
      const ba = a.blobAt(i)
      const bb = b.blobAt(j)
      if (ba !== bb) out.push({ path: pa, before: ba, after: bb })
      i++
      j++
    }
  }
  return out
}

function keyBytes(r: Records, i: number): Buffer {
  return r.bytes.subarray(r.start(i), r.ends[i])
}

/** One side's whole subtree (the other side has none): every file added or removed. */
function oneSide(dir: Dir, prefix: string, out: TreeChange[], removed: boolean): void {
  const r = dir.records
  for (let i = 0; i < r.size; i++) {
    const key = prefix + r.keyAt(i)
    if (r.isDirAt(i)) oneSide(dir.childAt(i), key, out, removed)
    else if (removed) out.push({ path: key, before: r.blobAt(i), after: null })
    else out.push({ path: key, before: null, after: r.blobAt(i) })
  }
}

function diffDirs(a: Dir, b: Dir, prefix: string, out: TreeChange[]): void {
  if (a.id === b.id) return
  const ra = a.records
  const rb = b.records
  let i = 0
  let j = 0
  const side = (dir: Dir, r: Records, k: number, removed: boolean) => {
    const key = prefix + r.keyAt(k)
    if (r.isDirAt(k)) oneSide(dir.childAt(k), key, out, removed)
    else if (removed) out.push({ path: key, before: r.blobAt(k), after: null })
    else out.push({ path: key, before: null, after: r.blobAt(k) })
  }
  while (i < ra.size || j < rb.size) {
    const c = i >= ra.size ? 1 : j >= rb.size ? -1 : Buffer.compare(keyBytes(ra, i), keyBytes(rb, j))
    if (c < 0) side(a, ra, i++, true)
    else if (c > 0) side(b, rb, j++, false)
    else {
      const x = ra.blobAt(i)
      const y = rb.blobAt(j)
      if (x !== y) {
        if (ra.isDirAt(i)) diffDirs(a.childAt(i), b.childAt(j), prefix + ra.keyAt(i), out)
        else out.push({ path: prefix + ra.keyAt(i), before: x, after: y })
      }
      i++
      j++
    }
  }
}
