/**
 * Whole-file replacement that survives a crash at any point: the old content or the new one,
 * never a mix. Temp file in the same directory, write, fsync, rename over the target, fsync the
 * directory (so the rename itself is durable). Used for objects, memory notes, state files.
 *
 * The pieces are exported for writers whose target is known only at the end (a blob streamed in
 * is named by its hash) or that write many files and want their fsyncs in flight together.
 *
 * In a folder others can write into (files.ts): temp files are created O_EXCL|O_NOFOLLOW (a name
 * planted in advance fails the create instead of being written through), a target that exists
 * and is not a regular file is refused rather than replaced, and with `base` every folder
 * between it and the target is checked to be a real one. Modes are 0666 before the umask, as
 * for any file a program creates; `readOnly` then clears the write bits of the mode the file
 * actually got (so umask 077 gives 0400, umask 022 gives 0444).
 */

import { randomBytes } from 'node:crypto'
import {
  closeSync,
  constants,
  fchmodSync,
  fstatSync,
  fsync,
  fsyncSync,
  lstatSync,
  mkdirSync,
  openSync,
  renameSync,
  rmSync,
  type Stats,
  statSync,
  writeSync,
} from 'node:fs'
import type { FileHandle } from 'node:fs/promises'
import { rm } from 'node:fs/promises'
import { basename, dirname, join, resolve } from 'node:path'
import { Errors } from './errors.js'
import {
  checkDirsBelow,
  DIR_MODE,
  FILE_MODE,
  type FileKind,
  kindOf,
  mkdirBelow,
  nameTooLong,
  notDirectory,
  openError,
  openFile,
  openFileSync,
  statFile,
  WRITE_NEW,
} from './files.js'

export interface AtomicWriteOptions {
  /** Creation mode before the umask (default 0o666). */
  mode?: number
  /** Clear the write bits once created: for files that are never changed in place (objects). */
  readOnly?: boolean
  /** Prefix of the temp file name in the target's directory (default `.<name>.`). */
  tempPrefix?: string
  /** Suffix of the temp file name (default `.tmp`). */
  tempSuffix?: string
  /**
   * The folder the caller was given (a root): every folder from it down to the file's must be
   * a real directory, not a symlink or anything else, and must exist. `base` itself may be a
   * symlink (the user chose it).
   */
  base?: string
  /** What the file is, for messages (default "file"). */
  what?: string
}

const { O_RDONLY, O_DIRECTORY } = constants

/** fsync a directory so that entries created, renamed or removed in it are durable. */
export function fsyncDir(dir: string): void {
  // O_DIRECTORY: a FIFO put where a folder was would otherwise block the open.
  const fd = openSync(dir, O_RDONLY | O_DIRECTORY)
  try {
    fsyncSync(fd)
  } finally {
    closeSync(fd)
  }
}

/** fsync on libuv's pool: the only call here slow enough to keep off the event loop. */
function fsyncAsync(fd: number): Promise<void> {
  return new Promise((resolve, reject) => fsync(fd, (err) => (err ? reject(err) : resolve())))
}

/** fsync several directories at once (the fsyncs run in parallel on libuv's pool). */
export async function fsyncDirs(dirs: Iterable<string>): Promise<void> {
  await Promise.all(
    [...dirs].map(async (dir) => {
      const fd = openSync(dir, O_RDONLY | O_DIRECTORY)
      try {
        await fsyncAsync(fd)
      } finally {
        closeSync(fd)
      }
    }),
  )
}

// 12 hex digits, as the names always had: a random 48-bit start per thread, counted up from
// there, so concurrent writers never share a name (two threads' runs would have to overlap);
// drawing fresh random bytes for every temp file cost more than writing a small one.
const TEMP_SPACE = 2 ** 48
const tempStart = randomBytes(6).readUIntBE(0, 6)
let tempCount = 0

/** A fresh name for a temp file in `dir` (unique to this thread, so concurrent writers never share one). */
export function tempPath(dir: string, prefix: string, suffix = '.tmp'): string {
  const n = (tempStart + tempCount++) % TEMP_SPACE
  return join(dir, `${prefix}${n.toString(16).padStart(12, '0')}${suffix}`)
}

/** Clears the write bits of the mode the file got (the umask already took its share). */
function makeReadOnly(fd: number): void {
  const mode = fstatSync(fd).mode & 0o7777
  fchmodSync(fd, mode & ~0o222)
}

function checkFolder(dir: string, options: AtomicWriteOptions): void {
  if (options.base === undefined) return
  const missing = checkDirsBelow(options.base, dir)
  if (missing !== null) {
    throw Errors.NOT_FOUND(`folder ${missing} does not exist (to write ${dir})`, {
      file: missing,
    })
  }
}

/** Creates a temp file for writing (O_EXCL|O_NOFOLLOW): its fd. */
function createTemp(temp: string, options: AtomicWriteOptions): number {
  const fd = openFileSync(temp, WRITE_NEW, { mode: options.mode ?? FILE_MODE, what: 'temp file' })
  if (options.readOnly) {
    try {
      makeReadOnly(fd)
    } catch (err) {
      closeSync(fd)
      rmSync(temp, { force: true })
      throw err
    }
  }
  return fd
}

/**
 * Writes `data` to `file` atomically and durably; returns the path written. A target that is a
 * symlink, a folder, a FIFO or a socket is refused (NOA_NOT_REGULAR_FILE) and left as it is.
 */
export function writeFileAtomic(
  file: string,
  data: string | Uint8Array,
  options: AtomicWriteOptions = {},
): string {
  const dir = dirname(file)
  checkFolder(dir, options)
  statFile(file, options.what)
  const temp = tempPath(dir, options.tempPrefix ?? `.${basename(file)}.`, options.tempSuffix)
  const fd = createTemp(temp, options)
  let renamed = false
  try {
    try {
      const buf = typeof data === 'string' ? Buffer.from(data, 'utf8') : data
      let off = 0
      while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off)
      fsyncSync(fd)
    } finally {
      closeSync(fd)
    }
    renameSync(temp, file)
    renamed = true
    fsyncDir(dir)
  } finally {
    if (!renamed) rmSync(temp, { force: true })
  }
  return file
}

/**
 * A temp file filled piece by piece (asynchronously), fsynced and closed by `finish`. The caller
 * then renames it into place (`renameSync` + `fsyncDir` of the target's directory) or drops it
 * with `abort`. Until the rename, a crash leaves only a stray temp file.
 */
export class TempFile {
  private constructor(
    readonly path: string,
    private handle: FileHandle | null,
  ) {}

  static async create(dir: string, options: AtomicWriteOptions = {}): Promise<TempFile> {
    checkFolder(dir, options)
    const path = tempPath(dir, options.tempPrefix ?? '.tmp-', options.tempSuffix)
    const handle = await openFile(path, WRITE_NEW, { mode: options.mode ?? FILE_MODE, what: 'temp file' })
    if (options.readOnly) {
      try {
        const st = await handle.stat()
        await handle.chmod(st.mode & 0o7777 & ~0o222)
      } catch (err) {
        await handle.close()
        await rm(path, { force: true })
        throw err
      }
    }
    return new TempFile(path, handle)
  }

  async write(data: Uint8Array): Promise<void> {
    if (!this.handle) throw new Error(`temp file ${this.path} is already closed`)
    let off = 0
    while (off < data.length) {
      const { bytesWritten } = await this.handle.write(data, off, data.length - off)
      off += bytesWritten
    }
  }

  /** fsync and close: the bytes are durable, the name is not yet. */
  async finish(): Promise<void> {
    const handle = this.handle
    if (!handle) return
    this.handle = null
    try {
      await handle.sync()
    } finally {
      await handle.close()
    }
  }

  /** Closes (if open) and removes the temp file. */
  async abort(): Promise<void> {
    const handle = this.handle
    this.handle = null
    if (handle) await handle.close().catch(() => {})
    await rm(this.path, { force: true })
  }
}

/**
 * Writes `data` to a new temp file in `dir`, fsynced and closed; returns its path. Open and write
 * are synchronous (they only reach the page cache); the fsync runs on libuv's pool, so several
 * of these at once have their fsyncs in flight together.
 */
export async function writeTempFile(
  dir: string,
  data: Uint8Array,
  options: AtomicWriteOptions = {},
): Promise<string> {
  checkFolder(dir, options)
  const temp = tempPath(dir, options.tempPrefix ?? '.tmp-', options.tempSuffix)
  const fd = createTemp(temp, options)
  let ok = false
  try {
    let off = 0
    while (off < data.length) off += writeSync(fd, data, off, data.length - off)
    await fsyncAsync(fd)
    ok = true
  } finally {
    closeSync(fd)
    if (!ok) rmSync(temp, { force: true })
  }
  return temp
}

function errnoOf(err: unknown): string | undefined {
  return err instanceof Error ? (err as NodeJS.ErrnoException).code : undefined
}

/**
 * Makes `dir` (below `base`) durably: `base` itself with `mkdir -p` if missing (the folder the
 * user named: its own path is theirs to choose, symlinks included) and then every folder below
 * it with mkdirBelow (no symlinked or file components), fsyncing the parent of each folder made.
 * Modes 0777 before the umask. `dir` may be `base`.
 */
export function mkdirDurable(base: string, dir: string = base): void {
  const b = resolve(base)
  let st = statOrUndefined(b)
  if (st === undefined) {
    let first: string | undefined
    try {
      first = mkdirSync(b, { recursive: true, mode: DIR_MODE })
    } catch (err) {
      const code = errnoOf(err)
      if (code === 'ENAMETOOLONG') throw nameTooLong(b)
      if (code !== 'EEXIST' && code !== 'ENOTDIR') throw err
    }
    if (first !== undefined) {
      // Each new folder is durable once its parent's entry for it is synced.
      for (let d = b; ; d = dirname(d)) {
        fsyncDir(dirname(d))
        if (d === first || dirname(d) === d) break
      }
    }
    st = statOrUndefined(b)
  }
  if (st === undefined || !st.isDirectory()) {
    let kind: FileKind = 'file'
    try {
      kind = kindOf(st ?? lstatSync(b))
    } catch {
      // below a file: 'file' names it well enough
    }
    throw notDirectory(b, kind)
  }
  for (const made of mkdirBelow(b, dir)) fsyncDir(dirname(made))
}

/** stat (following symlinks: `base` is the user's); undefined when missing or below a file. */
function statOrUndefined(path: string): Stats | undefined {
  try {
    return statSync(path)
  } catch (err) {
    const code = errnoOf(err)
    if (code === 'ENOENT' || code === 'ENOTDIR') return undefined
    if (code === 'ENAMETOOLONG') throw nameTooLong(path)
    throw err
  }
}

/**
 * Writes files an append carries (AppendOptions.files, already checked) durably before the
 * append is sent somewhere that does not take them (a `noa serve` daemon): each to a temp file,
 * fsynced, renamed into place; then their folders fsynced.
 */
export async function writeFilesDurably(
  root: string,
  files: ReadonlyArray<{ path: string; data: Uint8Array; readOnly?: boolean }>,
): Promise<void> {
  const dirs = new Set<string>()
  for (const f of files) {
    const target = join(root, f.path)
    const dir = dirname(target)
    mkdirDurable(root, dir)
    const temp = await writeTempFile(dir, f.data, { readOnly: f.readOnly === true, tempPrefix: '.tmp-' })
    try {
      renameSync(temp, target)
    } catch (err) {
      rmSync(temp, { force: true })
      throw openError(err, target)
    }
    dirs.add(dir)
  }
  await fsyncDirs(dirs)
}
