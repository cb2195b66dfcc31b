/**
 * The bottom layer of the object store (objects.ts): where an object lives and its bytes as
 * stored. Object files (`<root>/objects/<2 hex>/<62 hex>`) written durably (temp file, fsync,
 * rename, directory fsync), or found in an object log or a dead journal; reads of the raw bytes
 * below folders checked to be real ones; checks against the hash; freshening for gc. It also
 * holds every field the layers above share (ObjectBlobs, ObjectTrees, ObjectStore: one object
 * whose class is built in layers, each file importing only the one below).
 */
import { hash } from 'node:crypto'
import { closeSync, fstatSync, readFileSync, readSync, renameSync, rmSync, utimesSync } from 'node:fs'
import { dirname, join, sep } from 'node:path'
import { fsyncDirs, mkdirDurable, writeTempFile } from '../engine/atomic.js'
import { Errors, NoaError } from '../engine/errors.js'
import { checkDirsBelow, openFile, openFileSync, READ, statFile } from '../engine/files.js'
import { journalFile } from '../engine/journal-view.js'
import { objectLogIndex, resetObjectLogIndex } from './object-logs.js'
import type { Pack, PackMeter } from './pack.js'
import type { SnapshotRecord } from './snapshot-record.js'
import type { Tree } from './tree.js'

const HASH_RE = /^[0-9a-f]{64}$/
/**
 * Objects are immutable: once created (0666 before the umask, like any file) their write bits
 * are cleared, which discourages editing them in place without widening what the umask allowed.
 */
const OBJECT_WRITE = { readOnly: true, what: 'object' } as const
/** Temp files written at once by a batch (their fsyncs run in libuv's pool). */
const PARALLEL_WRITES = 16
/** Objects up to this size are read in one synchronous call (fewer thread-pool round trips). */
export const SYNC_READ = 4 << 20
/**
 * The default budget of the packs kept decoded, in bytes (Pack.heldBytes). A host that takes
 * snapshot after snapshot builds a pack each time (about 1 MB at 10k paths, 2 MB at 100k). Kept
 * by count alone, with the 1 MB chunks each build wrote its folders in, an engine kept open
 * for 200 snapshots at 10k paths reached 565 MB of RSS, growing by about 2 MB a snapshot.
 */
export const PACK_CACHE_BYTES = 64 << 20

export interface ObjectStoreOptions {
  /**
   * Budget in bytes of the tree packs kept decoded between reads (default PACK_CACHE_BYTES).
   * The newest pack is always kept; a folder of a pack let go is read from its file again.
   */
  packCacheBytes?: number
}

/**
 * Objects this process stored lately (written, or found there and freshened), per object
 * folder: a snapshot takes the blobs it names among them as stored without a lookup each.
 * Only for KNOWN_MS after the write: gc never removes an object younger than its grace period
 * (an hour by default), and this process's own gc forgets what it removes.
 */
const KNOWN_MS = 10 * 60 * 1000
const KNOWN_MAX = 200_000
const knownStored = new Map<string, Map<string, number>>()

/** An object to store under `id`; `exact` when `data` itself hashes to `id` (not a delta). */
export interface StoredObject {
  id: string
  data: Uint8Array
  exact: boolean
}

export function sha256(data: Uint8Array | string): string {
  // One call, not a Hash object: about twice as fast for the small objects a snapshot hashes.
  return hash('sha256', data, 'hex')
}

/** A well-formed object id (64 lowercase hex) or a NOA_BAD_ARGUMENT naming `what`. */
export function checkObjectId(id: unknown, what = 'object id'): string {
  if (typeof id !== 'string' || !HASH_RE.test(id)) {
    throw Errors.BAD_ARGUMENT(
      `${what} must be 64 lowercase hex characters (a SHA-256), got ${JSON.stringify(id)}`,
      { field: what },
    )
  }
  return id
}

export function isNotFound(err: unknown): boolean {
  return err instanceof NoaError && err.code === 'NOA_NOT_FOUND'
}

export function isSystemError(err: unknown, code: string): boolean {
  return err instanceof Error && (err as NodeJS.ErrnoException).code === code
}

export function readFully(fd: number, buf: Buffer, position: number): number {
  let got = 0
  while (got < buf.length) {
    const n = readSync(fd, buf, got, buf.length - got, position + got)
    if (n === 0) break
    got += n
  }
  return got
}

export abstract class ObjectFiles {
  readonly root: string
  readonly dir: string
  /** Folders made or checked (every component below the root a real directory). */
  private readonly knownDirs = new Set<string>()
  protected readonly trees = new Map<string, Tree>()
  protected readonly records = new Map<string, SnapshotRecord>()
  /** Trees built by treeObject, until they are stored. */
  protected readonly pending = new Map<string, Pack>()
  /** Packs read or written lately (their folders stay decoded). */
  protected readonly packs = new Map<string, Pack>()
  /** Pack.heldBytes summed over `packs`, kept by the packs themselves (Pack.countIn). */
  protected readonly packMeter: PackMeter = { bytes: 0 }
  /** Packs read a folder at a time, open until the current synchronous run ends (readRange). */
  protected readonly rangeFds = new Map<string, number>()
  /** Packs whose every folder treeObjects has read and checked (once is enough: they are kept). */
  protected readonly checkedPacks = new WeakSet<Pack>()
  /** While treeObjects walks a tree: every pack asked for (the ones a reader needs kept). */
  protected opened: Set<string> | null = null

  protected readonly packCacheBytes: number

  /** `root` is the noa root (the folder holding `agent-logs/`). */
  constructor(root: string, options: ObjectStoreOptions = {}) {
    const budget = options.packCacheBytes ?? PACK_CACHE_BYTES
    if (!Number.isSafeInteger(budget) || budget < 0) {
      throw Errors.BAD_OPTION(`option packCacheBytes must be an integer >= 0, got ${budget}`, {
        field: 'packCacheBytes',
      })
    }
    this.root = root
    this.dir = join(root, 'objects')
    this.packCacheBytes = budget
  }

  pathOf(id: string): string {
    // `dir` is already normal and an id is hex: plain concatenation is what join would give.
    return `${this.dir}${sep}${id.slice(0, 2)}${sep}${id.slice(2)}`
  }

  /**
   * Whether an object is stored (by name only; reads check the content). Something other than a
   * regular file under the object's name is a NOA_NOT_REGULAR_FILE, never "stored".
   */
  has(id: string): boolean {
    return this.sizeOf(checkObjectId(id)) >= 0
  }

  /**
   * Whether an object is stored, taking the objects this process stored in the last minutes
   * (any ObjectStore of the same folder) as stored without looking: a snapshot checks every
   * blob it takes in, most of them just put by the same host.
   */
  hasLately(id: string): boolean {
    const at = this.known().get(id)
    if (at !== undefined) {
      if (performance.now() - at < KNOWN_MS) return true
      this.known().delete(id)
    }
    return this.has(id)
  }

  /** Forgets that an object is stored (gc removed it). */
  forget(id: string): void {
    this.known().delete(id)
  }

  private known(): Map<string, number> {
    let map = knownStored.get(this.dir)
    if (!map) {
      map = new Map()
      knownStored.set(this.dir, map)
    }
    return map
  }

  private markStored(ids: Iterable<string>): void {
    const map = this.known()
    const now = performance.now()
    for (const id of ids) {
      map.delete(id) // kept in the order of their writes, the oldest first out
      map.set(id, now)
    }
    if (map.size > KNOWN_MAX) {
      for (const id of map.keys()) {
        map.delete(id)
        if (map.size <= KNOWN_MAX / 2) break
      }
    }
  }

  /**
   * Stores objects durably; returns their ids. Every new object is written and fsynced (up to
   * PARALLEL_WRITES at once) before any is renamed into place, then each directory is fsynced
   * once: when this resolves, all of them survive a crash.
   */
  async putObjects(items: readonly Uint8Array[]): Promise<string[]> {
    const objects = items.map((data) => ({ id: sha256(data), data, exact: true }))
    await this.write(objects)
    return objects.map((o) => o.id)
  }

  /**
   * Writes objects that are not there yet as files of their own (an exact object of the wrong
   * size is rewritten). One that only an object log holds is written too: gc removes a log whose
   * writer is gone, and a writer that counted on the log's copy would race it.
   */
  async write(objects: readonly StoredObject[]): Promise<void> {
    const todo = new Map<string, StoredObject>()
    for (const o of objects) {
      if (todo.has(o.id)) continue
      const size = this.looseSize(o.id)
      if (size < 0 || (o.exact && size !== o.data.length)) todo.set(o.id, o)
      else {
        this.freshen(o.id)
        // A tree that came back to one stored before: the stored pack of that name is the one
        // readers will open, so the one just built must not stand in for it.
        this.pending.delete(o.id)
      }
    }
    if (todo.size === 0) {
      this.markStored(objects.map((o) => o.id))
      return
    }
    const entries = [...todo.values()]
    const temps: string[] = new Array(entries.length)
    try {
      for (let i = 0; i < entries.length; i += PARALLEL_WRITES) {
        await Promise.all(
          entries.slice(i, i + PARALLEL_WRITES).map(async ({ id, data }, k) => {
            const dir = dirname(this.pathOf(id))
            this.ensureDir(dir)
            // ensureDir checked the folders (once per store): no second lstat walk per object.
            temps[i + k] = await writeTempFile(dir, data, { ...OBJECT_WRITE, tempPrefix: '.obj-' })
          }),
        )
      }
      const dirs = new Set<string>()
      entries.forEach(({ id }, i) => {
        renameSync(temps[i] as string, this.pathOf(id))
        temps[i] = ''
        dirs.add(dirname(this.pathOf(id)))
      })
      await fsyncDirs(dirs)
    } finally {
      for (const t of temps) if (t) rmSync(t, { force: true })
    }
    this.markStored(objects.map((o) => o.id))
  }

  /**
   * Objects as files for an append to write beside the entries that name them
   * (AppendOptions.files): written and made durable with those entries, in one sync of the
   * commit journal instead of one per object before it. No object is looked up first: most are
   * new, a lookup of a missing name in a folder being written waits for that folder's lock, and
   * one written again gets the same bytes (content addressed), its rename freshening it for gc
   * as `write` does.
   */
  filesFor(
    objects: readonly StoredObject[],
    packed = false,
  ): Array<{ path: string; data: Uint8Array; readOnly: boolean; packed?: boolean }> {
    const files: Array<{ path: string; data: Uint8Array; readOnly: boolean; packed?: boolean }> = []
    const seen = new Set<string>()
    for (const o of objects) {
      if (seen.has(o.id)) continue
      seen.add(o.id)
      // pathOf relative to the root, which is always this (dir is join(root, 'objects')).
      const path = `objects/${o.id.slice(0, 2)}/${o.id.slice(2)}`
      files.push(
        packed ? { path, data: o.data, readOnly: true, packed } : { path, data: o.data, readOnly: true },
      )
    }
    return files
  }

  protected check(id: string, bytes: Buffer, what: string): void {
    const actual = sha256(bytes)
    if (actual !== id) {
      throw Errors.CORRUPT_OBJECT(
        `${what} is corrupt: ${this.pathOf(id)} hashes to ${actual} (${bytes.length} bytes)`,
        { object: id, file: this.pathOf(id) },
      )
    }
  }

  protected checkHash(id: string, actual: string, what: string): void {
    if (actual !== id) {
      throw Errors.CORRUPT_OBJECT(`${what} is corrupt: ${this.pathOf(id)} hashes to ${actual}`, {
        object: id,
        file: this.pathOf(id),
      })
    }
  }

  /** A failed open of an object: ENOENT is NOA_NOT_FOUND, anything else as it is. */
  protected missing(err: unknown, id: string, what: string): unknown {
    if (!isSystemError(err, 'ENOENT')) return err
    const file = this.pathOf(id)
    return Errors.NOT_FOUND(`${what} not found (no ${file})`, { object: id, file })
  }

  /**
   * An object file's bytes, unchecked. Opened without following a symlink and checked to be a
   * regular file, below folders checked to be real ones: an object store others can write
   * into never makes noa read (or hang on) something outside it.
   */
  protected async readRaw(id: string, what: string): Promise<Buffer> {
    let fd: number
    try {
      fd = this.openObject(id, what)
    } catch (err) {
      const logged = isNotFound(err) ? this.logged(id) : null
      if (logged === null) throw err
      return logged
    }
    let size: number
    try {
      size = fstatSync(fd).size
      if (size <= SYNC_READ) return readFileSync(fd)
    } finally {
      closeSync(fd)
    }
    const handle = await openFile(this.pathOf(id), READ, { what: 'object' }).catch((err: unknown) => {
      throw this.missing(err, id, what)
    })
    try {
      return await handle.readFile()
    } finally {
      await handle.close()
    }
  }

  /**
   * An object file opened for reading: without following a symlink, checked to be a regular
   * file, below folders checked to be real ones (unless the caller already did); a missing one
   * is NOA_NOT_FOUND naming `what`.
   */
  protected openObject(id: string, what: string, checkFolder = true): number {
    const file = this.pathOf(id)
    if (checkFolder) this.checkDir(dirname(file))
    try {
      return openFileSync(file, READ, { what: 'object' })
    } catch (err) {
      throw this.missing(err, id, what)
    }
  }

  /**
   * Marks an object as just written by setting its mtime to now. gc never removes an object
   * younger than its grace period, so a writer that finds an old unreferenced object already
   * there (and so does not write it) keeps it alive until its own reference is in a log, as git
   * freshens loose objects.
   */
  protected freshen(id: string): void {
    try {
      const now = new Date()
      utimesSync(this.pathOf(id), now, now)
    } catch {
      // Gone since it was seen (gc took it): the caller's write of it already happened or the
      // next read names it; freshening is only a hint for gc's grace period.
    }
  }

  /** Size of a stored object, -1 when absent; something else under its name is refused. */
  protected sizeOf(id: string): number {
    const size = this.looseSize(id)
    if (size >= 0) return size
    return objectLogIndex(this.root).find(id)?.length ?? -1
  }

  /** Size of an object's own file, -1 when it has none (an object log may still hold it). */
  protected looseSize(id: string): number {
    const file = this.pathOf(id)
    return this.checkDir(dirname(file)) ? (statFile(file, 'object')?.size ?? -1) : -1
  }

  /** The bytes of an object that is in an object log and not a file of its own (unchecked), or null. */
  protected logged(id: string): Buffer | null {
    const loc = objectLogIndex(this.root).find(id)
    if (loc !== null) {
      const bytes = objectLogIndex(this.root).read(loc)
      if (bytes !== null) return bytes
      // Its log is gone: gc wrote the log again, elsewhere, with the objects still reachable
      // (gc.ts). What this process knew of the logs is stale: learn them again.
      const fresh = resetObjectLogIndex(this.root)
      const again = fresh.find(id)
      if (again !== null) return fresh.read(again)
    }
    // A power cut can leave an object only in a dead process's commit journal until a writer
    // replays it: a reader reads it from there (journal-view.ts), writing nothing.
    return journalFile(this.root, `objects/${id.slice(0, 2)}/${id.slice(2)}`)
  }

  /**
   * Whether a folder of the store exists, every component below the root a real directory
   * (a symlinked `objects/` or shard is NOA_NOT_DIRECTORY). Remembered once true.
   */
  protected checkDir(d: string): boolean {
    if (this.knownDirs.has(d)) return true
    // Below a folder already checked, only the last component is left to check.
    const up = dirname(d)
    if (checkDirsBelow(this.knownDirs.has(up) ? up : this.root, d) !== null) return false
    this.knownDirs.add(d)
    this.knownDirs.add(up)
    return true
  }

  /** mkdir -p below the root (no symlinked components), each new folder fsynced in its parent. */
  private ensureDir(d: string): void {
    if (this.knownDirs.has(d)) return
    mkdirDurable(this.root, d)
    this.knownDirs.add(d)
  }
}
