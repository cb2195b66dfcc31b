/**
 * A memory directory: Norma-compatible notes plus MEMORY.md, with what Norma lacks for a store
 * that must not lose notes: distinct file names instead of silent overwrites, atomic durable
 * writes, a cross-process writer lock, and an index that never links a missing file.
 *
 * Crash windows (every write is temp + fsync + rename + directory fsync):
 * - save: the note is written before the index, so a crash in between leaves the old index,
 *   which may miss the new note but names only files that exist; the next write rebuilds it.
 * - delete and rename: the index without the old file is written before the old file goes,
 *   so the index never names it after it is gone.
 */
import { createHash } from 'node:crypto'
import {
  closeSync,
  existsSync,
  fsyncSync,
  futimesSync,
  lstatSync,
  readdirSync,
  readFileSync,
  rmSync,
  unlinkSync,
} from 'node:fs'
import { join } from 'node:path'
import { fsyncDir, mkdirDurable, writeFileAtomic } from '../engine/atomic.js'
import { NoaError } from '../engine/errors.js'
import { nameTooLong, openFileSync, READ, statFile } from '../engine/files.js'
import { decodeBytes, encodeBytes, goTrimSpace } from '../gocompat/index.js'
import { renderIndex } from './index-file.js'
import { withDirLock } from './lock.js'
import { checkMemory, type MemoryInput, type MemoryNote, renderMemory } from './note.js'
import { type RecallHit, relevant, renderForInjection } from './recall.js'
import { INDEX_FILE, mtimeNs, readNote, type ScanResult, scanDir } from './scan.js'
import { slug } from './slug.js'

/** Auto-inject's default number of notes (Norma's MaxInject when unset). */
export const DEFAULT_INJECT_LIMIT = 3

/** writeFileAtomic's temp names (`.<file>.<12 hex>.tmp`) for notes and the index. */
const TEMP_NAME = /^\..+\.md\.[0-9a-f]{12}\.tmp$/

export interface InjectOptions {
  /** How many notes at most; ≤ 0 means the default 3, as Norma's MaxInject. */
  limit?: number
  /** The time ages are measured against (default: now). */
  now?: Date
}

export class MemoryStore {
  constructor(readonly dir: string) {
    if (typeof dir !== 'string' || dir === '') {
      throw new NoaError('NOA_BAD_ARGUMENT', 'memory directory must be a non-empty path', { field: 'dir' })
    }
  }

  /** The notes, newest first (unreadable files skipped silently, as in Norma). */
  scan(): MemoryNote[] {
    return scanDir(this.dir).notes
  }

  /** The notes and the files that were skipped, with the reason for each. */
  scanReport(): ScanResult {
    return scanDir(this.dir)
  }

  /** The note with this name (the one `save` would update), if any. */
  read(name: string): MemoryNote | undefined {
    return holderOf(goTrimSpace(name), this.scan())
  }

  /**
   * Writes a note and rebuilds MEMORY.md. A note with the same name is replaced where it lives
   * (all fields: what is not given becomes empty, as in Norma); a new note gets `slug(name).md`,
   * or a distinct name when that is empty or taken by another note. Returns the note as read
   * back.
   */
  save(input: MemoryInput): MemoryNote {
    const m = checkMemory(input)
    this.ensureDir()
    return withDirLock(this.dir, () => {
      this.checkIndexFile()
      this.removeStaleTemps()
      const file = holderOf(m.name, this.scan())?.file ?? this.freeFile(m.name)
      writeFileAtomic(join(this.dir, file), renderMemory(m))
      const notes = this.writeIndex()
      return notes.find((n) => n.file === file) ?? readNote(this.dir, file)
    })
  }

  /** Removes every note with this name; returns the files removed. */
  delete(name: string): string[] {
    const key = goTrimSpace(name)
    return this.locked(() => {
      this.checkIndexFile()
      const notes = this.scan()
      const gone = notes.filter((n) => n.name === key)
      if (gone.length === 0) throw notFound(key, this.dir)
      const files = gone.map((n) => n.file)
      this.writeIndex(notes.filter((n) => !files.includes(n.file)))
      for (const f of files) unlinkSync(join(this.dir, f))
      fsyncDir(this.dir)
      return files
    })
  }

  /**
   * Gives a note a new name, keeping its description, type, body and mtime (a rename does not
   * make a fact fresher). The file follows the name: `slug(newName).md` when free, else a
   * distinct name; the old file is removed after the index stops naming it.
   */
  rename(from: string, to: string): MemoryNote {
    const key = goTrimSpace(from)
    const { name } = checkMemory({ name: to })
    return this.locked(() => {
      this.checkIndexFile()
      const notes = this.scan()
      const holders = notes.filter((n) => n.name === key)
      const old = holders[0]
      if (old === undefined) throw notFound(key, this.dir)
      if (holders.length > 1) {
        throw new NoaError(
          'NOA_CONFLICT',
          `several files hold memory ${JSON.stringify(key)} (${holders.map((n) => n.file).join(', ')}); rename one by hand or delete the extra ones`,
          { name: key, files: holders.map((n) => n.file) },
        )
      }
      if (name === key) return old
      const clash = notes.find((n) => n.name === name)
      if (clash) {
        throw new NoaError(
          'NOA_CONFLICT',
          `memory ${JSON.stringify(name)} already exists (${clash.file}); delete it first or pick another name`,
          { name, file: clash.file },
        )
      }
      const file = this.freeFile(name, old.file)
      const path = join(this.dir, file)
      writeFileAtomic(path, encodeBytes(renderMemory({ ...old, name })))
      keepMtime(path, old)
      if (file !== old.file) {
        this.writeIndex(this.scan().filter((n) => n.file !== old.file))
        unlinkSync(old.path)
        fsyncDir(this.dir)
      } else {
        this.writeIndex()
      }
      return readNote(this.dir, file)
    })
  }

  /**
   * MEMORY.md as stored; when it cannot be read (missing or not a file), the text it would have,
   * built from a scan without writing anything, as Norma's Index does.
   */
  index(): string {
    let fd: number
    try {
      // A MEMORY.md that is a symlink, FIFO or folder "cannot be read": never followed.
      fd = openFileSync(join(this.dir, INDEX_FILE), READ, { what: 'memory index' })
    } catch {
      return renderIndex(this.scan())
    }
    try {
      return decodeBytes(readFileSync(fd))
    } finally {
      closeSync(fd)
    }
  }

  /** Rebuilds MEMORY.md from a full scan (creating the directory) and returns its text. */
  rebuildIndex(): string {
    this.ensureDir()
    return withDirLock(this.dir, () => {
      this.checkIndexFile()
      this.removeStaleTemps()
      return renderIndex(this.writeIndex())
    })
  }

  /** Norma's Relevant with scores: best first, newer first among ties; `limit` ≤ 0 = all. */
  recall(query: string, limit = 0): RecallHit[] {
    return relevant(this.scan(), query, limit)
  }

  /** The text auto-inject appends to a prompt for this query ('' when nothing is relevant). */
  inject(query: string, options: InjectOptions = {}): string {
    const limit = options.limit !== undefined && options.limit > 0 ? options.limit : DEFAULT_INJECT_LIMIT
    const hits = this.recall(query, limit)
    return renderForInjection(
      hits.map((h) => h.note),
      options.now ?? new Date(),
    )
  }

  /** Writes MEMORY.md for `notes` (default: a fresh scan); returns the notes it lists. */
  private writeIndex(notes: MemoryNote[] = this.scan()): MemoryNote[] {
    writeFileAtomic(join(this.dir, INDEX_FILE), encodeBytes(renderIndex(notes)))
    return notes
  }

  /** The first candidate file name with no directory entry at all (or `own`, the caller's file). */
  private freeFile(name: string, own?: string): string {
    for (const file of candidates(name)) {
      if (file === own || !entryExists(join(this.dir, file))) return file
    }
    throw new Error('unreachable: candidate names are unbounded')
  }

  private locked<T>(fn: () => T): T {
    if (!existsSync(this.dir)) {
      throw new NoaError('NOA_NOT_FOUND', `memory directory ${this.dir} does not exist`, { file: this.dir })
    }
    return withDirLock(this.dir, fn)
  }

  /** mkdir -p (0777 before the umask), each new folder's entry synced in its parent. */
  private ensureDir(): void {
    mkdirDurable(this.dir)
  }

  /**
   * Refuses a MEMORY.md that is not a regular file (a symlink is never written through or
   * replaced) before a note is written, so a write is not left half done by its index.
   */
  private checkIndexFile(): void {
    statFile(join(this.dir, INDEX_FILE), 'memory index')
  }

  /** Temp files of writers that died mid-write (only writers holding the lock create them). */
  private removeStaleTemps(): void {
    for (const f of readdirSync(this.dir)) {
      if (!TEMP_NAME.test(f)) continue
      const p = join(this.dir, f)
      if (lstatSync(p, { throwIfNoEntry: false })?.isFile()) rmSync(p, { force: true })
    }
  }
}

/**
 * File names a new note may take, in order: `slug.md`, then `<slug>-<hash>.md` (`note-<hash>.md`
 * for an empty slug) where hash is the first 8 hex digits of SHA-256 of the name, then
 * `<slug>-<hash>-2.md`, `-3`, …. The hash makes the fallback depend on the name alone, not on
 * the order notes were saved in.
 */
export function* candidates(name: string): Generator<string> {
  const s = slug(name)
  if (s !== '') yield `${s}.md`
  const base = `${s || 'note'}-${createHash('sha256').update(name, 'utf8').digest('hex').slice(0, 8)}`
  yield `${base}.md`
  for (let i = 2; ; i++) yield `${base}-${i}.md`
}

/** The file a save of `name` updates: the holder earliest in candidate order, else in name order. */
function holderOf(name: string, notes: MemoryNote[]): MemoryNote | undefined {
  const holders = notes.filter((n) => n.name === name)
  if (holders.length <= 1) return holders[0]
  const files = new Set(holders.map((n) => n.file))
  let i = 0
  for (const file of candidates(name)) {
    if (files.has(file)) return holders.find((n) => n.file === file)
    if (++i > holders.length + 2) break
  }
  return holders.sort((a, b) => Buffer.compare(Buffer.from(a.file), Buffer.from(b.file)))[0]
}

function entryExists(path: string): boolean {
  // lstat: a dangling symlink or a folder named like the file is taken too; never write over it.
  try {
    return lstatSync(path, { throwIfNoEntry: false }) !== undefined
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENAMETOOLONG') throw nameTooLong(path)
    throw err
  }
}

function keepMtime(path: string, old: MemoryNote): void {
  const ns = mtimeNs(old)
  if (ns === undefined) return
  const seconds = Number(ns) / 1e9
  // On a descriptor opened without following a symlink: the file just renamed into place, or
  // a refusal if something else took its name meanwhile.
  const fd = openFileSync(path, READ, { what: 'memory note' })
  try {
    futimesSync(fd, seconds, seconds)
    // futimes changes only the inode; fsync makes the restored time durable with the rename.
    fsyncSync(fd)
  } finally {
    closeSync(fd)
  }
}

function notFound(name: string, dir: string): NoaError {
  return new NoaError('NOA_NOT_FOUND', `no memory named ${JSON.stringify(name)} in ${dir}`, {
    name,
    file: dir,
  })
}
