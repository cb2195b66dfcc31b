/**
 * Finding a workspace's snapshot entries in its log, newest first, without parsing the lines in
 * between: a backward byte search for `"op":"snapshot"`. Inside a JSON string every `"` is
 * escaped, so those bytes occur only as the op key of a snapshot entry.
 *
 * The latest snapshot entry is the workspace's head. Finding it reads only the bytes after it
 * (those a snapshot replays anyway); the log stays the only source of truth: no ref file that a
 * crash could leave stale.
 */
import { closeSync, readSync } from 'node:fs'
import { type Entry, parseEntry, type SnapshotEntry } from '../engine/entry.js'
import { Errors } from '../engine/errors.js'
import { openFileSync, READ } from '../engine/files.js'
import { endOfCompleteLines, findLastNewline } from '../engine/reader.js'
import type { SnapshotRecord } from './objects.js'

export type StoredSnapshotEntry = SnapshotEntry & { seq: number; ts: number }

/** A workspace's newest snapshot entry and what it stands for. */
export interface Head {
  record: SnapshotRecord
  /** Seq of the snapshot entry in this workspace's log. */
  entrySeq: number
  /** The record's tree is the workspace's files as of this seq of its log. */
  pos: number
  /** The record belongs to this workspace's history (false: a fork base from elsewhere). */
  own: boolean
}

const PATTERN = Buffer.from('"op":"snapshot"', 'latin1')
const CHUNK = 1 << 18
const NL = 0x0a

function readAt(fd: number, buf: Buffer, len: number, pos: number): number {
  let got = 0
  while (got < len) {
    const n = readSync(fd, buf, got, len - got, pos + got)
    if (n === 0) break
    got += n
  }
  return got
}

function lineAround(fd: number, file: string, at: number, size: number): { line: string; start: number } {
  const start = findLastNewline(fd, at) + 1
  let buf = Buffer.allocUnsafe(1024)
  for (;;) {
    const n = readAt(fd, buf, Math.min(buf.length, size - start), start)
    const nl = buf.subarray(0, n).indexOf(NL)
    if (nl >= 0) return { line: buf.toString('utf8', 0, nl), start }
    if (start + n >= size) {
      throw Errors.CORRUPT_LOG(`${file}: no newline after byte ${at}`, { file, offset: at })
    }
    buf = Buffer.allocUnsafe(buf.length * 4)
  }
}

function parseSnapshotLine(file: string, line: string, offset: number): StoredSnapshotEntry {
  let entry: Entry
  try {
    entry = parseEntry(line)
  } catch (err) {
    throw Errors.CORRUPT_LOG(
      `${file} (line at byte ${offset}): corrupt snapshot entry: ${(err as Error).message}`,
      { file, offset },
    )
  }
  if (entry.op !== 'snapshot') {
    throw Errors.CORRUPT_LOG(`${file} (line at byte ${offset}): expected a snapshot entry`, {
      file,
      offset,
    })
  }
  return entry as StoredSnapshotEntry
}

/**
 * Snapshot entries of a log from the newest back, each with the byte offset of its line.
 * Reads the file backwards from its last complete line; stops early when the consumer does.
 */
export function* snapshotEntriesBackward(
  file: string,
): Generator<{ entry: StoredSnapshotEntry; offset: number }> {
  const fd = openFileSync(file, READ, { what: 'log' })
  try {
    const size = endOfCompleteLines(fd)
    const buf = Buffer.allocUnsafe(CHUNK)
    let end = size // the search goes on in [0, end): every match at or after it was reported
    while (end > 0) {
      const start = Math.max(0, end - CHUNK)
      const n = readAt(fd, buf, end - start, start)
      let limit = n // search buf[0, limit)
      let lastLineStart = end
      while (limit >= PATTERN.length) {
        const i = buf.subarray(0, limit).lastIndexOf(PATTERN)
        if (i < 0) break
        const { line, start: lineStart } = lineAround(fd, file, start + i, size)
        yield { entry: parseSnapshotLine(file, line, lineStart), offset: lineStart }
        lastLineStart = lineStart
        limit = lineStart - start // the rest of this window, before that line
      }
      // The next window overlaps this one by the pattern's length less one byte, so a match
      // across the boundary is seen whole; it never reaches past a line already reported.
      end = Math.min(start === 0 ? 0 : start + PATTERN.length - 1, lastLineStart)
    }
  } finally {
    closeSync(fd)
  }
}

/** The newest snapshot entry of a log (the workspace's head), or null when it has none. */
export function lastSnapshotEntry(file: string): { entry: StoredSnapshotEntry; offset: number } | null {
  for (const found of snapshotEntriesBackward(file)) return found
  return null
}

/** Bytes of a log up to its last complete line: where a replay that starts now stops. */
export function lengthOfLog(file: string): number {
  const fd = openFileSync(file, READ, { what: 'log' })
  try {
    return endOfCompleteLines(fd)
  } finally {
    closeSync(fd)
  }
}
