/**
 * Reading a root whose dead commit journals have not been replayed yet, without writing it. A
 * command that only reads (`log`, `workspaces`, `verify`, `tree`, ...) never changes the root:
 * the replay is left to the next writer or `noa recover`. Most of the time a dead journal holds
 * nothing the logs lack (a process that was killed had appended every acknowledged round to its
 * logs; only a power cut can leave rounds in a journal alone). When it does, the reader reads
 * through it: the journals are checked exactly as a replay would check them (journal-trust.ts),
 * and each log the replay would change is read from a private copy with the records applied (an
 * unlinked temp file outside the root; files.ts sends the log's read-only opens there). Whole
 * files the replay would put back are kept in memory for the object store to find.
 *
 * Untrusted journals are named once (a warning) and never read through; `untrustedJournals`
 * lists them with those already quarantined, for `verify` to fail on.
 */
import { closeSync, constants, lstatSync, openSync, unlinkSync, writeSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { checkDirsBelow, isExactObject, openFileSync, setReadView } from './files.js'
import {
  checkJournals,
  type JournalCheck,
  journalDir,
  type QuarantinedJournal,
  quarantinedJournals,
  warnUntrusted,
  withRootLock,
} from './journal-recovery.js'
import { type DeadJournal, findDeadJournals } from './journal-trust.js'
import { readAt } from './reader.js'

interface RootView {
  /** The dead journals the view was made from (path and stats): the same ones, the same view. */
  key: string
  /** Read views' descriptors, by log path. */
  logs: Map<string, number>
  /** Whole files the replay would put back, by path relative to the root. */
  files: Map<string, Buffer>
  untrusted: QuarantinedJournal[]
}

const views = new Map<string, RootView>()

function keyOf(dead: readonly DeadJournal[]): string {
  return dead.map((j) => `${j.path}:${j.stats.ino}:${j.stats.size}:${j.stats.mtimeMs}`).join('|')
}

function drop(root: string): void {
  const v = views.get(root)
  if (!v) return
  for (const [file, fd] of v.logs) {
    setReadView(file, null)
    closeSync(fd)
  }
  views.delete(root)
}

/**
 * Prepares reads of `root`: reads through its dead journals (see the file's comment). Writes
 * nothing. A root that cannot be locked (not readable) is read as it is.
 */
export function readThroughJournals(root: string): void {
  const r = resolve(root)
  try {
    if (checkDirsBelow(r, journalDir(r)) !== null) drop(r)
    else withRootLock(r, () => refresh(r))
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'EROFS' || code === 'EACCES' || code === 'EPERM' || code === 'ENOENT') return
    throw err
  }
}

function refresh(root: string): void {
  const dead = findDeadJournals(journalDir(root), new Set())
  try {
    const key = keyOf(dead)
    if (views.get(root)?.key === key) return
    drop(root)
    const view: RootView = { key, logs: new Map(), files: new Map(), untrusted: [] }
    views.set(root, view)
    if (dead.length === 0) return
    const check = checkJournals(root, dead)
    for (const [i, u] of check.untrusted) {
      const j = dead[i] as DeadJournal
      const q = { journal: j.path, found: j.path, reason: u.reason, workspaces: u.workspaces, at: '' }
      view.untrusted.push(q)
      warnUntrusted(q, 'left where it is: only a writer or noa recover moves it')
    }
    const stillThere = dead.map((j) => ({ path: j.path, ino: j.stats.ino }))
    const valid = () =>
      views.get(root) === view &&
      stillThere.every((j) => lstatSync(j.path, { throwIfNoEntry: false })?.ino === j.ino)
    makeViews(root, check, view, valid)
  } finally {
    for (const j of dead) if (j.fd >= 0) closeSync(j.fd)
  }
}

/** Whether writing `data` at `offset` of the file open as `fd` (of `size` bytes) would change it. */
function changes(fd: number, size: number, offset: number, data: Buffer): boolean {
  if (offset + data.length > size) return true
  const held = Buffer.allocUnsafe(data.length)
  return readAt(fd, held, offset) < data.length || !held.equals(data)
}

function makeViews(root: string, check: JournalCheck, view: RootView, valid: () => boolean): void {
  for (const plan of check.logs) {
    const src = openFileSync(plan.file, constants.O_RDONLY, { what: 'workspace log' })
    try {
      if (!plan.records.some((r) => changes(src, plan.size, r.offset, r.data))) continue
      const fd = privateFile()
      try {
        const buf = Buffer.allocUnsafe(1 << 20)
        for (let pos = 0; pos < plan.size; ) {
          const n = readAt(src, buf.subarray(0, Math.min(buf.length, plan.size - pos)), pos)
          if (n === 0) break
          writeAll(fd, buf.subarray(0, n), pos)
          pos += n
        }
        for (const r of plan.records) writeAll(fd, r.data, r.offset)
      } catch (err) {
        closeSync(fd)
        throw err
      }
      view.logs.set(plan.file, fd)
      setReadView(plan.file, `/proc/self/fd/${fd}`, valid)
    } finally {
      closeSync(src)
    }
  }
  for (const r of check.files) {
    const file = join(root, r.target)
    const st = lstatSync(file, { throwIfNoEntry: false })
    if (st !== undefined && r.target.startsWith('objects/') && !isExactObject(r.target, r.data)) continue
    if (st?.isFile() && st.size === r.data.length) {
      const fd = openFileSync(file, constants.O_RDONLY)
      try {
        if (!changes(fd, st.size, 0, r.data)) continue
      } finally {
        closeSync(fd)
      }
    }
    view.files.set(r.target, r.data)
  }
}

function writeAll(fd: number, data: Buffer, at: number): void {
  let off = 0
  while (off < data.length) off += writeSync(fd, data, off, data.length - off, at + off)
}

/** O_TMPFILE (Linux): a file with no name, gone with its last descriptor. */
const O_TMPFILE = 0o20000000 | constants.O_DIRECTORY

/** A private read-write file outside the root that leaves nothing behind. */
function privateFile(): number {
  try {
    return openSync(tmpdir(), constants.O_RDWR | O_TMPFILE, 0o600)
  } catch {
    // A file system without O_TMPFILE: a named one, unlinked at once.
    const path = join(tmpdir(), `noa-view-${process.pid}-${Math.random().toString(16).slice(2)}`)
    const fd = openSync(path, constants.O_RDWR | constants.O_CREAT | constants.O_EXCL, 0o600)
    unlinkSync(path)
    return fd
  }
}

/**
 * The bytes a dead journal would put back at `path` (relative to the root) where the file is
 * missing or differs; null when it would not. For readers of the object store.
 */
export function journalFile(root: string, path: string): Buffer | null {
  const r = resolve(root)
  readThroughJournals(r)
  return views.get(r)?.files.get(path) ?? null
}

/** Every journal of the root that is not trusted: quarantined, or found so by this process's reads. */
export function untrustedJournals(root: string): QuarantinedJournal[] {
  const r = resolve(root)
  readThroughJournals(r)
  const out = quarantinedJournals(r)
  for (const q of views.get(r)?.untrusted ?? []) if (!out.some((o) => o.found === q.found)) out.push(q)
  return out
}
