/**
 * The tree-pack format noa writes (PackV2): its encoding from a pack's folders (encodeSized),
 * and reading one, checked when opened, its folders found by binary search of its index.
 */
import { createHash } from 'node:crypto'
import { Errors } from '../engine/errors.js'
import { Dir, Pack, type PackSource } from './pack.js'
import { DIR_HEAD, LF, Records } from './tree-records.js'

export const PACK2_HEADER = 'noa-tree-pack 2\n'

/**
 * A folder of a pack being encoded: its id and length, where its source numbers are in the
 * builder's pool (hintAt -1: it has none), and, once encoded, its place in the index and the
 * pack. Pools and plain fields, not a typed array per folder: a snapshot makes thousands of
 * folders, and a typed array (or a view of one) costs more to make than most of them to write.
 */
export interface SizedFolder {
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
export interface BuiltFolder extends SizedFolder {
  bytes: Buffer | null
  endAt: number
}

const byId = (a: SizedFolder, b: SizedFolder): number => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)

/** Encodings of packs being made into a Pack by packOf (pack-build.ts): their tables need no check. */
export const justBuilt = new WeakSet<Buffer>()

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
export class PackV2 extends Pack {
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
      this.held(o.byteLength)
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
    const before = this.adoptedEnds.byteLength
    this.adopted = folders
    this.adoptedEnds = ends
    this.held(ends.byteLength - before)
  }

  private inlineAt(k: number, id: string, ends?: Uint32Array): Dir {
    const o = this.offsetsOf()
    const offset = o[k] as number
    const length = (o[k + 1] as number) - offset
    const bytes = this.data
      ? this.data.subarray(offset, offset + length)
      : this.checked(id, (this.read as NonNullable<typeof this.read>)(offset, length), offset)
    if (bytes.buffer !== this.meta.buffer) this.addRead(length) // read from the file
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
