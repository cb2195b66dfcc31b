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
 * for each subfolder it keeps from its base, the pack that holds that subfolder inline, so any
 * folder is found in one hop from the pack of its parent, and a snapshot never opens the packs
 * of the folders it keeps. noa writes the second pack format (PackV2 below: the source packs
 * listed once, a number per kept subfolder); the first (PackV1: a 130-byte ref line per kept
 * subfolder, which at 100k paths made a 1,000-entry snapshot write and read ~14k refs) is read:
 *
 *     noa-tree-pack 1\n
 *     <inline count> <ref count>\n
 *     <folder id> <offset> <length>\n      one per inline folder, the root first; offsets are
 *                                          from the end of the index
 *     <folder id> <pack id>\n              one per ref
 *     <the inline folders' encodings, back to back>
 */
import { createHash, hash } from 'node:crypto'
import { Errors } from '../engine/errors.js'

export const DIR_HEADER = 'noa-tree 2\n'
export const PACK_HEADER = 'noa-tree-pack 1\n'
export const PACK2_HEADER = 'noa-tree-pack 2\n'
const DIR_HEAD = Buffer.from(DIR_HEADER, 'latin1')
const NUL = 0
const LF = 0x0a
const SLASH = 0x2f
/** NUL + 64 hex + LF after the key. */
export const TAIL = 66

/** The buffer keyBytes writes to (grown as needed). */
let scratch = Buffer.allocUnsafe(1024)

/**
 * A key's UTF-8 bytes, to search a folder with: a view of one shared buffer, valid until the
 * next call (a lookup uses it at once; Buffer.from would allocate per lookup).
 */
function keyBytes(key: string): Buffer {
  if (scratch.length < 3 * key.length) scratch = Buffer.allocUnsafe(3 * key.length)
  return scratch.subarray(0, scratch.write(key, 0, 'utf8'))
}

/** Where Records.parse finds a small folder's record ends before copying them out. */
const parseScratch = new Uint32Array(4096)

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
  return hash('sha256', data, 'hex')
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
    // A record is at least a 1-byte key and its 66-byte tail: room for every one. The ends are
    // found in a scratch array and copied out at their count: one allocation per folder (a
    // folder read from disk is parsed before use, and a snapshot reads a thousand of them).
    const most = Math.floor((bytes.length - header.length) / (TAIL + 1))
    const small = most <= parseScratch.length
    const ends = small ? parseScratch : new Uint32Array(most)
    let n = 0
    let pos = header.length
    while (pos < bytes.length) {
      const z = bytes.indexOf(NUL, pos)
      if (z <= pos || z + TAIL > bytes.length || bytes[z + TAIL - 1] !== LF) {
        throw Errors.CORRUPT_OBJECT(`${what}: malformed record at byte ${pos}`, {
          object: id,
          offset: pos,
        })
      }
      ends[n++] = z
      pos = z + TAIL
    }
    return new Records(bytes, small || n < most ? ends.slice(0, n) : ends, header.length)
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
  /** Subfolders found so far, by record (a folder's content never changes). */
  private kids: Array<Dir | undefined> | null = null

  constructor(
    readonly id: string,
    readonly records: Records,
    readonly pack: Pack,
    /** Per record, the pack its subfolder is in (pack.sourceAt), or null: every one is in `pack`. */
    readonly hints: Hints | null = null,
  ) {}

  get size(): number {
    return this.records.size
  }

  /** The subfolder with this name, or undefined. */
  child(name: string): Dir | undefined {
    const r = this.records
    if (r.size === 0) return undefined
    const key = keyBytes(`${name}/`)
    const i = r.lowerBound(key)
    return r.isAt(i, key) ? this.childAt(i) : undefined
  }

  /** The file's blob, or undefined. */
  file(name: string): string | undefined {
    return this.records.find(keyBytes(name))
  }

  /** The subfolder record i names (the record is a folder's). */
  childAt(i: number): Dir {
    const known = this.kids?.[i]
    if (known) return known
    const dir = this.pack.childOf(this, i)
    // Kept only when it is in this folder's own pack. A subfolder in another pack is found
    // through the store's cache of packs each time: a link to it would keep that pack (and
    // every pack its folders link to) alive after the cache let it go, so that a host taking a
    // snapshot after snapshot would keep every pack it ever built. It also means a folder
    // found by a search (two packs holding one tree) is looked up again, so that every pack a
    // reader opens to find it is asked for each time (treeObjects lists them for gc).
    if (dir.pack === this.pack) {
      this.kids ??= new Array<Dir | undefined>(this.size)
      this.kids[i] = dir
    }
    return dir
  }

  /** The pack that holds subfolder record i, as this folder's pack says (not opened). */
  homeAt(i: number): string {
    return this.pack.homeOf(this, i)
  }
}

/** A folder's per-record source numbers: 0 = in the folder's own pack, k = the pack's source k. */
interface Hints {
  bytes: Buffer
  start: number
  width: number
}

/** Where packs come from: the object store (synchronous reads, checked as they are made). */
export interface PackSource {
  pack(id: string, from: { tree: string; folder: string }): Pack
}

/**
 * A pack: the folders it holds inline, found by id, and for every other folder its trees reach,
 * the pack to look in. Folders are decoded on first use and kept; a folder read from a file is
 * checked against its id.
 */
export abstract class Pack {
  protected readonly loaded = new Map<string, Dir>()
  /** Bytes of the folders read from the file one at a time (range reads) and kept. */
  protected readBytes = 0

  constructor(
    readonly id: string,
    protected readonly source: PackSource | null,
    protected readonly what: string,
  ) {}

  /** Whether the pack holds this folder inline. */
  abstract holds(id: string): boolean

  /** Folder `id`, which the pack holds inline. */
  protected abstract inlineDir(id: string): Dir

  /** The pack named for the subfolder record i of `parent` (a folder of this pack), unopened. */
  abstract homeOf(parent: Dir, i: number): string

  /** The packs this one names for folders it does not hold (v1: one per ref, deduplicated). */
  abstract get sources(): readonly string[]

  /**
   * Where subfolder record i of `parent` (a folder of this pack) is, as a number: 0 for this
   * pack, k for sources[k - 1]. A pack built on this one maps these numbers to its own once
   * per source, instead of a pack id string per record.
   */
  abstract localSourceAt(parent: Dir, i: number): number

  /** Ids of the folders held inline. */
  abstract inlineIds(): Iterable<string>

  /** Bytes of its own tables or whole encoding that the pack keeps (see heldBytes). */
  protected abstract get tableBytes(): number

  /**
   * About how many bytes the pack keeps in memory: its tables (or its whole encoding, when it
   * was read whole or built here) and the folders read from its file since, with their record
   * ends. What a cache of packs counts against its budget.
   */
  get heldBytes(): number {
    return this.tableBytes + this.readBytes
  }

  get root(): Dir {
    return this.dir(this.id)
  }

  /** Folder `id`: held here, or where its ref or hint says (v1 packs name folders by id). */
  dir(id: string): Dir {
    const cached = this.loaded.get(id)
    if (cached) return cached
    if (this.holds(id)) return this.inlineDir(id)
    return this.resolve(id, this.refOf(id))
  }

  /** A v1 pack's ref for a folder it does not hold (undefined: none; v2 packs hint by position). */
  protected refOf(_id: string): string | undefined {
    return undefined
  }

  /** The subfolder record i of `parent` names: held here, or in the pack its hint names. */
  childOf(parent: Dir, i: number): Dir {
    const id = parent.records.blobAt(i)
    const cached = this.loaded.get(id)
    if (cached) return cached
    // The hint first: a cold snapshot finds most folders it reads in other packs.
    const home = this.homeOf(parent, i)
    return (home === this.id ? this.inlineOrUndefined(id) : undefined) ?? this.resolve(id, home)
  }

  /** Folder `id` if the pack holds it inline. */
  protected inlineOrUndefined(id: string): Dir | undefined {
    return this.holds(id) ? this.inlineDir(id) : undefined
  }

  private resolve(id: string, home: string | undefined): Dir {
    if (home === undefined || this.source === null) {
      throw Errors.CORRUPT_OBJECT(
        `${this.what}: folder ${id} is neither in the pack nor named by one of its refs`,
        { object: this.id },
      )
    }
    // The home may be this pack's own name when the tree came back to one stored before: the
    // stored pack of that name is then another object than this one, just built.
    const pack = this.source.pack(home, { tree: this.id, folder: id })
    const there = pack === this ? undefined : pack.inlineOrUndefined(id)
    if (there) return there
    // Two packs can hold the same tree (two writers built it from different bases, and the
    // later write found the object there): the ref was made against the other one. The folder
    // is in that tree all the same (ids are content), so look for it there.
    const found = pack === this ? undefined : pack.search(id)
    if (found) return found
    throw Errors.CORRUPT_OBJECT(
      `${this.what}: its ref to folder ${id} names tree ${home}, which does not hold it`,
      { object: this.id },
    )
  }

  /** Folder `id`, found by a walk of this pack's tree; undefined if none. */
  private search(id: string): Dir | undefined {
    const seen = new Set<string>()
    const walk = (dir: Dir): Dir | undefined => {
      const r = dir.records
      for (let i = 0; i < r.size; i++) {
        if (!r.isDirAt(i)) continue
        const child = r.blobAt(i)
        if (seen.has(child)) continue
        seen.add(child)
        const d = dir.childAt(i)
        if (child === id) return d
        const hit = walk(d)
        if (hit) return hit
      }
      return undefined
    }
    return walk(this.root)
  }

  /** Reads and checks every folder held inline (verify: damage where no tree walk looks). */
  checkAll(): void {
    for (const id of this.inlineIds()) this.dir(id)
  }

  protected parseDir(id: string, bytes: Buffer, hints: Hints | null): Dir {
    const records = Records.parse(bytes, DIR_HEAD, `folder ${id} of ${this.what}`, this.id)
    this.readBytes += records.ends.byteLength
    if (hints && hints.bytes.length - hints.start < records.size * hints.width)
      throw this.corrupt(`the hints of folder ${id} are short`)
    const dir = new Dir(id, records, this, hints)
    this.loaded.set(id, dir)
    return dir
  }

  protected corrupt(why: string): Error {
    return Errors.CORRUPT_OBJECT(`${this.what} is corrupt: ${why}`, { object: this.id })
  }

  protected checked(id: string, bytes: Buffer, offset: number): Buffer {
    const actual = sha256hex(bytes)
    if (actual !== id) {
      const range = `bytes ${offset}-${offset + bytes.length - 1} of its data`
      throw this.corrupt(`its folder ${id} hashes to ${actual} (${range})`)
    }
    return bytes
  }
}

/** Where an inline folder's bytes are: at a range of the file. */
interface Range {
  offset: number
  length: number
}

/**
 * The first pack format (`noa-tree-pack 1`, read, no longer written): one ref line per
 * subfolder kept from the base, naming the pack that holds it.
 */
class PackV1 extends Pack {
  private refIds: string[] | null = null
  private sourceIndex: Map<string, number> | null = null

  constructor(
    id: string,
    private readonly inline: Map<string, Range>,
    private readonly refs: ReadonlyMap<string, string>,
    source: PackSource | null,
    private readonly read: (offset: number, length: number) => Buffer,
    what: string,
  ) {
    super(id, source, what)
  }

  holds(id: string): boolean {
    return this.inline.has(id)
  }

  inlineIds(): Iterable<string> {
    return this.inline.keys()
  }

  protected get tableBytes(): number {
    // Its index as maps: about a hundred bytes of strings and entry per id (the first format).
    return 100 * (this.inline.size + 2 * this.refs.size)
  }

  protected override refOf(id: string): string | undefined {
    return this.refs.get(id)
  }

  homeOf(parent: Dir, i: number): string {
    const id = parent.records.blobAt(i)
    if (this.inline.has(id)) return this.id
    const ref = this.refs.get(id)
    if (ref === undefined) {
      throw Errors.CORRUPT_OBJECT(
        `${this.what}: folder ${id} is neither in the pack nor named by one of its refs`,
        { object: this.id },
      )
    }
    return ref
  }

  get sources(): readonly string[] {
    this.refIds ??= [...new Set(this.refs.values())]
    return this.refIds
  }

  localSourceAt(parent: Dir, i: number): number {
    const home = this.homeOf(parent, i)
    if (home === this.id) return 0
    this.sourceIndex ??= new Map(this.sources.map((s, k) => [s, k + 1]))
    return this.sourceIndex.get(home) as number
  }

  protected inlineDir(id: string): Dir {
    const cached = this.loaded.get(id)
    if (cached) return cached
    const at = this.inline.get(id) as Range
    const bytes = this.checked(id, this.read(at.offset, at.length), at.offset)
    this.readBytes += bytes.length
    return this.parseDir(id, bytes, null)
  }

  /**
   * Parses a stored pack's index. `head` holds the file's first bytes; `more(n)` returns its
   * first n bytes when the index is longer than `head`.
   */
  static decode(
    id: string,
    head: Buffer,
    more: (n: number) => Buffer,
    source: PackSource,
    readAt: (offset: number, length: number) => Buffer,
    what: string,
    size?: number,
  ): PackV1 {
    const bad = (why: string) => Errors.CORRUPT_OBJECT(`${what} is not a tree pack: ${why}`, { object: id })
    let bytes = head
    const counts = bytes.indexOf(LF, PACK_HEADER.length)
    if (counts < 0) throw bad('no header')
    const m = /^(\d+) (\d+)$/.exec(bytes.toString('latin1', PACK_HEADER.length, counts))
    if (!m) throw bad('bad counts')
    const nInline = Number(m[1])
    const nRefs = Number(m[2])
    if (nInline < 1) throw bad('no root folder')
    // Each index line is at most 64 + 1 + 64 + 1 bytes.
    const maxEnd = counts + 1 + (nInline + nRefs) * 130
    const inline = new Map<string, Range>()
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
    return new PackV1(id, inline, refs, source, (offset, length) => readAt(dataStart + offset, length), what)
  }
}

/** Bytes of one index entry of a v2 pack: folder id, length of its bytes, start of its hints. */
const ENTRY = 40

/**
 * The pack format noa writes (`noa-tree-pack 2`): the packs it takes folders from are listed
 * once, and each folder it holds says, per record, which of them holds that subfolder. So a
 * snapshot writes a byte or two per subfolder it keeps (not a 130-byte ref), and a fresh
 * process opens only the packs on the paths it reads: one hop from the pack of the parent.
 *
 *     noa-tree-pack 2\n
 *     <inline count> <source count> <hint width> <hint bytes>\n
 *     <32 bytes: SHA-256 of the counts line and the three tables below>
 *     sources   <source count> × 32-byte pack ids
 *     index     <inline count> × (32-byte folder id, u32 BE length, u32 BE hint start),
 *               sorted by id (looked up by binary search, in place); the folders' bytes follow
 *               in the same order, back to back, so each offset is the sum of the lengths before
 *     hints     per folder, either nothing (every subfolder it names is in this pack) or one
 *               big-endian number of <hint width> bytes per record: 0 for a file or a subfolder
 *               held here, k for the pack sources[k - 1]
 *     data      the folders' encodings
 *
 * The folders' bytes are checked against their ids as they are read; everything else is
 * covered by the hash after the counts, checked when the pack is opened.
 */
class PackV2 extends Pack {
  private offsets: Float64Array | null = null
  private srcIds: string[] | null = null
  /** A pack just built: its folders' index positions and record ends (see adopt). */
  private adopted: ReadonlyMap<string, BuiltFolder> | null = null
  private adoptedEnds: Uint32Array = new Uint32Array(0)

  private constructor(
    id: string,
    /** The counts line through the hints (the bytes the meta hash covers, and the tables). */
    private readonly meta: Buffer,
    private readonly sourcesAt: number,
    private readonly nSources: number,
    private readonly indexAt: number,
    private readonly nInline: number,
    private readonly hintsAt: number,
    private readonly hintBytes: number,
    private readonly width: number,
    source: PackSource | null,
    /** Reads [offset, offset + length) of the data (null: in `data`, made here, not checked). */
    private readonly read: ((offset: number, length: number) => Buffer) | null,
    private readonly data: Buffer | null,
    what: string,
  ) {
    super(id, source, what)
  }

  /** The index entry of folder `id`, or -1. */
  private find(id: string): number {
    // Ids are uniform: their first 48 bits almost always decide, compared as numbers.
    const want = Number.parseInt(id.slice(0, 12), 16)
    const m = this.meta
    let lo = 0
    let hi = this.nInline
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      const at = this.indexAt + mid * ENTRY
      const got = m.readUIntBE(at, 6)
      if (got < want) lo = mid + 1
      else if (got > want) hi = mid
      else {
        const full = m.toString('hex', at, at + 32)
        if (full === id) return mid
        if (full < id) lo = mid + 1
        else hi = mid
      }
    }
    return -1
  }

  holds(id: string): boolean {
    return this.find(id) >= 0
  }

  protected get tableBytes(): number {
    // The whole buffers: a pack read whole or built here keeps all of its encoding.
    const meta = this.meta.buffer.byteLength
    const data = this.data && this.data.buffer !== this.meta.buffer ? this.data.buffer.byteLength : 0
    return meta + data + this.adoptedEnds.byteLength + (this.offsets?.byteLength ?? 0)
  }

  *inlineIds(): Iterable<string> {
    for (let k = 0; k < this.nInline; k++) {
      const at = this.indexAt + k * ENTRY
      yield this.meta.toString('hex', at, at + 32)
    }
  }

  get sources(): readonly string[] {
    if (!this.srcIds) {
      const out: string[] = []
      for (let k = 0; k < this.nSources; k++) {
        const at = this.sourcesAt + k * 32
        out.push(this.meta.toString('hex', at, at + 32))
      }
      this.srcIds = out
    }
    return this.srcIds
  }

  homeOf(parent: Dir, i: number): string {
    const k = this.localSourceAt(parent, i)
    return k === 0 ? this.id : (this.sources[k - 1] as string)
  }

  localSourceAt(parent: Dir, i: number): number {
    const h = parent.hints
    if (h === null) return 0
    const at = h.start + i * h.width
    const k = h.width === 1 ? (h.bytes[at] as number) : h.bytes.readUIntBE(at, h.width)
    if (k > this.nSources) throw this.corrupt(`folder ${parent.id} names source ${k} of ${this.nSources}`)
    return k
  }

  private offsetsOf(): Float64Array {
    if (!this.offsets) {
      const o = new Float64Array(this.nInline + 1)
      for (let k = 0; k < this.nInline; k++) {
        o[k + 1] = (o[k] as number) + this.meta.readUInt32BE(this.indexAt + k * ENTRY + 32)
      }
      this.offsets = o
    }
    return this.offsets
  }

  protected override inlineOrUndefined(id: string): Dir | undefined {
    const cached = this.loaded.get(id)
    if (cached) return cached
    const built = this.adopted?.get(id)
    if (built) {
      const ends =
        built.endAt < 0 ? undefined : this.adoptedEnds.subarray(built.endAt, built.endAt + built.count)
      return this.inlineAt(built.k, id, ends)
    }
    const k = this.find(id)
    return k < 0 ? undefined : this.inlineAt(k, id)
  }

  protected inlineDir(id: string): Dir {
    return this.inlineOrUndefined(id) as Dir
  }

  /**
   * Folders of a pack just built: where each is in the index and the record ends its builder
   * already knows, so the next snapshot on this tree reads a folder without a search or a parse.
   * Kept as they are and made a Dir only when asked for: a snapshot reads few of the folders the
   * one before it made (most are leaves it does not touch again).
   */
  adopt(folders: ReadonlyMap<string, BuiltFolder>, ends: Uint32Array): void {
    this.adopted = folders
    this.adoptedEnds = ends
  }

  private inlineAt(k: number, id: string, ends?: Uint32Array): Dir {
    const o = this.offsetsOf()
    const offset = o[k] as number
    const length = (o[k + 1] as number) - offset
    const bytes = this.data
      ? this.data.subarray(offset, offset + length)
      : this.checked(id, (this.read as NonNullable<typeof this.read>)(offset, length), offset)
    if (bytes.buffer !== this.meta.buffer) this.readBytes += length // read from the file
    const e = this.indexAt + k * ENTRY
    const start = this.meta.readUInt32BE(e + 36)
    const end = k + 1 < this.nInline ? this.meta.readUInt32BE(e + ENTRY + 36) : this.hintBytes
    const hints = end > start ? { bytes: this.meta, start: this.hintsAt + start, width: this.width } : null
    let dir: Dir
    if (ends) {
      dir = new Dir(id, new Records(bytes, ends, DIR_HEAD.length), this, hints)
      this.loaded.set(id, dir)
    } else dir = this.parseDir(id, bytes, hints)
    if (hints && end - start !== dir.size * this.width) {
      this.loaded.delete(id)
      throw this.corrupt(`folder ${id} has ${end - start} bytes of hints for ${dir.size} records`)
    }
    return dir
  }

  /**
   * Encodes a pack from its folders' lengths and source numbers (`hints[hintAt, hintAt + count)`
   * per folder, 1-based into `sources`, 0 for none; hintAt -1: none at all). Sets each folder's
   * `k` (its place in the index) and `offset` (of its bytes in the pack), then `fill` writes
   * the folders' bytes there (so a caller can write them straight into the pack, keeping no copy).
   */
  static encodeSized(
    folders: readonly SizedFolder[],
    hints: Uint32Array | null,
    sources: readonly string[],
    fill: (out: Buffer) => void,
  ): Buffer {
    const sorted = folders.length > 1 ? [...folders].sort(byId) : folders
    const nSources = sources.length
    const width = nSources < 0x100 ? 1 : nSources < 0x10000 ? 2 : 4
    let hintBytes = 0
    let dataBytes = 0
    for (const f of sorted) {
      if (f.hintAt >= 0) hintBytes += f.count * width
      dataBytes += f.length
    }
    const counts = `${sorted.length} ${nSources} ${width} ${hintBytes}\n`
    const hashAt = PACK2_HEADER.length + counts.length
    const sourcesAt = hashAt + 32
    const indexAt = sourcesAt + nSources * 32
    const hintsAt = indexAt + sorted.length * ENTRY
    const dataAt = hintsAt + hintBytes
    // One buffer, written in place: a snapshot's pack holds thousands of folders.
    const out = Buffer.allocUnsafe(dataAt + dataBytes)
    out.write(PACK2_HEADER, 0, 'latin1')
    out.write(counts, PACK2_HEADER.length, 'latin1')
    let at = sourcesAt
    for (const s of sources) at += out.write(s, at, 'hex')
    let hint = 0
    let data = dataAt
    for (let k = 0; k < sorted.length; k++) {
      const f = sorted[k] as SizedFolder
      out.write(f.id, at, 'hex')
      out.writeUInt32BE(f.length, at + 32)
      out.writeUInt32BE(hint, at + 36)
      at += ENTRY
      if (f.hintAt >= 0 && hints) {
        let p = hintsAt + hint
        const end = f.hintAt + f.count
        if (width === 1) for (let i = f.hintAt; i < end; i++) out[p++] = hints[i] as number
        else for (let i = f.hintAt; i < end; i++, p += width) out.writeUIntBE(hints[i] as number, p, width)
        hint += f.count * width
      }
      f.k = k
      f.offset = data
      data += f.length
    }
    createHash('sha256')
      .update(out.subarray(PACK2_HEADER.length, hashAt))
      .update(out.subarray(sourcesAt, dataAt))
      .digest()
      .copy(out, hashAt)
    fill(out)
    return out
  }

  /**
   * Reads a v2 pack. `head` holds the file's first bytes; `more(n)` its first n bytes when the
   * tables are longer than `head`; `readAt` reads a range of the file (null: `head` is the whole
   * pack, just built, and its folders are not checked again).
   */
  static decode(
    id: string,
    head: Buffer,
    more: (n: number) => Buffer,
    source: PackSource | null,
    readAt: ((offset: number, length: number) => Buffer) | null,
    what: string,
    size: number,
  ): PackV2 {
    const bad = (why: string) => Errors.CORRUPT_OBJECT(`${what} is not a tree pack: ${why}`, { object: id })
    const from = PACK2_HEADER.length
    const nl = head.indexOf(LF, from)
    if (nl < 0 || nl - from > 64) throw bad('no counts')
    const m = /^(\d+) (\d+) ([124]) (\d+)$/.exec(head.toString('latin1', from, nl))
    if (!m) throw bad('bad counts')
    const nInline = Number(m[1])
    const nSources = Number(m[2])
    const width = Number(m[3])
    const hintBytes = Number(m[4])
    if (nInline < 1) throw bad('no root folder')
    const hashAt = nl + 1
    const sourcesAt = hashAt + 32
    const indexAt = sourcesAt + nSources * 32
    const hintsAt = indexAt + nInline * ENTRY
    const dataAt = hintsAt + hintBytes
    if (dataAt > size) throw bad(`its tables need ${dataAt} bytes, it has ${size}`)
    const bytes = head.length >= dataAt ? head : more(dataAt)
    if (bytes.length < dataAt) throw bad(`it ends at byte ${bytes.length}`)
    const pack = (): PackV2 =>
      new PackV2(
        id,
        bytes.subarray(0, dataAt),
        sourcesAt,
        nSources,
        indexAt,
        nInline,
        hintsAt,
        hintBytes,
        width,
        source,
        readAt ? (offset, length) => readAt(dataAt + offset, length) : null,
        readAt ? null : bytes.subarray(dataAt),
        what,
      )
    // A pack this process just encoded (no reader: its bytes are in memory) is what it wrote.
    if (readAt === null && justBuilt.has(bytes)) return pack()
    const actual = createHash('sha256')
      .update(bytes.subarray(from, hashAt))
      .update(bytes.subarray(sourcesAt, dataAt))
      .digest()
    if (!actual.equals(bytes.subarray(hashAt, sourcesAt))) {
      throw Errors.CORRUPT_OBJECT(
        `${what} is corrupt: its tables (bytes ${from}-${dataAt - 1}) do not match their hash`,
        { object: id },
      )
    }
    // Past the hash, only a writer's fault can break these; a reader's lookups rely on them.
    let total = 0
    let lastHint = 0
    for (let k = 0; k < nInline; k++) {
      const e = indexAt + k * ENTRY
      if (k > 0 && !ascending(bytes, e - ENTRY, e)) throw bad('its index is not sorted')
      total += bytes.readUInt32BE(e + 32)
      const hint = bytes.readUInt32BE(e + 36)
      if (hint < lastHint || hint > hintBytes) throw bad(`index entry ${k + 1} has bad hints`)
      lastHint = hint
    }
    if (dataAt + total !== size) {
      throw Errors.CORRUPT_OBJECT(
        `${what} is corrupt: the pack has ${size} bytes, its index accounts for ${dataAt + total}`,
        { object: id },
      )
    }
    const checked = pack()
    if (!checked.holds(id)) throw bad('it does not hold its root folder')
    return checked
  }
}

/** Whether the 32-byte id at `b` sorts after the one at `a` (48-bit prefixes as numbers first). */
function ascending(bytes: Buffer, a: number, b: number): boolean {
  const x = bytes.readUIntBE(a, 6)
  const y = bytes.readUIntBE(b, 6)
  if (x !== y) return x < y
  return bytes.compare(bytes, a, a + 32, b, b + 32) > 0
}

/** Reads a stored pack of either format (see PackV1.decode and PackV2.decode). */
export function decodePack(
  id: string,
  head: Buffer,
  more: (n: number) => Buffer,
  source: PackSource,
  readAt: (offset: number, length: number) => Buffer,
  what: string,
  size: number,
): Pack {
  const magic = head.toString('latin1', 0, PACK_HEADER.length)
  if (magic === PACK2_HEADER) return PackV2.decode(id, head, more, source, readAt, what, size)
  if (magic === PACK_HEADER) return PackV1.decode(id, head, more, source, readAt, what, size)
  throw Errors.CORRUPT_OBJECT(`${what} is not a tree pack: no header`, { object: id })
}

/**
 * A folder of a pack being encoded: its id and length, where its source numbers are in the
 * builder's pool (hintAt -1: it has none), and, once encoded, its place in the index and the
 * pack. Pools and plain fields, not a typed array per folder: a snapshot makes thousands of
 * folders, and a typed array (or a view of one) costs more to make than most of them to write.
 */
interface SizedFolder {
  id: string
  length: number
  hintAt: number
  /** Its records. */
  count: number
  k: number
  offset: number
}

/**
 * A folder made for a pack: also its bytes (null once copied into the pack: a pack keeps its
 * own encoding, not the chunks its folders were written in), and where its record ends are in
 * the ends pool (-1: not kept).
 */
interface BuiltFolder extends SizedFolder {
  bytes: Buffer | null
  endAt: number
}

const byId = (a: SizedFolder, b: SizedFolder): number => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)

/**
 * A pack being built: the folders made so far, and the packs their kept subfolders are in,
 * numbered as the pack will list them.
 */
class PackBuilder {
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

function packOf(bytes: Buffer, rootId: string, source: PackSource | null, what: string): PackV2 {
  justBuilt.add(bytes)
  const pack = PackV2.decode(rootId, bytes, () => bytes, source, null, what, bytes.length)
  justBuilt.delete(bytes)
  built.set(pack, bytes)
  return pack
}

/** Encodings of packs being made into a Pack by packOf (their tables need no check). */
const justBuilt = new WeakSet<Buffer>()

/** The encodings of packs just built (to store them without encoding again). */
const built = new WeakMap<Pack, Buffer>()

/** The stored form of a pack this process built. */
export function encodedPack(pack: Pack): Buffer {
  const bytes = built.get(pack)
  if (!bytes) throw new Error(`pack ${pack.id} was read, not built: it is stored already`)
  return bytes
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

/**
 * Bytes of one folder being written, grown in place: records go straight into it (no small
 * buffer per record to concatenate), and one writer per depth is reused for every folder at
 * that depth, so building a large tree allocates little besides the folders' own bytes.
 */
class FolderWriter {
  buf: Buffer = Buffer.allocUnsafe(4096)
  len = 0

  start(): void {
    this.len = DIR_HEAD.copy(this.buf, 0)
  }

  /** Room for `n` more bytes. */
  private room(n: number): Buffer {
    if (this.len + n > this.buf.length) {
      const bigger = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.len + n))
      this.buf.copy(bigger, 0, 0, this.len)
      this.buf = bigger
    }
    return this.buf
  }

  /** A subfolder's record: its name, `/`, NUL, its id, LF. UTF-8 takes at most 3 bytes a unit. */
  folder(name: string, id: string): void {
    const b = this.room(name.length * 3 + 67)
    let at = this.len + b.write(name, this.len, 'utf8')
    b[at++] = SLASH
    b[at++] = NUL
    at += b.write(id, at, 'latin1')
    b[at++] = LF
    this.len = at
  }

  /** A file's record: its name, NUL, the blob `files` has for the path it just gave, LF. */
  file(name: string, files: SortedFiles): void {
    const b = this.room(name.length * 3 + files.blobBytes() + 2)
    let at = this.len + b.write(name, this.len, 'utf8')
    b[at++] = NUL
    at += files.writeBlob(b, at)
    b[at++] = LF
    this.len = at
  }

  /** The bytes so far (a view: the writer is reused for the next folder). */
  view(): Buffer {
    return this.buf.subarray(0, this.len)
  }
}

/**
 * Files in path order, for the folder walks below: `next` gives the next path (undefined: no
 * more), and `writeBlob` writes that path's blob into a folder's bytes, so a source that keeps
 * its blobs as bytes copies them without making a string of each.
 */
export interface SortedFiles {
  next(): string | undefined
  /** At most how many bytes `writeBlob` writes for the current path. */
  blobBytes(): number
  /** Writes the current path's blob at `at` of `out`; returns the bytes written. */
  writeBlob(out: Buffer, at: number): number
}

/** (path, blob) pairs as SortedFiles. */
function filesOfPairs(entries: Iterable<[string, string]>): SortedFiles {
  const it = entries[Symbol.iterator]()
  let blob = ''
  return {
    next() {
      const r = it.next()
      if (r.done) return undefined
      blob = r.value[1]
      return r.value[0]
    },
    blobBytes: () => blob.length * 3,
    writeBlob: (out, at) => out.write(blob, at, 'utf8'),
  }
}

/**
 * Walks sorted (path, blob) pairs folder by folder: paths in byte order visit each folder's
 * records in key order (`name/` sorts where the folder's paths do), so each folder is written
 * once, in one pass, and closed as soon as the paths leave it. `closed` gets each folder's
 * bytes (valid until it returns) and returns its id; the root's id is returned.
 */
function walkSorted(files: SortedFiles, closed: (bytes: Buffer) => string): string {
  // Writers are reused from walk to walk (a small tree's walk would otherwise spend most of its
  // time allocating their buffers); a walk started while another runs gets its own.
  const writers = spareWriters ?? [new FolderWriter()]
  spareWriters = null
  try {
    return walkWith(writers, files, closed)
  } finally {
    // A writer that grew for a large folder is not kept at that size.
    for (let d = 0; d < writers.length; d++) {
      if ((writers[d] as FolderWriter).buf.length > SPARE_WRITER_BYTES) writers[d] = new FolderWriter()
    }
    spareWriters = writers
  }
}

const SPARE_WRITER_BYTES = 64 << 10

/** The writers the last walk left, for the next (null while a walk holds them). */
let spareWriters: FolderWriter[] | null = null

function walkWith(writers: FolderWriter[], files: SortedFiles, closed: (bytes: Buffer) => string): string {
  // The open folders below the root, outermost first; writers[d] holds the folder at depth d.
  const names: string[] = []
  ;(writers[0] as FolderWriter).start()
  const close = (): void => {
    const id = closed((writers[names.length] as FolderWriter).view())
    const name = names.pop() as string
    ;(writers[names.length] as FolderWriter).folder(name, id)
  }
  for (let path = files.next(); path !== undefined; path = files.next()) {
    // The folders the path shares with the open ones stay open; the rest close, innermost first.
    let depth = 0
    let from = 0
    for (;;) {
      const slash = path.indexOf('/', from)
      if (slash < 0 || depth >= names.length) break
      const open = names[depth] as string
      if (open.length !== slash - from || !path.startsWith(open, from)) break
      depth++
      from = slash + 1
    }
    while (names.length > depth) close()
    for (;;) {
      const slash = path.indexOf('/', from)
      if (slash < 0) break
      names.push(path.slice(from, slash))
      if (writers.length <= names.length) writers.push(new FolderWriter())
      ;(writers[names.length] as FolderWriter).start()
      from = slash + 1
    }
    ;(writers[names.length] as FolderWriter).file(from === 0 ? path : path.slice(from), files)
  }
  while (names.length > 0) close()
  return closed((writers[0] as FolderWriter).view())
}

/**
 * A tree built whole from sorted (path, blob) pairs (a flat tree's records, say): every folder
 * inline, no sources.
 */
export function packFromSorted(entries: Iterable<[string, string]>): Pack {
  const out = new PackBuilder()
  const rootId = walkSorted(filesOfPairs(entries), (bytes) => out.add(Buffer.from(bytes)))
  return out.finish(rootId, null, `tree ${rootId}`)
}

/**
 * The same pack as `packFromSorted`, from files that can be walked twice: the first walk hashes
 * each folder and keeps only its id and length, the second writes its bytes straight into the
 * pack. So the folders are never held twice (a copy each, then the pack), which for a replay of
 * 100k paths is most of the memory the pack costs; the second walk costs no hashing.
 */
export function packFromSortedTwice(files: () => SortedFiles): Pack {
  const folders = new Map<string, SizedFolder>()
  const order: string[] = []
  const rootId = walkSorted(files(), (bytes) => {
    const id = sha256hex(bytes)
    if (!folders.has(id))
      folders.set(id, { id, length: bytes.length, hintAt: -1, count: 0, k: -1, offset: 0 })
    order.push(id)
    return id
  })
  const bytes = PackV2.encodeSized([...folders.values()], null, [], (out) => {
    let k = 0
    const written = new Set<string>()
    walkSorted(files(), (folder) => {
      const id = order[k++] as string
      if (!written.has(id)) {
        written.add(id)
        folder.copy(out, (folders.get(id) as SizedFolder).offset)
      }
      return id
    })
  })
  return packOf(bytes, rootId, null, `tree ${rootId}`)
}

/** The id of the empty tree in this format. */
export const EMPTY_DIR_ID = sha256hex(EMPTY_DIR)
