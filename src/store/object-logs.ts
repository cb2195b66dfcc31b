/**
 * Objects found in the root's object logs (engine/object-log.ts): where each one's bytes are,
 * by object id. An append with `packed` files puts objects there instead of in files of their
 * own; the object store looks at an object's own file first and here after.
 *
 * One index per root folder in the process, shared by its ObjectStores. It learns of logs and
 * of what they gained only when asked for an object it does not know: a reader that got an entry
 * naming an object another process just wrote finds it, because the writer appended the object
 * before the entry. Each ask for an unknown object costs an lstat of the logs' folder (there
 * usually is none), a listing of it while its mtime is recent or changed, and an lstat of each
 * log; a log that grew is read from where the last look stopped.
 *
 * A log (or its folder) that is not a real file (a symlink, say) is never read; a record that
 * does not name an object path is skipped. Bytes read from a log are checked against the id by
 * the store, as a file's are.
 */
import { closeSync, lstatSync, readdirSync, readSync, type Stats } from 'node:fs'
import { join } from 'node:path'
import { openFileSync, READ, statFile } from '../engine/files.js'
import {
  fdReader,
  OBJECT_LOG_DIR,
  OBJECT_LOG_HEADER,
  OBJECT_LOG_NAME_RE,
  scanObjectLog,
} from '../engine/object-log.js'

const OBJECT_NAME_RE = /^objects\/([0-9a-f]{2})\/([0-9a-f]{62})$/
/** A folder changed this recently may change again within its mtime's granularity: list it again. */
const RACY_MS = 2000

interface LogFile {
  path: string
  ino: number
  /** Where the valid records read so far end. */
  scanned: number
}

export interface LoggedObject {
  log: string
  offset: number
  length: number
}

const indexes = new Map<string, ObjectLogIndex>()

/** The index of the object logs under `root` (one per root in this process). */
export function objectLogIndex(root: string): ObjectLogIndex {
  let index = indexes.get(root)
  if (!index) {
    index = new ObjectLogIndex(root)
    indexes.set(root, index)
  }
  return index
}

/** A new index of the logs under `root`, in place of what this process knew (a log it knew is gone). */
export function resetObjectLogIndex(root: string): ObjectLogIndex {
  indexes.delete(root)
  return objectLogIndex(root)
}

export class ObjectLogIndex {
  readonly dir: string
  private readonly where = new Map<string, LoggedObject>()
  private readonly logs = new Map<string, LogFile>()
  private dirMtime = -1

  constructor(readonly root: string) {
    this.dir = join(root, OBJECT_LOG_DIR)
  }

  /** Where object `id` is in a log, or null when no log holds it. */
  find(id: string): LoggedObject | null {
    const known = this.where.get(id)
    if (known) return known
    if (!this.refresh()) return null
    return this.where.get(id) ?? null
  }

  /** Forgets a log (gc removed it): its objects are looked for elsewhere. */
  forget(path: string): void {
    for (const [id, loc] of this.where) if (loc.log === path) this.where.delete(id)
    for (const [name, log] of this.logs) if (log.path === path) this.logs.delete(name)
  }

  /** Every object id the logs hold (read up to now). */
  ids(): string[] {
    this.refresh()
    return [...this.where.keys()]
  }

  /** The bytes of a logged object (unchecked), or null when its log no longer has them. */
  read(loc: LoggedObject): Buffer | null {
    let fd: number
    try {
      fd = openFileSync(loc.log, READ, { what: 'object log' })
    } catch {
      return null
    }
    try {
      const buf = Buffer.allocUnsafe(loc.length)
      let got = 0
      while (got < loc.length) {
        const n = readSync(fd, buf, got, loc.length - got, loc.offset + got)
        if (n === 0) return null
        got += n
      }
      return buf
    } finally {
      closeSync(fd)
    }
  }

  /** Reads what the logs gained since the last look; false when nothing new was found. */
  private refresh(): boolean {
    // lstat: a symlink (or anything but a folder) where the folder should be holds no logs.
    let dir: Stats | undefined
    try {
      dir = lstatSync(this.dir, { throwIfNoEntry: false })
    } catch {
      return false
    }
    if (!dir?.isDirectory()) return false
    let names: string[] | null = null
    if (dir.mtimeMs !== this.dirMtime || Date.now() - dir.mtimeMs < RACY_MS) {
      names = listLogs(this.dir)
      this.dirMtime = dir.mtimeMs
    }
    let grew = false
    if (names !== null) {
      for (const name of names) {
        if (!this.logs.has(name)) {
          this.logs.set(name, { path: join(this.dir, name), ino: -1, scanned: 0 })
        }
      }
    }
    for (const log of this.logs.values()) if (this.scan(log)) grew = true
    return grew
  }

  /** Reads a log's records past what was read of it; true when it had new ones. */
  private scan(log: LogFile): boolean {
    let st: Stats | undefined
    try {
      st = statFile(log.path, 'object log')
    } catch {
      return false // not a regular file: never read
    }
    if (st === undefined) return false
    if (st.ino !== log.ino) {
      // Another file under that name: what was read of the old one no longer holds.
      if (log.ino !== -1) for (const [id, loc] of this.where) if (loc.log === log.path) this.where.delete(id)
      log.ino = st.ino
      log.scanned = 0
    }
    if (st.size <= log.scanned) return false
    let fd: number
    try {
      fd = openFileSync(log.path, READ, { what: 'object log' })
    } catch {
      return false
    }
    let found = 0
    try {
      const readAt = fdReader(fd)
      if (log.scanned === 0) {
        const head = Buffer.alloc(OBJECT_LOG_HEADER.length)
        if (readAt(head, head.length, 0) < head.length || !head.equals(OBJECT_LOG_HEADER)) return false
        log.scanned = head.length
      }
      log.scanned = scanObjectLog(readAt, log.scanned, st.size, (r) => {
        const m = OBJECT_NAME_RE.exec(r.name)
        if (m === null) return
        const id = `${m[1]}${m[2]}`
        if (!this.where.has(id)) {
          this.where.set(id, { log: log.path, offset: r.offset, length: r.length })
          found++
        }
      })
    } finally {
      closeSync(fd)
    }
    return found > 0
  }
}

function listLogs(dir: string): string[] {
  try {
    return readdirSync(dir).filter((n) => OBJECT_LOG_NAME_RE.test(n))
  } catch {
    return []
  }
}
