/**
 * What a dead commit journal may do to a root, decided before it does anything. A root is often
 * a folder others can write into, and a journal's records say "write these bytes there": replay
 * trusts nothing beyond what noa's own writer could have written.
 *
 * - The file: a regular file (never followed through a symlink), owned by the user running noa,
 *   writable by no one else, with one link, at most MAX_JOURNAL_SIZE bytes and exactly the size
 *   its header says. Read frame by frame, never whole: a huge or sparse file is refused in
 *   bounded time and memory.
 * - Its frames: a frame that fails its checksum, journal id or lsn ends the valid prefix (a torn
 *   write, an earlier cycle); a valid one holding what no writer of noa makes (journal-format's
 *   BadFrame) makes the journal untrusted.
 * - Its records: a workspace's log by its name (never a path); a whole file by a path an append
 *   may write beside its entries (files.ts: normalized, below the root, outside the engine's
 *   own folders; under `objects/` only an object's name). An object whose bytes do not hash to
 *   its name (a tree stored as a delta) never replaces a file stored under that name
 *   (journal-recovery.ts); the store checks every object it reads.
 * - What they would write: the records of one log, from every dead journal, in offset order,
 *   each starting at a line start no further than the log's end, whole entry lines that pass the
 *   engine's own checks, seq following the line before, ts never going back; a record may only rewrite
 *   bytes the log already holds with the same bytes (a byte the log holds as zero is a hole a
 *   power cut left, and is filled). So no acknowledged byte is ever changed.
 *
 * A journal that breaks a rule is untrusted as a whole: none of its records is applied, and the
 * workspaces it names are reported with it (journal-recovery.ts quarantines it and refuses them).
 */
import { closeSync, constants, fstatSync, lstatSync, readdirSync, type Stats } from 'node:fs'
import { join } from 'node:path'
import { isWorkspaceName, parseCounters, parseEntry } from './entry.js'
import { filePathProblem, openFileSync } from './files.js'
import {
  BadFrame,
  DATA_START,
  decodeFrame,
  FLAG_END,
  FLAG_WRAP,
  FRAME_HEADER,
  type JournalHeader,
  type JournalRecord,
  MAX_JOURNAL_SIZE,
  newestHeader,
  REC_DATA,
  REC_FILE,
  SECTOR,
} from './journal-format.js'
import { loadNative } from './native.js'
import { findLastNewline, readAt } from './reader.js'

export const JOURNAL_SUFFIX = '.jnl'
/** A journal being allocated: renamed to its `.jnl` name only once it is locked and whole. */
export const JOURNAL_TEMP_SUFFIX = '.jnl.tmp'

/** A journal found with no live owner: its descriptor (read-only, flocked) and what it is. */
export interface DeadJournal {
  path: string
  fd: number
  temp: boolean
  stats: Stats
}

/**
 * The journals in `dir` whose owner is gone, each opened read-only without following a link and
 * flocked (a live owner holds its journal's flock). The caller holds the root lock and closes
 * the descriptors. Journals named in `own` are left alone; so are allocations under way or left
 * half-done (`.jnl.tmp`) unless `temps`: a writer creates and locks one under the root lock, so
 * only a caller holding it may take an unlocked one for a dead one.
 */
export function findDeadJournals(dir: string, own: ReadonlySet<string>, temps = true): DeadJournal[] {
  const native = loadNative()
  const dead: DeadJournal[] = []
  let names: string[]
  try {
    names = readdirSync(dir).sort()
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return []
    throw err
  }
  try {
    for (const name of names) {
      const path = join(dir, name)
      const temp = name.endsWith(JOURNAL_TEMP_SUFFIX)
      if ((!temp && !name.endsWith(JOURNAL_SUFFIX)) || (temp && !temps) || own.has(path)) continue
      // Gone since the listing (a journal being allocated is renamed into place): nothing to do.
      const st = lstatSync(path, { throwIfNoEntry: false })
      if (st === undefined) continue
      if (!st.isFile()) {
        // A symlink, FIFO or folder where a journal should be: no owner ever made it. It has no
        // descriptor; reported untrusted as it is.
        dead.push({ path, fd: -1, temp, stats: st })
        continue
      }
      let fd: number
      try {
        fd = openFileSync(path, constants.O_RDONLY, { what: 'commit journal' })
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue
        if ((err as NodeJS.ErrnoException).code === 'EACCES') {
          dead.push({ path, fd: -1, temp, stats: st })
          continue
        }
        throw err
      }
      try {
        native.flock(fd, true, true)
      } catch (err) {
        closeSync(fd)
        const code = (err as NodeJS.ErrnoException).code
        if (code === 'EAGAIN' || code === 'EWOULDBLOCK') continue // its owner is alive
        throw err
      }
      dead.push({ path, fd, temp, stats: fstatSync(fd) })
    }
  } catch (err) {
    for (const j of dead) if (j.fd >= 0) closeSync(j.fd)
    throw err
  }
  return dead
}

/** Why a journal file is not one noa's writer made for this user; null when it may be. */
export function journalFileProblem(st: Stats, hasFd: boolean): string | null {
  if (!st.isFile()) return `it is not a regular file (${st.isSymbolicLink() ? 'a symlink' : 'not a file'})`
  if (!hasFd) return 'it cannot be opened'
  const euid = process.geteuid?.()
  if (euid !== undefined && st.uid !== euid) {
    return `it is owned by uid ${st.uid}, not by the user running noa (uid ${euid})`
  }
  if ((st.mode & 0o022) !== 0) {
    return `it is writable by ${st.mode & 0o020 ? 'its group' : 'others'} (mode ${(st.mode & 0o777).toString(8).padStart(4, '0')})`
  }
  if (st.nlink !== 1) return `it has ${st.nlink} hard links (a journal has one)`
  if (st.size > MAX_JOURNAL_SIZE) {
    return `it is ${st.size} bytes, larger than any journal noa writes (${MAX_JOURNAL_SIZE})`
  }
  return null
}

/** A record and where it came from (which dead journal, and its place in it). */
export interface SourcedRecord extends JournalRecord {
  journal: number
  order: number
}

export interface ScannedJournal {
  header: JournalHeader
  /** Records of whole rounds (every frame of the round valid, the last one flagged END), in order. */
  records: JournalRecord[]
  rounds: number
  /** Where the valid prefix ends: the next frame's lsn and offset. */
  next: { lsn: number; offset: number }
}

/** A journal that is not to be trusted, why, and the workspaces its frames name. */
export class Untrusted extends Error {
  constructor(
    readonly reason: string,
    readonly workspaces: string[] = [],
  ) {
    super(reason)
  }
}

/**
 * Reads a journal's valid prefix from its header's tail, a frame at a time (memory: one frame
 * and the records of the prefix). Throws Untrusted for a journal noa's writer cannot have
 * written (no valid header, a size its header does not say, a valid frame of impossible
 * contents, a record naming what noa never journals).
 */
export function scanJournal(fd: number, size = fstatSync(fd).size): ScannedJournal {
  if (size < DATA_START) throw new Untrusted(`it is ${size} bytes, too short to hold a header`)
  if (size > MAX_JOURNAL_SIZE) {
    throw new Untrusted(`it is ${size} bytes, larger than any journal noa writes (${MAX_JOURNAL_SIZE})`)
  }
  const slots = Buffer.alloc(2 * SECTOR)
  readAt(fd, slots, 0)
  const header = newestHeader(slots.subarray(0, SECTOR), slots.subarray(SECTOR))
  if (!header) throw new Untrusted('it has no valid header')
  if (header.size !== size) {
    throw new Untrusted(`its header says ${header.size} bytes, but the file has ${size}`)
  }
  const names = new Set<string>()
  const records: JournalRecord[] = []
  let pending: JournalRecord[] = []
  let rounds = 0
  let lsn = header.tailLsn
  let offset = header.tailOffset
  let scanned = 0
  let next = { lsn, offset }
  const head = Buffer.alloc(FRAME_HEADER)
  try {
    while (scanned < size) {
      if (offset >= size) offset = DATA_START
      if (offset + FRAME_HEADER > size) break
      if (readAt(fd, head, offset) < FRAME_HEADER) break
      const length = head.readUInt32LE(8)
      if (length < SECTOR || length % SECTOR !== 0 || offset + length > size) break
      const buf = Buffer.allocUnsafe(length)
      if (readAt(fd, buf, offset) < length) break
      const frame = decodeFrame(buf, header.journalId, lsn)
      if (!frame) break
      scanned += frame.length
      lsn++
      if (frame.flags & FLAG_WRAP) {
        offset = DATA_START
        continue
      }
      offset += frame.length
      for (const r of frame.records) {
        if (r.type === REC_DATA && isWorkspaceName(r.target)) names.add(r.target)
        pending.push(r)
      }
      if (frame.flags & FLAG_END) {
        for (const r of pending) records.push(r)
        pending = []
        rounds++
        next = { lsn, offset: offset >= size ? DATA_START : offset }
      }
    }
    for (const r of records) {
      const problem = recordProblem(r)
      if (problem !== null) throw new Untrusted(problem)
    }
  } catch (err) {
    if (err instanceof BadFrame) throw new Untrusted(err.message, [...names].sort())
    if (err instanceof Untrusted) throw new Untrusted(err.reason, [...names].sort())
    throw err
  }
  return { header, records, rounds, next }
}

/** Why noa's writer cannot have made this record; null when it can have. */
export function recordProblem(r: JournalRecord): string | null {
  if (r.type === REC_DATA) {
    if (!isWorkspaceName(r.target)) {
      return `a record names ${JSON.stringify(r.target)}, which is not a workspace name (noa journals only workspace logs, by name)`
    }
    return null
  }
  if (r.type !== REC_FILE) return `a record has unknown type ${r.type}`
  const problem = filePathProblem(r.target)
  if (problem !== null) return `a whole-file record names ${JSON.stringify(r.target)}, which ${problem}`
  return null
}

/** One workspace log's records from the dead journals that would be applied, once checked. */
export interface LogPlan {
  workspace: string
  file: string
  ino: bigint
  /** The log's size when it was checked (the apply step refuses a log that changed since). */
  size: number
  records: SourcedRecord[]
}

/** A record refused, by the journal it came from. */
export class BadRecord extends Error {
  constructor(
    readonly journal: number,
    reason: string,
  ) {
    super(reason)
  }
}

const NL = 0x0a
interface Counters {
  seq: number
  ts: number
}
/** What the first entry of a log follows. */
const START: Counters = { seq: 0, ts: -1 }

/**
 * Checks what one log's records would do (see the file's comment). `records` are this log's,
 * sorted by offset then journal order. Returns the plan (records with another inode, or whose
 * file is gone, are left out and reported through `skip`), or null when nothing applies.
 * Throws BadRecord naming the journal of the first record that breaks a rule.
 */
export function checkLog(
  file: string,
  workspace: string,
  records: readonly SourcedRecord[],
  skip: (file: string, reason: string) => void,
): LogPlan | null {
  let fd: number
  try {
    fd = openFileSync(file, constants.O_RDONLY, { what: 'workspace log' })
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOENT') {
      skip(file, 'the file no longer exists')
      return null
    }
    if (code === 'NOA_NOT_REGULAR_FILE' || code === 'NOA_NOT_DIRECTORY') {
      // Something planted where the log was: the workspace itself reports it when it is used.
      skip(file, (err as Error).message)
      return null
    }
    throw err
  }
  try {
    const st = fstatSync(fd, { bigint: true })
    const size = Number(st.size)
    const mine = records.filter((r) => r.ino === st.ino)
    if (mine.length < records.length) skip(file, 'the file was replaced since the record was made')
    if (mine.length === 0) return null
    const kept: SourcedRecord[] = []
    let covered = -1
    let prev: Counters | null = null
    for (const r of mine) {
      const end = r.offset + r.data.length
      const bad = (why: string) => new BadRecord(r.journal, `a record for ${file} at byte ${r.offset} ${why}`)
      const last = kept[kept.length - 1]
      if (last !== undefined && r.offset < covered) {
        // The same bytes journaled twice (by two journals) are one record; any other overlap is not noa's.
        if (r.offset === last.offset && r.data.equals(last.data)) continue
        throw bad(`overlaps the record before it (bytes ${last.offset}-${covered - 1})`)
      }
      if (r.data.length === 0 || r.data[r.data.length - 1] !== NL) throw bad('does not end with a whole line')
      if (r.offset !== covered) {
        if (r.offset > size) throw bad(`starts beyond the log's end (${size} bytes)`)
        // The first record, or one after bytes the log holds already (a commit made straight
        // to the file): it starts where a line does, after the line whose counters it follows.
        if (r.offset > 0 && !byteIs(fd, r.offset - 1, NL)) throw bad('does not start at the start of a line')
        prev = r.offset === 0 ? START : countersBefore(fd, r.offset)
      }
      const held = Math.min(end, size) - r.offset
      if (held > 0) {
        const existing = Buffer.allocUnsafe(held)
        readAt(fd, existing, r.offset)
        for (let i = 0; i < held; i++) {
          const b = existing[i] as number
          if (b !== 0 && b !== r.data[i]) {
            throw bad(
              `would change byte ${r.offset + i} of the log, which it already holds (an acknowledged entry)`,
            )
          }
        }
      }
      const why = linesProblem(r.data, prev)
      if (why !== null) throw bad(why)
      prev = lastCounters(r.data)
      kept.push(r)
      covered = end
    }
    return { workspace, file, ino: st.ino, size, records: kept }
  } finally {
    closeSync(fd)
  }
}

function byteIs(fd: number, pos: number, value: number): boolean {
  const one = Buffer.allocUnsafe(1)
  return readAt(fd, one, pos) === 1 && one[0] === value
}

/** seq and ts of the line that ends at `at` - 1; null when it cannot be read as an entry. */
function countersBefore(fd: number, at: number): Counters | null {
  const start = findLastNewline(fd, at - 1) + 1
  const buf = Buffer.allocUnsafe(at - 1 - start)
  readAt(fd, buf, start)
  try {
    return parseCounters(buf.toString('utf8'))
  } catch {
    return null
  }
}

/**
 * Why `data` is not whole entry lines noa could have appended after an entry with counters
 * `prev` (null: unknown, the line before cannot be read): each line an entry that passes every
 * check, seq one above the one before, ts not below it (what verify holds a log to). Null when it is.
 */
function linesProblem(data: Buffer, prev: Counters | null): string | null {
  let at = 0
  let last = prev
  let n = 0
  while (at < data.length) {
    const nl = data.indexOf(NL, at)
    n++
    let entry: Counters
    try {
      entry = parseEntry(data.toString('utf8', at, nl))
    } catch (err) {
      return `holds a line (${n}) that is not an entry: ${(err as Error).message}`
    }
    if (last !== null && entry.seq !== last.seq + 1) {
      return `holds seq ${entry.seq} (line ${n}) after seq ${last.seq}: noa appends seqs one after another`
    }
    if (last !== null && entry.ts < last.ts) {
      return `holds ts ${entry.ts} (line ${n}) after ts ${last.ts}: ts never goes back`
    }
    last = entry
    at = nl + 1
  }
  return null
}

function lastCounters(data: Buffer): Counters {
  const end = data.length - 1
  const start = data.lastIndexOf(NL, end - 1) + 1
  return parseCounters(data.toString('utf8', start, end))
}
