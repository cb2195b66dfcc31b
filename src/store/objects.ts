/**
 * The object store (design.md §4): `<root>/objects/<2 hex>/<62 hex>`, each object named by the
 * SHA-256 of its bytes. It holds blobs (file contents, as given), trees (tree.ts) and snapshot
 * records. Writes go to a temp file that is fsynced and renamed into place, then the directory
 * is fsynced; an object that exists is never rewritten (unless its size is wrong, i.e. it is
 * damaged). Every read is checked against the hash: a damaged object is an error naming it.
 *
 * Snapshot ids are `noa_` + the hash of the record, so resolving one is a single object read.
 *
 * A tree is named by the hash of its canonical encoding (tree.ts) but may be stored as a delta:
 * the paths changed since a base tree. An incremental snapshot then writes what changed, not
 * the whole tree again. Reading one rebuilds the tree from the chain (at most MAX_DELTA_DEPTH
 * deltas over a full tree) and checks the result against the name, so the guarantee is the
 * same: a damaged object, or a damaged link of its chain, is an error naming the tree.
 */
import { createHash, hash } from 'node:crypto'
import { closeSync, fstatSync, readFileSync, readSync, renameSync, rmSync, utimesSync } from 'node:fs'
import { dirname, join, sep } from 'node:path'
import { fsyncDirs, mkdirDurable, writeTempFile } from '../engine/atomic.js'
import type { ObjectChecks } from '../engine/checks.js'
import { checkSnapshotId, type EntryInput, isWorkspaceName, type SnapshotEntry } from '../engine/entry.js'
import { Errors, NoaError } from '../engine/errors.js'
import { checkDirsBelow, openFile, openFileSync, READ, statFile } from '../engine/files.js'
import { journalFile } from '../engine/journal-view.js'
import {
  blobCutter,
  blobObjects,
  CHUNK_HEADER_LENGTH,
  CHUNK_MAX,
  CHUNK_THRESHOLD,
  type ChunkList,
  type ChunkRef,
  encodeChunkList,
  looksLikeChunkList,
  parseChunkList,
} from './chunks.js'
import { objectLogIndex, resetObjectLogIndex } from './object-logs.js'
import type { Dir, Pack } from './pack.js'
import { encodedPack } from './pack-build.js'
import { decodePack } from './pack-decode.js'
import { PACK_HEADER } from './pack-v1.js'
import { PACK2_HEADER } from './pack-v2.js'
import { packFromSorted } from './pack-walk.js'
import { checkRecordEntries } from './records.js'
import { NO_EFFECT_REASONS, SKIP_REASONS, type Skipped } from './replay.js'
import type {
  ConflictSide,
  RecordedNoEffect,
  SnapshotRecord,
  SnapshotRecordInput,
} from './snapshot-record.js'
import { TREE_HEADER, Tree, TreeBuilder } from './tree.js'

const HASH_RE = /^[0-9a-f]{64}$/
const NOA_ID_RE = /^noa_[0-9a-f]{64}$/
const SNAPSHOT_HEADER = 'noa-snapshot 1\n'
/**
 * Objects are immutable: once created (0666 before the umask, like any file) their write bits
 * are cleared, which discourages editing them in place without widening what the umask allowed.
 */
const OBJECT_WRITE = { readOnly: true, what: 'object' } as const
/** Chunk size of a streamed blob read. */
const STREAM_CHUNK = 1 << 20
/** Bytes of chunks a streamed blob write gathers before it writes them. */
const STREAM_BATCH = 4 << 20
/** Chunk lists within chunk lists (a chunk whose bytes are another chunked blob) followed at most. */
const MAX_LIST_DEPTH = 4
/** Temp files written at once by a batch (their fsyncs run in libuv's pool). */
const PARALLEL_WRITES = 16
const TREE_CACHE = 4
/** Objects up to this size are read in one synchronous call (fewer thread-pool round trips). */
const SYNC_READ = 4 << 20
const TREE_DELTA_HEADER = 'noa-tree-delta 1\n'
/**
 * Longest chain of flat deltas the format before wrote before storing a tree whole again (a
 * longer chain is read as damage).
 */
export const MAX_DELTA_DEPTH = 4
/** Blob field of a delta record that removes the path. */
const REMOVED = '-'.repeat(64)
/** Packs kept decoded (each holds the folders read from it), at most. */
const PACK_CACHE = 256
/**
 * The default budget of the packs kept decoded, in bytes (Pack.heldBytes). A host that takes
 * snapshot after snapshot builds a pack each time (about 1 MB at 10k paths, 2 MB at 100k). Kept
 * by count alone, with the 1 MB chunks each build wrote its folders in, an engine kept open
 * for 200 snapshots at 10k paths reached 565 MB of RSS, growing by about 2 MB a snapshot.
 */
export const PACK_CACHE_BYTES = 64 << 20
/** A pack up to this size is read whole at once; a larger one a folder at a time. */
const WHOLE_PACK = 1 << 20

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

export type {
  ConflictSide,
  MergeConflict,
  RecordedNoEffect,
  SnapshotRecord,
  SnapshotRecordInput,
} from './snapshot-record.js'

export type BlobSource = Uint8Array | string | AsyncIterable<Uint8Array | string>

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

/** Canonical bytes of a snapshot record: fixed key order, optional keys left out. */
export function encodeSnapshotRecord(r: SnapshotRecordInput): Buffer {
  const o: Record<string, unknown> = { workspace: r.workspace, tree: r.tree }
  if (r.parent !== undefined) o.parent = r.parent
  if (r.merged !== undefined) o.merged = r.merged
  if (r.base !== undefined) o.base = r.base
  o.since = r.since
  o.seq = r.seq
  if (r.noEffect !== undefined && r.noEffect.length > 0) {
    o.no_effect = r.noEffect.map((n) => ({ seq: n.seq, reason: n.reason }))
  }
  if (r.skipped !== undefined && r.skipped.length > 0) {
    o.skipped = r.skipped.map((k) => {
      const x: Record<string, unknown> = {}
      if (k.offset !== undefined) x.offset = k.offset
      if (k.length !== undefined) x.length = k.length
      if (k.firstSeq !== undefined) x.first_seq = k.firstSeq
      if (k.lastSeq !== undefined) x.last_seq = k.lastSeq
      x.reason = k.reason
      return x
    })
  }
  if (r.conflicts !== undefined && r.conflicts.length > 0) {
    o.conflicts = r.conflicts.map((c) => ({
      path: c.path,
      winner: c.winner,
      sides: c.sides.map((x) => {
        const side: Record<string, unknown> = {
          workspace: x.workspace,
          op: x.op,
          blob: x.blob,
          ts: x.ts,
          seq: x.seq,
        }
        if (x.log !== undefined) side.log = x.log
        return side
      }),
    }))
  }
  if (r.pruned !== undefined && r.pruned.length > 0) o.pruned = r.pruned
  o.message = r.message
  o.ts = r.ts
  return Buffer.from(`${SNAPSHOT_HEADER}${JSON.stringify(o)}\n`, 'utf8')
}

function parseSnapshotRecord(id: string, bytes: Buffer): SnapshotRecord {
  const text = bytes.toString('utf8')
  const bad = (why: string) =>
    Errors.CORRUPT_OBJECT(`snapshot record ${id} is malformed: ${why}`, { object: id })
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
  const record: SnapshotRecord = {
    id,
    workspace: o.workspace,
    tree: o.tree,
    since: o.since as number,
    seq: o.seq as number,
    message: o.message,
    ts: o.ts as number,
  }
  if (o.parent !== undefined) record.parent = o.parent as string
  if (o.merged !== undefined) record.merged = o.merged as string[]
  if (o.base !== undefined) record.base = o.base as string
  // Fields added later: absent in older records; unknown keys are ignored, as older readers do.
  if (o.no_effect !== undefined) {
    const list = o.no_effect
    if (
      !Array.isArray(list) ||
      list.some(
        (n) =>
          typeof n !== 'object' ||
          n === null ||
          !isCount(n.seq) ||
          !(NO_EFFECT_REASONS as readonly unknown[]).includes(n.reason),
      )
    )
      throw bad('no_effect')
    record.noEffect = (list as RecordedNoEffect[]).map((n) => ({ seq: n.seq, reason: n.reason }))
  }
  if (o.skipped !== undefined) {
    const list = o.skipped
    const optCount = (v: unknown) => v === undefined || isCount(v)
    if (
      !Array.isArray(list) ||
      list.some(
        (k) =>
          typeof k !== 'object' ||
          k === null ||
          !optCount(k.offset) ||
          !optCount(k.length) ||
          !optCount(k.first_seq) ||
          !optCount(k.last_seq) ||
          !(SKIP_REASONS as readonly unknown[]).includes(k.reason),
      )
    )
      throw bad('skipped')
    record.skipped = (list as Array<Record<string, number | undefined> & { reason: Skipped['reason'] }>).map(
      (k) => {
        const x: Skipped = { reason: k.reason }
        if (k.offset !== undefined) x.offset = k.offset
        if (k.length !== undefined) x.length = k.length
        if (k.first_seq !== undefined) x.firstSeq = k.first_seq
        if (k.last_seq !== undefined) x.lastSeq = k.last_seq
        return x
      },
    )
  }
  if (o.conflicts !== undefined) {
    if (!Array.isArray(o.conflicts)) throw bad('conflicts')
    record.conflicts = o.conflicts.map((c: Record<string, unknown>) => {
      if (typeof c?.path !== 'string' || typeof c.winner !== 'string' || !Array.isArray(c.sides))
        throw bad('conflicts')
      return {
        path: c.path,
        winner: c.winner,
        sides: c.sides.map((x: Record<string, unknown>) => {
          if (typeof x?.workspace !== 'string' || !isCount(x.seq) || !isCount(x.ts)) throw bad('conflicts')
          const side: ConflictSide = {
            workspace: x.workspace,
            op: x.op as ConflictSide['op'],
            blob: typeof x.blob === 'string' ? x.blob : null,
            ts: x.ts as number,
            seq: x.seq as number,
          }
          if (typeof x.log === 'string') side.log = x.log
          return side
        }),
      }
    })
  }
  if (o.pruned !== undefined) {
    if (!Array.isArray(o.pruned) || o.pruned.some((m) => typeof m !== 'string' || !NOA_ID_RE.test(m)))
      throw bad('pruned')
    record.pruned = o.pruned as string[]
  }
  return record
}

function isNotFound(err: unknown): boolean {
  return err instanceof NoaError && err.code === 'NOA_NOT_FOUND'
}

function isSystemError(err: unknown, code: string): boolean {
  return err instanceof Error && (err as NodeJS.ErrnoException).code === code
}

export class ObjectStore implements ObjectChecks {
  readonly root: string
  readonly dir: string
  /** Folders made or checked (every component below the root a real directory). */
  private readonly knownDirs = new Set<string>()
  private readonly trees = new Map<string, Tree>()
  private readonly records = new Map<string, SnapshotRecord>()
  /** Trees built by treeObject, until they are stored. */
  private readonly pending = new Map<string, Pack>()
  /** Packs read or written lately (their folders stay decoded). */
  private readonly packs = new Map<string, Pack>()
  /** Packs read a folder at a time, open until the current synchronous run ends (readRange). */
  private readonly rangeFds = new Map<string, number>()
  /** Packs whose every folder treeObjects has read and checked (once is enough: they are kept). */
  private readonly checkedPacks = new WeakSet<Pack>()
  /** While treeObjects walks a tree: every pack asked for (the ones a reader needs kept). */
  private opened: Set<string> | null = null

  private readonly packCacheBytes: number

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

  /** Bytes the packs kept decoded hold now (Pack.heldBytes summed; see ObjectStoreOptions). */
  get cachedPackBytes(): number {
    let total = 0
    for (const pack of this.packs.values()) total += pack.heldBytes
    return total
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

  /** ObjectChecks (for AgentLog.open({ objects })): whether a blob is stored. */
  hasBlob(hash: string): boolean {
    return this.has(hash)
  }

  /** ObjectChecks: snapshot and merge entries appended by hand must name this workspace's records. */
  checkRecords(workspace: string, entries: readonly EntryInput[], where: (i: number) => string): void {
    checkRecordEntries(this, workspace, entries, where)
  }

  /**
   * ObjectChecks: the last seq a snapshot of this workspace covers, when its record and tree are
   * stored (what a compacted log's base needs: nothing can rebuild that tree any more); null
   * for a snapshot of another workspace, an unknown one, or one whose tree gc took.
   */
  snapshotCover(workspace: string, snapshotId: string): number | null {
    const record = this.peekSnapshot(snapshotId)
    if (!record || record.workspace !== workspace) return null
    return this.has(record.tree) ? record.seq : null
  }

  /**
   * Stores file content; returns its SHA-256. A blob larger than CHUNK_THRESHOLD is stored as
   * content-defined chunks and a chunk list (chunks.ts), a stream as it arrives: the chunks are
   * durable before the list that names them, and this resolves once the list is.
   */
  async putBlob(data: BlobSource): Promise<string> {
    if (typeof data === 'string' || data instanceof Uint8Array) {
      const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : data
      const objects = blobObjects(bytes)
      await this.write(objects)
      return (objects[objects.length - 1] as StoredObject).id
    }
    if (data === null || typeof data !== 'object' || !(Symbol.asyncIterator in data)) {
      throw Errors.BAD_ARGUMENT('putBlob takes bytes, a string or an async iterable of chunks')
    }
    const cutter = blobCutter()
    const hash = createHash('sha256')
    // Bytes not yet cut, from `pos` to `len` of `pending` (a cut needs CHUNK_MAX bytes ahead, or the end).
    let pending = Buffer.allocUnsafe(CHUNK_MAX * 2)
    let pos = 0
    let len = 0
    let size = 0
    const refs: ChunkRef[] = []
    let batch: StoredObject[] = []
    let batchBytes = 0
    const cut = async (end: boolean) => {
      while (len - pos >= (end ? 1 : CHUNK_MAX)) {
        const at = cutter.cut(pending, pos, len).at
        const chunk = Buffer.from(pending.subarray(pos, at))
        const id = sha256(chunk)
        refs.push({ id, length: chunk.length })
        batch.push({ id, data: chunk, exact: true })
        batchBytes += chunk.length
        pos = at
      }
      if (batchBytes >= STREAM_BATCH && !end) {
        await this.write(batch)
        batch = []
        batchBytes = 0
      }
    }
    for await (const part of data) {
      const buf = typeof part === 'string' ? Buffer.from(part, 'utf8') : part
      hash.update(buf)
      size += buf.length
      for (let from = 0; from < buf.length; ) {
        if (len === pending.length) {
          // Keep what is not cut yet at the front (grown when the caller's parts are larger).
          const next = len - pos > pending.length / 2 ? Buffer.allocUnsafe(pending.length * 2) : pending
          pending.copy(next, 0, pos, len)
          pending = next
          len -= pos
          pos = 0
        }
        const n = Math.min(buf.length - from, pending.length - len)
        pending.set(buf.subarray(from, from + n), len)
        len += n
        from += n
        // Whole blobs stay whole: cut only once the blob is known to be larger than that.
        if (size > CHUNK_THRESHOLD) await cut(false)
      }
    }
    const id = hash.digest('hex')
    if (size <= CHUNK_THRESHOLD) {
      await this.write([{ id, data: pending.subarray(pos, len), exact: true }])
      return id
    }
    await cut(true)
    if (refs.length === 1) {
      await this.write([{ id, data: batch[0]?.data as Uint8Array, exact: true }])
      return id
    }
    batch.push({ id, data: encodeChunkList({ size, chunks: refs }), exact: false })
    await this.write(batch)
    return id
  }

  /** A blob's bytes, checked against its hash. */
  async getBlob(id: string): Promise<Buffer> {
    return this.read(checkObjectId(id, 'blob hash'), `blob ${id}`)
  }

  /**
   * A blob's bytes in chunks of at most 1 MiB, never the whole blob in memory. A large blob is
   * hashed first and only then read out, so a damaged one yields nothing (NOA_CORRUPT_OBJECT);
   * the bytes read out are hashed again, and a file changed in between fails after its last
   * chunk. A chunked blob is read the same way through its chunk list.
   */
  async *streamBlob(id: string): AsyncGenerator<Buffer> {
    checkObjectId(id, 'blob hash')
    const what = `blob ${id}`
    const file = this.pathOf(id)
    this.checkDir(dirname(file))
    let handle: Awaited<ReturnType<typeof openFile>>
    try {
      handle = await openFile(file, READ, { what: 'object' })
    } catch (err) {
      const logged = isSystemError(err, 'ENOENT') ? this.logged(id) : null
      if (logged === null) throw this.missing(err, id, what)
      // An object log holds it: small enough to have gone through a journal frame.
      if (sha256(logged) !== id && looksLikeChunkList(logged)) {
        yield* this.streamChunks(id, parseChunkList(id, logged, file), what)
        return
      }
      this.check(id, logged, what)
      for (let at = 0; at < logged.length; at += STREAM_CHUNK) yield logged.subarray(at, at + STREAM_CHUNK)
      return
    }
    let list: ChunkList | null = null
    try {
      const size = (await handle.stat()).size
      if (size <= SYNC_READ) {
        const bytes = await handle.readFile()
        if (sha256(bytes) !== id && looksLikeChunkList(bytes)) list = parseChunkList(id, bytes, file)
        else {
          this.check(id, bytes, what)
          if (bytes.length > 0) yield bytes
          return
        }
      } else {
        const buf = Buffer.allocUnsafe(STREAM_CHUNK)
        const first = createHash('sha256')
        let head: Buffer | null = null
        for (let pos = 0; ; ) {
          const { bytesRead } = await handle.read(buf, 0, buf.length, pos)
          if (bytesRead === 0) break
          if (pos === 0) head = Buffer.from(buf.subarray(0, Math.min(bytesRead, CHUNK_HEADER_LENGTH)))
          first.update(buf.subarray(0, bytesRead))
          pos += bytesRead
        }
        const actual = first.digest('hex')
        if (actual !== id && head !== null && looksLikeChunkList(head)) {
          // A list this large names some 60,000 chunks: read whole, it is still small beside the blob.
          list = parseChunkList(id, await handle.readFile(), file)
        } else {
          this.checkHash(id, actual, what)
          const again = createHash('sha256')
          for (let pos = 0; ; ) {
            // A fresh buffer per chunk: the consumer may keep it after the next read.
            const chunk = Buffer.allocUnsafe(STREAM_CHUNK)
            const { bytesRead } = await handle.read(chunk, 0, chunk.length, pos)
            if (bytesRead === 0) break
            const out = chunk.subarray(0, bytesRead)
            again.update(out)
            pos += bytesRead
            yield out
          }
          this.checkHash(id, again.digest('hex'), `${what} (changed while it was read out)`)
          return
        }
      }
    } finally {
      await handle.close()
    }
    yield* this.streamChunks(id, list, what)
  }

  /**
   * A chunked blob's bytes, chunk by chunk: read whole when small; else every chunk is read
   * and the whole hashed before anything is yielded, then read out again, each chunk checked
   * against its id.
   */
  private async *streamChunks(id: string, list: ChunkList, what: string): AsyncGenerator<Buffer> {
    if (list.size <= SYNC_READ) {
      const bytes = await this.assemble(id, list, what, 0)
      for (let at = 0; at < bytes.length; at += STREAM_CHUNK) yield bytes.subarray(at, at + STREAM_CHUNK)
      return
    }
    const whole = createHash('sha256')
    for (const c of list.chunks) whole.update(await this.readChunk(c, id, what, 0))
    this.checkHash(id, whole.digest('hex'), what)
    for (const c of list.chunks) yield await this.readChunk(c, id, what, 0)
  }

  /** A chunk of blob `blob`, checked against its id and its length in the list. */
  private async readChunk(c: ChunkRef, blob: string, what: string, depth: number): Promise<Buffer> {
    const chunkWhat = `chunk ${c.id} of ${what}`
    const bytes = await this.readResolved(c.id, chunkWhat, depth + 1)
    if (bytes.length !== c.length) {
      throw Errors.CORRUPT_OBJECT(
        `${chunkWhat} is corrupt: ${bytes.length} bytes where its chunk list says ${c.length}`,
        { object: c.id, blob, file: this.pathOf(c.id) },
      )
    }
    return bytes
  }

  /** The bytes of a blob stored as `list`, checked against the blob's id. */
  private async assemble(id: string, list: ChunkList, what: string, depth: number): Promise<Buffer> {
    const parts: Buffer[] = []
    for (const c of list.chunks) parts.push(await this.readChunk(c, id, what, depth))
    const bytes = Buffer.concat(parts, list.size)
    const actual = sha256(bytes)
    if (actual !== id) {
      throw Errors.CORRUPT_OBJECT(
        `${what} is corrupt: its ${list.chunks.length} chunks (${this.pathOf(id)}) hash to ${actual}`,
        { object: id, file: this.pathOf(id) },
      )
    }
    return bytes
  }

  /**
   * The chunks a blob is stored in (its chunk list), or null when it is stored whole; read
   * synchronously (gc and verify reach chunks through the blobs that list them). A blob that is
   * not stored is NOA_NOT_FOUND naming `what`.
   */
  chunksOf(id: string, what = `blob ${id}`): ChunkList | null {
    const file = this.pathOf(id)
    let fd: number
    let bytes: Buffer = Buffer.alloc(0)
    try {
      fd = this.openObject(id, what)
    } catch (err) {
      const logged = isNotFound(err) ? this.logged(id) : null
      if (logged === null) throw err
      fd = -1
      bytes = logged
    }
    if (fd >= 0) {
      try {
        // Most blobs are stored whole: their first bytes say so, nothing more is read.
        const head = Buffer.alloc(CHUNK_HEADER_LENGTH)
        if (readFully(fd, head, 0) < head.length || !looksLikeChunkList(head)) return null
        bytes = Buffer.allocUnsafe(fstatSync(fd).size)
        bytes = bytes.subarray(0, readFully(fd, bytes, 0))
      } finally {
        closeSync(fd)
      }
    }
    if (!looksLikeChunkList(bytes) || sha256(bytes) === id) return null
    return parseChunkList(id, bytes, file)
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

  /** An object's bytes, checked against its id. `what` names it in errors (e.g. `tree <id>`). */
  async read(id: string, what = `object ${id}`): Promise<Buffer> {
    return this.readResolved(id, what, 0)
  }

  /** An object's bytes, a chunked blob's read through its list (lists in lists up to a depth). */
  private async readResolved(id: string, what: string, depth: number): Promise<Buffer> {
    const bytes = await this.readRaw(id, what)
    const actual = sha256(bytes)
    if (actual === id) return bytes
    if (depth < MAX_LIST_DEPTH && looksLikeChunkList(bytes)) {
      return this.assemble(id, parseChunkList(id, bytes, this.pathOf(id)), what, depth)
    }
    throw Errors.CORRUPT_OBJECT(
      `${what} is corrupt: ${this.pathOf(id)} hashes to ${actual} (${bytes.length} bytes)`,
      { object: id, file: this.pathOf(id) },
    )
  }

  private check(id: string, bytes: Buffer, what: string): void {
    const actual = sha256(bytes)
    if (actual !== id) {
      throw Errors.CORRUPT_OBJECT(
        `${what} is corrupt: ${this.pathOf(id)} hashes to ${actual} (${bytes.length} bytes)`,
        { object: id, file: this.pathOf(id) },
      )
    }
  }

  private checkHash(id: string, actual: string, what: string): void {
    if (actual !== id) {
      throw Errors.CORRUPT_OBJECT(`${what} is corrupt: ${this.pathOf(id)} hashes to ${actual}`, {
        object: id,
        file: this.pathOf(id),
      })
    }
  }

  /** A failed open of an object: ENOENT is NOA_NOT_FOUND, anything else as it is. */
  private missing(err: unknown, id: string, what: string): unknown {
    if (!isSystemError(err, 'ENOENT')) return err
    const file = this.pathOf(id)
    return Errors.NOT_FOUND(`${what} not found (no ${file})`, { object: id, file })
  }

  /**
   * An object file's bytes, unchecked. Opened without following a symlink and checked to be a
   * regular file, below folders checked to be real ones: an object store others can write
   * into never makes noa read (or hang on) something outside it.
   */
  private async readRaw(id: string, what: string): Promise<Buffer> {
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
   * How to store a tree just built by `built` (its changes over its base): the folders on the
   * changed paths, in one pack named by the new root (pack-build.ts). `bytes`, the flat listing, is
   * only used when there is no builder (every folder is new then).
   */
  treeObject(bytes: Buffer | null, built?: TreeBuilder): StoredObject {
    let pack: Pack
    if (built) {
      let builder = built
      if (built.base.format === 'flat' && !built.base.isEmpty) {
        // A flat view of a folder tree this store holds (a caller that decoded the listing
        // under the tree's id): build on the stored folders instead, so only changes are new.
        const stored = this.folderTreeSync(built.base.id)
        if (stored) builder = built.withBase(stored)
      }
      pack = builder.buildPack(this)
    } else {
      pack = packFromSorted(Tree.decode('', bytes as Buffer).entries())
    }
    this.pending.set(pack.id, pack)
    return { id: pack.id, data: packBytes(pack), exact: false }
  }

  /**
   * The tree of a pack treeObject built, before it is stored: what the next change builds on
   * (its folders in memory, so nothing is encoded or read back).
   */
  builtTree(id: string): Tree {
    const pack = this.pending.get(id) ?? this.packs.get(id)
    if (!pack) throw new Error(`tree ${id} was not built by treeObject`)
    return Tree.ofPack(pack)
  }

  /** Stores a tree built by `built` (see treeObject); returns its id. */
  async putTree(bytes: Buffer | null, built?: TreeBuilder): Promise<string> {
    const object = this.treeObject(bytes, built)
    await this.write([object])
    this.stored(object.id)
    return object.id
  }

  /**
   * Stores a tree as it is (a tree rebuilt from a log: its own format, so that its id is the one
   * its record names).
   */
  async putWholeTree(tree: Tree): Promise<void> {
    if (tree.format === 'flat') {
      await this.write([{ id: tree.id, data: tree.bytes, exact: true }])
      return
    }
    const pack = packFromSorted(tree.entries())
    if (pack.id !== tree.id) throw new Error(`tree ${tree.id} re-encodes as ${pack.id}`)
    await this.write([{ id: pack.id, data: encodedPack(pack), exact: false }])
  }

  /** Records that a tree from treeObject is now stored, and keeps it for the next reads. */
  stored(id: string, bytes?: Buffer): void {
    const pack = this.pending.get(id)
    this.pending.delete(id)
    if (pack) {
      this.rememberPack(pack)
      this.remember(Tree.ofPack(pack))
    } else if (bytes) {
      this.remember(Tree.decode(id, bytes))
    }
  }

  /** PackSource: a stored pack, read synchronously (its index now, its folders when used). */
  pack(id: string, from?: { tree: string; folder: string }): Pack {
    this.opened?.add(id)
    // A pack built for a commit still in flight: a later tree of the same commit builds on it.
    const built = this.pending.get(id)
    if (built) return built
    const cached = this.packs.get(id)
    if (cached) {
      this.packs.delete(id)
      this.packs.set(id, cached)
      return cached
    }
    const what = from ? `tree ${id} (holding folder ${from.folder} of tree ${from.tree})` : `tree ${id}`
    const file = this.pathOf(id)
    let fd: number
    try {
      fd = this.openObject(id, what)
    } catch (err) {
      const all = isNotFound(err) ? this.logged(id) : null
      if (all === null) throw err
      const pack = decodePack(
        id,
        all,
        () => all,
        this,
        (o, n) => sliceOf(all, o, n, what, id),
        what,
        all.length,
      )
      this.rememberPack(pack)
      return pack
    }
    let pack: Pack
    try {
      const size = fstatSync(fd).size
      const readAt = (offset: number, length: number): Buffer => {
        const buf = Buffer.allocUnsafe(length)
        const got = readFully(fd, buf, offset)
        if (got < length) {
          throw Errors.CORRUPT_OBJECT(`${what} is corrupt: ${file} ends at byte ${offset + got}`, {
            object: id,
            file,
          })
        }
        return buf
      }
      if (size <= WHOLE_PACK) {
        const all = readAt(0, size)
        pack = decodePack(
          id,
          all,
          () => all,
          this,
          (o, n) => sliceOf(all, o, n, what, id),
          what,
          size,
        )
      } else {
        const head = readAt(0, Math.min(size, 64 << 10))
        let index = head
        pack = decodePack(
          id,
          head,
          (n) => {
            index = readAt(0, Math.min(size, n))
            return index
          },
          this,
          (o, n) => this.readRange(id, o, n, what),
          what,
          size,
        )
      }
    } finally {
      closeSync(fd)
    }
    this.rememberPack(pack)
    return pack
  }

  /**
   * An object file opened for reading: without following a symlink, checked to be a regular
   * file, below folders checked to be real ones (unless the caller already did); a missing one
   * is NOA_NOT_FOUND naming `what`.
   */
  private openObject(id: string, what: string, checkFolder = true): number {
    const file = this.pathOf(id)
    if (checkFolder) this.checkDir(dirname(file))
    try {
      return openFileSync(file, READ, { what: 'object' })
    } catch (err) {
      throw this.missing(err, id, what)
    }
  }

  /**
   * Bytes [offset, offset + length) of an object file (a folder of a large pack). A snapshot
   * reads hundreds of folders from the same few packs in one synchronous run: the file stays
   * open until that run is over (an open per folder cost more than the reads).
   */
  private readRange(id: string, offset: number, length: number, what: string): Buffer {
    const file = this.pathOf(id)
    let fd = this.rangeFds.get(id)
    if (fd === undefined) {
      // The folder was checked when the pack holding this range was opened.
      fd = this.openObject(id, what, false)
      if (this.rangeFds.size === 0) setImmediate(() => this.closeRangeFds())
      this.rangeFds.set(id, fd)
    }
    const buf = Buffer.allocUnsafe(length)
    if (readFully(fd, buf, offset) < length) {
      throw Errors.CORRUPT_OBJECT(`${what} is corrupt: ${file} is too short`, {
        object: id,
        file,
      })
    }
    return buf
  }

  private closeRangeFds(): void {
    for (const fd of this.rangeFds.values()) closeSync(fd)
    this.rangeFds.clear()
  }

  /**
   * Keeps a pack decoded, letting the least recently used ones go past PACK_CACHE packs or the
   * byte budget (counted as each pack comes in: folders read since count at the next one).
   */
  private rememberPack(pack: Pack): void {
    this.packs.delete(pack.id)
    this.packs.set(pack.id, pack)
    let total = this.packs.size > 1 ? this.cachedPackBytes : 0
    while (this.packs.size > 1 && (this.packs.size > PACK_CACHE || total > this.packCacheBytes)) {
      const [id, oldest] = this.packs.entries().next().value as [string, Pack]
      total -= oldest.heldBytes
      this.packs.delete(id)
    }
  }

  /** The folder tree stored under `id`, or null when there is none (or it is another kind of object). */
  private folderTreeSync(id: string): Tree | null {
    const cached = this.trees.get(id)
    if (cached) return cached.format === 'dirs' ? cached : null
    if (this.packs.has(id)) return Tree.ofPack(this.pack(id))
    if (this.sizeOf(id) < 0 || !this.isPack(id)) return null
    try {
      return Tree.ofPack(this.pack(id))
    } catch {
      return null
    }
  }

  /** Whether the object file starts with the pack header. */
  private isPack(id: string): boolean {
    const head = Buffer.alloc(PACK_HEADER.length)
    let fd: number
    try {
      fd = openFileSync(this.pathOf(id), READ, { what: 'object' })
    } catch (err) {
      const logged = isSystemError(err, 'ENOENT') ? this.logged(id) : null
      if (logged === null) return false
      logged.copy(head, 0, 0, Math.min(head.length, logged.length))
      fd = -1
    }
    if (fd >= 0) {
      try {
        readFully(fd, head, 0)
      } finally {
        closeSync(fd)
      }
    }
    const magic = head.toString('latin1')
    return magic === PACK2_HEADER || magic === PACK_HEADER
  }

  async getTree(id: string): Promise<Tree> {
    checkObjectId(id, 'tree id')
    const cached = this.trees.get(id)
    if (cached) {
      this.trees.delete(id)
      this.trees.set(id, cached)
      return cached
    }
    // Follow the chain of deltas down to a whole tree (or one in the cache).
    const deltas: Array<{ id: string; bytes: Buffer; body: number; base: string }> = []
    let at = id
    let base: Tree | undefined
    for (;;) {
      base = this.trees.get(at)
      if (base) break
      const what = at === id ? `tree ${id}` : `tree ${at} (in the delta chain of tree ${id})`
      if (at === id && this.isPack(at)) {
        const tree = Tree.ofPack(this.pack(id))
        this.remember(tree)
        return tree
      }
      const bytes = await this.readRaw(at, what)
      if (bytes.subarray(0, TREE_HEADER.length).toString('latin1') === TREE_HEADER) {
        this.check(at, bytes, what)
        base = Tree.decode(at, bytes, what)
        break
      }
      const delta = parseDeltaHeader(bytes)
      if (!delta || deltas.length > MAX_DELTA_DEPTH * 4) {
        throw Errors.CORRUPT_OBJECT(`${what} is not a tree (${this.pathOf(at)})`, {
          object: at,
          file: this.pathOf(at),
        })
      }
      deltas.push({ id: at, bytes, body: delta.body, base: delta.base })
      at = delta.base
    }
    if (deltas.length === 0) {
      this.remember(base)
      return base
    }
    const builder = new TreeBuilder(base)
    for (let i = deltas.length - 1; i >= 0; i--) {
      const d = deltas[i] as (typeof deltas)[number]
      applyDelta(builder, d.bytes, d.body, d.id)
    }
    const bytes = builder.encode()
    const actual = sha256(bytes)
    if (actual !== id) {
      throw Errors.CORRUPT_OBJECT(
        `tree ${id} is corrupt: rebuilt from its delta chain (${deltas.map((d) => d.id).join(' <- ')}) it hashes to ${actual}`,
        { object: id, file: this.pathOf(id) },
      )
    }
    const tree = Tree.decode(id, bytes)
    this.remember(tree)
    return tree
  }

  /**
   * The objects a stored tree is made of. A folder tree: its pack, then every other pack a
   * reader opens to find its folders (all its folders are read and checked, and every folder
   * those packs hold, so damage where no path leads is found too). A flat tree: its own object,
   * then the bases of its delta chain down to a whole tree (headers only). A missing one is
   * NOA_NOT_FOUND naming it.
   */
  async treeObjects(id: string): Promise<string[]> {
    checkObjectId(id, 'tree id')
    if (this.isPack(id)) {
      // The walk is synchronous: no other read can add to the set while it runs.
      const packs = new Set<string>()
      this.opened = packs
      try {
        // Every reference is followed, not every folder once: the same folder named in two
        // places may be found through two packs, and a reader may take either way.
        const seen = new Set<Dir>()
        const walk = (dir: Dir) => {
          seen.add(dir)
          packs.add(dir.pack.id)
          const r = dir.records
          for (let i = 0; i < r.size; i++) {
            if (!r.isDirAt(i)) continue
            const child = dir.childAt(i)
            if (!seen.has(child)) walk(child)
          }
        }
        walk(this.pack(id).root)
        for (const p of packs) {
          const pack = this.pack(p)
          if (this.checkedPacks.has(pack)) continue
          pack.checkAll()
          this.checkedPacks.add(pack)
        }
      } finally {
        this.opened = null
      }
      return [id, ...[...packs].filter((p) => p !== id)]
    }
    const out: string[] = []
    let at = id
    const head = Buffer.allocUnsafe(TREE_DELTA_HEADER.length + 64 + 48)
    for (;;) {
      out.push(at)
      const file = this.pathOf(at)
      let n: number
      let fd: number
      try {
        fd = openFileSync(file, READ, { what: 'object' })
      } catch (err) {
        if (isSystemError(err, 'ENOENT')) {
          const what = at === id ? `tree ${id}` : `tree ${at} (in the delta chain of tree ${id})`
          throw Errors.NOT_FOUND(`${what} not found (no ${file})`, { object: at, file })
        }
        throw err
      }
      try {
        n = readSync(fd, head, 0, head.length, 0)
      } finally {
        closeSync(fd)
      }
      const delta = parseDeltaHeader(head.subarray(0, n))
      if (!delta || out.length > MAX_DELTA_DEPTH * 4) return out
      at = delta.base
    }
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
      throw Errors.NOT_FOUND(`unknown snapshot ${id} (not a snapshot id noa made)`, {
        snapshot: id,
      })
    }
    const hash = id.slice(4)
    let bytes: Buffer
    try {
      bytes = await this.read(hash, `snapshot ${id}`)
    } catch (err) {
      if (err instanceof NoaError && err.code === 'NOA_NOT_FOUND') {
        throw Errors.NOT_FOUND(`unknown snapshot ${id} (no record ${this.pathOf(hash)})`, {
          snapshot: id,
        })
      }
      throw err
    }
    if (!bytes.subarray(0, SNAPSHOT_HEADER.length).equals(Buffer.from(SNAPSHOT_HEADER))) {
      throw Errors.NOT_FOUND(`unknown snapshot ${id}: object ${hash} is not a snapshot record`, {
        snapshot: id,
      })
    }
    const record = parseSnapshotRecord(id, bytes)
    if (this.records.size >= 100_000) this.records.clear()
    this.records.set(id, record)
    return record
  }

  /**
   * Stores a record, together with objects it needs (its tree, from treeObject) in the same
   * batch: one round of fsyncs for all of them.
   */
  async putSnapshot(
    input: SnapshotRecordInput,
    with_: readonly StoredObject[] = [],
  ): Promise<SnapshotRecord> {
    const bytes = encodeSnapshotRecord(input)
    const id = sha256(bytes)
    await this.write([...with_, { id, data: bytes, exact: true }])
    const record: SnapshotRecord = { id: `noa_${id}`, ...input }
    this.records.set(record.id, record)
    return record
  }

  /**
   * Marks an object as just written by setting its mtime to now. gc never removes an object
   * younger than its grace period, so a writer that finds an old unreferenced object already
   * there (and so does not write it) keeps it alive until its own reference is in a log, as git
   * freshens loose objects.
   */
  private freshen(id: string): void {
    try {
      const now = new Date()
      utimesSync(this.pathOf(id), now, now)
    } catch {
      // Gone since it was seen (gc took it): the caller's write of it already happened or the
      // next read names it; freshening is only a hint for gc's grace period.
    }
  }

  /**
   * A snapshot record read synchronously (for checks on the append path), or null when there is
   * no such record. A damaged record is an error, as in getSnapshot.
   */
  peekSnapshot(id: string): SnapshotRecord | null {
    const cached = this.records.get(id)
    if (cached) return cached
    if (!NOA_ID_RE.test(id)) return null
    const hash = id.slice(4)
    let bytes: Buffer = Buffer.alloc(0)
    let fd: number
    try {
      fd = openFileSync(this.pathOf(hash), READ, { what: 'object' })
    } catch (err) {
      if (!isSystemError(err, 'ENOENT')) throw err
      const logged = this.logged(hash)
      if (logged === null) return null
      fd = -1
      bytes = logged
    }
    if (fd >= 0) {
      try {
        bytes = readFileSync(fd)
      } finally {
        closeSync(fd)
      }
    }
    if (!bytes.subarray(0, SNAPSHOT_HEADER.length).equals(Buffer.from(SNAPSHOT_HEADER))) return null
    this.check(hash, bytes, `snapshot ${id}`)
    const record = parseSnapshotRecord(id, bytes)
    if (this.records.size >= 100_000) this.records.clear()
    this.records.set(id, record)
    return record
  }

  /** Size of a stored object, -1 when absent; something else under its name is refused. */
  private sizeOf(id: string): number {
    const size = this.looseSize(id)
    if (size >= 0) return size
    return objectLogIndex(this.root).find(id)?.length ?? -1
  }

  /** Size of an object's own file, -1 when it has none (an object log may still hold it). */
  private looseSize(id: string): number {
    const file = this.pathOf(id)
    return this.checkDir(dirname(file)) ? (statFile(file, 'object')?.size ?? -1) : -1
  }

  /** The bytes of an object that is in an object log and not a file of its own (unchecked), or null. */
  private logged(id: string): Buffer | null {
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
  private checkDir(d: string): boolean {
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

function checkSnapshotIdArgument(id: unknown): void {
  try {
    checkSnapshotId(id, 'snapshot id')
  } catch (err) {
    throw Errors.BAD_ARGUMENT((err as Error).message, { field: 'snapshot id' })
  }
}

/** The `snapshot` log entry for a record: `parent` is the workspace's previous head. */
export function snapshotEntry(record: SnapshotRecord, message: string): SnapshotEntry {
  const e: SnapshotEntry = { op: 'snapshot', snapshot_id: record.id, message }
  if (record.parent !== undefined) e.parent = record.parent
  return e
}

function parseDeltaHeader(
  bytes: Buffer,
): { base: string; depth: number; records: number; body: number } | null {
  if (bytes.subarray(0, TREE_DELTA_HEADER.length).toString('latin1') !== TREE_DELTA_HEADER) return null
  const nl = bytes.indexOf(0x0a, TREE_DELTA_HEADER.length)
  if (nl < 0) return null
  const m = /^([0-9a-f]{64}) (\d+) (\d+)$/.exec(bytes.toString('latin1', TREE_DELTA_HEADER.length, nl))
  if (!m) return null
  return { base: m[1] as string, depth: Number(m[2]), records: Number(m[3]), body: nl + 1 }
}

/** Applies a delta's records (`path NUL blob-or-dashes LF`, the tree framing) to a builder. */
function applyDelta(builder: TreeBuilder, bytes: Buffer, from: number, id: string): void {
  let pos = from
  while (pos < bytes.length) {
    const z = bytes.indexOf(0, pos)
    if (z <= pos || z + 66 > bytes.length || bytes[z + 65] !== 0x0a) {
      throw Errors.CORRUPT_OBJECT(`tree delta ${id}: malformed record at byte ${pos}`, {
        object: id,
      })
    }
    const path = bytes.toString('utf8', pos, z)
    const blob = bytes.toString('latin1', z + 1, z + 65)
    if (blob === REMOVED) builder.remove(path)
    else builder.set(path, blob)
    pos = z + 66
  }
}

function readFully(fd: number, buf: Buffer, position: number): number {
  let got = 0
  while (got < buf.length) {
    const n = readSync(fd, buf, got, buf.length - got, position + got)
    if (n === 0) break
    got += n
  }
  return got
}

/**
 * The stored form of a tree's pack: as built, or (a tree that did not change, whose pack was read)
 * every folder of it in one new pack of the same name.
 */
function packBytes(pack: Pack): Buffer {
  try {
    return encodedPack(pack)
  } catch {
    return encodedPack(packFromSorted(Tree.ofPack(pack).entries()))
  }
}

function sliceOf(all: Buffer, offset: number, length: number, what: string, id: string): Buffer {
  if (offset + length > all.length) {
    throw Errors.CORRUPT_OBJECT(`${what} is corrupt: its index points past its end`, {
      object: id,
    })
  }
  return all.subarray(offset, offset + length)
}
