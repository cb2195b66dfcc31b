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
    // A record is at least a 1-byte key and its 66-byte tail: room for every one, filled once.
    const ends = new Uint32Array(Math.floor((bytes.length - header.length) / (TAIL + 1)))
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
    return new Records(bytes, n === ends.length ? ends : ends.slice(0, n), header.length)
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
    const key = Buffer.from(`${name}/`, 'utf8')
    const i = r.lowerBound(key)
    return r.isAt(i, key) ? this.childAt(i) : undefined
  }

  /** The file's blob, or undefined. */
  file(name: string): string | undefined {
    return this.records.find(Buffer.from(name, 'utf8'))
  }

  /** The subfolder record i names (the record is a folder's). */
  childAt(i: number): Dir {
    return this.pack.childOf(this, i)
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

  /** Ids of the folders held inline. */
  abstract inlineIds(): Iterable<string>

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
    return this.inlineOrUndefined(id) ?? this.resolve(id, this.homeOf(parent, i))
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
    if (pack !== this && pack.holds(id)) return pack.inlineDir(id)
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
    if (hints && hints.bytes.length - hints.start < records.size * hints.width)
      throw this.corrupt(`the hints of folder ${id} are short`)
    const dir = new Dir(id, records, this, hints)
    this.loaded.set(id, dir)
    return dir
  }

  protected corrupt(why: string): Error {
    return Errors.CORRUPT_OBJECT(`${this.what} is corrupt: ${why}`, { object: this.id })
  }

  protected checked(id: string, bytes: Buffer, range: string): Buffer {
    const actual = sha256hex(bytes)
    if (actual !== id) throw this.corrupt(`its folder ${id} hashes to ${actual} (${range})`)
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

  protected inlineDir(id: string): Dir {
    const cached = this.loaded.get(id)
    if (cached) return cached
    const at = this.inline.get(id) as Range
    const bytes = this.checked(
      id,
      this.read(at.offset, at.length),
      `bytes ${at.offset}-${at.offset + at.length - 1} of its data`,
    )
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
    const h = parent.hints
    if (h === null) return this.id
    const at = h.start + i * h.width
    const k = h.width === 1 ? (h.bytes[at] as number) : h.bytes.readUIntBE(at, h.width)
    if (k === 0) return this.id
    if (k > this.nSources) throw this.corrupt(`folder ${parent.id} names source ${k} of ${this.nSources}`)
    return this.sources[k - 1] as string
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
    const k = this.find(id)
    return k < 0 ? undefined : this.inlineAt(k, id)
  }

  protected inlineDir(id: string): Dir {
    return this.inlineOrUndefined(id) as Dir
  }

  private inlineAt(k: number, id: string): Dir {
    const o = this.offsetsOf()
    const offset = o[k] as number
    const length = (o[k + 1] as number) - offset
    const bytes = this.data
      ? this.data.subarray(offset, offset + length)
      : this.checked(
          id,
          (this.read as NonNullable<typeof this.read>)(offset, length),
          `bytes ${offset}-${offset + length - 1} of its data`,
        )
    const e = this.indexAt + k * ENTRY
    const start = this.meta.readUInt32BE(e + 36)
    const end = k + 1 < this.nInline ? this.meta.readUInt32BE(e + ENTRY + 36) : this.hintBytes
    const hints = end > start ? { bytes: this.meta, start: this.hintsAt + start, width: this.width } : null
    const dir = this.parseDir(id, bytes, hints)
    if (hints && end - start !== dir.size * this.width) {
      this.loaded.delete(id)
      throw this.corrupt(`folder ${id} has ${end - start} bytes of hints for ${dir.size} records`)
    }
    return dir
  }

  /** Encodes a pack: `folders` by id, each with its bytes and, per record, its source (or null). */
  static encode(folders: Map<string, { bytes: Buffer; homes: Array<string | null> | null }>): Buffer {
    const sized = new Map<string, { length: number; homes: Array<string | null> | null }>()
    for (const [id, f] of folders) sized.set(id, { length: f.bytes.length, homes: f.homes })
    return PackV2.encodeSized(sized, (out, at) => {
      for (const [id, f] of folders) f.bytes.copy(out, at.get(id) as number)
    })
  }

  /**
   * Encodes a pack from its folders' lengths: `fill` writes each folder's bytes at the offset
   * given for its id (so a caller can write them straight into the pack, keeping no copy).
   */
  static encodeSized(
    folders: Map<string, { length: number; homes: Array<string | null> | null }>,
    fill: (out: Buffer, at: ReadonlyMap<string, number>) => void,
  ): Buffer {
    const ids = [...folders.keys()].sort()
    const sourceNo = new Map<string, number>()
    for (const id of ids) {
      for (const home of folders.get(id)?.homes ?? []) {
        if (home != null && !sourceNo.has(home)) {
          sourceNo.set(home, sourceNo.size + 1)
        }
      }
    }
    const width = sourceNo.size < 0x100 ? 1 : sourceNo.size < 0x10000 ? 2 : 4
    let hintBytes = 0
    let dataBytes = 0
    for (const id of ids) {
      const f = folders.get(id) as { length: number; homes: Array<string | null> | null }
      if (f.homes?.some((h) => h != null)) hintBytes += f.homes.length * width
      dataBytes += f.length
    }
    const counts = Buffer.from(`${ids.length} ${sourceNo.size} ${width} ${hintBytes}\n`, 'latin1')
    const tablesAt = PACK2_HEADER.length + counts.length + 32
    const tablesLength = sourceNo.size * 32 + ids.length * ENTRY + hintBytes
    const out = Buffer.allocUnsafe(tablesAt + tablesLength + dataBytes)
    out.write(PACK2_HEADER, 0, 'latin1')
    counts.copy(out, PACK2_HEADER.length)
    const tables = out.subarray(tablesAt, tablesAt + tablesLength).fill(0)
    let at = 0
    for (const s of sourceNo.keys()) at += tables.write(s, at, 'hex')
    let hintAt = 0
    const hintsBase = sourceNo.size * 32 + ids.length * ENTRY
    const dataAt = new Map<string, number>()
    let dataPos = tablesAt + tablesLength
    for (const id of ids) {
      const f = folders.get(id) as { length: number; homes: Array<string | null> | null }
      at += tables.write(id, at, 'hex')
      at = tables.writeUInt32BE(f.length, at)
      at = tables.writeUInt32BE(hintAt, at)
      dataAt.set(id, dataPos)
      dataPos += f.length
      if (!f.homes?.some((h) => h != null)) continue
      const homes = f.homes
      for (let i = 0; i < homes.length; i++) {
        const home = homes[i]
        const k = home == null ? 0 : (sourceNo.get(home) as number)
        if (width === 1) tables[hintsBase + hintAt] = k
        else tables.writeUIntBE(k, hintsBase + hintAt, width)
        hintAt += width
      }
    }
    createHash('sha256')
      .update(counts)
      .update(tables)
      .digest()
      .copy(out, tablesAt - 32)
    fill(out, dataAt)
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
    const meta = bytes.subarray(0, dataAt)
    const pack = new PackV2(
      id,
      meta,
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
    if (!pack.holds(id)) throw bad('it does not hold its root folder')
    return pack
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

/** A pack being built: the folders made so far, with the pack of each subfolder they keep. */
class PackBuilder {
  readonly folders = new Map<string, { bytes: Buffer; homes: Array<string | null> | null }>()

  /** Adds a folder (`homes`: per record, the pack of a subfolder kept from the base); returns its id. */
  add(bytes: Buffer, homes: Array<string | null> | null = null): string {
    const id = sha256hex(bytes)
    if (!this.folders.has(id)) this.folders.set(id, { bytes, homes })
    return id
  }

  finish(rootId: string, source: PackSource | null, what: string): Pack {
    return packOf(PackV2.encode(this.folders), rootId, source, what)
  }
}

function packOf(bytes: Buffer, rootId: string, source: PackSource | null, what: string): Pack {
  const pack = PackV2.decode(rootId, bytes, () => bytes, source, null, what, bytes.length)
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
  // Per record, the pack holding a subfolder kept from the base, as the base's pack names it
  // (not opened: a fresh process reads only the folders on the changed paths).
  let homes: Array<string | null> | null = null
  const reuse = (from: number, to: number) => {
    if (to <= from || !r || !base) return
    parts.push(r.recordBytes(from, to))
    for (let k = from; k < to; k++) {
      if (r.isDirAt(k)) {
        // Kept dense (null for files and new records): a holey array would be slow to fill.
        const at = records + k - from
        homes ??= []
        while (homes.length < at) homes.push(null)
        homes.push(base.homeAt(k))
      }
    }
    records += to - from
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
  if (homes)
    while ((homes as Array<string | null>).length < records) (homes as Array<string | null>).push(null)
  return out.add(bytes, homes)
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
  // The open folders below the root, outermost first; writers[d] holds the folder at depth d.
  const names: string[] = []
  const writers: FolderWriter[] = [new FolderWriter()]
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
  const folders = new Map<string, { length: number; homes: null }>()
  const order: string[] = []
  const rootId = walkSorted(files(), (bytes) => {
    const id = sha256hex(bytes)
    if (!folders.has(id)) folders.set(id, { length: bytes.length, homes: null })
    order.push(id)
    return id
  })
  const bytes = PackV2.encodeSized(folders, (out, at) => {
    let k = 0
    const written = new Set<string>()
    walkSorted(files(), (folder) => {
      const id = order[k++] as string
      if (!written.has(id)) {
        written.add(id)
        folder.copy(out, at.get(id) as number)
      }
      return id
    })
  })
  return packOf(bytes, rootId, null, `tree ${rootId}`)
}

/** The id of the empty tree in this format. */
export const EMPTY_DIR_ID = sha256hex(EMPTY_DIR)
