/**
 * The base record of a compacted log (beyond the seed; docs/compaction.md). A log whose prefix
 * was compacted starts with one line that stands for every entry up to its seq:
 *
 *   {"seq":900000,"op":"base","snapshot_id":"noa_…","ts":1717592400000000}
 *
 * keys in the seed's order (seq, op, the op's fields, ts), `\n`-terminated like every line. Its
 * seq and ts are those of the last entry it replaces, so seqs and ts still increase through the
 * file and every later line is kept byte for byte; `snapshot_id` names this workspace's snapshot
 * whose tree is the state after that entry. It is never an entry: readers start after it, and a
 * read from a seq it replaced is refused (NOA_COMPACTED) rather than given a silent gap. It is
 * only ever the first line; anywhere else it is corruption.
 */
import { closeSync, readSync } from 'node:fs'
import { checkSnapshotId } from './entry.js'
import { Errors, type NoaError } from './errors.js'
import { openFileSync, READ } from './files.js'

export const BASE_OP = 'base'

/** What a log's base record says, and the bytes of its line (the first entry's offset). */
export interface LogBase {
  seq: number
  ts: number
  snapshotId: string
  bytes: number
}

const PREFIX = '{"seq":'
const BASE_RE = /^\{"seq":(\d{1,16}),"op":"base","snapshot_id":"([^"\\]*)","ts":(\d{1,16})\}$/
/** A base line is far shorter (a 128-character snapshot id and two 16-digit counters). */
const HEAD_BYTES = 512

export function formatBase(seq: number, snapshotId: string, ts: number): string {
  checkSnapshotId(snapshotId, 'snapshot_id')
  return `{"seq":${seq},"op":"base","snapshot_id":"${snapshotId}","ts":${ts}}\n`
}

/** Whether a line (without its `\n`) is a base record by its op, whatever else it holds. */
export function isBaseLine(line: string): boolean {
  return line.startsWith(PREFIX) && line.includes('"op":"base"')
}

/**
 * The base record of a line (without its `\n`), or null when it is not one. A line whose op is
 * `base` but that is not exactly the shape above is corruption (NOA_CORRUPT_LOG via the caller).
 */
export function parseBase(line: string): Omit<LogBase, 'bytes'> | null {
  if (!isBaseLine(line)) return null
  const m = BASE_RE.exec(line)
  const seq = Number(m?.[1])
  const ts = Number(m?.[3])
  if (!m || !Number.isSafeInteger(seq) || seq < 1 || !Number.isSafeInteger(ts)) {
    throw Errors.BAD_ENTRY(
      'a base record must be exactly {"seq":N,"op":"base","snapshot_id":"noa_…","ts":T}',
      { field: 'op' },
    )
  }
  checkSnapshotId(m[2], 'snapshot_id')
  return { seq, ts, snapshotId: m[2] as string }
}

/** The base record at the start of an open log, or null (not compacted, empty, or a torn first line). */
export function readBaseFd(fd: number, file: string): LogBase | null {
  const buf = Buffer.allocUnsafe(HEAD_BYTES)
  let n = 0
  for (let got = 1; got > 0 && n < HEAD_BYTES; n += got) got = readSync(fd, buf, n, HEAD_BYTES - n, n)
  if (n < PREFIX.length || buf.toString('latin1', 0, PREFIX.length) !== PREFIX) return null
  const nl = buf.subarray(0, n).indexOf(0x0a)
  const line = buf.toString('utf8', 0, nl < 0 ? n : nl)
  if (!isBaseLine(line)) return null
  if (nl < 0) return null // torn: recovery cuts it; nothing is based on it
  let base: Omit<LogBase, 'bytes'> | null
  try {
    base = parseBase(line)
  } catch (err) {
    throw Errors.CORRUPT_LOG(`${file}:1: ${(err as Error).message}`, { file, line: 1 })
  }
  return base && { ...base, bytes: nl + 1 }
}

/** The base record of a log file, or null. */
export function readBase(file: string): LogBase | null {
  const fd = openFileSync(file, READ, { what: 'log' })
  try {
    return readBaseFd(fd, file)
  } finally {
    closeSync(fd)
  }
}

/** The refusal of a read from a seq a compaction replaced. */
export function compactedError(file: string, fromSeq: number, base: LogBase, workspace?: string): NoaError {
  return Errors.COMPACTED(
    `${workspace ? `workspace ${workspace}` : file} was compacted: seqs up to ${base.seq} are replaced by snapshot ${base.snapshotId} (its base record); seq ${fromSeq} cannot be read, start at ${base.seq + 1} or from the snapshot`,
    {
      file,
      ...(workspace ? { workspace } : {}),
      seq: fromSeq,
      baseSeq: base.seq,
      snapshotId: base.snapshotId,
    },
  )
}

/**
 * Where a read of entries from `fromSeq` starts, given where a seek by seq landed (`start`, 0
 * when fromSeq is 1): past the base record when the log has one. fromSeq 1 means the log's
 * start, which in a compacted log is its first entry after the base; any other seq the base
 * replaced is refused.
 */
export function entryStart(file: string, fromSeq: number, start: number): { start: number; fromSeq: number } {
  if (start !== 0) return { start, fromSeq }
  const base = readBase(file)
  if (base === null) return { start, fromSeq }
  if (fromSeq > 1 && fromSeq <= base.seq) throw compactedError(file, fromSeq, base)
  return { start: base.bytes, fromSeq: Math.max(fromSeq, base.seq + 1) }
}

/** The same for raw bytes: from seq 1 they start with the base record itself (bytes as on disk). */
export function byteStart(file: string, fromSeq: number, start: number): number {
  if (start !== 0 || fromSeq <= 1) return start
  const base = readBase(file)
  if (base !== null && fromSeq <= base.seq) throw compactedError(file, fromSeq, base)
  return start
}

/**
 * Whether a name in `agent-logs/` is a compaction's temp file (`.<workspace>.log.compact`,
 * engine/compact.ts): a crash before its rename leaves it; the next compaction replaces it, and
 * listings pass over it instead of reporting a stray file.
 */
export function isCompactTemp(name: string): boolean {
  return name.startsWith('.') && name.endsWith('.log.compact')
}
