/**
 * Reading logs without loading them: chunks that end on a line boundary, lines, entries, and a
 * binary search from a seq to its byte offset. Only complete (`\n`-terminated) lines are ever
 * returned, so reading while an owner appends is safe: a line being written is simply not there
 * yet.
 */
import { closeSync, fstatSync, readSync } from 'node:fs'
import { basename, dirname, join } from 'node:path'
import { entryStart } from './base.js'
import { crc32c } from './crc.js'
import { type Entry, parseCounters } from './entry.js'
import { hasReadView, openFile, openFileSync, READ } from './files.js'
import { parallelEntryBatches, useThreads } from './parallel.js'
import { BadLine, corruptLine, LineScanner, type ParseOptions, parseLines } from './scan.js'
import { blockOfSeq, readSidecar, SIDECAR_DIR } from './sidecar.js'

const CHUNK = 1 << 20
/** The folder of the logs below a root (logs.ts, which imports this file, owns the layout). */
const LOG_DIR = 'agent-logs'
const NL = 0x0a

export interface ChunkOptions {
  /** Byte offset to start at: must be a line start. */
  start?: number
  /** Stop at this byte offset (default: the file's size when reading starts). */
  end?: number
  chunkSize?: number
}

/**
 * Yields buffers that each hold whole lines (the last byte of each is `\n`). A trailing partial
 * line is not yielded. The buffers may be reused after the consumer resumes the iterator.
 *
 * Two buffers take turns: the read of the next chunk is already in the thread pool while the
 * consumer parses this one, so a replay never waits for the disk (or the page cache copy)
 * between chunks.
 */
export async function* readChunks(file: string, options: ChunkOptions = {}): AsyncGenerator<Buffer> {
  const handle = await openFile(file, READ, { what: 'log' })
  let pending: Promise<{ bytesRead: number }> | null = null
  try {
    const end = options.end ?? (await handle.stat()).size
    const size = options.chunkSize ?? CHUNK
    let pos = options.start ?? 0
    let buf: Buffer = Buffer.allocUnsafe(size)
    let spare: Buffer | null = null
    let carry = 0 // bytes at the start of buf left over from the previous read (a partial line)
    const readInto = (into: Buffer, at: number): Promise<{ bytesRead: number }> =>
      handle.read(into, at, Math.min(into.length - at, end - pos), pos)
    if (pos < end) pending = readInto(buf, 0)
    while (pending !== null) {
      const { bytesRead } = await pending
      pending = null
      if (bytesRead === 0) break
      pos += bytesRead
      const filled = carry + bytesRead
      const lastNl = buf.lastIndexOf(NL, filled - 1)
      if (lastNl < 0) {
        carry = filled
        if (carry === buf.length) {
          // One line longer than the buffer: grow it.
          const bigger = Buffer.allocUnsafe(buf.length * 2)
          buf.copy(bigger, 0, 0, carry)
          buf = bigger
        }
        if (pos < end) pending = readInto(buf, carry)
        continue
      }
      const nextCarry = filled - (lastNl + 1)
      // The next buffer holds the partial line and room for at least as much again.
      if (spare === null || spare.length < Math.max(size, nextCarry * 2)) {
        spare = Buffer.allocUnsafe(Math.max(size, nextCarry * 2))
      }
      buf.copy(spare, 0, lastNl + 1, filled)
      if (pos < end) pending = readInto(spare, nextCarry)
      yield buf.subarray(0, lastNl + 1)
      const done = buf
      buf = spare
      spare = done
      carry = nextCarry
    }
  } finally {
    // A consumer that stops early leaves the next read in flight: let it land before closing.
    if (pending !== null) await (pending as Promise<unknown>).catch(() => undefined)
    await handle.close()
  }
}

export interface LineOptions extends ChunkOptions {}

/** Lines (without their `\n`), in batches: one array per chunk read. */
export async function* readLineBatches(file: string, options: LineOptions = {}): AsyncGenerator<string[]> {
  for await (const chunk of readChunks(file, options)) {
    const text = chunk.toString('utf8', 0, chunk.length - 1)
    yield text.split('\n')
  }
}

export interface EntryReadOptions {
  /** First seq wanted; the start is found by binary search, not by scanning. */
  fromSeq?: number
  end?: number
  /** Check every field of every entry (default true). */
  validate?: boolean
  /** Pass over lines that are not entries instead of refusing (a lookup that needs no proof). */
  skipBadLines?: boolean
}

/**
 * How a read holds memory, for a caller that keeps many reads open at once (the daemon's streams)
 * rather than one fast one: not a read option of the API.
 */
export interface ReadTuning {
  /** Bytes read at a time (default 1 MiB); a read holds two such buffers and the entries of one. */
  chunkSize?: number
  /** Whether a large read may use a scanning thread and its 8 MiB of slots (default true). */
  threads?: boolean
}

/** Entries in file order, in batches. Malformed lines are corruption: a NoaError with file:line. */
export async function* readEntryBatches(
  file: string,
  options: EntryReadOptions = {},
  tuning: ReadTuning = {},
): AsyncGenerator<Entry[]> {
  // A compacted log: past its base record, and never from a seq the base replaced (base.ts).
  const { start, fromSeq } = entryStart(
    file,
    options.fromSeq ?? 1,
    (options.fromSeq ?? 1) > 1 ? seekSeq(file, options.fromSeq ?? 1) : 0,
  )
  const parse: ParseOptions = { validate: options.validate ?? true, fromSeq }
  if (options.skipBadLines) parse.onBad = () => undefined
  const end = options.end ?? logSize(file)
  let lineNo = 0
  let from = start
  if (tuning.threads !== false && !options.skipBadLines && useThreads(end - start) && !hasReadView(file)) {
    const state = { lines: 0, resumeAt: start, complete: false }
    yield* parallelEntryBatches(file, start, end, parse, state, (n, err) => corruptLine(file, n, start, err))
    if (state.complete) return
    lineNo = state.lines
    from = state.resumeAt
  }
  const scanner = new LineScanner()
  const chunks: ChunkOptions = { start: from, end }
  if (tuning.chunkSize !== undefined) chunks.chunkSize = tuning.chunkSize
  for await (const chunk of readChunks(file, chunks)) {
    const out: Entry[] = []
    try {
      lineNo += parseLines(scanner, chunk, out, parse)
    } catch (err) {
      if (!(err instanceof BadLine)) throw err
      throw corruptLine(file, lineNo + err.lineIndex, start, err.error)
    }
    if (out.length > 0) yield out
  }
}

export async function* readEntries(file: string, options: EntryReadOptions = {}): AsyncGenerator<Entry> {
  for await (const batch of readEntryBatches(file, options)) yield* batch
}

/** Reads `buf.length` bytes at `pos` (fewer at the end of the file); returns how many. */
export function readAt(fd: number, buf: Buffer, pos: number): number {
  let got = 0
  while (got < buf.length) {
    const n = readSync(fd, buf, got, buf.length - got, pos + got)
    if (n === 0) break
    got += n
  }
  return got
}

/** Start of the first line that begins at or after `pos` (or `size`). */
export function lineStartFrom(fd: number, pos: number, size: number): number {
  if (pos === 0) return 0
  const buf = Buffer.allocUnsafe(4096)
  let p = pos - 1
  while (p < size) {
    const n = readAt(fd, buf, p)
    if (n === 0) break
    const i = buf.subarray(0, n).indexOf(NL)
    if (i >= 0) return p + i + 1
    p += n
  }
  return size
}

/** The complete line starting at `start`, or null when it has no `\n` before `size`. */
function lineAt(fd: number, start: number, size: number): string | null {
  let buf = Buffer.allocUnsafe(512)
  for (;;) {
    const n = readAt(fd, buf, start)
    const i = buf.subarray(0, n).indexOf(NL)
    if (i >= 0) return buf.toString('utf8', 0, i)
    if (start + n >= size) return null
    buf = Buffer.allocUnsafe(buf.length * 4)
  }
}

/**
 * Byte offset of the first line whose seq is ≥ `seq`. With the log's checksum sidecar, one
 * block read: the block that holds `seq` (or, past the last block, a search of the tail after
 * it). Without one, or when it does not match the log, O(log size) small reads, relying on seqs
 * increasing through the file (which `verify` checks). Returns the file size when none is.
 */
export function seekSeq(file: string, seq: number): number {
  const fd = openFileSync(file, READ, { what: 'log' })
  try {
    const size = endOfCompleteLines(fd)
    const hint = sidecarSeek(fd, file, size, seq)
    if (hint !== null && hint.at !== undefined) return hint.at
    let lo = hint?.after ?? 0 // a line start; every line before it has a smaller seq
    let hi = size // a line start (or size); the line there, if any, has seq ≥ target
    while (hi - lo > 8192) {
      const s = lineStartFrom(fd, lo + Math.floor((hi - lo) / 2), hi)
      if (s >= hi) break
      const line = lineAt(fd, s, size)
      if (line === null) break
      let at: number
      try {
        at = parseCounters(line).seq
      } catch {
        break // let the linear pass (and then the reader) meet the bad line
      }
      if (at < seq) lo = s + Buffer.byteLength(line) + 1
      else hi = s
    }
    // Linear pass over what is left. A line whose seq cannot be read is passed over only once a
    // later line shows it came before `seq` (seqs increase); otherwise the search ends on it, so
    // the reader meets the damage instead of starting past it.
    let p = lo
    let bad: number | null = null
    while (p < hi) {
      const line = lineAt(fd, p, size)
      if (line === null) return bad ?? size
      if (line.length > 0) {
        let at: number | null = null
        try {
          at = parseCounters(line).seq
        } catch {
          bad ??= p
        }
        if (at !== null) {
          if (at >= seq) return bad ?? p
          bad = null
        }
      }
      p += Buffer.byteLength(line) + 1
    }
    return bad ?? hi
  } finally {
    closeSync(fd)
  }
}

/**
 * What the checksum sidecar says of `seq`'s place in the log: `at`, the start of its line, or
 * `after`, a line start before which every seq is smaller (seq is past the blocks recorded).
 * Null when there is no sidecar, it names another file (inode), or the block it names does not
 * match the log's bytes (its CRC, or a line that is not where the block says): a stale or
 * foreign sidecar only costs the search it would have saved. A block is trusted only once its
 * bytes match its CRC, so a damaged block is never a seek target.
 */
export function sidecarSeek(
  fd: number,
  file: string,
  size: number,
  seq: number,
): { at?: number; after?: number } | null {
  const dir = dirname(file)
  if (basename(dir) !== LOG_DIR || !file.endsWith('.log')) return null
  let sidecar: ReturnType<typeof readSidecar>
  try {
    const st = fstatSync(fd, { bigint: true })
    sidecar = readSidecar(
      join(dirname(dir), SIDECAR_DIR, `${basename(file, '.log')}.sum`),
      st.ino,
      Number(st.size),
      true,
    )
  } catch {
    return null // unreadable: the search without it is just as right
  }
  const blocks = sidecar?.blocks ?? []
  const last = blocks[blocks.length - 1]
  if (last === undefined) return null
  const past = seq >= last.firstSeq + last.entries
  const block = past ? last : blockOfSeq(blocks, seq)
  if (block === null || block.offset + block.length > size) return null
  const buf = Buffer.allocUnsafe(block.length)
  if (readAt(fd, buf, block.offset) < block.length || crc32c(buf) !== block.crc) return null
  if (buf[buf.length - 1] !== NL || (block.offset > 0 && !lineEndsAt(fd, block.offset - 1))) return null
  if (past) return { after: block.offset + block.length }
  let p = 0
  while (p < buf.length) {
    const nl = buf.indexOf(NL, p)
    let at: number
    try {
      at = parseCounters(buf.toString('utf8', p, nl)).seq
    } catch {
      return null
    }
    if (at >= seq) return { at: block.offset + p }
    p = nl + 1
  }
  return null
}

function lineEndsAt(fd: number, pos: number): boolean {
  const one = Buffer.allocUnsafe(1)
  return readAt(fd, one, pos) === 1 && one[0] === NL
}

function logSize(file: string): number {
  const fd = openFileSync(file, READ, { what: 'log' })
  try {
    return fstatSync(fd).size
  } finally {
    closeSync(fd)
  }
}

/** The size of the file up to and including its last `\n`. */
export function endOfCompleteLines(fd: number): number {
  const tail = findLastNewline(fd, sizeOf(fd))
  return tail + 1
}

function sizeOf(fd: number): number {
  return fstatSync(fd).size
}

/**
 * Offset of the last `\n` strictly before `before`, or -1. Reads backwards, 4 KiB first (a line
 * is usually ~200 bytes), then in growing chunks.
 */
export function findLastNewline(fd: number, before: number): number {
  let buf = Buffer.allocUnsafe(4096)
  let end = before
  while (end > 0) {
    const start = Math.max(0, end - buf.length)
    const n = readAt(fd, buf.subarray(0, end - start), start)
    const i = buf.subarray(0, n).lastIndexOf(NL)
    if (i >= 0) return start + i
    end = start
    if (buf.length < 1 << 20) buf = Buffer.allocUnsafe(buf.length * 4)
  }
  return -1
}
