/**
 * Trees stored per directory, as git stores them: each folder is one object listing its files
 * and its subfolders by hash, so an incremental snapshot re-encodes only the folders on the
 * changed paths and every other subtree is reused by its hash. A tree's id is its root folder's.
 *
 * A folder's encoding: the header `noa-tree 2\n`, then one record per child, sorted by the
 * UTF-8 bytes of its key:
 *
 *     <key bytes> NUL <64 lowercase hex> LF
 *
 * where the key of a file is its name and the key of a subfolder is its name and `/` (a name
 * holds neither `/` nor NUL). That is the framing of the flat format (tree.ts), and sorting
 * subfolders as `name/` is git's rule: walking the folders in key order yields the full paths
 * in the order of their bytes, the order of a flat tree. A file and a folder may share a name
 * (`a` and `a/b` are both paths a log can write). Only the root may be empty.
 *
 * Storage: the folders a snapshot made are written together as one object, a pack, named by
 * the root's id (its bytes do not hash to that name; each folder in it is checked against its
 * own id when read). Thousands of small files with an fsync each would cost far more than the
 * encoding saved; a pack is one sequential write. A pack holds the folders it made inline and,
 * for each subfolder it reuses, the pack that holds that subfolder inline (a ref), so any
 * folder is found in one hop from the pack of its parent:
 *
 *     noa-tree-pack 1\n
 *     <inline count> <ref count>\n
 *     <folder id> <offset> <length>\n      one per inline folder, the root first; offsets are
 *                                          from the end of the index
 *     <folder id> <pack id>\n              one per ref
 *     <the inline folders' encodings, back to back>
 */
import { createHash } from 'node:crypto'
import { Errors } from '../engine/errors.js'

export const DIR_HEADER = 'noa-tree 2\n'
export const PACK_HEADER = 'noa-tree-pack 1\n'
const DIR_HEAD = Buffer.from(DIR_HEADER, 'latin1')
const NUL = 0
const LF = 0x0a
const SLASH = 0x2f
/** NUL + 64 hex + LF after the key. */
export const TAIL = 66

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

export function sha256hex(data: Uint8Array | string): string {
  return createHash('sha256').update(data).digest('hex')
}

/**
 * Sorted `key NUL hex LF` records after a header, kept as bytes and indexed by the offset of
 * each NUL: a flat tree (keys are full paths) or one folder (keys are names).
 */
export class Records {
  constructor(
    readonly bytes: Buffer,
    readonly ends: Uint32Array,
    readonly headerLength: number,
  ) {}

  /** Checks the framing after `header`; `what` names the object in errors. */
  static parse(bytes: Buffer, header: Buffer, what: string, id: string): Records {
    if (bytes.length < header.length || !bytes.subarray(0, header.length).equals(header)) {
      throw Errors.CORRUPT_OBJECT(`${what} is not a tree (no "${header.toString('latin1').trim()}" header)`, {
        object: id,
      })
    }
    const ends: number[] = []
    let pos = header.length
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
    return new Records(bytes, Uint32Array.from(ends), header.length)
  }

  get size(): number {
    return this.ends.length
  }

  start(i: number): number {
    return i === 0 ? this.headerLength : (this.ends[i - 1] as number) + TAIL
  }

  keyAt(i: number): string {
    return this.bytes.toString('utf8', this.start(i), this.ends[i])
  }

  blobAt(i: number): string {
    const z = this.ends[i] as number
    return this.bytes.toString('latin1', z + 1, z + 65)
  }

  /** Whether record i's key ends in `/` (a subfolder of a folder). */
  isDirAt(i: number): boolean {
    return this.bytes[(this.ends[i] as number) - 1] === SLASH
  }

  /**
   * Compares record i's key with `key` (UTF-8 bytes): < 0 when the record sorts first. A plain
   * loop: keys are short and share prefixes, where the binding call of Buffer#compare costs more.
   */
  compareAt(i: number, key: Uint8Array): number {
    const b = this.bytes
    let p = this.start(i)
    const end = this.ends[i] as number
    const n = key.length
    for (let k = 0; k < n; k++, p++) {
      if (p === end) return -1
      const d = (b[p] as number) - (key[k] as number)
      if (d !== 0) return d
    }
    return p === end ? 0 : 1
  }

  /** First record index in [lo, size) whose key is ≥ `key`. */
  lowerBound(key: Uint8Array, lo = 0): number {
    let hi = this.ends.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (this.compareAt(mid, key) < 0) lo = mid + 1
      else hi = mid
    }
    return lo
  }

  isAt(i: number, key: Uint8Array): boolean {
    return i < this.ends.length && this.compareAt(i, key) === 0
  }

  /** The hash stored under `key`, or undefined. */
  find(key: Uint8Array): string | undefined {
    if (this.ends.length === 0) return undefined
    const i = this.lowerBound(key)
    return this.isAt(i, key) ? this.blobAt(i) : undefined
  }

  /** Bytes of records [from, to) as they are stored (a zero-copy view). */
  recordBytes(from: number, to: number): Buffer {
    return this.bytes.subarray(this.start(from), this.start(to))
  }
}

/** One folder of a stored tree: its records, and the pack that holds it (to find its subfolders). */
export class Dir {
  constructor(
    readonly id: string,
    readonly records: Records,
    readonly pack: Pack,
  ) {}

  get size(): number {
    return this.records.size
  }

  /** The subfolder with this name, or undefined. */
  child(name: string): Dir | undefined {
    const id = this.records.find(Buffer.from(`${name}/`, 'utf8'))
    return id === undefined ? undefined : this.pack.dir(id)
  }

  /** The file's blob, or undefined. */
  file(name: string): string | undefined {
    return this.records.find(Buffer.from(name, 'utf8'))
  }

  /** The subfolder record i names (the record is a folder's). */
  childAt(i: number): Dir {
    return this.pack.dir(this.records.blobAt(i))
  }
}

/** Where packs come from: the object store (synchronous reads, checked as they are made). */
export interface PackSource {
  pack(id: string, from: { tree: string; folder: string }): Pack
}

/** Where an inline folder's bytes are: in memory (a pack just built) or at a range of the file. */
type Inline = Buffer | { offset: number; length: number }

/**
 * A pack: folders inline (by id) and refs (folder id → the pack holding it inline). Folders
 * are decoded on first use and kept; a folder read from a file is checked against its id.
 */
export class Pack {
  private readonly loaded = new Map<string, Dir>()

  constructor(
    readonly id: string,
    private readonly inline: Map<string, Inline>,
    readonly refs: ReadonlyMap<string, string>,
    private readonly source: PackSource | null,
    /** Reads [offset, offset + length) of the pack's data (a stored pack). */
    private readonly read: ((offset: number, length: number) => Buffer) | null,
    private readonly what: string,
  ) {}

  /** Whether the pack holds this folder inline. */
  holds(id: string): boolean {
    return this.inline.has(id)
  }

  get inlineIds(): IterableIterator<string> {
    return this.inline.keys()
  }

  get root(): Dir {
    return this.dir(this.id)
  }

  /** The pack that holds folder `id` inline: this one, or the one its ref names. */
  home(id: string): Pack {
    if (this.inline.has(id)) return this
    const ref = this.refs.get(id)
    if (ref === undefined || this.source === null) {
      throw Errors.CORRUPT_OBJECT(
        `${this.what}: folder ${id} is neither in the pack nor named by one of its refs`,
        { object: this.id },
      )
    }
    const pack = this.source.pack(ref, { tree: this.id, folder: id })
    if (pack.holds(id)) return pack
    // Two packs can hold the same tree (two writers built it from different bases, and the
    // later write found the object there): the ref was made against the other one. The folder
    // is in that tree all the same (ids are content), so look for it there.
    const found = pack === this ? undefined : pack.search(id)
    if (found) return found
    throw Errors.CORRUPT_OBJECT(
      `${this.what}: its ref to folder ${id} names tree ${ref}, which does not hold it`,
      { object: this.id },
    )
  }

  /** The pack holding folder `id` inline, found by a walk of this pack's tree; undefined if none. */
  private search(id: string): Pack | undefined {
    const seen = new Set<string>()
    const walk = (dir: Dir): Pack | undefined => {
      const r = dir.records
      for (let i = 0; i < r.size; i++) {
        if (!r.isDirAt(i)) continue
        const child = r.blobAt(i)
        if (seen.has(child)) continue
        seen.add(child)
        const d = dir.childAt(i)
        if (child === id) return d.pack
        const hit = walk(d)
        if (hit) return hit
      }
      return undefined
    }
    return walk(this.root)
  }

  /** Folder `id`, read from this pack or the one its ref names. */
  dir(id: string): Dir {
    const cached = this.loaded.get(id)
    if (cached) return cached
    const inline = this.inline.get(id)
    if (inline === undefined) return this.home(id).dir(id)
    let bytes: Buffer
    if (Buffer.isBuffer(inline)) {
      bytes = inline
    } else {
      bytes = (this.read as NonNullable<typeof this.read>)(inline.offset, inline.length)
      const actual = sha256hex(bytes)
      if (actual !== id) {
        throw Errors.CORRUPT_OBJECT(
          `${this.what} is corrupt: its folder ${id} hashes to ${actual} (bytes ${inline.offset}-${inline.offset + inline.length - 1} of its data)`,
          { object: this.id },
        )
      }
    }
    const dir = new Dir(id, Records.parse(bytes, DIR_HEAD, `folder ${id} of ${this.what}`, this.id), this)
    this.loaded.set(id, dir)
    return dir
  }

  /** The stored form of the pack. */
  encode(): Buffer {
    const parts: Buffer[] = []
    let index = ''
    let offset = 0
    for (const [id, inline] of this.inline) {
      const bytes = Buffer.isBuffer(inline) ? inline : this.dir(id).records.bytes
      index += `${id} ${offset} ${bytes.length}\n`
      offset += bytes.length
      parts.push(bytes)
    }
    for (const [id, pack] of this.refs) index += `${id} ${pack}\n`
    return Buffer.concat([
      Buffer.from(`${PACK_HEADER}${this.inline.size} ${this.refs.size}\n${index}`, 'latin1'),
      ...parts,
    ])
  }

  /**
   * Parses a stored pack's index. `head` holds the file's first bytes; `more(n)` returns its
   * first n bytes when the index is longer than `head`.
   */
  static decodeIndex(
    id: string,
    head: Buffer,
    more: (n: number) => Buffer,
    source: PackSource,
    readAt: (offset: number, length: number) => Buffer,
    what: string,
    size?: number,
  ): Pack {
    const bad = (why: string) => Errors.CORRUPT_OBJECT(`${what} is not a tree pack: ${why}`, { object: id })
    let bytes = head
    const counts = bytes.indexOf(LF, PACK_HEADER.length)
    if (bytes.toString('latin1', 0, PACK_HEADER.length) !== PACK_HEADER || counts < 0) throw bad('no header')
    const m = /^(\d+) (\d+)$/.exec(bytes.toString('latin1', PACK_HEADER.length, counts))
    if (!m) throw bad('bad counts')
    const nInline = Number(m[1])
    const nRefs = Number(m[2])
    if (nInline < 1) throw bad('no root folder')
    // Each index line is at most 64 + 1 + 64 + 1 bytes.
    const maxEnd = counts + 1 + (nInline + nRefs) * 130
    const inline = new Map<string, Inline>()
    const refs = new Map<string, string>()
    let pos = counts + 1
    let total = 0
    for (let k = 0; k < nInline + nRefs; k++) {
      let nl = bytes.indexOf(LF, pos)
      if (nl < 0 && bytes.length < maxEnd) {
        bytes = more(maxEnd)
        nl = bytes.indexOf(LF, pos)
      }
      if (nl < 0) throw bad(`index line ${k + 1} has no end`)
      const line = bytes.toString('latin1', pos, nl)
      pos = nl + 1
      if (k < nInline) {
        const r = /^([0-9a-f]{64}) (\d+) (\d+)$/.exec(line)
        if (!r || Number(r[2]) !== total) throw bad(`index line ${k + 1}`)
        if (k === 0 && r[1] !== id) throw bad(`its first folder is ${r[1]}, not its root`)
        inline.set(r[1] as string, { offset: total, length: Number(r[3]) })
        total += Number(r[3])
      } else {
        const r = /^([0-9a-f]{64}) ([0-9a-f]{64})$/.exec(line)
        if (!r) throw bad(`index line ${k + 1}`)
        refs.set(r[1] as string, r[2] as string)
      }
    }
    const dataStart = pos
    if (size !== undefined && dataStart + total !== size) {
      throw Errors.CORRUPT_OBJECT(
        `${what} is corrupt: the pack has ${size} bytes, its index accounts for ${dataStart + total}`,
        { object: id },
      )
    }
    return new Pack(id, inline, refs, source, (offset, length) => readAt(dataStart + offset, length), what)
  }
}

/** A pack being built: the folders made so far, and refs to the subfolders reused. */
class PackBuilder {
  readonly inline = new Map<string, Buffer>()
  readonly refs = new Map<string, string>()
  /** Folders reused, with the pack that holds each inline. */
  readonly reused = new Map<string, Pack>()

  /** Adds a folder; returns its id. */
  add(bytes: Buffer): string {
    const id = sha256hex(bytes)
    if (!this.inline.has(id)) this.inline.set(id, bytes)
    return id
  }

  finish(rootId: string, source: PackSource | null, what: string): Pack {
    // The root first (a reader checks it is the pack's name), then the rest as made.
    const inline = new Map<string, Inline>([[rootId, this.inline.get(rootId) as Buffer]])
    for (const [id, bytes] of this.inline) if (id !== rootId) inline.set(id, bytes)
    const refs = new Map<string, string>()
    for (const [id, pack] of this.reused) if (!inline.has(id)) refs.set(id, pack.id)
    const pack = new Pack(rootId, inline, refs, source, null, what)
    // The reused folders are already decoded in their own packs: share them.
    return pack
  }
}

const EMPTY_DIR = DIR_HEAD

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

const keyOrder = (a: [Buffer, unknown], b: [Buffer, unknown]) => Buffer.compare(a[0], b[0])

/**
 * The folder `base` (undefined: none yet) with the changes of `node` applied; its new id, or
 * null when it ends up empty. Unchanged runs of the base's records are copied as bytes.
 */
function rebuild(base: Dir | undefined, node: Node, out: PackBuilder, isRoot: boolean): string | null {
  const edits: Array<[Buffer, string | null]> = []
  for (const [name, value] of node.files) edits.push([Buffer.from(name, 'utf8'), value])
  for (const [name, sub] of node.dirs) {
    const childBase = base?.child(name)
    const id = rebuild(childBase, sub, out, false)
    if (childBase && id === childBase.id) continue // changed back to what it was
    edits.push([Buffer.from(`${name}/`, 'utf8'), id])
  }
  if (edits.length === 0 && base) return base.id
  edits.sort(keyOrder)
  const parts: Buffer[] = [DIR_HEAD]
  const r = base?.records
  const n = r?.size ?? 0
  let i = 0
  let records = 0
  const reuse = (from: number, to: number) => {
    if (to <= from || !r || !base) return
    parts.push(r.recordBytes(from, to))
    records += to - from
    for (let k = from; k < to; k++) {
      if (r.isDirAt(k)) {
        const id = r.blobAt(k)
        if (!out.reused.has(id)) out.reused.set(id, base.pack.home(id))
      }
    }
  }
  for (const [key, value] of edits) {
    const j = r ? r.lowerBound(key, i) : 0
    reuse(i, j)
    if (value !== null) {
      parts.push(key, Buffer.from(`\0${value}\n`, 'latin1'))
      records++
    }
    i = r?.isAt(j, key) ? j + 1 : j
  }
  reuse(i, n)
  if (records === 0 && !isRoot) return null
  const bytes = records === 0 ? EMPTY_DIR : Buffer.concat(parts)
  if (base && bytes.length === base.records.bytes.length && bytes.equals(base.records.bytes)) return base.id
  return out.add(bytes)
}

/**
 * A tree built from `base` (a folder tree, or undefined: empty) and path changes: the new
 * folders in a pack (named by the new root), refs to the subfolders kept from the base.
 */
export function buildPack(
  base: Dir | undefined,
  changes: Iterable<[string, string | null]>,
  source: PackSource | null,
): Pack {
  const out = new PackBuilder()
  const rootId = rebuild(base, groupChanges(changes), out, true) as string
  // Nothing changed: the base's own pack (a tree's root is its pack's).
  if (!out.inline.has(rootId)) return (base as Dir).pack
  return out.finish(rootId, source, `tree ${rootId}`)
}

/**
 * A tree built whole from sorted (path, blob) pairs (a flat tree's records, say): every folder
 * inline, no refs.
 */
export function packFromSorted(entries: Iterable<[string, string]>): Pack {
  const out = new PackBuilder()
  // The open folders, root first: each with the bytes of its records so far.
  const names: string[] = []
  const open: Buffer[][] = [[DIR_HEAD]]
  const close = (): void => {
    const bytes = Buffer.concat(open.pop() as Buffer[])
    const id = out.add(bytes)
    const name = names.pop() as string
    ;(open[open.length - 1] as Buffer[]).push(Buffer.from(`${name}/\0${id}\n`, 'utf8'))
  }
  for (const [path, blob] of entries) {
    const parts = path.split('/')
    const file = parts.pop() as string
    let common = 0
    while (common < names.length && common < parts.length && names[common] === parts[common]) common++
    while (names.length > common) close()
    for (let k = common; k < parts.length; k++) {
      names.push(parts[k] as string)
      open.push([DIR_HEAD])
    }
    ;(open[open.length - 1] as Buffer[]).push(Buffer.from(`${file}\0${blob}\n`, 'utf8'))
  }
  while (names.length > 0) close()
  const rootId = out.add(Buffer.concat(open[0] as Buffer[]))
  return out.finish(rootId, null, `tree ${rootId}`)
}

/** The id of the empty tree in this format. */
export const EMPTY_DIR_ID = sha256hex(EMPTY_DIR)
