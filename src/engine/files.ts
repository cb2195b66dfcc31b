/**
 * Opening files inside a folder that others can write into (a shared root, a transcript or
 * memory folder). What git and PostgreSQL do with a data directory someone else may have
 * touched: never follow a symlink planted where a file or folder of ours should be, never open
 * a FIFO, socket or device as if it were a file (a FIFO would block the open forever), and say
 * which path is wrong and why instead of surfacing a raw errno.
 *
 * - A file is opened with O_NOFOLLOW (a symlink as its last component fails the open, dangling
 *   or not, with or without O_CREAT) and O_NONBLOCK (a FIFO opens at once instead of waiting for
 *   a peer), then fstat-checked to be a regular file. O_NONBLOCK has no effect on regular files.
 * - A folder below the base is lstat-checked component by component: a symlink or a file where
 *   a folder should be is refused. The base itself (the root the user named) may be a symlink.
 * - Files are created with mode 0666 and folders 0777, so the umask decides, as for any program.
 */

import { createHash } from 'node:crypto'
import {
  closeSync,
  constants,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  type Stats,
  statSync,
} from 'node:fs'
import { type FileHandle, open } from 'node:fs/promises'
import { dirname, isAbsolute, relative, resolve, sep } from 'node:path'
import { Errors, type NoaError } from './errors.js'
import { loadNative } from './native.js'

const { O_NOFOLLOW, O_NONBLOCK, O_RDONLY, O_WRONLY, O_RDWR, O_CREAT, O_EXCL, O_APPEND, O_TRUNC } = constants
const O_ACCMODE = O_RDONLY | O_WRONLY | O_RDWR

export const FILE_MODE = 0o666
export const DIR_MODE = 0o777

export type FileKind =
  | 'file'
  | 'directory'
  | 'symlink'
  | 'FIFO'
  | 'socket'
  | 'block device'
  | 'character device'
  | 'unknown'

export function kindOf(st: Stats): FileKind {
  if (st.isFile()) return 'file'
  if (st.isDirectory()) return 'directory'
  if (st.isSymbolicLink()) return 'symlink'
  if (st.isFIFO()) return 'FIFO'
  if (st.isSocket()) return 'socket'
  if (st.isBlockDevice()) return 'block device'
  if (st.isCharacterDevice()) return 'character device'
  return 'unknown'
}

function article(kind: FileKind): string {
  return kind === 'unknown' ? 'something that is not a file' : `a ${kind}`
}

export function notRegularFile(path: string, kind: FileKind, what = 'file'): NoaError {
  return Errors.NOT_REGULAR_FILE(
    `${path} is ${article(kind)}, not a regular file: noa refuses to use it as a ${what}${kind === 'symlink' ? ' (it does not follow symlinks inside its folders)' : ''}`,
    { file: path, kind },
  )
}

export function notDirectory(path: string, kind: FileKind): NoaError {
  return Errors.NOT_DIRECTORY(
    `${path} is ${article(kind)}, not a folder: noa refuses to use it${kind === 'symlink' ? ' (it does not follow symlinks inside its folders)' : ''}`,
    { file: path, kind },
  )
}

export function nameTooLong(path: string): NoaError {
  return Errors.NAME_TOO_LONG(`${path}: the name is too long for the filesystem`, { file: path })
}

function errnoOf(err: unknown): string | undefined {
  return err instanceof Error ? (err as NodeJS.ErrnoException).code : undefined
}

/** Turns the errno of a failed open into a named error where there is one; else returns err. */
export function openError(err: unknown, path: string, what = 'file'): unknown {
  switch (errnoOf(err)) {
    case 'ELOOP':
      return notRegularFile(path, 'symlink', what)
    case 'ENXIO': // O_WRONLY|O_NONBLOCK on a FIFO with no reader, or a socket
    case 'EOPNOTSUPP':
    case 'ENOTREG': // the addon's refusal of a descriptor that is not a regular file
      return notRegularFile(path, kindAt(path) ?? 'unknown', what)
    case 'EISDIR':
      return notRegularFile(path, 'directory', what)
    case 'ENAMETOOLONG':
      return nameTooLong(path)
    case 'ENOTDIR':
      return notDirectory(firstNonDirectory(path) ?? dirname(path), kindAt(firstNonDirectory(path)) ?? 'file')
    default:
      return err
  }
}

function kindAt(path: string | undefined): FileKind | undefined {
  if (path === undefined) return undefined
  try {
    return kindOf(lstatSync(path))
  } catch {
    return undefined
  }
}

/** The first ancestor of path that exists and is not a directory (the cause of an ENOTDIR). */
function firstNonDirectory(path: string): string | undefined {
  const parts = resolve(path).split(sep)
  let p = ''
  for (let i = 1; i < parts.length; i++) {
    p += sep + parts[i]
    let st: Stats
    try {
      st = statSync(p)
    } catch {
      return undefined
    }
    if (!st.isDirectory()) return p
  }
  return undefined
}

export interface OpenFileOptions {
  /** What the file is to noa, for messages ("workspace log", "memory note"). Default "file". */
  what?: string
  /** Creation mode before the umask (default 0666). */
  mode?: number
}

/** fstat-checks an fd just opened; closes it and throws when it is not a regular file. */
export function checkOpened(fd: number, path: string, what = 'file'): Stats {
  let st: Stats
  try {
    st = fstatSync(fd)
  } catch (err) {
    closeSync(fd)
    throw err
  }
  if (!st.isFile()) {
    closeSync(fd)
    throw notRegularFile(path, kindOf(st), what)
  }
  return st
}

/**
 * Read views (journal-view.ts): a log whose acknowledged entries are partly only in a dead
 * commit journal is read, by a process that must not write the root, from a private copy with
 * the journal's records applied. A read-only open of the log's path opens that copy instead
 * (`/proc/self/fd/N` of an unlinked file, so nothing is left behind); writes never do.
 */
const readViews = new Map<string, { view: string; valid: () => boolean }>()

/**
 * Sends read-only opens of `path` to `view` while `valid()` holds (the journals it was made
 * from are still there: once a writer has replayed them, the log itself is read again).
 */
export function setReadView(path: string, view: string | null, valid: () => boolean = () => true): void {
  if (view === null) readViews.delete(resolve(path))
  else readViews.set(resolve(path), { view, valid })
}

/** Whether reads of `path` go to a view (threads of their own, which do not see it, are not used). */
export function hasReadView(path: string): boolean {
  return readViews.size > 0 && readViews.has(resolve(path))
}

/** The path and flags an open goes to: a read view's for a read-only open of a viewed file. */
function target(path: string, flags: number): [string, number] {
  if (readViews.size > 0 && (flags & (O_ACCMODE | O_CREAT | O_TRUNC)) === O_RDONLY) {
    const key = resolve(path)
    const v = readViews.get(key)
    if (v?.valid()) return [v.view, flags | O_NONBLOCK]
    if (v) readViews.delete(key)
  }
  return [path, flags | O_NOFOLLOW | O_NONBLOCK]
}

/**
 * open(2) of a regular file, never through a symlink in its last component and never blocking
 * on a FIFO. `flags` are numeric open flags (`O_RDONLY`, `O_WRONLY | O_CREAT | O_EXCL`, ...).
 */
export function openFileSync(path: string, flags: number = O_RDONLY, options: OpenFileOptions = {}): number {
  let fd: number
  try {
    fd = openSync(...target(path, flags), options.mode ?? FILE_MODE)
  } catch (err) {
    throw openError(err, path, options.what)
  }
  checkOpened(fd, path, options.what)
  return fd
}

/** The same, as a FileHandle. */
export async function openFile(
  path: string,
  flags: number = O_RDONLY,
  options: OpenFileOptions = {},
): Promise<FileHandle> {
  let handle: FileHandle
  try {
    handle = await open(...target(path, flags), options.mode ?? FILE_MODE)
  } catch (err) {
    throw openError(err, path, options.what)
  }
  let st: Stats
  try {
    st = await handle.stat()
  } catch (err) {
    await handle.close()
    throw err
  }
  if (!st.isFile()) {
    await handle.close()
    throw notRegularFile(path, kindOf(st), options.what)
  }
  return handle
}

/** Flags for the common cases, so callers need not import fs.constants. */
export const READ = O_RDONLY
export const WRITE_NEW = O_WRONLY | O_CREAT | O_EXCL
export const WRITE_TRUNCATE = O_WRONLY | O_CREAT | O_TRUNC
export const APPEND = O_WRONLY | O_APPEND
export const APPEND_CREATE = O_WRONLY | O_APPEND | O_CREAT
export const READ_WRITE = O_RDWR
export const READ_WRITE_CREATE = O_RDWR | O_CREAT

/**
 * lstat of a path that should be a regular file: undefined when it does not exist, the stats when
 * it is a file, a NOA_NOT_REGULAR_FILE naming what it is otherwise.
 */
export function statFile(path: string, what = 'file'): Stats | undefined {
  let st: Stats | undefined
  try {
    // A missing file is the common answer (a blob lookup): no exception made for it.
    st = lstatSync(path, { throwIfNoEntry: false })
    if (st === undefined) return undefined
  } catch (err) {
    const code = errnoOf(err)
    if (code === 'ENOENT') return undefined
    if (code === 'ENAMETOOLONG') throw nameTooLong(path)
    if (code === 'ENOTDIR') throw openError(err, path, what)
    throw err
  }
  if (!st.isFile()) throw notRegularFile(path, kindOf(st), what)
  return st
}

/** The addon's `fileSize`, once loaded; null where the addon does not load (lstat instead). */
let sizeOf: ((path: string) => number) | null | undefined

/**
 * The size of the regular file at `path`, -1 when there is none, a NOA_NOT_REGULAR_FILE naming
 * what is there otherwise: statFile's answer as a number, for code that polls a file's size
 * between its own commits (an adapter's log follower). It asks the kernel for the type and size
 * alone. An lstat asks for the change time too, which marks it as seen (multigrain timestamps,
 * Linux 6.13+): the file's next write then takes a fine-grained timestamp, which moves the
 * filesystem's timestamp floor, so every other file written after it gets a new mtime, and its
 * inode is written by the next fdatasync. Measured here (ext4 on Linux 6.18): an overwrite +
 * fdatasync took 0.21 ms instead of 0.14 when another file was lstat-ed between commits.
 */
export function fileSize(path: string, what = 'file'): number {
  if (sizeOf === undefined) {
    try {
      const io = loadNative()
      sizeOf = (p) => io.fileSize(p)
    } catch {
      sizeOf = null
    }
  }
  if (sizeOf !== null) {
    try {
      const n = sizeOf(path)
      if (n !== -2) return n
    } catch {
      // an error of the path itself (too long, a file as a folder...): statFile names it
    }
  }
  return statFile(path, what)?.size ?? -1
}

/** Whether `path` is `base` or below it (both resolved; no filesystem access). */
export function isInside(base: string, path: string): boolean {
  const r = relative(resolve(base), resolve(path))
  return r === '' || (!r.startsWith(`..${sep}`) && r !== '..' && !isAbsolute(r))
}

/**
 * Checks every existing component of `dir` below `base` (excluded) with lstat: each must be a
 * real directory. Returns the first missing component (to create from), or null when `dir`
 * exists. `dir` outside `base` is a programming error.
 */
export function checkDirsBelow(base: string, dir: string): string | null {
  const b = resolve(base)
  const d = resolve(dir)
  if (!isInside(b, d)) throw new Error(`${d} is not inside ${b}`)
  const rest = relative(b, d)
  if (rest === '') return null
  let p = b
  for (const part of rest.split(sep)) {
    p = `${p}${p.endsWith(sep) ? '' : sep}${part}`
    let st: Stats
    try {
      st = lstatSync(p)
    } catch (err) {
      const code = errnoOf(err)
      if (code === 'ENOENT') return p
      if (code === 'ENAMETOOLONG') throw nameTooLong(p)
      if (code === 'ENOTDIR') throw openError(err, p)
      throw err
    }
    if (!st.isDirectory()) throw notDirectory(p, kindOf(st))
  }
  return null
}

/**
 * mkdir -p of `dir` below `base`, checking every existing component (no symlinks, no files),
 * mode 0777 before the umask. Returns the directories it created, outermost first (their parents
 * need an fsync for the new entries to be durable).
 */
export function mkdirBelow(base: string, dir: string): string[] {
  const first = checkDirsBelow(base, dir)
  if (first === null) return []
  const created: string[] = []
  const d = resolve(dir)
  let p = first
  for (;;) {
    try {
      mkdirSync(p, { mode: DIR_MODE })
      created.push(p)
    } catch (err) {
      const code = errnoOf(err)
      if (code === 'ENAMETOOLONG') throw nameTooLong(p)
      if (code !== 'EEXIST') throw err
      // Made by someone else meanwhile: it must still be a real directory.
      const st = lstatSync(p)
      if (!st.isDirectory()) throw notDirectory(p, kindOf(st))
    }
    if (p === d) break
    p = `${p}${sep}${relative(p, d).split(sep)[0]}`
  }
  return created
}

/**
 * The root folder named by the user: it may be a symlink (the user chose it), but it must be a
 * folder. `mustExist`: for commands that only read, a missing root is an error too.
 */
export function checkRoot(root: string, mustExist: boolean): void {
  let st: Stats
  try {
    st = statSync(root)
  } catch (err) {
    const code = errnoOf(err)
    if (code === 'ENOENT') {
      if (!mustExist) return
      throw Errors.BAD_ROOT(`no noa root at ${root} (the folder does not exist)`, { root })
    }
    if (code === 'ENOTDIR')
      throw Errors.BAD_ROOT(`${root} cannot be a noa root: a part of its path is a file`, {
        root,
      })
    if (code === 'ENAMETOOLONG') throw nameTooLong(root)
    throw err
  }
  if (!st.isDirectory()) {
    throw Errors.BAD_ROOT(`${root} is ${article(kindOf(st))}, not a folder: it cannot be a noa root`, {
      root,
    })
  }
}

/**
 * Folders below a root that only the engine writes (workspace logs, commit journals, checksum
 * sidecars): no file an append writes beside its entries goes there.
 */
const ENGINE_DIRS = ['agent-logs', 'journal', 'checksums', 'object-logs']
const MAX_FILE_PATH_BYTES = 4096
const MAX_SEGMENT_BYTES = 255

/**
 * Why `path` cannot name a file an append writes beside its entries (relative to the root, in
 * a folder below it that is not the engine's, no `.`, `..` or empty segment), or null. Checked
 * when the append is made and again when a journal record is replayed.
 */
export function filePathProblem(path: string): string | null {
  // A store object's path (what nearly every such file is) passes every check below: 73 ASCII
  // bytes, relative, three non-empty segments of at most 62 bytes with no NUL, `.` or `..`, in
  // objects/ (not an engine folder), and OBJECT_FILE itself. So it is answered by the one test.
  if (OBJECT_FILE.test(path)) return null
  if (path === '' || Buffer.byteLength(path) > MAX_FILE_PATH_BYTES)
    return `must be 1 to ${MAX_FILE_PATH_BYTES} bytes`
  if (path.startsWith('/')) return 'must be relative to the root'
  const segments = path.split('/')
  for (const seg of segments) {
    if (seg === '' || seg === '.' || seg === '..') {
      return 'must be a normalized path below the root (no empty, . or .. segment)'
    }
    if (seg.includes('\0')) return 'must not contain NUL'
    if (Buffer.byteLength(seg) > MAX_SEGMENT_BYTES)
      return `has a segment longer than ${MAX_SEGMENT_BYTES} bytes`
  }
  if (segments.length < 2 || ENGINE_DIRS.includes(segments[0] as string)) {
    return `must be in a folder below the root other than ${ENGINE_DIRS.join(', ')}`
  }
  if (segments[0] === 'objects' && !OBJECT_FILE.test(path)) {
    return "is in objects/, which holds only the store's objects (objects/<2 hex>/<62 hex>, named by their SHA-256)"
  }
  return null
}

/** An object of the store below the root: `objects/` and its SHA-256, split after two digits. */
export const OBJECT_FILE = /^objects\/[0-9a-f]{2}\/[0-9a-f]{62}$/

/**
 * Whether `data` is the object `path` (below the root) names: its bytes hash to its name. A
 * store object that does not (a tree stored as a delta, named by what it decodes to) is an
 * encoded one: a journal replay writes it only where nothing is stored under its name.
 */
export function isExactObject(path: string, data: Uint8Array): boolean {
  const id = path.slice(8, 10) + path.slice(11)
  return createHash('sha256').update(data).digest('hex') === id
}
