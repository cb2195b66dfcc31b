/**
 * Reading a memory directory as Norma's Scan does: `.md` files in name order, minus folders
 * and MEMORY.md, newest mtime first. Files that cannot be read are skipped, as in Norma, but
 * noa says which and why to a caller that asks.
 */
import { closeSync, type Dirent, fstatSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { notDirectory, openFileSync, READ } from '../engine/files.js'
import { decodeBytes } from '../gocompat/index.js'
import { type MemoryNote, parseMemory } from './note.js'

export const INDEX_FILE = 'MEMORY.md'

export interface SkippedFile {
  /** File name inside the directory (lossy when the name is not valid UTF-8). */
  file: string
  path: string
  reason: string
  /** The system error code (`ENOENT`, `ELOOP`, `EACCES`, …) when there is one. */
  code?: string
}

export interface ScanResult {
  /** Newest mtime first; equal mtimes in file-name order. */
  notes: MemoryNote[]
  skipped: SkippedFile[]
}

/**
 * Exact mtimes of scanned notes, for ordering as Go does (nanoseconds); the public `mtime` is a
 * Date (milliseconds) so that notes stay JSON-serializable.
 */
const exactMtime = new WeakMap<MemoryNote, bigint>()

export function mtimeNs(note: MemoryNote): bigint | undefined {
  return exactMtime.get(note) ?? (note.mtime ? BigInt(note.mtime.getTime()) * 1_000_000n : undefined)
}

/** Newer first; an unknown mtime sorts as the oldest (Go's zero time). Stable sorts keep ties. */
export function newerFirst(a: MemoryNote, b: MemoryNote): number {
  const x = mtimeNs(a)
  const y = mtimeNs(b)
  if (x === y) return 0
  if (x === undefined) return 1
  if (y === undefined) return -1
  return x > y ? -1 : 1
}

const MD = Buffer.from('.md')

/** A note file's name: ends in `.md` and is not the index (compared as bytes, like Go). */
function isNoteName(name: Buffer): boolean {
  return (
    name.length >= MD.length &&
    name.subarray(name.length - MD.length).equals(MD) &&
    name.toString() !== INDEX_FILE
  )
}

/** Reads one note file; a thrown error means "skip it". */
export function readNote(dir: string, file: string): MemoryNote {
  const path = join(dir, file)
  // Not through a symlink (Norma would follow one; noa skips it and says why), and a FIFO named
  // x.md opens without waiting for a writer and is refused; fstat on the same fd then gives the
  // mtime, so content and mtime belong to the same file even if it is replaced meanwhile.
  const fd = openFileSync(path, READ, { what: 'memory note' })
  try {
    const st = fstatSync(fd, { bigint: true })
    // A byte that is not UTF-8 stays itself (utf8.ts), as in Norma's Go strings, so the index and
    // a rename write it back unchanged.
    const text = decodeBytes(readFileSync(fd))
    const note: MemoryNote = {
      ...parseMemory(text, file),
      file,
      path,
      mtime: new Date(Number(st.mtimeNs / 1_000_000n)),
    }
    exactMtime.set(note, st.mtimeNs)
    return note
  } finally {
    closeSync(fd)
  }
}

/** Scans `dir`; a missing directory holds no notes. */
export function scanDir(dir: string): ScanResult {
  let entries: Dirent<Buffer>[]
  try {
    entries = readdirSync(dir, { withFileTypes: true, encoding: 'buffer' })
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOENT') return { notes: [], skipped: [] }
    if (code === 'ENOTDIR') throw notDirectory(dir, 'file')
    throw err
  }
  // os.ReadDir's order: file names compared as bytes.
  entries.sort((a, b) => Buffer.compare(a.name, b.name))
  const notes: MemoryNote[] = []
  const skipped: SkippedFile[] = []
  for (const entry of entries) {
    if (entry.isDirectory() || !isNoteName(entry.name)) continue
    const file = entry.name.toString('utf8')
    const path = join(dir, file)
    if (!Buffer.from(file, 'utf8').equals(entry.name)) {
      // A decoded name would not open the file, nor could an index link name it.
      skipped.push({ file, path, reason: 'file name is not valid UTF-8' })
      continue
    }
    try {
      notes.push(readNote(dir, file))
    } catch (err) {
      const e = err as NodeJS.ErrnoException
      skipped.push({ file, path, reason: e.message, ...(typeof e.code === 'string' ? { code: e.code } : {}) })
    }
  }
  notes.sort(newerFirst)
  return { notes, skipped }
}
