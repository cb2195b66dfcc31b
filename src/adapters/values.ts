/**
 * Serialized values inside the JSON records adapters store as blobs. Small values are kept in
 * the record (as text when their bytes are UTF-8, as base64 otherwise); a large one becomes a
 * blob of its own, named in the record by its hash, so a value carried unchanged from one
 * checkpoint to the next is stored once.
 */
import { Errors } from '../engine/errors.js'
import { blobObjects } from '../store/chunks.js'
import type { ObjectStore, StoredObject } from '../store/objects.js'

/** Values above this size are stored as blobs of their own. */
export const INLINE_MAX = 4096

export type StoredValue =
  | { type: string; text: string }
  | { type: string; base64: string }
  | { type: string; blob: string }

const utf8 = new TextDecoder('utf-8', { fatal: true })

/** The record's form of a serialized value; a large one is added to `objects` to be stored. */
export function encodeValue(type: string, data: Uint8Array | string, objects: StoredObject[]): StoredValue {
  const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : data
  if (bytes.length > INLINE_MAX) {
    // A large value is stored in content-defined chunks (store/chunks.ts): a list that grew at
    // its end since the last checkpoint costs its new chunks, not its whole bytes again.
    const parts = blobObjects(bytes)
    objects.push(...parts)
    return { type, blob: (parts[parts.length - 1] as StoredObject).id }
  }
  if (typeof data === 'string') return { type, text: data }
  try {
    return { type, text: utf8.decode(bytes) }
  } catch {
    return { type, base64: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString('base64') }
  }
}

export function isStoredValue(v: unknown): v is StoredValue {
  if (typeof v !== 'object' || v === null) return false
  const o = v as Record<string, unknown>
  if (typeof o.type !== 'string') return false
  const keys = Object.keys(o).length
  return (
    keys === 2 &&
    (typeof o.text === 'string' ||
      typeof o.base64 === 'string' ||
      (typeof o.blob === 'string' && /^[0-9a-f]{64}$/.test(o.blob)))
  )
}

/** Small LRU of blobs already read (values carried over many checkpoints are read once). */
export class BlobCache {
  private readonly map = new Map<string, Buffer>()
  private bytes = 0

  constructor(
    private readonly store: ObjectStore,
    private readonly maxBytes = 64 << 20,
  ) {}

  async get(id: string): Promise<Buffer> {
    const hit = this.map.get(id)
    if (hit) {
      this.map.delete(id)
      this.map.set(id, hit)
      return hit
    }
    const data = await this.store.getBlob(id)
    this.put(id, data)
    return data
  }

  put(id: string, data: Buffer): void {
    if (this.map.has(id) || data.length > this.maxBytes / 4) return
    this.map.set(id, data)
    this.bytes += data.length
    for (const [k, v] of this.map) {
      if (this.bytes <= this.maxBytes) break
      this.map.delete(k)
      this.bytes -= v.length
    }
  }
}

/** The serialized bytes (or text) of a stored value, for the serializer's loadsTyped. */
export async function valueData(v: StoredValue, blobs: BlobCache): Promise<Uint8Array | string> {
  if ('text' in v) return v.text
  if ('base64' in v) return new Uint8Array(Buffer.from(v.base64, 'base64'))
  if ('blob' in v) return new Uint8Array(await blobs.get(v.blob))
  throw Errors.CORRUPT_OBJECT('stored value has neither text, base64 nor blob')
}
