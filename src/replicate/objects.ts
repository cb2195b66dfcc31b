/**
 * The object store travels with the logs. A merge on another machine needs the snapshot records
 * and trees the logs name (`noa merge` finds the common base through them), so every object of
 * `<root>/objects/<2 hex>/<62 hex>` is published once on `<prefix>._obj.<id>`, before any log
 * entry read after it was found, and the mirror writes it into its own store before it appends
 * the entries that follow it in the stream.
 *
 * An object larger than a message goes out in parts on its subject, each with
 * `Noa-Object-Size` and `Noa-Object-Offset`; the first part expects the subject to be empty and
 * each later part expects the previous one, so a subject holds one copy of an object, in order,
 * however many publishers hold it. Objects named by the hash of their own bytes are verified
 * against it on both sides. A tree may be stored as a delta against another tree (its file
 * does not hash to its name): the publisher checks it by rebuilding it through the object
 * store, and marks it `Noa-Object-Exact: 0`; the mirror stores its bytes as they are, and the
 * object store checks the rebuilt tree whenever it is read, as on the origin. A blob stored in
 * chunks (store/chunks.ts) travels the same way: each chunk is an object of its own, and its
 * chunk list, under the blob's id, is checked by reading the blob through it and sent as not exact.
 */
import { createHash } from 'node:crypto'
import { closeSync, lstatSync, readdirSync, writeSync } from 'node:fs'
import { type FileHandle, rename, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { fsyncDir, mkdirDurable, writeFileAtomic } from '../engine/atomic.js'
import { Errors } from '../engine/errors.js'
import {
  APPEND_CREATE,
  checkDirsBelow,
  kindOf,
  notDirectory,
  openFile,
  openFileSync,
  READ,
  statFile,
  WRITE_TRUNCATE,
} from '../engine/files.js'
import { objectLogIndex } from '../store/object-logs.js'
import { ObjectStore } from '../store/objects.js'
import { ensureReplicationDir, readReplicationFile, replicationDir } from './checkpoint.js'
import { isWrongLastSequence, replicationError } from './failures.js'
import { sameBytes } from './lines.js'
import type { Link } from './link.js'
import { lastOnSubject, messageAt } from './stream.js'
import {
  HDR_OBJECT_EXACT,
  HDR_OBJECT_OFFSET,
  HDR_OBJECT_SIZE,
  objectMsgId,
  objectSubject,
} from './subjects.js'

const SHARD_RE = /^[0-9a-f]{2}$/
const REST_RE = /^[0-9a-f]{62}$/
/** As the object store's own files: 0666 before the umask, then the write bits cleared. */
const OBJECT_WRITE = { readOnly: true, what: 'object' } as const
/** A directory whose mtime is this close to the scan is read again next time (same-tick writes). */
const RACY_MS = 2_000

export function objectsDir(root: string): string {
  return join(root, 'objects')
}

export function objectFile(root: string, id: string): string {
  return join(objectsDir(root), id.slice(0, 2), id.slice(2))
}

async function hashFile(file: string): Promise<{ hash: string; size: number }> {
  const h = createHash('sha256')
  const handle = await openFile(file, READ, { what: 'object' })
  let size = 0
  try {
    const buf = Buffer.allocUnsafe(1 << 20)
    for (;;) {
      const { bytesRead } = await handle.read(buf, 0, buf.length, size)
      if (bytesRead === 0) break
      h.update(buf.subarray(0, bytesRead))
      size += bytesRead
    }
  } finally {
    await handle.close()
  }
  return { hash: h.digest('hex'), size }
}

/** Something in the object store that is not what the store writes there, found by a scan. */
export interface ObjectProblem {
  file: string
  code: string
  message: string
}

/**
 * Finds objects not yet published. Shard directories whose mtime has not changed since they
 * were last read are not read again; the ids published are remembered in
 * `replication/push.<prefix>.objects` (one per line), so a restart does not send them again.
 * A shard that is not a real folder (a symlink, a file) is not read and is reported in
 * `problems`, once.
 */
export class ObjectScanner {
  private readonly dir: string
  private readonly listFile: string
  private readonly published = new Set<string>()
  private readonly shardMtimes = new Map<string, number>()
  private pendingList: string[] = []
  /** Shards (and objects) skipped because they are not what the store writes, by path. */
  readonly problems = new Map<string, ObjectProblem>()

  constructor(
    readonly root: string,
    prefix: string,
  ) {
    this.dir = objectsDir(root)
    this.listFile = join(replicationDir(root), `push.${prefix}.objects`)
  }

  /** Loads the list of published ids; `reset` forgets it (the stream was made again). */
  load(reset: boolean): void {
    this.published.clear()
    this.shardMtimes.clear()
    if (reset) {
      if (lstatSync(this.listFile, { throwIfNoEntry: false })) {
        ensureReplicationDir(this.root)
        writeFileAtomic(this.listFile, '', { base: this.root, what: 'published-objects list' })
      }
      return
    }
    const bytes = readReplicationFile(this.root, this.listFile, 'published-objects list')
    if (bytes === null) return
    for (const line of bytes.toString('latin1').split('\n')) {
      if (/^[0-9a-f]{64}$/.test(line)) this.published.add(line)
    }
  }

  /** Whether the root has an object store at all (no scan to wait for when not). */
  present(): boolean {
    return checkDirsBelow(this.root, this.dir) === null || objectLogIndex(this.root).ids().length > 0
  }

  get count(): number {
    return this.published.size
  }

  /** Ids present in the store and not yet published, in id order. */
  scan(): string[] {
    if (!this.present()) return []
    const now = Date.now()
    const found: string[] = []
    // Objects appended to object logs (engine/object-log.ts) rather than written as files.
    const logged = objectLogIndex(this.root)
      .ids()
      .filter((id) => !this.published.has(id))
    const shards = checkDirsBelow(this.root, this.dir) === null ? readdirSync(this.dir).sort() : []
    for (const shard of shards) {
      if (!SHARD_RE.test(shard)) continue
      const path = join(this.dir, shard)
      let mtime: number
      try {
        // lstat: a symlinked shard is never read through.
        const st = lstatSync(path)
        if (!st.isDirectory()) {
          const err = notDirectory(path, kindOf(st))
          this.problems.set(path, { file: path, code: err.code, message: err.message })
          continue
        }
        mtime = st.mtimeMs
      } catch {
        continue
      }
      if (this.shardMtimes.get(shard) === mtime) continue
      for (const name of readdirSync(path).sort()) {
        if (!REST_RE.test(name)) continue // temp files and anything else the store may hold
        const id = shard + name
        if (!this.published.has(id)) found.push(id)
      }
      // Trust the mtime only once it is safely in the past.
      if (now - mtime > RACY_MS) this.shardMtimes.set(shard, mtime)
      else this.shardMtimes.delete(shard)
    }
    if (logged.length === 0) return found
    return [...new Set([...found, ...logged])].sort()
  }

  markPublished(id: string): void {
    if (this.published.has(id)) return
    this.published.add(id)
    this.pendingList.push(id)
  }

  /** Appends the newly published ids to the list file (a lost tail only means re-checking them). */
  async flush(): Promise<void> {
    if (this.pendingList.length === 0) return
    const ids = this.pendingList
    this.pendingList = []
    ensureReplicationDir(this.root)
    const fd = openFileSync(this.listFile, APPEND_CREATE, { what: 'published-objects list' })
    try {
      const buf = Buffer.from(`${ids.join('\n')}\n`, 'latin1')
      let off = 0
      while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off)
    } finally {
      closeSync(fd)
    }
  }
}

export interface ObjectPublishContext {
  link: Link
  stream: string
  prefix: string
  /** Largest payload per message. */
  partSize: number
  /** Runs one request with retries on transient failures. */
  retry<T>(what: string, fn: () => Promise<T>): Promise<T>
}

/**
 * Publishes one object (all its parts) unless the stream has it already. Returns the number of
 * parts this call stored (0: the stream had them all).
 */
export async function publishObject(ctx: ObjectPublishContext, root: string, id: string): Promise<number> {
  const file = objectFile(root, id)
  // Not a file of its own: an object log's copy (checked against its id below, as a file is).
  const logged = statFile(file, 'object') === undefined ? loggedObject(root, id) : null
  const { hash, size } = logged
    ? { hash: createHash('sha256').update(logged).digest('hex'), size: logged.length }
    : await hashFile(file)
  const exact = hash === id
  if (!exact) {
    // Not named by its own bytes: a tree stored as a delta or a blob stored as a chunk list,
    // which the store can rebuild and check, or a damaged object.
    const store = new ObjectStore(root)
    try {
      if (store.chunksOf(id) !== null) {
        // Streamed: read through, checked against the id as a whole, never all in memory.
        for await (const _ of store.streamBlob(id)) {
        }
      } else await store.getTree(id)
    } catch (err) {
      throw Errors.CORRUPT_OBJECT(
        `object ${id} (${file}) does not match its hash (${hash}) and is not a tree or a chunked blob the object store can rebuild (${(err as Error).message}): not replicated`,
        { file, id },
      )
    }
  }
  const subject = objectSubject(ctx.prefix, id)
  const handle = logged ? null : await openFile(file, READ, { what: 'object' })
  try {
    let offset = 0
    let expect = 0
    let sent = 0
    const buf = Buffer.allocUnsafe(Math.max(1, Math.min(ctx.partSize, size)))
    for (;;) {
      const len = Math.min(ctx.partSize, size - offset)
      const part = buf.subarray(0, len)
      if (handle) await readFully(handle, part, offset)
      else (logged as Buffer).copy(part, 0, offset, offset + len)
      const extra: Record<string, string> = {
        [HDR_OBJECT_SIZE]: String(size),
        [HDR_OBJECT_OFFSET]: String(offset),
      }
      if (!exact) extra[HDR_OBJECT_EXACT] = '0'
      const outcome = await ctx.retry(`publish object ${id}`, async () => {
        try {
          const ack = await ctx.link.publish(subject, part, objectMsgId(id, offset), expect, extra)
          if (ack.duplicate) {
            const stored = await messageAt(ctx.link, ctx.stream, ack.seq)
            if (!stored || stored.subject !== subject || !sameBytes(stored.data, part)) {
              throw replicationError(
                `object ${id}: the stream reports part at offset ${offset} as a duplicate of stream seq ${ack.seq}, which holds other bytes`,
                { id, streamSeq: ack.seq },
              )
            }
          }
          return { kind: 'stored' as const, seq: ack.seq }
        } catch (err) {
          if (!isWrongLastSequence(err)) throw err
          // Someone published (part of) this object before: continue after what the subject holds.
          const last = await lastOnSubject(ctx.link, ctx.stream, subject)
          if (last === null) throw err
          const lastSize = Number(last.header?.get(HDR_OBJECT_SIZE))
          const lastOffset = Number(last.header?.get(HDR_OBJECT_OFFSET))
          if (lastSize !== size || !Number.isSafeInteger(lastOffset)) {
            throw replicationError(
              `object ${id}: the stream holds a copy of ${lastSize} bytes on ${subject}, but the object has ${size}`,
              { id },
            )
          }
          return { kind: 'moved' as const, seq: last.seq, end: lastOffset + last.data.length }
        }
      })
      if (outcome.kind === 'moved') {
        if (outcome.end >= size) return sent
        offset = outcome.end
        expect = outcome.seq
        continue
      }
      sent++
      expect = outcome.seq
      offset += len
      if (offset >= size) return sent
    }
  } finally {
    await handle?.close()
  }
}

/** An object's bytes from the object log holding it; NOA_NOT_FOUND when none does. */
function loggedObject(root: string, id: string): Buffer {
  const index = objectLogIndex(root)
  const loc = index.find(id)
  const bytes = loc === null ? null : index.read(loc)
  if (bytes === null) {
    throw Errors.NOT_FOUND(`object ${id} not found (no ${objectFile(root, id)}, in no object log)`, {
      object: id,
    })
  }
  return bytes
}

async function readFully(handle: FileHandle, into: Buffer, position: number): Promise<void> {
  let got = 0
  while (got < into.length) {
    const { bytesRead } = await handle.read(into, got, into.length - got, position + got)
    if (bytesRead === 0)
      throw replicationError(`object file shrank while being read at byte ${position + got}`)
    got += bytesRead
  }
}

interface PartialObject {
  size: number
  received: number
  /** Stream sequence of the first part: the mirror's checkpoint must not pass it until done. */
  startSeq: number
  temp: string
  handle: FileHandle
  hash: ReturnType<typeof createHash>
  exact: boolean
}

/**
 * The mirror's side: writes objects that arrive into `<root>/objects/`, verified, atomically,
 * read-only like the store's own. Parts of a large object are gathered in a temp file under
 * `replication/tmp/` and renamed into place when complete.
 */
export class ObjectSink {
  private readonly partials = new Map<string, PartialObject>()
  private readonly tempDir: string
  written = 0

  constructor(readonly root: string) {
    this.tempDir = join(replicationDir(root), 'tmp')
  }

  /** Removes temp files left by a crash (their objects arrive again from an earlier checkpoint). */
  async start(): Promise<void> {
    // Checked first: a symlinked `replication/` or `tmp/` is refused, never emptied through.
    if (checkDirsBelow(this.root, this.tempDir) === null)
      await rm(this.tempDir, { recursive: true, force: true })
  }

  /** Lowest stream sequence that must be received again after a restart (Infinity: none). */
  oldestPending(): number {
    let min = Number.POSITIVE_INFINITY
    for (const p of this.partials.values()) min = Math.min(min, p.startSeq)
    return min
  }

  /** One part of an object; `exact`: the object's bytes hash to its id (else a delta tree). */
  async put(
    id: string,
    size: number,
    offset: number,
    data: Uint8Array,
    streamSeq: number,
    exact = true,
  ): Promise<void> {
    const file = objectFile(this.root, id)
    if (
      !Number.isSafeInteger(size) ||
      !Number.isSafeInteger(offset) ||
      offset < 0 ||
      offset + data.length > size
    ) {
      throw replicationError(
        `object ${id}: a part at stream seq ${streamSeq} has a bad size or offset (${size}, ${offset})`,
        { id, streamSeq },
      )
    }
    let partial = this.partials.get(id)
    if (offset === 0) {
      if (partial) await this.drop(id, partial)
      partial = undefined
      if (this.has(id)) return
      if (data.length === size) {
        if (exact) this.check(id, createHash('sha256').update(data).digest('hex'), streamSeq)
        this.ensureShard(id)
        writeFileAtomic(file, data, { ...OBJECT_WRITE, base: this.root })
        this.written++
        return
      }
      mkdirDurable(this.root, this.tempDir)
      const temp = join(this.tempDir, `${id}.part`)
      const handle = await openFile(temp, WRITE_TRUNCATE, { what: 'temp file' })
      partial = { size, received: 0, startSeq: streamSeq, temp, handle, hash: createHash('sha256'), exact }
      this.partials.set(id, partial)
    }
    if (!partial) {
      if (this.has(id)) return // a part of an object we have
      throw replicationError(
        `object ${id}: part at offset ${offset} (stream seq ${streamSeq}) arrived without the parts before it`,
        { id, streamSeq },
      )
    }
    if (offset !== partial.received || size !== partial.size) {
      throw replicationError(
        `object ${id}: part at offset ${offset} (stream seq ${streamSeq}) does not continue the ${partial.received} bytes received`,
        { id, streamSeq },
      )
    }
    await partial.handle.write(data, 0, data.length, offset)
    partial.hash.update(data)
    partial.received += data.length
    if (partial.received < partial.size) return
    this.partials.delete(id)
    try {
      if (partial.exact) this.check(id, partial.hash.digest('hex'), streamSeq)
      const mode = (await partial.handle.stat()).mode & 0o7777
      await partial.handle.chmod(mode & ~0o222)
      await partial.handle.sync()
    } finally {
      await partial.handle.close()
    }
    this.ensureShard(id)
    await rename(partial.temp, file)
    fsyncDir(join(objectsDir(this.root), id.slice(0, 2)))
    this.written++
  }

  private check(id: string, hash: string, streamSeq: number): void {
    if (hash !== id) {
      throw Errors.CORRUPT_OBJECT(
        `object ${id} from the stream (ending at stream seq ${streamSeq}) does not match its hash (${hash}): not written`,
        { id, streamSeq },
      )
    }
  }

  /** Whether the object is stored; something else under its name is NOA_NOT_REGULAR_FILE. */
  private has(id: string): boolean {
    const file = objectFile(this.root, id)
    if (checkDirsBelow(this.root, join(objectsDir(this.root), id.slice(0, 2))) !== null) return false
    return statFile(file, 'object') !== undefined
  }

  private ensureShard(id: string): void {
    mkdirDurable(this.root, join(objectsDir(this.root), id.slice(0, 2)))
  }

  private async drop(id: string, p: PartialObject): Promise<void> {
    this.partials.delete(id)
    await p.handle.close().catch(() => {})
    await rm(p.temp, { force: true })
  }

  async close(): Promise<void> {
    for (const [id, p] of [...this.partials]) await this.drop(id, p)
  }
}
