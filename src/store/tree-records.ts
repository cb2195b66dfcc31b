/**
 * The records of a tree object and the order of their keys: sorted `key NUL <64 hex> LF` records
 * after a header, read in place (Records), for a flat tree (tree.ts, keys are full paths) and
 * for one folder of a folder tree (keys are names).
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
 */
import { hash } from 'node:crypto'
import { Errors } from '../engine/errors.js'

export const DIR_HEADER = 'noa-tree 2\n'
export const DIR_HEAD = Buffer.from(DIR_HEADER, 'latin1')
export const NUL = 0
export const LF = 0x0a
export const SLASH = 0x2f
/** NUL + 64 hex + LF after the key. */
export const TAIL = 66

/** The buffer keyBytes writes to (grown as needed). */
let scratch = Buffer.allocUnsafe(1024)

/**
 * A key's UTF-8 bytes, to search a folder with: a view of one shared buffer, valid until the
 * next call (a lookup uses it at once; Buffer.from would allocate per lookup).
 */
export function keyBytes(key: string): Buffer {
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

const EMPTY_DIR = DIR_HEAD

/** The id of the empty tree in this format. */
export const EMPTY_DIR_ID = sha256hex(EMPTY_DIR)
