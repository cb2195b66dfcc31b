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
 *
 * Nothing is written before every dead journal has been checked (journal-trust.ts). One that
 * breaks a rule is untrusted: none of its records is applied, it is moved aside to
 * `journal/quarantine/` with a note of why and of the workspaces it names, a warning names it,
 * and only those workspaces are refused (NOA_JOURNAL) until someone looks at it and removes it.
 * Every other workspace of the root goes on.
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
  renameSync,
  rmSync,
  type Stats,
  writeSync,
} from 'node:fs'
import { basename, dirname, join } from 'node:path'
import { fsyncDir, mkdirDurable, tempPath, writeFileAtomic } from './atomic.js'
import { Errors, type NoaError } from './errors.js'
import { checkDirsBelow, isExactObject, mkdirBelow, openFileSync } from './files.js'
import { REC_DATA, REC_FILE, REC_READ_ONLY } from './journal-format.js'
import {
  BadRecord,
  checkLog,
  type DeadJournal,
  findDeadJournals,
  journalFileProblem,
  type LogPlan,
  type ScannedJournal,
  type SourcedRecord,
  scanJournal,
  Untrusted,
} from './journal-trust.js'
import { withFolderLock } from './locks.js'
import { loadNative } from './native.js'

export { JOURNAL_SUFFIX, JOURNAL_TEMP_SUFFIX, scanJournal, Untrusted } from './journal-trust.js'

export const JOURNAL_DIR = 'journal'
/** Below the journal folder: journals that were not trusted, each with a `.json` note beside it. */
export const QUARANTINE_DIR = 'quarantine'

export function journalDir(root: string): string {
  return join(root, JOURNAL_DIR)
}

export function quarantineDir(root: string): string {
  return join(root, JOURNAL_DIR, QUARANTINE_DIR)
}

/** A workspace's log below the root (logs.ts owns the layout; it imports this file). */
function logOf(root: string, workspace: string): string {
  return join(root, 'agent-logs', `${workspace}.log`)
}

/**
 * Runs fn holding the exclusive flock on the root folder (taken blocking: whoever holds it is
 * opening a workspace or replaying a journal, which is brief).
 */
export function withRootLock<T>(root: string, fn: () => T): T {
  return withFolderLock(root, fn, fdHook)
}

let fdHook: ((fd: number, open: boolean) => void) | null = null

/**
 * An owner worker registers the descriptors it holds, the root lock's included, so that if its
 * thread dies they can be closed (a leaked root lock would block every other open).
 */
export function setFdHook(hook: ((fd: number, open: boolean) => void) | null): void {
  fdHook = hook
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

/** A journal that was not trusted: where it is, why, and the workspaces it names. */
export interface QuarantinedJournal {
  /** Where it is now: in `journal/quarantine/`, or where it was found if it could not be moved. */
  journal: string
  /** Where it was found. */
  found: string
  reason: string
  /** Workspaces its frames name: refused until it is removed. */
  workspaces: string[]
  /** When it was found (ISO 8601). */
  at: string
}

/** What checking the dead journals found, before anything is written. */
export interface JournalCheck {
  dead: DeadJournal[]
  scans: Array<ScannedJournal | null>
  untrusted: Map<number, Untrusted>
  logs: LogPlan[]
  /** Whole files to put back (the last record of a path wins), in journal order. */
  files: SourcedRecord[]
  skipped: Array<{ file: string; reason: string }>
}

/** Untrusted verdicts of journals that could not be moved aside, by file identity: checked once. */
const verdicts = new Map<string, Untrusted>()

function identity(j: DeadJournal): string {
  const s = j.stats
  return `${j.path}\0${s.dev}:${s.ino}:${s.size}:${s.mtimeMs}:${s.ctimeMs}`
}

/** The workspaces a journal names, read as far as it can be (for a journal refused whole). */
function namesOf(j: DeadJournal): string[] {
  if (j.fd < 0 || !j.stats.isFile()) return []
  try {
    const names = new Set<string>()
    for (const r of scanJournal(j.fd, j.stats.size).records) if (r.type === REC_DATA) names.add(r.target)
    return [...names].sort()
  } catch (err) {
    return err instanceof Untrusted ? err.workspaces : []
  }
}

/**
 * Checks every dead journal (file, frames, records, and what the records of each log would do
 * together) and returns what a replay would do. Reads only. The caller holds the root lock.
 */
export function checkJournals(root: string, dead: DeadJournal[]): JournalCheck {
  const scans: Array<ScannedJournal | null> = dead.map(() => null)
  const untrusted = new Map<number, Untrusted>()
  for (const [i, j] of dead.entries()) {
    if (j.temp) continue
    const known = verdicts.get(identity(j))
    if (known) {
      untrusted.set(i, known)
      continue
    }
    const problem = journalFileProblem(j.stats, j.fd >= 0)
    if (problem !== null) {
      untrusted.set(i, new Untrusted(problem, namesOf(j)))
      continue
    }
    try {
      scans[i] = scanJournal(j.fd, j.stats.size)
    } catch (err) {
      if (!(err instanceof Untrusted)) throw err
      untrusted.set(i, err)
    }
  }
  // The records of every log from every trusted journal, checked together; a journal whose
  // record breaks a rule is untrusted as a whole, and the rest is checked again without it.
  for (;;) {
    const skipped: Array<{ file: string; reason: string }> = []
    const byLog = new Map<string, SourcedRecord[]>()
    const files = new Map<string, SourcedRecord>()
    let order = 0
    for (const [i, scan] of scans.entries()) {
      if (scan === null || untrusted.has(i)) continue
      for (const r of scan.records) {
        const sourced = { ...r, journal: i, order: order++ }
        if (r.type === REC_FILE) {
          files.delete(r.target) // the last record of a path wins, in journal order
          files.set(r.target, sourced)
          continue
        }
        const list = byLog.get(r.target)
        if (list) list.push(sourced)
        else byLog.set(r.target, [sourced])
      }
    }
    const logs: LogPlan[] = []
    let refused: BadRecord | null = null
    for (const ws of [...byLog.keys()].sort()) {
      const records = (byLog.get(ws) as SourcedRecord[]).sort(
        (x, y) => x.offset - y.offset || x.order - y.order,
      )
      try {
        const plan = checkLog(logOf(root, ws), ws, records, (file, reason) => skipped.push({ file, reason }))
        if (plan) logs.push(plan)
      } catch (err) {
        if (!(err instanceof BadRecord)) throw err
        refused = err
        break
      }
    }
    if (refused === null) return { dead, scans, untrusted, logs, files: [...files.values()], skipped }
    const names = new Set<string>()
    for (const r of (scans[refused.journal] as ScannedJournal).records)
      if (r.type === REC_DATA) names.add(r.target)
    untrusted.set(refused.journal, new Untrusted(refused.message, [...names].sort()))
  }
}

/**
 * Replays and removes every journal under the root whose owner is gone, and removes the
 * leftovers of allocations that died half-way; an untrusted journal is moved aside instead
 * (see the file's comment). The caller holds the root lock (withRootLock). Journals named in
 * `own` (this process's) are left alone.
 *
 * The records of all dead journals are applied together, file by file in offset order: one
 * file's records can be in several journals (an atomic batch's part is committed by another
 * worker's journal), and within a file the bytes only ever grow at the end.
 */
export function recoverJournalsLocked(root: string, own: ReadonlySet<string> = new Set()): ReplayReport[] {
  const dir = journalDir(root)
  if (checkDirsBelow(root, dir) !== null) return []
  const dead = findDeadJournals(dir, own)
  try {
    if (dead.length === 0) return []
    const check = checkJournals(root, dead)
    quarantine(root, check)
    const trusted = dead.filter((j, i) => !j.temp && !check.untrusted.has(i))
    const reports = trusted.map((j, n) => ({
      journal: j.path,
      rounds: (check.scans[dead.indexOf(j)] as ScannedJournal).rounds,
      records: 0,
      bytes: 0,
      files: [] as string[],
      skipped: n === 0 ? check.skipped : [],
    }))
    // One replay covers them all; the first report carries what it did.
    const total = reports[0] ?? {
      journal: '',
      rounds: 0,
      records: 0,
      bytes: 0,
      files: [],
      skipped: check.skipped,
    }
    applyFiles(root, check.files, total)
    for (const plan of check.logs) applyLog(plan, total)
    let removed = false
    for (const j of dead) {
      if (!j.temp && !trusted.includes(j)) continue
      // A leftover allocation is removed only if it is one this user's writer made.
      if (j.temp && journalFileProblem(j.stats, j.fd >= 0) !== null) continue
      rmSync(j.path, { force: true })
      removed = true
    }
    if (removed) fsyncDir(dir)
    return reports
  } finally {
    for (const j of dead) if (j.fd >= 0) closeSync(j.fd)
  }
}

/**
 * Whether any journal under the root may need a replay (or a move aside): one whose owner is
 * gone, or one that cannot be told apart from such (not a file, not openable). Looked at
 * without the root lock, so allocations under way are left out (findDeadJournals); an owner
 * asks this once it holds the locks of the logs it is opening, and takes the root lock to
 * replay only when the answer is yes.
 */
export function deadJournalsIn(root: string): boolean {
  const dir = journalDir(root)
  if (checkDirsBelow(root, dir) !== null) return false
  const dead = findDeadJournals(dir, new Set(), false)
  for (const j of dead) if (j.fd >= 0) closeSync(j.fd)
  return dead.length > 0
}

/** recoverJournalsLocked under the root lock. */
export function recoverJournals(root: string, own?: ReadonlySet<string>): ReplayReport[] {
  if (checkDirsBelow(root, journalDir(root)) !== null) return []
  return withRootLock(root, () => recoverJournalsLocked(root, own))
}

/**
 * Makes each file hold exactly its record's bytes, durably: a file that already does (the
 * process wrote it, then died) is fdatasynced where it is; any other is written again to a temp
 * file, fdatasynced and renamed into place. Then each folder is fsynced. Every record was
 * checked (a normalized path below the root, outside the engine's folders, an object's name in
 * objects/); an object whose bytes do not hash to its name is written only where nothing is
 * stored under that name. One whose folder cannot be made is skipped and reported.
 */
function applyFiles(root: string, records: readonly SourcedRecord[], report: ReplayReport): void {
  const dirs = new Set<string>()
  for (const r of records) {
    const file = join(root, r.target)
    const dir = dirname(file)
    if (r.target.startsWith('objects/') && !isExactObject(r.target, r.data)) {
      // An encoded object (a delta tree): never written over what is stored under its name.
      if (lstatSync(file, { throwIfNoEntry: false }) !== undefined) {
        report.skipped.push({
          file,
          reason: 'an object is stored under its name already: an encoded one never replaces it',
        })
        continue
      }
    }
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
          `${report.journal}: cannot put back ${file} from its journal record (${(err as Error).message}); the journal is kept`,
          { journal: report.journal, file },
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

/**
 * Writes a checked log's records at their offsets and fdatasyncs it. A log a live writer holds
 * (it replayed these journals before it took the log: the root lock orders the two), or that
 * changed since it was checked, is skipped and reported.
 */
function applyLog(plan: LogPlan, report: ReplayReport): void {
  const native = loadNative()
  const skip = (reason: string): void => {
    report.skipped.push({ file: plan.file, reason })
  }
  let fd: number
  try {
    // Positional writes: never O_APPEND (Linux appends whatever the offset on such a descriptor).
    fd = openFileSync(plan.file, constants.O_RDWR, { what: 'workspace log' })
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOENT') skip('the file no longer exists')
    else if (code === 'NOA_NOT_REGULAR_FILE' || code === 'NOA_NOT_DIRECTORY') skip((err as Error).message)
    else throw err
    return
  }
  try {
    try {
      native.flock(fd, true, true)
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code !== 'EAGAIN' && code !== 'EWOULDBLOCK') throw err
      skip('a live writer holds it (it replayed this journal before it took it)')
      return
    }
    const st = fstatSync(fd, { bigint: true })
    if (st.ino !== plan.ino || Number(st.size) !== plan.size) {
      skip('it changed since it was checked')
      return
    }
    for (const r of plan.records) {
      let off = 0
      while (off < r.data.length) off += writeSync(fd, r.data, off, r.data.length - off, r.offset + off)
      report.records++
      report.bytes += r.data.length
    }
    fdatasyncSync(fd)
    report.files.push(plan.file)
  } finally {
    closeSync(fd)
  }
}

// ---------------------------------------------------------------------------------------------
// Quarantine

/** Warnings already given in this process, by journal: each is named once. */
const warned = new Set<string>()

/** Names an untrusted journal on stderr (a process warning), once per process; `where` says what became of it. */
export function warnUntrusted(q: QuarantinedJournal, where: string): void {
  const key = `${q.found}\0${q.reason}`
  if (warned.has(key)) return
  warned.add(key)
  const n = q.workspaces.length
  const names =
    n > 0 ? `; workspace${n === 1 ? '' : 's'} ${q.workspaces.join(', ')} refused until it is removed` : ''
  process.emitWarning(
    `the commit journal ${q.found} is not trusted and was not replayed: ${q.reason}; ${where}${names}`,
    { code: 'NOA_JOURNAL_QUARANTINED' },
  )
}

/** Moves each untrusted journal of `check` aside, with its note; one that cannot be moved is remembered. */
function quarantine(root: string, check: JournalCheck): void {
  if (check.untrusted.size === 0) return
  const dir = quarantineDir(root)
  let ready = false
  for (const [i, u] of check.untrusted) {
    const j = check.dead[i] as DeadJournal
    const at = new Date().toISOString()
    const q: QuarantinedJournal = {
      journal: j.path,
      found: j.path,
      reason: u.reason,
      workspaces: u.workspaces,
      at,
    }
    let moved = false
    let note: string | null = null
    try {
      if (!ready) {
        for (const created of mkdirBelow(root, dir)) fsyncDir(dirname(created))
        ready = true
      }
      let target = join(dir, basename(j.path))
      for (let n = 1; lstatSync(target, { throwIfNoEntry: false }) !== undefined; n++) {
        target = join(dir, `${basename(j.path)}.${n}`)
      }
      note = `${target}.json`
      writeFileAtomic(note, `${JSON.stringify({ ...q, journal: target }, null, 2)}\n`, {
        base: root,
        what: 'quarantine note',
      })
      renameSync(j.path, target)
      fsyncDir(dirname(j.path))
      q.journal = target
      moved = true
    } catch {
      if (note !== null) rmSync(note, { force: true })
      // Not ours to move (a folder others own, say): it stays, and is judged the same way next time.
      verdicts.set(identity(j), u)
      unmoved.set(j.path, q)
    }
    warnUntrusted(q, moved ? `moved aside to ${q.journal}` : 'left where it is (it could not be moved)')
  }
}

/** Untrusted journals that could not be moved, by path (this process's view). */
const unmoved = new Map<string, QuarantinedJournal>()

/** Notes read from the quarantine folder, by name, with the stats they were read at. */
const notes = new Map<string, { key: string; note: QuarantinedJournal | null }>()

const MAX_NOTE = 1 << 20

function readNote(path: string, st: Stats): QuarantinedJournal | null {
  if (!st.isFile() || st.size > MAX_NOTE) return null
  try {
    const fd = openFileSync(path, constants.O_RDONLY, { what: 'quarantine note' })
    let text: string
    try {
      text = readFileSync(fd, 'utf8')
    } finally {
      closeSync(fd)
    }
    const v = JSON.parse(text) as Partial<QuarantinedJournal>
    if (typeof v.journal !== 'string' || typeof v.reason !== 'string' || !Array.isArray(v.workspaces))
      return null
    return {
      journal: v.journal,
      found: typeof v.found === 'string' ? v.found : v.journal,
      reason: v.reason,
      workspaces: v.workspaces.filter((w): w is string => typeof w === 'string'),
      at: typeof v.at === 'string' ? v.at : '',
    }
  } catch {
    return null
  }
}

/**
 * The journals of the root that are not trusted: those in the quarantine folder whose journal
 * is still there, and those this process found and could not move.
 */
export function quarantinedJournals(root: string): QuarantinedJournal[] {
  const out: QuarantinedJournal[] = []
  const dir = quarantineDir(root)
  let names: string[] = []
  try {
    if (checkDirsBelow(root, dir) === null) names = readdirSync(dir)
  } catch {
    names = []
  }
  const present = new Set(names)
  for (const name of names.sort()) {
    if (!name.endsWith('.json') || !present.has(name.slice(0, -'.json'.length))) continue
    const path = join(dir, name)
    const st = lstatSync(path, { throwIfNoEntry: false })
    if (st === undefined) continue
    const key = `${st.ino}:${st.size}:${st.mtimeMs}`
    let cached = notes.get(name)
    if (cached?.key !== key) {
      cached = { key, note: readNote(path, st) }
      notes.set(name, cached)
    }
    if (cached.note) out.push({ ...cached.note, journal: join(dir, name.slice(0, -'.json'.length)) })
  }
  for (const [path, q] of unmoved) {
    if (lstatSync(path, { throwIfNoEntry: false }) === undefined) unmoved.delete(path)
    else out.push(q)
  }
  return out
}

/**
 * Gives each quarantined journal that this user may trust as a file (its own, writable by no
 * one else: a journal another user's process left in a shared root, quarantined by someone
 * else) back to replay: it is moved back into the journal folder, where the next replay checks
 * it again, record by record (and quarantines it again if a record breaks a rule). `noa recover`
 * calls this first. Returns the journals given back.
 */
export function retryQuarantined(root: string): string[] {
  const back: string[] = []
  if (checkDirsBelow(root, quarantineDir(root)) !== null) return back
  withRootLock(root, () => {
    for (const q of quarantinedJournals(root)) {
      if (q.journal === q.found) continue
      const st = lstatSync(q.journal, { throwIfNoEntry: false })
      if (st === undefined || journalFileProblem(st, true) !== null) continue
      const target = join(journalDir(root), basename(q.found))
      if (lstatSync(target, { throwIfNoEntry: false }) !== undefined) continue
      renameSync(q.journal, target)
      rmSync(`${q.journal}.json`, { force: true })
      fsyncDir(journalDir(root))
      fsyncDir(quarantineDir(root))
      back.push(target)
    }
  })
  return back
}

/** NOA_JOURNAL when an untrusted journal names `workspace`: it is not opened for writing. */
export function refuseIfQuarantined(root: string, workspace: string): void {
  const q = quarantinedJournals(root).find((j) => j.workspaces.includes(workspace))
  if (q) throw quarantinedError(workspace, q)
}

export function quarantinedError(workspace: string, q: QuarantinedJournal): NoaError {
  return Errors.JOURNAL(
    `workspace ${workspace} is refused: the commit journal ${q.found} names it and is not trusted (${q.reason}); nothing of it was applied. It is kept at ${q.journal}: look at it, then remove it${q.journal === q.found ? '' : ' and its .json note'} to use the workspace again`,
    { workspace, journal: q.journal, reason: q.reason },
  )
}
