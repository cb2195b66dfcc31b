/**
 * Checksums beside a log: `<root>/checksums/<workspace>.sum`. A flipped byte inside a string (a
 * path `f3` that becomes `f4`) is still valid JSON, so the log alone cannot show it; the sidecar
 * holds a CRC32C per block of about 64 KiB of the log (whole lines), with the block's first seq
 * and entry count, so that `verify` and replay name a damaged block by byte range and seq range,
 * and a seq can be found by a binary search over the blocks.
 *
 *   header (32 bytes)  "NOASUMS1", version, block size, the log's inode, CRC of the header
 *   records (32 bytes) offset u48, first seq u48, length u32, entries u32, CRC32C of the log
 *                      bytes [offset, offset + length), CRC of the record's first 28 bytes
 *
 * The owner writes a record from the bytes it has just committed (in memory, not read back), off
 * the ack path, without an fdatasync of its own: the log's bytes are durable before their block
 * is recorded, and a record lost or torn by a crash only leaves its block unverified. Blocks
 * need not be contiguous: a log written before it had a sidecar, or while it lagged, has ranges
 * that are simply not covered. A sidecar whose inode is not the log's (the log was replaced) is
 * not used.
 */
import { closeSync, fstatSync, readSync } from 'node:fs'
import { join } from 'node:path'
import { crc32c, crc32cSmall } from './crc.js'
import { openFileSync, READ } from './files.js'

export const SIDECAR_DIR = 'checksums'
export const BLOCK_BYTES = 64 << 10
export const SUM_HEADER = 32
export const SUM_RECORD = 32
const MAGIC = Buffer.from('NOASUMS1', 'latin1')

export function sidecarPath(root: string, workspace: string): string {
  return join(root, SIDECAR_DIR, `${workspace}.sum`)
}

export function encodeSumHeader(ino: bigint): Buffer {
  const buf = Buffer.alloc(SUM_HEADER)
  MAGIC.copy(buf, 0)
  buf.writeUInt32LE(1, 8)
  buf.writeUInt32LE(BLOCK_BYTES, 12)
  buf.writeBigUInt64LE(ino, 16)
  buf.writeUInt32LE(crc32c(buf.subarray(0, 28)), 28)
  return buf
}

export interface SumBlock {
  offset: number
  firstSeq: number
  length: number
  entries: number
  crc: number
}

export function encodeSumRecord(b: SumBlock): Buffer {
  const buf = Buffer.alloc(SUM_RECORD)
  buf.writeUIntLE(b.offset, 0, 6)
  buf.writeUIntLE(b.firstSeq, 8, 6)
  buf.writeUInt32LE(b.length, 16)
  buf.writeUInt32LE(b.entries, 20)
  buf.writeUInt32LE(b.crc >>> 0, 24)
  buf.writeUInt32LE(crc32c(buf.subarray(0, 28)), 28)
  return buf
}

function decodeSumRecord(buf: Buffer, at: number): SumBlock | null {
  const r = buf.subarray(at, at + SUM_RECORD)
  if (r.length < SUM_RECORD || r.readUInt32LE(28) !== crc32cSmall(r, 0, 28)) return null
  return {
    offset: r.readUIntLE(0, 6),
    firstSeq: r.readUIntLE(8, 6),
    length: r.readUInt32LE(16),
    entries: r.readUInt32LE(20),
    crc: r.readUInt32LE(24),
  }
}

export interface Sidecar {
  /** Valid blocks in offset order, each within the log's current size. */
  blocks: SumBlock[]
  /** Bytes of the sidecar that hold valid records (what a writer keeps; the rest is cut). */
  validBytes: number
  /** The sidecar's size when it was read (past validBytes: records to cut). */
  size: number
}

/** A sidecar as a reader last decoded it (readSidecar with `cached`). */
interface Decoded {
  ino: bigint
  logIno: bigint
  logSize: number
  size: number
  mtimeNs: bigint
  blocks: SumBlock[]
  validBytes: number
  /**
   * The 32 bytes before `validBytes` (its last valid record, or the header, as long as a record),
   * to tell a sidecar appended to from one rewritten.
   */
  tail: Buffer
}

const decoded = new Map<string, Decoded>()
const DECODED_MAX = 64

/**
 * The sidecar of a log, or null when there is none usable (missing, another log's, damaged
 * header). Reading stops at the first invalid record, at a block out of order, or at one that
 * reaches past `logSize`.
 *
 * `cached` (readers: a seek, a replay's check of the blocks it reads) keeps what was decoded
 * and, while the sidecar only grew (same file, its last record read still in place, decoding
 * having reached its end), decodes only the records added since: a snapshot of the last 1,000
 * entries of a 1M-entry log otherwise decoded all 3,000 records twice. Writers and verify read
 * it whole.
 */
export function readSidecar(path: string, logIno: bigint, logSize: number, cached = false): Sidecar | null {
  let fd: number
  try {
    fd = openFileSync(path, READ, { what: 'checksum sidecar' })
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
    throw err
  }
  try {
    const st = fstatSync(fd, { bigint: true })
    const size = Number(st.size)
    const known = cached ? decoded.get(path) : undefined
    if (
      known &&
      known.ino === st.ino &&
      known.logIno === logIno &&
      logSize >= known.logSize &&
      known.validBytes === known.size
    ) {
      if (size === known.size && st.mtimeNs === known.mtimeNs && tailStill(fd, known)) {
        return { blocks: known.blocks.slice(), validBytes: known.validBytes, size }
      }
      if (size > known.size && tailStill(fd, known)) {
        const rest = readRange(fd, known.size, size - known.size)
        const blocks = known.blocks.slice()
        const last = blocks[blocks.length - 1]
        const at = decodeRecords(rest, 0, blocks, last ? last.offset + last.length : 0, logSize)
        const tail = at > 0 ? rest.subarray(at - SUM_RECORD, at) : known.tail
        return remember(path, st, logIno, logSize, blocks, known.size + at, tail)
      }
    }
    const buf = readRange(fd, 0, size)
    if (buf.length < SUM_HEADER || !buf.subarray(0, 8).equals(MAGIC)) return null
    if (buf.readUInt32LE(28) !== crc32c(buf.subarray(0, 28))) return null
    if (buf.readBigUInt64LE(16) !== logIno) return null
    const blocks: SumBlock[] = []
    const at = decodeRecords(buf, SUM_HEADER, blocks, 0, logSize)
    if (!cached) return { blocks, validBytes: at, size }
    return remember(path, st, logIno, logSize, blocks, at, buf.subarray(at - SUM_RECORD, at))
  } finally {
    closeSync(fd)
  }
}

/** Decodes records from `at` of `buf` into `blocks` while valid; returns where it stopped. */
function decodeRecords(buf: Buffer, at: number, blocks: SumBlock[], end: number, logSize: number): number {
  for (; at + SUM_RECORD <= buf.length; at += SUM_RECORD) {
    const b = decodeSumRecord(buf, at)
    if (!b || b.offset < end || b.offset + b.length > logSize || b.length === 0) break
    blocks.push(b)
    end = b.offset + b.length
  }
  return at
}

function remember(
  path: string,
  st: { ino: bigint; size: bigint; mtimeNs: bigint },
  logIno: bigint,
  logSize: number,
  blocks: SumBlock[],
  validBytes: number,
  tail: Buffer,
): Sidecar {
  decoded.delete(path)
  decoded.set(path, {
    ino: st.ino,
    logIno,
    logSize,
    size: Number(st.size),
    mtimeNs: st.mtimeNs,
    blocks,
    validBytes,
    tail: Buffer.from(tail),
  })
  if (decoded.size > DECODED_MAX) decoded.delete(decoded.keys().next().value as string)
  return { blocks: blocks.slice(), validBytes, size: Number(st.size) }
}

/** Whether the last record decoded is still where it was (the sidecar was appended to, not rewritten). */
function tailStill(fd: number, known: Decoded): boolean {
  return readRange(fd, known.validBytes - SUM_RECORD, SUM_RECORD).equals(known.tail)
}

function readRange(fd: number, offset: number, length: number): Buffer {
  const buf = Buffer.allocUnsafe(length)
  let got = 0
  while (got < length) {
    const n = readSync(fd, buf, got, length - got, offset + got)
    if (n === 0) break
    got += n
  }
  return got < length ? buf.subarray(0, got) : buf
}

/** The block holding `seq`, by binary search; null when no block does. */
export function blockOfSeq(blocks: readonly SumBlock[], seq: number): SumBlock | null {
  let lo = 0
  let hi = blocks.length - 1
  let found: SumBlock | null = null
  while (lo <= hi) {
    const mid = (lo + hi) >> 1
    const b = blocks[mid] as SumBlock
    if (b.firstSeq <= seq) {
      found = b
      lo = mid + 1
    } else {
      hi = mid - 1
    }
  }
  return found && seq < found.firstSeq + found.entries ? found : null
}

/**
 * Checks the blocks of a log against its bytes. Returns the damaged ones (checksum mismatch),
 * in order; reads each block once.
 */
export function damagedBlocks(logFd: number, blocks: readonly SumBlock[]): SumBlock[] {
  const bad: SumBlock[] = []
  let buf = Buffer.allocUnsafe(BLOCK_BYTES * 2)
  for (const b of blocks) {
    if (buf.length < b.length) buf = Buffer.allocUnsafe(b.length)
    let got = 0
    while (got < b.length) {
      const n = readSync(logFd, buf, got, b.length - got, b.offset + got)
      if (n === 0) break
      got += n
    }
    if (got < b.length || crc32c(buf.subarray(0, b.length)) !== b.crc) bad.push(b)
  }
  return bad
}
