/**
 * Blobs (objects.ts, a layer of the store's class): file contents stored whole or, past
 * CHUNK_THRESHOLD, as content-defined chunks and a chunk list (chunks.ts); written from bytes or
 * a stream, read whole or streamed, every read checked against the blob's hash.
 */
import { createHash } from 'node:crypto'
import { closeSync, fstatSync } from 'node:fs'
import { dirname } from 'node:path'
import { Errors } from '../engine/errors.js'
import { openFile, READ } from '../engine/files.js'
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
import {
  checkObjectId,
  isNotFound,
  isSystemError,
  ObjectFiles,
  readFully,
  type StoredObject,
  SYNC_READ,
  sha256,
} from './object-files.js'

/** Chunk size of a streamed blob read. */
const STREAM_CHUNK = 1 << 20
/** Bytes of chunks a streamed blob write gathers before it writes them. */
const STREAM_BATCH = 4 << 20
/** Chunk lists within chunk lists (a chunk whose bytes are another chunked blob) followed at most. */
const MAX_LIST_DEPTH = 4

export type BlobSource = Uint8Array | string | AsyncIterable<Uint8Array | string>

export abstract class ObjectBlobs extends ObjectFiles {
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
   * A blob's size in bytes without reading its content: its chunk list's total, or its object's
   * size when stored whole. A blob that is not stored is NOA_NOT_FOUND.
   */
  blobSize(id: string): number {
    const list = this.chunksOf(checkObjectId(id, 'blob hash'))
    if (list !== null) return list.size
    const size = this.sizeOf(id)
    if (size < 0) throw Errors.NOT_FOUND(`blob ${id}: not in the object store`, { blob: id })
    return size
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
}
