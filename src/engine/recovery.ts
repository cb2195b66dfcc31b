/**
 * Crash recovery (seed: クラッシュリカバリ). Opening a workspace reads only the tail: cut a partial
 * last line, take the last seq and ts. `verify` is the full scan.
 */
import { closeSync, fstatSync, readSync } from 'node:fs'
import { type LogBase, readBaseFd } from './base.js'
import { parseCounters, parseEntry } from './entry.js'
import { Errors } from './errors.js'
import { hasReadView, openFileSync, READ } from './files.js'
import { useThreads, verifyInThread } from './parallel.js'
import { findLastNewline, lineStartFrom, readAt, readChunks } from './reader.js'
import { LineScanner } from './scan.js'
import type { VerifyRangeReport } from './scan-protocol.js'

export interface Tail {
  size: number
  /** Length up to and including the last `\n`: what survives a cut. */
  validLength: number
  /** The last complete line, without its `\n`. */
  lastLine: string | null
}

const NEWLINE = 0x0a
/** Bytes inspectTail reads first from a log's end. */
const TAIL_WINDOW = 4096

/** Reads backwards from the end until the last two newlines are found: O(line length). */
export function inspectTail(fd: number, size = fstatSync(fd).size): Tail {
  // The usual case in one read: the last line and the newline before it in the log's last 4 KiB
  // (an owner opens a log this way each time it opens it: at 100,000 workspaces, often).
  const window = Math.min(size, TAIL_WINDOW)
  if (window > 0) {
    const buf = Buffer.allocUnsafe(window)
    const n = readAt(fd, buf, size - window)
    if (n === window) {
      const last = buf.lastIndexOf(NEWLINE)
      if (last < 0 && window === size) return { size, validLength: 0, lastLine: null }
      const prev = last > 0 ? buf.lastIndexOf(NEWLINE, last - 1) : -1
      if (last >= 0 && (prev >= 0 || window === size)) {
        const start = size - window
        return { size, validLength: start + last + 1, lastLine: buf.toString('utf8', prev + 1, last) }
      }
    }
  }
  const lastNl = findLastNewline(fd, size)
  if (lastNl < 0) return { size, validLength: 0, lastLine: null }
  const prevNl = findLastNewline(fd, lastNl)
  const len = lastNl - (prevNl + 1)
  const buf = Buffer.allocUnsafe(len)
  let got = 0
  while (got < len) {
    const n = readSyncAt(fd, buf, got, prevNl + 1 + got)
    if (n === 0) break
    got += n
  }
  return { size, validLength: lastNl + 1, lastLine: buf.toString('utf8', 0, got) }
}

function readSyncAt(fd: number, buf: Buffer, off: number, pos: number): number {
  return readSync(fd, buf, off, buf.length - off, pos)
}

/** seq and ts of the last complete line; a bad last line is corruption, reported with its line number. */
export function countersOf(file: string, tail: Tail): { lastSeq: number; lastTs: number } {
  if (tail.lastLine === null) return { lastSeq: 0, lastTs: 0 }
  try {
    const { seq, ts } = parseCounters(tail.lastLine)
    return { lastSeq: seq, lastTs: ts }
  } catch (err) {
    const line = countLines(file, tail.validLength)
    throw Errors.CORRUPT_LOG(
      `${file}:${line}: corrupt entry in the last complete line (${(err as Error).message}); it ends with a newline, so it is not a torn write and was not cut`,
      { file, line },
    )
  }
}

/** Number of `\n` in the first `end` bytes. */
export function countLines(file: string, end: number): number {
  const fd = openFileSync(file, READ, { what: 'log' })
  try {
    const buf = Buffer.allocUnsafe(1 << 20)
    let pos = 0
    let count = 0
    while (pos < end) {
      const n = readSync(fd, buf, 0, Math.min(buf.length, end - pos), pos)
      if (n === 0) break
      let i = buf.indexOf(0x0a, 0)
      while (i >= 0 && i < n) {
        count++
        i = buf.indexOf(0x0a, i + 1)
      }
      pos += n
    }
    return count
  } finally {
    closeSync(fd)
  }
}

export interface VerifyProblem {
  line: number
  reason: string
}

export interface VerifyReport {
  file: string
  ok: boolean
  entries: number
  firstSeq: number
  lastSeq: number
  lastTs: number
  /** Bytes covered by complete lines. */
  bytes: number
  /** Bytes of a partial last line (a torn write `recover` would cut). */
  tornTailBytes: number
  problem?: VerifyProblem
  /** Bytes checked against the checksum sidecar (0: none, or no sidecar). */
  checksummedBytes?: number
  /** Blocks whose bytes do not match their checksum: byte range and seq range of each. */
  damaged?: DamagedBlock[]
  /** A compacted log's base record: the seqs up to `seq` are in snapshot `snapshotId`. */
  base?: { seq: number; ts: number; snapshotId: string }
}

export interface DamagedBlock {
  offset: number
  length: number
  firstSeq: number
  lastSeq: number
}

export interface VerifyOptions {
  /** Called after each batch of lines with the bytes checked so far and the bytes to check. */
  onProgress?: (bytes: number, size: number) => void
}

/**
 * Full scan: every line a valid entry, seq strictly increasing, ts non-decreasing. Stops at the
 * first problem and reports it as file:line. Reads up to the size the file has when it starts.
 * A large log is checked in two halves at once (split at a line boundary), joined in order.
 */
export async function verifyLog(file: string, options: VerifyOptions = {}): Promise<VerifyReport> {
  const { onProgress } = options
  const fd = openFileSync(file, READ, { what: 'log' })
  let size: number
  let middle = 0
  let base: LogBase | null
  try {
    size = fstatSync(fd).size
    try {
      base = readBaseFd(fd, file)
    } catch (err) {
      const report = joinRanges(file, size, [])
      report.ok = false
      report.problem = { line: 1, reason: (err as Error).message }
      return report
    }
    if (useThreads(size) && !hasReadView(file)) middle = lineStartFrom(fd, Math.floor(size / 2), size)
  } finally {
    closeSync(fd)
  }
  // A compacted log's base record (base.ts) is checked as its first line: the entries after it
  // follow its seq and ts; it is reported as the base, not counted as an entry.
  const start = base?.bytes ?? 0
  const head: VerifyRangeReport[] = base
    ? [
        {
          lines: 1,
          entries: 1,
          firstSeq: base.seq,
          firstTs: base.ts,
          firstLineBytes: base.bytes,
          lastSeq: base.seq,
          lastTs: base.ts,
          bytes: base.bytes,
        },
      ]
    : []
  const progress = onProgress && ((bytes: number) => onProgress(start + bytes, size))
  let ranges: VerifyRangeReport[]
  if (middle > start && middle < size) {
    const [first, second] = await Promise.all([
      verifyRange(file, start, middle, progress),
      verifyInThread(file, middle, size),
    ])
    // Without its thread the second half is checked here, after the first.
    const rest =
      second ?? (await verifyRange(file, middle, size, progress && ((b) => progress(middle - start + b))))
    ranges = [...head, first, rest]
  } else {
    ranges = [...head, await verifyRange(file, start, size, progress)]
  }
  const report = joinRanges(file, size, ranges)
  if (base) {
    report.entries--
    report.firstSeq = ranges.slice(1).find((r) => r.entries > 0)?.firstSeq ?? 0
    report.base = { seq: base.seq, ts: base.ts, snapshotId: base.snapshotId }
  }
  if (report.ok && middle > start && middle < size) progress?.(report.bytes - start)
  return report
}

/**
 * Checks the complete lines in [start, end) (start is a line start) as `verifyLog` does, with
 * line numbers from 1 at `start` and no entry before it; stops at the first problem.
 */
export async function verifyRange(
  file: string,
  start: number,
  end: number,
  /** Called after each chunk with the bytes of the range checked so far. */
  onChunk?: (bytes: number) => void,
): Promise<VerifyRangeReport> {
  const r: VerifyRangeReport = {
    lines: 0,
    entries: 0,
    firstSeq: 0,
    firstTs: 0,
    firstLineBytes: 0,
    lastSeq: 0,
    lastTs: 0,
    bytes: 0,
  }
  const fail = (reason: string): VerifyRangeReport => {
    r.problem = { line: r.lines, reason }
    return r
  }
  const scanner = new LineScanner()
  for await (const chunk of readChunks(file, { start, end })) {
    const stop = chunk.length
    let s = 0
    while (s < stop) {
      r.lines++
      let seq: number
      let ts: number
      let next: number
      if (scanner.take(chunk, s)) {
        seq = scanner.seq
        ts = scanner.ts
        next = scanner.next
      } else {
        next = chunk.indexOf(0x0a, s) + 1
        if (next === s + 1) {
          r.bytes += 1
          return fail('empty line')
        }
        try {
          const e = parseEntry(chunk.toString('utf8', s, next - 1))
          seq = e.seq
          ts = e.ts
        } catch (err) {
          r.bytes += next - s
          return fail((err as Error).message)
        }
      }
      r.bytes += next - s
      if (r.entries === 0) {
        r.firstSeq = seq
        r.firstTs = ts
        r.firstLineBytes = next - s
      } else {
        if (seq <= r.lastSeq) return fail(`seq ${seq} does not increase (previous ${r.lastSeq})`)
        if (ts < r.lastTs) return fail(`ts ${ts} goes back (previous ${r.lastTs})`)
      }
      r.entries++
      r.lastSeq = seq
      r.lastTs = ts
      s = next
    }
    onChunk?.(r.bytes)
  }
  return r
}

/** The report of a whole log from the reports of its consecutive ranges, as one scan would give. */
function joinRanges(file: string, size: number, ranges: readonly VerifyRangeReport[]): VerifyReport {
  const report: VerifyReport = {
    file,
    ok: true,
    entries: 0,
    firstSeq: 0,
    lastSeq: 0,
    lastTs: 0,
    bytes: 0,
    tornTailBytes: 0,
  }
  let lines = 0
  const fail = (line: number, reason: string): VerifyReport => {
    report.ok = false
    report.problem = { line, reason }
    return report
  }
  for (const r of ranges) {
    if (r.lines === 0) continue
    // The range's first line is an entry unless the range's problem is on it; it follows the
    // last entry of the ranges before.
    if (r.problem?.line !== 1 && report.entries > 0) {
      if (r.firstSeq <= report.lastSeq) {
        report.bytes += r.firstLineBytes
        return fail(lines + 1, `seq ${r.firstSeq} does not increase (previous ${report.lastSeq})`)
      }
      if (r.firstTs < report.lastTs) {
        report.bytes += r.firstLineBytes
        return fail(lines + 1, `ts ${r.firstTs} goes back (previous ${report.lastTs})`)
      }
    }
    if (report.entries === 0 && r.entries > 0) report.firstSeq = r.firstSeq
    if (r.entries > 0) {
      report.lastSeq = r.lastSeq
      report.lastTs = r.lastTs
    }
    report.entries += r.entries
    report.bytes += r.bytes
    if (r.problem) return fail(lines + r.problem.line, r.problem.reason)
    lines += r.lines
  }
  if (report.bytes < size) {
    report.tornTailBytes = size - report.bytes
    return fail(
      lines + 1,
      `partial last line (${report.tornTailBytes} bytes without a newline): a torn write; recover cuts it`,
    )
  }
  return report
}

/** Bytes and newline count of a log, for listings. */
export async function countEntries(file: string): Promise<{ entries: number; bytes: number }> {
  let entries = 0
  let bytes = 0
  for await (const chunk of readChunks(file)) {
    bytes += chunk.length
    let i = chunk.indexOf(0x0a)
    while (i >= 0) {
      entries++
      i = chunk.indexOf(0x0a, i + 1)
    }
  }
  return { entries, bytes }
}
