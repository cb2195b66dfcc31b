/**
 * The object store (design.md §4): `<root>/objects/<2 hex>/<62 hex>`, each object named by the
 * SHA-256 of its bytes. It holds blobs (file contents, as given), trees (tree.ts) and snapshot
 * records. Writes go to a temp file that is fsynced and renamed into place, then the directory
 * is fsynced; an object that exists is never rewritten (unless its size is wrong, i.e. it is
 * damaged). Every read is checked against the hash: a damaged object is an error naming it.
 *
 * Snapshot ids are `noa_` + the hash of the record, so resolving one is a single object read.
 */
import { createHash } from 'node:crypto'
import { mkdirSync, renameSync, rmSync, statSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { fsyncDir, TempFile, writeTempFile } from './atomic.js'
import { checkSnapshotId, isWorkspaceName, type SnapshotEntry } from './entry.js'
import { NoaError } from './errors.js'
import { Tree } from './tree.js'

const HASH_RE = /^[0-9a-f]{64}$/
const NOA_ID_RE = /^noa_[0-9a-f]{64}$/
const SNAPSHOT_HEADER = 'noa-snapshot 1\n'
/** Objects are immutable: read-only files discourage editing them in place. */
const OBJECT_MODE = 0o444
/** Temp files written at once by a batch (their fsyncs run in libuv's pool). */
const PARALLEL_WRITES = 16
const TREE_CACHE = 4

/** A snapshot record as stored (design.md §4; field order is the encoding's). */
export interface SnapshotRecord {
  /** `noa_` + the SHA-256 of the stored record (not itself stored). */
  id: string
  /** Workspace whose log the snapshot covers. */
  workspace: string
  /** Tree id. */
  tree: string
  /** The workspace's previous snapshot (or the snapshot it was forked from); absent for the first. */
  parent?: string
  /** Merge snapshots only: the source snapshots merged in, in the order given. */
  merged?: string[]
  /** Merge snapshots only: the common base (absent when the sources share no snapshot). */
  base?: string
  /** The replay started after this seq of the workspace's log (the parent's position in it). */
  since: number
  /** Last seq of the workspace's log the snapshot covers. */
  seq: number
  message: string
  /** Creation time, unix µs. */
  ts: number
}

export type SnapshotRecordInput = Omit<SnapshotRecord, 'id'>

export type BlobSource = Uint8Array | string | AsyncIterable<Uint8Array | string>

export function sha256(data: Uint8Array | string): string {
  return createHash('sha256').update(data).digest('hex')
}

/** A well-formed object id (64 lowercase hex) or a NOA_BAD_ARGUMENT naming `what`. */
export function checkObjectId(id: unknown, what = 'object id'): string {
  if (typeof id !== 'string' || !HASH_RE.test(id)) {
    throw new NoaError(
      'NOA_BAD_ARGUMENT',
      `${what} must be 64 lowercase hex characters (a SHA-256), got ${JSON.stringify(id)}`,
      { field: what },
    )
  }
  return id
}

/** Canonical bytes of a snapshot record: fixed key order, optional keys left out. */
export function encodeSnapshotRecord(r: SnapshotRecordInput): Buffer {
  const o: Record<string, unknown> = { workspace: r.workspace, tree: r.tree }
  if (r.parent !== undefined) o.parent = r.parent
  if (r.merged !== undefined) o.merged = r.merged
  if (r.base !== undefined) o.base = r.base
  o.since = r.since
  o.seq = r.seq
  o.message = r.message
  o.ts = r.ts
  return Buffer.from(`${SNAPSHOT_HEADER}${JSON.stringify(o)}\n`, 'utf8')
}

function parseSnapshotRecord(id: string, bytes: Buffer): SnapshotRecord {
  const text = bytes.toString('utf8')
  const bad = (why: string) =>
    new NoaError('NOA_CORRUPT_OBJECT', `snapshot record ${id} is malformed: ${why}`, { object: id })
  if (!text.startsWith(SNAPSHOT_HEADER) || !text.endsWith('\n')) throw bad('no "noa-snapshot 1" header')
  let o: Record<string, unknown>
  try {
    o = JSON.parse(text.slice(SNAPSHOT_HEADER.length)) as Record<string, unknown>
  } catch (err) {
    throw bad((err as Error).message)
  }
  const isCount = (v: unknown) => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0
  if (!isWorkspaceName(o.workspace)) throw bad('workspace')
  if (typeof o.tree !== 'string' || !HASH_RE.test(o.tree)) throw bad('tree')
  if (o.parent !== undefined && (typeof o.parent !== 'string' || !NOA_ID_RE.test(o.parent)))
    throw bad('parent')
  if (
    o.merged !== undefined &&
    (!Array.isArray(o.merged) || o.merged.some((m) => typeof m !== 'string' || !NOA_ID_RE.test(m)))
  )
    throw bad('merged')
  if (o.base !== undefined && (typeof o.base !== 'string' || !NOA_ID_RE.test(o.base))) throw bad('base')
  if (!isCount(o.since) || !isCount(o.seq) || !isCount(o.ts)) throw bad('since, seq or ts')
  if (typeof o.message !== 'string') throw bad('message')
  return { id, ...(o as Omit<SnapshotRecord, 'id'>) }
}

function isSystemError(err: unknown, code: string): boolean {
  return err instanceof Error && (err as NodeJS.ErrnoException).code === code
}

export class ObjectStore {
  readonly root: string
  readonly dir: string
  private readonly knownDirs = new Set<string>()
  private readonly trees = new Map<string, Tree>()
  private readonly records = new Map<string, SnapshotRecord>()

  /** `root` is the noa root (the folder holding `agent-logs/`). */
  constructor(root: string) {
    this.root = root
    this.dir = join(root, 'objects')
  }

  pathOf(id: string): string {
    return join(this.dir, id.slice(0, 2), id.slice(2))
  }

  /** Whether an object is stored (by name only; reads check the content). */
  has(id: string): boolean {
    return statSync(this.pathOf(checkObjectId(id)), { throwIfNoEntry: false }) !== undefined
  }

  /** Stores file content; returns its SHA-256. A stream is hashed as it is written to disk. */
  async putBlob(data: BlobSource): Promise<string> {
    if (typeof data === 'string' || data instanceof Uint8Array) {
      const [id] = await this.putObjects([typeof data === 'string' ? Buffer.from(data, 'utf8') : data])
      return id as string
    }
    if (data === null || typeof data !== 'object' || !(Symbol.asyncIterator in data)) {
      throw new NoaError('NOA_BAD_ARGUMENT', 'putBlob takes bytes, a string or an async iterable of chunks')
    }
    this.ensureDir(this.dir)
    const temp = await TempFile.create(this.dir, { mode: OBJECT_MODE, tempPrefix: '.blob-' })
    let id: string
    let size = 0
    try {
      const hash = createHash('sha256')
      for await (const chunk of data) {
        const buf = typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : chunk
        hash.update(buf)
        size += buf.length
        await temp.write(buf)
      }
      await temp.finish()
      id = hash.digest('hex')
    } catch (err) {
      await temp.abort()
      throw err
    }
    if (this.sizeOf(id) === size) {
      rmSync(temp.path, { force: true })
      return id
    }
    const target = this.pathOf(id)
    this.ensureDir(dirname(target))
    try {
      renameSync(temp.path, target)
    } catch (err) {
      rmSync(temp.path, { force: true })
      throw err
    }
    fsyncDir(dirname(target))
    return id
  }

  /** A blob's bytes, checked against its hash. */
  async getBlob(id: string): Promise<Buffer> {
    return this.read(checkObjectId(id, 'blob hash'), `blob ${id}`)
  }

  /**
   * Stores objects durably; returns their ids. Every new object is written and fsynced (up to
   * PARALLEL_WRITES at once) before any is renamed into place, then each directory is fsynced
   * once: when this resolves, all of them survive a crash.
   */
  async putObjects(items: readonly Uint8Array[]): Promise<string[]> {
    const ids = items.map((b) => sha256(b))
    const todo = new Map<string, Uint8Array>()
    items.forEach((b, i) => {
      const id = ids[i] as string
      if (!todo.has(id) && this.sizeOf(id) !== b.length) todo.set(id, b)
    })
    if (todo.size === 0) return ids
    const entries = [...todo]
    const temps: string[] = new Array(entries.length)
    try {
      for (let i = 0; i < entries.length; i += PARALLEL_WRITES) {
        await Promise.all(
          entries.slice(i, i + PARALLEL_WRITES).map(async ([id, data], k) => {
            const dir = dirname(this.pathOf(id))
            this.ensureDir(dir)
            temps[i + k] = await writeTempFile(dir, data, { mode: OBJECT_MODE, tempPrefix: '.obj-' })
          }),
        )
      }
      const dirs = new Set<string>()
      entries.forEach(([id], i) => {
        renameSync(temps[i] as string, this.pathOf(id))
        temps[i] = ''
        dirs.add(dirname(this.pathOf(id)))
      })
      for (const d of dirs) fsyncDir(d)
    } finally {
      for (const t of temps) if (t) rmSync(t, { force: true })
    }
    return ids
  }

  /** An object's bytes, checked against its id. `what` names it in errors (e.g. `tree <id>`). */
  async read(id: string, what = `object ${id}`): Promise<Buffer> {
    const file = this.pathOf(id)
    let bytes: Buffer
    try {
      bytes = await readFile(file)
    } catch (err) {
      if (isSystemError(err, 'ENOENT')) {
        throw new NoaError('NOA_NOT_FOUND', `${what} not found (no ${file})`, { object: id, file })
      }
      throw err
    }
    const actual = sha256(bytes)
    if (actual !== id) {
      throw new NoaError(
        'NOA_CORRUPT_OBJECT',
        `${what} is corrupt: ${file} hashes to ${actual} (${bytes.length} bytes)`,
        { object: id, file },
      )
    }
    return bytes
  }

  async putTree(bytes: Uint8Array): Promise<string> {
    const [id] = await this.putObjects([bytes])
    return id as string
  }

  async getTree(id: string): Promise<Tree> {
    const cached = this.trees.get(id)
    if (cached) {
      this.trees.delete(id)
      this.trees.set(id, cached)
      return cached
    }
    const tree = Tree.decode(id, await this.read(checkObjectId(id, 'tree id'), `tree ${id}`))
    this.remember(tree)
    return tree
  }

  /** Keeps a tree just built (whose bytes are known to hash to its id) for the next reads. */
  remember(tree: Tree): void {
    this.trees.set(tree.id, tree)
    while (this.trees.size > TREE_CACHE) this.trees.delete(this.trees.keys().next().value as string)
  }

  /** Resolves a snapshot id to its record: one object read, never a log scan. */
  async getSnapshot(id: string): Promise<SnapshotRecord> {
    const cached = this.records.get(id)
    if (cached) return cached
    checkSnapshotIdArgument(id)
    if (!NOA_ID_RE.test(id)) {
      throw new NoaError('NOA_NOT_FOUND', `unknown snapshot ${id} (not a snapshot id noa made)`, {
        snapshot: id,
      })
    }
    const hash = id.slice(4)
    let bytes: Buffer
    try {
      bytes = await this.read(hash, `snapshot ${id}`)
    } catch (err) {
      if (err instanceof NoaError && err.code === 'NOA_NOT_FOUND') {
        throw new NoaError('NOA_NOT_FOUND', `unknown snapshot ${id} (no record ${this.pathOf(hash)})`, {
          snapshot: id,
        })
      }
      throw err
    }
    if (!bytes.subarray(0, SNAPSHOT_HEADER.length).equals(Buffer.from(SNAPSHOT_HEADER))) {
      throw new NoaError('NOA_NOT_FOUND', `unknown snapshot ${id}: object ${hash} is not a snapshot record`, {
        snapshot: id,
      })
    }
    const record = parseSnapshotRecord(id, bytes)
    if (this.records.size >= 100_000) this.records.clear()
    this.records.set(id, record)
    return record
  }

  /** Stores a record (with its tree already stored, or in `alsoStore`); returns the record. */
  async putSnapshot(
    input: SnapshotRecordInput,
    alsoStore: readonly Uint8Array[] = [],
  ): Promise<SnapshotRecord> {
    const bytes = encodeSnapshotRecord(input)
    const ids = await this.putObjects([...alsoStore, bytes])
    const record: SnapshotRecord = { id: `noa_${ids[ids.length - 1]}`, ...input }
    this.records.set(record.id, record)
    return record
  }

  private sizeOf(id: string): number {
    return statSync(this.pathOf(id), { throwIfNoEntry: false })?.size ?? -1
  }

  /** mkdir -p, with each new directory's entry fsynced in its parent. */
  private ensureDir(d: string): void {
    if (this.knownDirs.has(d)) return
    const created = mkdirSync(d, { recursive: true })
    if (created !== undefined) {
      for (let p = d; ; p = dirname(p)) {
        fsyncDir(dirname(p))
        if (p === created || dirname(p) === p) break
      }
    }
    this.knownDirs.add(d)
  }
}

function checkSnapshotIdArgument(id: unknown): void {
  try {
    checkSnapshotId(id, 'snapshot id')
  } catch (err) {
    throw new NoaError('NOA_BAD_ARGUMENT', (err as Error).message, { field: 'snapshot id' })
  }
}

/** The `snapshot` log entry for a record: `parent` is the workspace's previous head. */
export function snapshotEntry(record: SnapshotRecord, message: string): SnapshotEntry {
  const e: SnapshotEntry = { op: 'snapshot', snapshot_id: record.id, message }
  if (record.parent !== undefined) e.parent = record.parent
  return e
}
