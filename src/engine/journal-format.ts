/**
 * The commit journal's bytes (the design of SQLite's and PostgreSQL's write-ahead logs, for
 * noa's append-only files). One journal per owner worker, `<root>/journal/<name>.jnl`, allocated
 * and written once at full size, then overwritten in place cyclically, so a commit's sync has no
 * file size to commit.
 *
 *   [0, 512)      header slot A  ┐ the one with the valid checksum and the higher generation
 *   [512, 1024)   header slot B  ┘ says where replay starts (tail lsn and offset)
 *   [4096, size)  frames, each a multiple of 512 bytes, written at the head and reused after a
 *                 checkpoint has made the logs they cover durable
 *
 * A frame holds records, each the bytes appended to one file (a workspace log, or a file written
 * through `appendToFile`) at a byte offset, with that file's inode, so that replaying a record
 * into a file that was since replaced is refused rather than done; or a whole file an append
 * wrote beside its entries (REC_FILE: an object of the store, say), by its path below the root. Every frame has
 * a CRC32C over all of its bytes after the checksum field, the journal's random id and a
 * log sequence number (lsn) one above its predecessor's; replay reads from the header's tail
 * while frames are valid and consecutive, so a torn frame, a frame of an earlier cycle or a
 * zero-filled block all end the valid prefix. The frames of one commit round are applied only
 * when the round's last frame (flag END) is valid: a round is atomic.
 */
import { crc32c } from './crc.js'

export const SECTOR = 512
export const DATA_START = 4096
export const HEADER_SLOTS = [0, 512] as const

const HEADER_MAGIC = Buffer.from('NOAJHDR1', 'latin1')
const FRAME_MAGIC = 0x31464a4e // 'NJF1' little-endian
export const FRAME_HEADER = 32
export const RECORD_HEADER = 32
const HEADER_BYTES = 64

export const FLAG_END = 1
export const FLAG_WRAP = 2

export const REC_DATA = 1
/**
 * A whole file written with a round (an append's `files`): its target is the path relative to
 * the root, its data the file's bytes; inode and offset are 0. Replay makes the file hold exactly
 * these bytes (see journal-recovery.ts).
 */
export const REC_FILE = 2
/** Record flag (byte 1) of a REC_FILE: the file is made read-only. */
export const REC_READ_ONLY = 1

export interface JournalHeader {
  journalId: number
  size: number
  generation: number
  tailLsn: number
  tailOffset: number
}

/** 48-bit unsigned values (lsns, offsets): exact in a JS number, and 2^48 bytes is plenty. */
function put48(buf: Buffer, value: number, at: number): void {
  buf.writeUIntLE(value, at, 6)
  buf.writeUInt16LE(0, at + 6)
}

function get48(buf: Buffer, at: number): number {
  if (buf.readUInt16LE(at + 6) !== 0) return -1
  return buf.readUIntLE(at, 6)
}

export function encodeHeader(h: JournalHeader): Buffer {
  const buf = Buffer.alloc(SECTOR)
  HEADER_MAGIC.copy(buf, 0)
  buf.writeUInt32LE(1, 12) // version
  buf.writeUInt32LE(h.journalId >>> 0, 16)
  put48(buf, h.size, 24)
  put48(buf, h.generation, 32)
  put48(buf, h.tailLsn, 40)
  put48(buf, h.tailOffset, 48)
  buf.writeUInt32LE(crc32c(buf.subarray(12, HEADER_BYTES)) >>> 0, 8)
  return buf
}

export function decodeHeader(buf: Buffer): JournalHeader | null {
  if (buf.length < HEADER_BYTES || !buf.subarray(0, 8).equals(HEADER_MAGIC)) return null
  if (buf.readUInt32LE(8) !== crc32c(buf.subarray(12, HEADER_BYTES)) >>> 0) return null
  if (buf.readUInt32LE(12) !== 1) return null
  const h = {
    journalId: buf.readUInt32LE(16),
    size: get48(buf, 24),
    generation: get48(buf, 32),
    tailLsn: get48(buf, 40),
    tailOffset: get48(buf, 48),
  }
  if (h.size < 0 || h.generation < 0 || h.tailLsn < 1 || h.tailOffset < DATA_START) return null
  if (h.tailOffset % SECTOR !== 0 || h.tailOffset >= h.size) return null
  return h
}

/** The newest valid header of the two slots, or null when neither is valid. */
export function newestHeader(slotA: Buffer, slotB: Buffer): JournalHeader | null {
  const a = decodeHeader(slotA)
  const b = decodeHeader(slotB)
  if (a && b) return a.generation >= b.generation ? a : b
  return a ?? b
}

export interface JournalRecord {
  /** REC_DATA: bytes at an offset of a log or file; REC_FILE: a whole file's bytes. */
  type: number
  /** REC_FILE: REC_READ_ONLY or 0. */
  flags: number
  /** A workspace name (its log is `agent-logs/<name>.log`), or an absolute path; REC_FILE: a path relative to the root. */
  target: string
  /** The file's inode when the record was made. */
  ino: bigint
  /** Byte offset in the file. */
  offset: number
  data: Buffer
}

/**
 * The fixed part of a record (type, target length, data length, inode, offset) and the target's
 * name. Made once per open file; `setRecord` fills in each round's offset and length.
 */
export function recordHeader(target: string, ino: bigint): Buffer {
  const name = Buffer.from(target, 'utf8')
  const buf = Buffer.alloc(RECORD_HEADER + name.length)
  buf.writeUInt8(REC_DATA, 0)
  buf.writeUInt16LE(name.length, 2)
  buf.writeBigUInt64LE(ino, 8)
  name.copy(buf, RECORD_HEADER)
  return buf
}

/** The header of a REC_FILE record: a whole file of `length` bytes at `path` below the root. */
export function fileRecordHeader(path: string, length: number, readOnly: boolean): Buffer {
  const name = Buffer.from(path, 'utf8')
  const buf = Buffer.alloc(RECORD_HEADER + name.length)
  buf.writeUInt8(REC_FILE, 0)
  buf.writeUInt8(readOnly ? REC_READ_ONLY : 0, 1)
  buf.writeUInt16LE(name.length, 2)
  buf.writeUInt32LE(length, 4)
  name.copy(buf, RECORD_HEADER)
  return buf
}

/** A copy of a record header with this round's offset and data length. */
export function setRecord(header: Buffer, offset: number, length: number): Buffer {
  const buf = Buffer.allocUnsafe(header.length)
  header.copy(buf)
  buf.writeUInt32LE(length, 4)
  put48(buf, offset, 16)
  return buf
}

/** A frame under construction: its bytes (one piece) to write with one pwrite, checksummed. */
export interface EncodedFrame {
  pieces: Buffer[]
  length: number
  lsn: number
}

export interface FramePart {
  /**
   * The record's header; with `offset`, the open file's fixed header (recordHeader), whose
   * offset and data length are written into the frame's copy (no header made per round).
   */
  header: Buffer
  data: Buffer | null
  /** Byte offset in the file, for a header made by recordHeader (setRecord's work, in place). */
  offset?: number
}

/**
 * Builds a frame from record parts (header + data each), copied into one buffer and summed with
 * one CRC32C call: a round of 10,000 workspaces is 20,000 parts, and a native call per part
 * (with a header buffer made per part) cost its owner more than copying the bytes (a few
 * hundred KiB) does.
 */
export function encodeFrame(
  journalId: number,
  lsn: number,
  flags: number,
  parts: readonly FramePart[],
): EncodedFrame {
  let length = FRAME_HEADER
  for (const p of parts) length += p.header.length + (p.data?.length ?? 0)
  const padded = Math.ceil(length / SECTOR) * SECTOR
  const frame = Buffer.allocUnsafe(padded)
  frame.fill(0, 0, FRAME_HEADER)
  frame.writeUInt32LE(FRAME_MAGIC, 0)
  frame.writeUInt32LE(padded, 8)
  frame.writeUInt32LE(journalId >>> 0, 12)
  put48(frame, lsn, 16)
  frame.writeUInt32LE(flags, 24)
  frame.writeUInt32LE(parts.length, 28)
  let at = FRAME_HEADER
  for (const p of parts) {
    p.header.copy(frame, at)
    const dataLength = p.data?.length ?? 0
    if (p.offset !== undefined) {
      frame.writeUInt32LE(dataLength, at + 4)
      put48(frame, p.offset, at + 16)
    }
    at += p.header.length
    if (p.data && dataLength > 0) {
      p.data.copy(frame, at)
      at += dataLength
    }
  }
  frame.fill(0, at)
  frame.writeUInt32LE(crc32c(frame.subarray(8)) >>> 0, 4)
  return { pieces: [frame], length: padded, lsn }
}

/** The 512-byte marker written at the head when the next frame does not fit before the end. */
export function wrapFrame(journalId: number, lsn: number): EncodedFrame {
  return encodeFrame(journalId, lsn, FLAG_WRAP, [])
}

export interface DecodedFrame {
  lsn: number
  flags: number
  length: number
  records: JournalRecord[]
}

/**
 * A frame whose checksum, journal id and lsn hold but whose contents no writer of noa makes (an
 * unknown record type or flag, a record running past its frame): the journal is not one to
 * trust. A frame that fails its checksum is only the end of the valid prefix (a torn write).
 */
export class BadFrame extends Error {}

/** The largest journal noa writes or trusts (the `journalSize` option's bound). */
export const MAX_JOURNAL_SIZE = 1 << 30

/**
 * Decodes the frame at the start of `buf` if it is whole and valid for this journal and lsn;
 * null otherwise (the end of the valid prefix). `buf` may be longer than the frame. Throws
 * BadFrame for a valid frame with contents noa never writes.
 */
export function decodeFrame(buf: Buffer, journalId: number, lsn: number): DecodedFrame | null {
  if (buf.length < FRAME_HEADER || buf.readUInt32LE(0) !== FRAME_MAGIC) return null
  const length = buf.readUInt32LE(8)
  if (length < SECTOR || length % SECTOR !== 0 || length > buf.length) return null
  if (buf.readUInt32LE(12) !== journalId >>> 0 || get48(buf, 16) !== lsn) return null
  if (buf.readUInt32LE(4) !== crc32c(buf.subarray(8, length)) >>> 0) return null
  const flags = buf.readUInt32LE(24)
  const count = buf.readUInt32LE(28)
  if ((flags & ~(FLAG_END | FLAG_WRAP)) !== 0)
    throw new BadFrame(`frame lsn ${lsn} has unknown flags ${flags}`)
  if (flags & FLAG_WRAP && count !== 0) throw new BadFrame(`wrap marker lsn ${lsn} holds records`)
  const records: JournalRecord[] = []
  let at = FRAME_HEADER
  for (let i = 0; i < count; i++) {
    const where = `record ${i + 1} of frame lsn ${lsn}`
    if (at + RECORD_HEADER > length) throw new BadFrame(`${where} runs past the end of its frame`)
    const type = buf.readUInt8(at)
    const recFlags = buf.readUInt8(at + 1)
    const nameLen = buf.readUInt16LE(at + 2)
    const dataLen = buf.readUInt32LE(at + 4)
    const ino = buf.readBigUInt64LE(at + 8)
    const offset = get48(buf, at + 16)
    const nameEnd = at + RECORD_HEADER + nameLen
    if (type !== REC_DATA && type !== REC_FILE) throw new BadFrame(`${where} has unknown type ${type}`)
    if (type === REC_DATA ? recFlags !== 0 : (recFlags & ~REC_READ_ONLY) !== 0)
      throw new BadFrame(`${where} has unknown flags ${recFlags}`)
    if (offset < 0) throw new BadFrame(`${where} has an offset beyond 2^48`)
    if (type === REC_FILE && (offset !== 0 || ino !== 0n))
      throw new BadFrame(`${where} is a whole file with an offset or inode`)
    if (nameEnd + dataLen > length) throw new BadFrame(`${where} runs past the end of its frame`)
    const name = buf.subarray(at + RECORD_HEADER, nameEnd)
    const target = name.toString('utf8')
    if (nameLen === 0 || !Buffer.from(target, 'utf8').equals(name))
      throw new BadFrame(`${where} names no file, or one that is not UTF-8`)
    records.push({
      type,
      flags: recFlags,
      target,
      ino,
      offset,
      data: buf.subarray(nameEnd, nameEnd + dataLen),
    })
    at = nameEnd + dataLen
  }
  return { lsn, flags, length, records }
}
