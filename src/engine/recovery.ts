/**
 * Crash recovery (seed: クラッシュリカバリ). Opening a workspace reads only the tail: cut a partial
 * last line, take the last seq and ts. `verify` is the full scan.
 */
import { closeSync, fstatSync, readSync } from 'node:fs'
import { parseCounters, parseEntry } from './entry.js'
import { NoaError } from './errors.js'
import { openFileSync, READ } from './files.js'
import { findLastNewline, readChunks, readLineBatches } from './reader.js'

export interface Tail {
  size: number
  /** Length up to and including the last `\n`: what survives a cut. */
  validLength: number
  /** The last complete line, without its `\n`. */
  lastLine: string | null
}

/** Reads backwards from the end until the last two newlines are found: O(line length). */
export function inspectTail(fd: number, size = fstatSync(fd).size): Tail {
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
    throw new NoaError(
      'NOA_CORRUPT_LOG',
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
}

export interface VerifyOptions {
  /** Called after each batch of lines with the bytes checked so far and the bytes to check. */
  onProgress?: (bytes: number, size: number) => void
}

/**
 * Full scan: every line a valid entry, seq strictly increasing, ts non-decreasing. Stops at the
 * first problem and reports it as file:line. Reads up to the size the file has when it starts.
 */
export async function verifyLog(file: string, options: VerifyOptions = {}): Promise<VerifyReport> {
  const { onProgress } = options
  const fd = openFileSync(file, READ, { what: 'log' })
  let size: number
  try {
    size = fstatSync(fd).size
  } finally {
    closeSync(fd)
  }
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
  let lineNo = 0
  const fail = (reason: string): VerifyReport => {
    report.ok = false
    report.problem = { line: lineNo, reason }
    return report
  }
  for await (const lines of readLineBatches(file, { end: size })) {
    for (const line of lines) {
      lineNo++
      report.bytes += Buffer.byteLength(line) + 1
      if (line.length === 0) return fail('empty line')
      let seq: number
      let ts: number
      try {
        const e = parseEntry(line)
        seq = e.seq
        ts = e.ts
      } catch (err) {
        return fail((err as Error).message)
      }
      if (report.entries > 0 && seq <= report.lastSeq) {
        return fail(`seq ${seq} does not increase (previous ${report.lastSeq})`)
      }
      if (report.entries > 0 && ts < report.lastTs)
        return fail(`ts ${ts} goes back (previous ${report.lastTs})`)
      if (report.entries === 0) report.firstSeq = seq
      report.entries++
      report.lastSeq = seq
      report.lastTs = ts
    }
    onProgress?.(report.bytes, size)
  }
  if (report.bytes < size) {
    report.tornTailBytes = size - report.bytes
    lineNo++
    return fail(
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
