/**
 * Replaying commit journals whose owner is gone. A live owner holds an exclusive flock on its
 * journal for as long as it runs, so a journal that can be locked belongs to a process that
 * died: every record of its valid prefix is written again at its offset in its file (the same
 * bytes: idempotent), the files are fdatasynced, and the journal is removed.
 *
 * Who may replay, and when: opening a workspace, replaying dead journals and creating a journal
 * all happen under an exclusive flock on the root folder itself. A dead process's journal can
 * only hold unreplayed records for files it had locked until it died (an owner makes a file's
 * journaled bytes durable in the file before it releases it); so whoever next opens any of them
 * replays that journal first, and no live owner can be writing a file that a replay touches.
 */
import {
  closeSync,
  constants,
  fchmodSync,
  fdatasyncSync,
  fstatSync,
  lstatSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  writeSync,
} from 'node:fs'
import { dirname, join } from 'node:path'
import { fsyncDir, mkdirDurable, tempPath } from './atomic.js'
import { isWorkspaceName } from './entry.js'
import { Errors } from './errors.js'
import { checkDirsBelow, filePathProblem, openFileSync } from './files.js'
import {
  DATA_START,
  decodeFrame,
  FLAG_END,
  FLAG_WRAP,
  FRAME_HEADER,
  type JournalHeader,
  type JournalRecord,
  newestHeader,
  REC_FILE,
  REC_READ_ONLY,
  SECTOR,
} from './journal-format.js'
import { loadNative } from './native.js'

export const JOURNAL_DIR = 'journal'
export const JOURNAL_SUFFIX = '.jnl'
/** A journal being allocated: renamed to its `.jnl` name only once it is locked and whole. */
export const JOURNAL_TEMP_SUFFIX = '.jnl.tmp'

export function journalDir(root: string): string {
  return join(root, JOURNAL_DIR)
}

/** The file a record names: a workspace's log, or an absolute path (appendToFile). */
export function recordFile(root: string, target: string): string | null {
  if (target.startsWith('/')) return target
  return isWorkspaceName(target) ? join(root, 'agent-logs', `${target}.log`) : null
}

/**
 * Runs fn holding the exclusive flock on the root folder (taken blocking: whoever holds it is
 * opening a workspace or replaying a journal, which is brief).
 */
export function withRootLock<T>(root: string, fn: () => T): T {
  const native = loadNative()
  const fd = openSync(root, constants.O_RDONLY | constants.O_DIRECTORY)
  fdHook?.(fd, true)
  try {
    native.flock(fd, true, false)
    return fn()
  } finally {
    fdHook?.(fd, false)
    closeSync(fd) // releases the lock
  }
}

let fdHook: ((fd: number, open: boolean) => void) | null = null

/**
 * An owner worker registers the descriptors it holds, the root lock's included, so that if its
 * thread dies they can be closed (a leaked root lock would block every other open).
 */
export function setFdHook(hook: ((fd: number, open: boolean) => void) | null): void {
  fdHook = hook
}

export interface ScannedJournal {
  header: JournalHeader
  /** Records of whole rounds (every frame of the round valid, the last one flagged END), in order. */
  records: JournalRecord[]
  rounds: number
  /** Where the valid prefix ends: the next frame's lsn and offset. */
  next: { lsn: number; offset: number }
}

function readAll(fd: number, size: number): Buffer {
  const buf = Buffer.allocUnsafe(size)
  let got = 0
  while (got < size) {
    const n = readSync(fd, buf, got, size - got, got)
    if (n === 0) break
    got += n
  }
  return got === size ? buf : buf.subarray(0, got)
}

/** Reads a journal's valid prefix from its header's tail. Null when it has no valid header. */
export function scanJournal(fd: number): ScannedJournal | null {
  const size = fstatSync(fd).size
  if (size < DATA_START) return null
  const buf = readAll(fd, size)
  const header = newestHeader(buf.subarray(0, SECTOR), buf.subarray(SECTOR, 2 * SECTOR))
  if (!header) return null
  const end = Math.min(header.size, buf.length)
  const records: JournalRecord[] = []
  let pending: JournalRecord[] = []
  let rounds = 0
  let lsn = header.tailLsn
  let offset = header.tailOffset
  let scanned = 0
  let next = { lsn, offset }
  while (scanned < end) {
    if (offset >= end) offset = DATA_START
    if (offset + FRAME_HEADER > end) break
    const frame = decodeFrame(buf.subarray(offset, end), header.journalId, lsn)
    if (!frame) break
    scanned += frame.length
    lsn++
    if (frame.flags & FLAG_WRAP) {
      offset = DATA_START
      continue
    }
    offset += frame.length
    for (const r of frame.records) pending.push(r)
    if (frame.flags & FLAG_END) {
      for (const r of pending) records.push(r)
      pending = []
      rounds++
      next = { lsn, offset: offset >= end ? DATA_START : offset }
    }
  }
  return { header, records, rounds, next }
}

export interface ReplayReport {
  journal: string
  rounds: number
  records: number
  bytes: number
  /** Files written again and fdatasynced. */
  files: string[]
  /** Records not replayed, and why (the file is gone, or was replaced since). */
  skipped: Array<{ file: string; reason: string }>
}

interface Target {
  fd: number
  file: string
}

/**
 * Writes every record of a scanned journal again at its offset in its file and fdatasyncs the
 * files. Records whose file is gone, was replaced since (another inode) or is held by a live
 * writer are skipped and reported. A record that would leave a hole is an error: the journal is
 * kept, nothing is guessed.
 */
export function applyRecords(
  root: string,
  journal: string,
  scanned: Pick<ScannedJournal, 'records' | 'rounds'>,
  only?: (target: string) => boolean,
): ReplayReport {
  const native = loadNative()
  const report: ReplayReport = {
    journal,
    rounds: scanned.rounds,
    records: 0,
    bytes: 0,
    files: [],
    skipped: [],
  }
  const open = new Map<string, Target | null>()
  // Whole files first: the entries replayed below may name them. The last record of a path wins.
  const files = new Map<string, JournalRecord>()
  for (const r of scanned.records)
    if (r.type === REC_FILE && (!only || only(r.target))) files.set(r.target, r)
  if (files.size > 0) applyFileRecords(root, journal, [...files.values()], report)
  try {
    for (const r of scanned.records) {
      if (r.type === REC_FILE || (only && !only(r.target))) continue
      let t = open.get(r.target)
      if (t === undefined) {
        t = openTarget(root, journal, r, report, native)
        open.set(r.target, t)
      }
      if (t === null) continue
      const size = fstatSync(t.fd).size
      if (r.offset > size) {
        throw Errors.JOURNAL(
          `${journal}: a record for ${t.file} starts at byte ${r.offset}, beyond its end (${size}); the journal is kept for inspection`,
          { file: t.file, journal, offset: r.offset },
        )
      }
      let off = 0
      while (off < r.data.length) off += writeSync(t.fd, r.data, off, r.data.length - off, r.offset + off)
      report.records++
      report.bytes += r.data.length
    }
    for (const t of open.values()) {
      if (t === null) continue
      fdatasyncSync(t.fd)
      report.files.push(t.file)
    }
  } finally {
    for (const t of open.values()) if (t) closeSync(t.fd)
  }
  return report
}

/**
 * Makes each file hold exactly its record's bytes, durably: a file that already does (the
 * process wrote it, then died) is fdatasynced where it is; any other is written again to a temp
 * file, fdatasynced and renamed into place. Then each folder is fsynced. A record whose path
 * would leave the root, or lead through a symlink, is skipped and reported.
 */
function applyFileRecords(
  root: string,
  journal: string,
  records: JournalRecord[],
  report: ReplayReport,
): void {
  const dirs = new Set<string>()
  for (const r of records) {
    const problem = filePathProblem(r.target)
    if (problem !== null) {
      report.skipped.push({ file: r.target, reason: `not a path for a file beside entries: it ${problem}` })
      continue
    }
    const file = join(root, r.target)
    const dir = dirname(file)
    try {
      mkdirDurable(root, dir)
    } catch (err) {
      report.skipped.push({ file, reason: `its folder cannot be made: ${(err as Error).message}` })
      continue
    }
    if (!sameBytes(file, r.data)) {
      const temp = tempPath(dir, '.tmp-')
      const fd = openSync(
        temp,
        constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
        0o666,
      )
      try {
        let off = 0
        while (off < r.data.length) off += writeSync(fd, r.data, off, r.data.length - off)
        if (r.flags & REC_READ_ONLY) fchmodSync(fd, fstatSync(fd).mode & 0o7777 & ~0o222)
        fdatasyncSync(fd)
      } catch (err) {
        closeSync(fd)
        rmSync(temp, { force: true })
        throw err
      }
      closeSync(fd)
      try {
        renameSync(temp, file)
      } catch (err) {
        rmSync(temp, { force: true })
        throw Errors.JOURNAL(
          `${journal}: cannot put back ${file} from its journal record (${(err as Error).message}); the journal is kept`,
          { journal, file },
        )
      }
    }
    dirs.add(dir)
    report.records++
    report.bytes += r.data.length
    report.files.push(file)
  }
  for (const d of dirs) fsyncDir(d)
}

/** Whether `file` is a regular file (not followed if a symlink) holding exactly `data`; fdatasynced if so. */
function sameBytes(file: string, data: Buffer): boolean {
  const st = lstatSync(file, { throwIfNoEntry: false })
  if (!st?.isFile() || st.size !== data.length) return false
  let fd: number
  try {
    fd = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK)
  } catch {
    return false
  }
  try {
    if (!readFileSync(fd).equals(data)) return false
    fdatasyncSync(fd)
    return true
  } finally {
    closeSync(fd)
  }
}

function openTarget(
  root: string,
  _journal: string,
  r: JournalRecord,
  report: ReplayReport,
  native: ReturnType<typeof loadNative>,
): Target | null {
  const file = recordFile(root, r.target)
  if (file === null) {
    report.skipped.push({ file: r.target, reason: 'not a workspace name or an absolute path' })
    return null
  }
  let fd: number
  try {
    // Positional writes: never O_APPEND (Linux appends whatever the offset on such a descriptor).
    fd = openFileSync(file, constants.O_RDWR, { what: 'journaled file' })
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
      report.skipped.push({ file, reason: 'the file no longer exists' })
      return null
    }
    throw err
  }
  try {
    native.flock(fd, true, true)
  } catch (err) {
    closeSync(fd)
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'EAGAIN' || code === 'EWOULDBLOCK') {
      // A live writer took the file after this journal's owner died, so it replayed this
      // journal before it opened the file (the root lock orders the two): nothing is missing.
      report.skipped.push({
        file,
        reason: 'a live writer holds it (it replayed this journal before it took it)',
      })
      return null
    }
    throw err
  }
  if (fstatSync(fd, { bigint: true }).ino !== r.ino) {
    closeSync(fd)
    report.skipped.push({ file, reason: 'the file was replaced since the record was made' })
    return null
  }
  return { fd, file }
}

/**
 * Replays and removes every journal under the root whose owner is gone, and removes the
 * leftovers of allocations that died half-way. The caller holds the root lock (withRootLock).
 * Journals named in `own` (this process's) are left alone.
 *
 * The records of all dead journals are applied together, file by file in offset order: one
 * file's records can be in several journals (an atomic batch's part is committed by another
 * worker's journal), and within a file the bytes only ever grow at the end.
 */
export function recoverJournalsLocked(root: string, own: ReadonlySet<string> = new Set()): ReplayReport[] {
  const dir = journalDir(root)
  if (checkDirsBelow(root, dir) !== null) return []
  const native = loadNative()
  const dead: Array<{ path: string; fd: number; temp: boolean }> = []
  try {
    for (const name of readdirSync(dir).sort()) {
      const path = join(dir, name)
      const temp = name.endsWith(JOURNAL_TEMP_SUFFIX)
      if ((!temp && !name.endsWith(JOURNAL_SUFFIX)) || own.has(path)) continue
      // Gone since the listing (a journal being allocated is renamed into place): nothing to do.
      const st = lstatSync(path, { throwIfNoEntry: false })
      if (!st?.isFile()) continue
      let fd: number
      try {
        fd = openFileSync(path, constants.O_RDWR, { what: 'commit journal' })
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue
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
      dead.push({ path, fd, temp })
    }
    if (dead.length === 0) return []
    const records: Array<JournalRecord & { order: number }> = []
    const reports: ReplayReport[] = []
    let order = 0
    for (const j of dead) {
      if (j.temp) continue
      const scanned = scanJournal(j.fd)
      if (!scanned) {
        throw Errors.JOURNAL(
          `${j.path} has no valid header: it cannot be replayed, and is kept for inspection`,
          {
            journal: j.path,
          },
        )
      }
      for (const r of scanned.records) records.push({ ...r, order: order++ })
      reports.push({ journal: j.path, rounds: scanned.rounds, records: 0, bytes: 0, files: [], skipped: [] })
    }
    // Whole files keep journal order (the stable sort leaves equal targets in it).
    records.sort((x, y) =>
      x.target < y.target ? -1 : x.target > y.target ? 1 : x.offset - y.offset || x.order - y.order,
    )
    const applied = applyRecords(root, reports.map((r) => r.journal).join(', '), { records, rounds: 0 })
    const total = reports[0]
    if (total) {
      // One replay covered them all; the first report carries what it did.
      total.records = applied.records
      total.bytes = applied.bytes
      total.files = applied.files
      total.skipped = applied.skipped
    }
    for (const j of dead) rmSync(j.path)
    fsyncDir(dir)
    return reports
  } finally {
    for (const j of dead) closeSync(j.fd)
  }
}

/** recoverJournalsLocked under the root lock. */
export function recoverJournals(root: string, own?: ReadonlySet<string>): ReplayReport[] {
  if (checkDirsBelow(root, journalDir(root)) !== null) return []
  return withRootLock(root, () => recoverJournalsLocked(root, own))
}

/**
 * For readers: replays dead journals if there are any and the root can be written; a read-only
 * root is read as it is (a reader cannot repair it, and the logs hold every entry that was
 * acknowledged before a process crash; only a power loss can leave entries in a journal alone).
 */
export function recoverJournalsForRead(root: string): void {
  try {
    if (checkDirsBelow(root, journalDir(root)) !== null) return
    recoverJournals(root)
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'EROFS' || code === 'EACCES' || code === 'EPERM') return
    throw err
  }
}
