/**
 * Object logs: files an append writes beside its entries (AppendOptions.files) with `packed`
 * set, appended to one file of their owner's instead of each created as a file of its own.
 * Creating a small file costs this machine's kernel about 70 µs (create, write, close, rename
 * into place), and its checkpoint an fdatasync each; appending the same bytes to an open file
 * costs about 1.4 µs, and one fdatasync covers them all. A checkpointing saver writes several
 * objects per step, so this is most of what a step costs.
 *
 *   <root>/object-logs/<16 hex digits>.olog
 *
 *   [0, 17)     'noa-object-log 1\n'
 *   records     each: u32 magic 'NOL1', u32 data length, u16 name length, u16 flags (0),
 *               u32 CRC32C of the name and the data; then the name (the file's path relative
 *               to the root, UTF-8) and the data
 *
 * One owner thread creates a log, appends to it while it lives and never after: a log whose
 * writer is gone is only read. Its writer writes each record at the end and cuts a failed write
 * back off, so the valid records are a prefix and a reader stops at the first record that is not
 * whole (a crash can leave a torn tail). Durability is the commit journal's, as for any file an
 * append writes: the frame carries each record's file too (REC_FILE), and a checkpoint
 * fdatasyncs the log before the frame's space is reused; after a crash, journal recovery puts
 * back, as a file of its own, every file of a frame that was not reclaimed. So a file can be at
 * its own path, in an object log, or both, with the same bytes; readers look at its path first.
 */
import { readSync } from 'node:fs'
import { crc32c } from './crc.js'

export const OBJECT_LOG_DIR = 'object-logs'
export const OBJECT_LOG_SUFFIX = '.olog'
export const OBJECT_LOG_HEADER = Buffer.from('noa-object-log 1\n', 'latin1')
const MAGIC = 0x314c4f4e // 'NOL1' little-endian
export const OBJECT_RECORD_HEADER = 16
/** A record's data is at most this long (a file beside entries fits a journal frame anyway). */
export const MAX_OBJECT_DATA = 1 << 30
/** A log is not appended to once it holds this many bytes: its owner starts a new one. */
export const OBJECT_LOG_ROTATE = 64 << 20

export const OBJECT_LOG_NAME_RE = /^[0-9a-f]{16}\.olog$/

/** The records of `files`, in order, as one buffer (one write). */
export function encodeObjectRecords(files: ReadonlyArray<{ path: string; data: Uint8Array }>): Buffer {
  const names = files.map((f) => Buffer.from(f.path, 'utf8'))
  let length = 0
  for (let i = 0; i < files.length; i++) {
    length +=
      OBJECT_RECORD_HEADER + (names[i] as Buffer).length + (files[i] as { data: Uint8Array }).data.length
  }
  const out = Buffer.allocUnsafe(length)
  let at = 0
  for (let i = 0; i < files.length; i++) {
    const name = names[i] as Buffer
    const data = (files[i] as { data: Uint8Array }).data
    out.writeUInt32LE(MAGIC, at)
    out.writeUInt32LE(data.length, at + 4)
    out.writeUInt16LE(name.length, at + 8)
    out.writeUInt16LE(0, at + 10)
    const body = at + OBJECT_RECORD_HEADER
    name.copy(out, body)
    out.set(data, body + name.length)
    out.writeUInt32LE(crc32c(out.subarray(body, body + name.length + data.length)) >>> 0, at + 12)
    at = body + name.length + data.length
  }
  return out
}

/** One valid record found by scanObjectLog: where its data is in the log. */
export interface ObjectRecord {
  name: string
  /** Byte offset of the data in the log file. */
  offset: number
  length: number
}

/** Reads `length` bytes at `position` into `buf` (at 0); returns how many it got (fewer at the end). */
export type ReadAt = (buf: Buffer, length: number, position: number) => number

const CHUNK = 1 << 20

/** A ReadAt over an open descriptor (positional reads, looped until `length` or the end). */
export function fdReader(fd: number): ReadAt {
  return (buf, length, position) => {
    let got = 0
    while (got < length) {
      const n = readSync(fd, buf, got, length - got, position + got)
      if (n === 0) break
      got += n
    }
    return got
  }
}

/**
 * Walks the valid records of a log from byte `from` (the header's end, or where an earlier
 * scan stopped) to `size`, calling `found` for each; returns where the valid prefix ends. A
 * record that is cut short, has a wrong magic or length, or fails its checksum ends it.
 */
export function scanObjectLog(
  readAt: ReadAt,
  from: number,
  size: number,
  found: (r: ObjectRecord) => void,
): number {
  let pos = from
  let buf = Buffer.allocUnsafe(CHUNK)
  while (pos + OBJECT_RECORD_HEADER <= size) {
    const head = Math.min(buf.length, size - pos)
    const got = readAt(buf, head, pos)
    if (got < OBJECT_RECORD_HEADER) break
    // Every whole record in this chunk, then the next chunk from the first one that is not.
    let at = 0
    let ended = false
    while (at + OBJECT_RECORD_HEADER <= got) {
      if (buf.readUInt32LE(at) !== MAGIC || buf.readUInt16LE(at + 10) !== 0) {
        ended = true
        break
      }
      const dataLength = buf.readUInt32LE(at + 4)
      const nameLength = buf.readUInt16LE(at + 8)
      const total = OBJECT_RECORD_HEADER + nameLength + dataLength
      if (nameLength === 0 || dataLength > MAX_OBJECT_DATA || pos + at + total > size) {
        ended = true
        break
      }
      if (at + total > got) {
        if (at === 0 && total > buf.length) buf = Buffer.allocUnsafe(total) // one record larger than a chunk
        break
      }
      const body = at + OBJECT_RECORD_HEADER
      if (crc32c(buf.subarray(body, body + nameLength + dataLength)) >>> 0 !== buf.readUInt32LE(at + 12)) {
        ended = true
        break
      }
      found({
        name: buf.toString('utf8', body, body + nameLength),
        offset: pos + body + nameLength,
        length: dataLength,
      })
      at += total
    }
    if (at === 0 && !ended && got < head) break // the file is shorter than it said
    pos += at
    if (ended) break
  }
  return pos
}
