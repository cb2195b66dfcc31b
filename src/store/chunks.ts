/**
 * Chunked blobs (docs/chunked-objects.md). A blob larger than CHUNK_THRESHOLD is cut by FastCDC
 * (fastcdc.ts) into chunks, each stored once as an object named by the SHA-256 of its bytes;
 * the object stored under the blob's own id (still the SHA-256 of its whole bytes) is then a
 * chunk list:
 *
 *     noa-chunks 1\n
 *     <total size> <chunk count>\n
 *     <chunk id> <chunk length>\n      (once per chunk, in order)
 *
 * The list does not hash to the blob's id, so a reader tells a list from a blob that merely
 * starts with the header by the hash: bytes that hash to the id are the blob whatever they
 * hold. A blob read through its list is checked against its id as a whole, as a blob stored
 * whole is. A blob that stays one chunk (no cut found) is stored whole: a chunk named like its
 * own list could not be told from it.
 */
import { hash } from 'node:crypto'
import { Errors } from '../engine/errors.js'
import { type Cutter, fastcdc } from './fastcdc.js'

export const CHUNK_LIST_HEADER = 'noa-chunks 1\n'
/** Blobs up to this size are stored whole. */
export const CHUNK_THRESHOLD = 16 << 10
/** FastCDC sizes (chosen by measurement: docs/chunked-objects.md). */
export const CHUNK_MIN = 2 << 10
export const CHUNK_AVG = 8 << 10
export const CHUNK_MAX = 64 << 10

const HEADER_BYTES = Buffer.from(CHUNK_LIST_HEADER, 'latin1')

let cutter: Cutter | undefined
export function blobCutter(): Cutter {
  cutter ??= fastcdc({ min: CHUNK_MIN, avg: CHUNK_AVG, max: CHUNK_MAX })
  return cutter
}

export interface ChunkRef {
  id: string
  length: number
}

export interface ChunkList {
  size: number
  chunks: ChunkRef[]
}

/** An object of a blob to store: `exact` when its bytes hash to its id (the list does not). */
export interface BlobObject {
  id: string
  data: Uint8Array
  exact: boolean
}

function sha256(data: Uint8Array): string {
  return hash('sha256', data, 'hex')
}

/**
 * The objects that store `data` as the blob `id` (the SHA-256 of data, computed when not given):
 * the blob itself when it is small or stays one chunk; else its chunks (each once), then its
 * list, last.
 */
export function blobObjects(data: Uint8Array, id = sha256(data)): BlobObject[] {
  if (data.length <= CHUNK_THRESHOLD) return [{ id, data, exact: true }]
  const c = blobCutter()
  const refs: ChunkRef[] = []
  const out: BlobObject[] = []
  const seen = new Set<string>()
  for (let at = 0; at < data.length; ) {
    const end = c.cut(data, at, data.length).at
    const chunk = data.subarray(at, end)
    const ref = { id: sha256(chunk), length: end - at }
    refs.push(ref)
    if (!seen.has(ref.id)) {
      seen.add(ref.id)
      out.push({ id: ref.id, data: chunk, exact: true })
    }
    at = end
  }
  if (refs.length === 1) return [{ id, data, exact: true }]
  out.push({ id, data: encodeChunkList({ size: data.length, chunks: refs }), exact: false })
  return out
}

export function encodeChunkList(list: ChunkList): Buffer {
  const lines = [CHUNK_LIST_HEADER, `${list.size} ${list.chunks.length}\n`]
  for (const c of list.chunks) lines.push(`${c.id} ${c.length}\n`)
  return Buffer.from(lines.join(''), 'latin1')
}

/** Whether bytes start like a chunk list (they may still be a blob: the hash decides). */
export function looksLikeChunkList(bytes: Uint8Array): boolean {
  if (bytes.length < HEADER_BYTES.length) return false
  for (let i = 0; i < HEADER_BYTES.length; i++) if (bytes[i] !== HEADER_BYTES[i]) return false
  return true
}

export const CHUNK_HEADER_LENGTH = HEADER_BYTES.length

/** A chunk list's entries; malformed bytes are NOA_CORRUPT_OBJECT naming the blob. */
export function parseChunkList(id: string, bytes: Buffer, file: string): ChunkList {
  const bad = (why: string) =>
    Errors.CORRUPT_OBJECT(`blob ${id} is corrupt: its chunk list ${file} ${why}`, { object: id, file })
  if (!looksLikeChunkList(bytes)) throw bad('has no "noa-chunks 1" header')
  const text = bytes.toString('latin1', HEADER_BYTES.length)
  if (!text.endsWith('\n')) throw bad('does not end with a newline')
  const lines = text.slice(0, -1).split('\n')
  const head = /^(\d{1,15}) (\d{1,9})$/.exec(lines[0] ?? '')
  if (!head) throw bad('has no "<size> <count>" line')
  const size = Number(head[1])
  const count = Number(head[2])
  if (lines.length - 1 !== count) throw bad(`says ${count} chunks but lists ${lines.length - 1}`)
  const chunks: ChunkRef[] = new Array(count)
  let total = 0
  for (let i = 0; i < count; i++) {
    const m = /^([0-9a-f]{64}) ([1-9]\d{0,9})$/.exec(lines[i + 1] as string)
    if (!m) throw bad(`has a malformed line ${i + 3}`)
    const length = Number(m[2])
    chunks[i] = { id: m[1] as string, length }
    total += length
  }
  if (total !== size) throw bad(`lists chunks of ${total} bytes in all, not ${size}`)
  return { size, chunks }
}
