/**
 * The first tree-pack format, read and no longer written (PackV1): one ref line per subfolder
 * kept from the base, naming the pack that holds it.
 *
 *     noa-tree-pack 1\n
 *     <inline count> <ref count>\n
 *     <folder id> <offset> <length>\n      one per inline folder, the root first; offsets are
 *                                          from the end of the index
 *     <folder id> <pack id>\n              one per ref
 *     <the inline folders' encodings, back to back>
 */
import { Errors } from '../engine/errors.js'
import { type Dir, Pack, type PackSource } from './pack.js'
import { LF } from './tree-records.js'

export const PACK_HEADER = 'noa-tree-pack 1\n'

/** Where an inline folder's bytes are: at a range of the file. */
interface Range {
  offset: number
  length: number
}

/**
 * The first pack format (`noa-tree-pack 1`, read, no longer written): one ref line per
 * subfolder kept from the base, naming the pack that holds it.
 */
export class PackV1 extends Pack {
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
    this.addRead(bytes.length)
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
