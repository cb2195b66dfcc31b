/**
 * Trees stored per directory, as git stores them, and read through their packs: each folder is
 * one object listing its files and its subfolders by hash (tree-records.ts has the encoding), so
 * an incremental snapshot re-encodes only the folders on the changed paths and every other
 * subtree is reused by its hash. A tree's id is its root folder's. This file holds a folder as
 * read (Dir) and what every pack format does to find one (Pack); pack-v1.ts and pack-v2.ts are
 * the two formats, pack-decode.ts picks one, pack-build.ts and pack-walk.ts make packs.
 *
 * Storage: the folders a snapshot made are written together as one object, a pack, named by
 * the root's id (its bytes do not hash to that name; each folder in it is checked against its
 * own id when read). Thousands of small files with an fsync each would cost far more than the
 * encoding saved; a pack is one sequential write. A pack holds the folders it made inline and,
 * for each subfolder it keeps from its base, the pack that holds that subfolder inline, so any
 * folder is found in one hop from the pack of its parent, and a snapshot never opens the packs
 * of the folders it keeps. noa writes the second pack format (PackV2, pack-v2.ts: the source
 * packs listed once, a number per kept subfolder); the first (PackV1, pack-v1.ts: a 130-byte
 * ref line per kept subfolder, which at 100k paths made a 1,000-entry snapshot write and read
 * ~14k refs) is read.
 */
import { Errors } from '../engine/errors.js'
import { DIR_HEAD, keyBytes, Records, sha256hex } from './tree-records.js'

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
export interface Hints {
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
/** The running sum of heldBytes over the packs a cache holds (see Pack.countIn). */
export interface PackMeter {
  bytes: number
}

export abstract class Pack {
  protected readonly loaded = new Map<string, Dir>()
  /** Bytes of the folders read from the file one at a time (range reads) and kept (see addRead). */
  private readBytes = 0
  /** The cache counting this pack's heldBytes, told of every change of it (see held). */
  private meter: PackMeter | null = null

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

  /**
   * Counts this pack in a cache's meter. From then on every change of heldBytes goes to the
   * meter as it happens (held, addRead), so a cache knows its total without summing its packs
   * at each insert. A pack is kept by the one store that built or read it.
   */
  countIn(meter: PackMeter): void {
    if (this.meter === meter) return
    if (this.meter) this.meter.bytes -= this.heldBytes
    this.meter = meter
    meter.bytes += this.heldBytes
  }

  /** Takes this pack out of `meter` (a cache letting it go), if it is counted there. */
  uncount(meter: PackMeter): void {
    if (this.meter !== meter) return
    meter.bytes -= this.heldBytes
    this.meter = null
  }

  /**
   * tableBytes changed by `delta`: every change of it is told here, after it was made (a
   * subclass whose tables grow after it was made calls this; readBytes grows only by addRead).
   */
  protected held(delta: number): void {
    if (this.meter) this.meter.bytes += delta
  }

  /** `n` more bytes read from the file and kept. */
  protected addRead(n: number): void {
    this.readBytes += n
    if (this.meter) this.meter.bytes += n
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
    this.addRead(records.ends.byteLength)
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
