/**
 * Building a whole tree's pack from files sorted by path (packFromSorted, packFromSortedTwice):
 * one walk writes each folder once, in one pass, closing it as soon as the paths leave it.
 */
import type { Pack } from './pack.js'
import { PackBuilder, packOf } from './pack-build.js'
import { PackV2, type SizedFolder } from './pack-v2.js'
import { DIR_HEAD, LF, NUL, SLASH, sha256hex } from './tree-records.js'

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
