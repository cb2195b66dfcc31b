/**
 * Trees: path → blob maps (seed: スナップショット計算), stored as one canonical object.
 *
 * Encoding: the header `noa-tree 1\n`, then one record per file, sorted by the UTF-8 bytes of
 * the path (the same as code point order):
 *
 *     <path bytes> NUL <64 lowercase hex> LF
 *
 * A path may hold any character but NUL (entry.ts refuses NUL), so the NUL ends the path even
 * when the path contains a newline, and every record ends 65 bytes after its NUL. Sorted
 * records with no escaping make the encoding canonical (equal trees hash equal) and let a
 * tree be searched and merged as bytes: an incremental snapshot copies the unchanged runs of
 * its parent's tree and never decodes them.
 *
 * The tree is flat, not one object per directory: with changes spread over many directories
 * (what a busy agent does) nested trees rewrite hundreds of small objects, each with its own
 * fsync, where a flat tree is one sequential write.
 */
import { createHash } from 'node:crypto'
import { Errors } from '../engine/errors.js'

export const TREE_HEADER = 'noa-tree 1\n'
const HEADER = Buffer.from(TREE_HEADER, 'latin1')
const NUL = 0
const BLOB_RE = /^[0-9a-f]{64}$/
const LF = 0x0a
/** NUL + 64 hex + LF after the path. */
const TAIL = 66

/** Orders paths by code point, which is the order of their UTF-8 bytes. */
export function comparePaths(a: string, b: string): number {
  if (a === b) return 0
  const n = Math.min(a.length, b.length)
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i)
    let y = b.charCodeAt(i)
    if (x !== y) {
      if (x >= 0xd800 && y >= 0xd800) {
        // UTF-16 puts U+E000..U+FFFF above the surrogates that encode U+10000 and up.
        x = x >= 0xe000 ? x - 0x800 : x + 0x2000
        y = y >= 0xe000 ? y - 0x800 : y + 0x2000
      }
      return x - y
    }
  }
  return a.length - b.length
}

/** A lone surrogate cannot be written as UTF-8: such a path would silently change in a tree. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

export function isWellFormedPath(path: string): boolean {
  return !LONE_SURROGATE.test(path)
}

/** An immutable, decoded tree object. Records stay as bytes; paths are decoded on demand. */
export class Tree {
  /** Offset of each record's NUL (the end of its path). */
  private readonly ends: Uint32Array

  private constructor(
    readonly id: string,
    readonly bytes: Buffer,
    ends: Uint32Array,
  ) {
    this.ends = ends
  }

  /**
   * Checks the framing of tree bytes (the caller has checked their hash) and indexes them.
   * `what` names the object in errors.
   */
  static decode(id: string, bytes: Buffer, what = `tree ${id}`): Tree {
    if (bytes.length < HEADER.length || !bytes.subarray(0, HEADER.length).equals(HEADER)) {
      throw Errors.CORRUPT_OBJECT(`${what} is not a tree (no "noa-tree 1" header)`, {
        object: id,
      })
    }
    const ends: number[] = []
    let pos = HEADER.length
    while (pos < bytes.length) {
      const z = bytes.indexOf(NUL, pos)
      if (z <= pos || z + TAIL > bytes.length || bytes[z + TAIL - 1] !== LF) {
        throw Errors.CORRUPT_OBJECT(`${what}: malformed record at byte ${pos}`, {
          object: id,
          offset: pos,
        })
      }
      ends.push(z)
      pos = z + TAIL
    }
    return new Tree(id, bytes, Uint32Array.from(ends))
  }

  static readonly EMPTY_BYTES: Buffer = HEADER

  /** Number of files. */
  get size(): number {
    return this.ends.length
  }

  private start(i: number): number {
    return i === 0 ? HEADER.length : (this.ends[i - 1] as number) + TAIL
  }

  pathAt(i: number): string {
    return this.bytes.toString('utf8', this.start(i), this.ends[i])
  }

  blobAt(i: number): string {
    const z = this.ends[i] as number
    return this.bytes.toString('latin1', z + 1, z + 65)
  }

  /**
   * Compares record i's path with `path` (UTF-8 bytes): < 0 when the record sorts first. A plain
   * loop: the paths share long prefixes and are short, where the binding call of
   * Buffer#compare costs more than the comparison.
   */
  private compareAt(i: number, path: Uint8Array): number {
    const b = this.bytes
    let p = this.start(i)
    const end = this.ends[i] as number
    const n = path.length
    for (let k = 0; k < n; k++, p++) {
      if (p === end) return -1
      const d = (b[p] as number) - (path[k] as number)
      if (d !== 0) return d
    }
    return p === end ? 0 : 1
  }

  /** First record index in [lo, size) whose path is ≥ `path`. */
  lowerBound(path: Uint8Array, lo = 0): number {
    let hi = this.ends.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (this.compareAt(mid, path) < 0) lo = mid + 1
      else hi = mid
    }
    return lo
  }

  get(path: string): string | undefined {
    if (this.ends.length === 0) return undefined
    const key = Buffer.from(path, 'utf8')
    const i = this.lowerBound(key)
    return i < this.ends.length && this.compareAt(i, key) === 0 ? this.blobAt(i) : undefined
  }

  /** Whether record i's path is exactly `path`. */
  isAt(i: number, path: Uint8Array): boolean {
    return i < this.ends.length && this.compareAt(i, path) === 0
  }

  has(path: string): boolean {
    return this.get(path) !== undefined
  }

  /** Bytes of records [from, to) as they are stored (a zero-copy view). */
  recordBytes(from: number, to: number): Buffer {
    return this.bytes.subarray(this.start(from), this.start(to))
  }

  *entries(): Generator<[path: string, blob: string]> {
    for (let i = 0; i < this.ends.length; i++) yield [this.pathAt(i), this.blobAt(i)]
  }

  toMap(): Map<string, string> {
    return new Map(this.entries())
  }
}

export const EMPTY_TREE: Tree = Tree.decode(
  createHash('sha256').update(Tree.EMPTY_BYTES).digest('hex'),
  Tree.EMPTY_BYTES,
)

/**
 * A tree being changed: a base tree plus the paths set (to a blob) or removed (null) since.
 * Reads go to the changes first, then to the base by binary search, so replaying n entries on
 * a parent's tree costs O(n log size), and `encode` copies the untouched runs of the base.
 */
export class TreeBuilder {
  readonly base: Tree
  private readonly changes = new Map<string, string | null>()
  private readonly baseEmpty: boolean

  constructor(base: Tree = EMPTY_TREE) {
    this.base = base
    this.baseEmpty = base.size === 0
  }

  get(path: string): string | undefined {
    const v = this.changes.get(path)
    if (v !== undefined) return v === null ? undefined : v
    return this.baseEmpty ? undefined : this.base.get(path)
  }

  has(path: string): boolean {
    return this.get(path) !== undefined
  }

  set(path: string, blob: string): void {
    this.changes.set(path, blob)
  }

  /** Removes a path; the caller has checked that it exists. */
  remove(path: string): void {
    if (this.baseEmpty) this.changes.delete(path)
    else this.changes.set(path, null)
  }

  /** Paths touched since the base, with their value now (null: removed). */
  touched(): IterableIterator<[string, string | null]> {
    return this.changes.entries()
  }

  get touchedCount(): number {
    return this.changes.size
  }

  /** The canonical bytes of the tree as it stands. */
  encode(): Buffer {
    const keys = [...this.changes.keys()]
    for (const k of keys) {
      if (!isWellFormedPath(k)) {
        throw Errors.REPLAY(
          `path ${JSON.stringify(k)} holds a lone UTF-16 surrogate and cannot be stored in a tree`,
          { path: k },
        )
      }
      const v = this.changes.get(k)
      if (v && !BLOB_RE.test(v)) {
        throw Errors.CORRUPT_LOG(
          `path ${JSON.stringify(k)}: blob ${JSON.stringify(v)} is not 64 lowercase hex (from a log? noa verify finds the line)`,
          { path: k },
        )
      }
    }
    keys.sort(comparePaths)
    const base = this.base
    if (this.baseEmpty) {
      let text = TREE_HEADER
      for (const k of keys) {
        const v = this.changes.get(k)
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
      const v = this.changes.get(k)
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

/** Paths whose blob differs between two trees, in path order: one merge pass over both. */
export function diffTrees(a: Tree, b: Tree): TreeChange[] {
  const out: TreeChange[] = []
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
