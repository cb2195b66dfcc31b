/** Reading a stored tree pack: its header picks the format (pack-v1.ts, pack-v2.ts). */
import { Errors } from '../engine/errors.js'
import type { Pack, PackSource } from './pack.js'
import { PACK_HEADER, PackV1 } from './pack-v1.js'
import { PACK2_HEADER, PackV2 } from './pack-v2.js'

/** Reads a stored pack of either format (see PackV1.decode and PackV2.decode). */
export function decodePack(
  id: string,
  head: Buffer,
  more: (n: number) => Buffer,
  source: PackSource,
  readAt: (offset: number, length: number) => Buffer,
  what: string,
  size: number,
): Pack {
  const magic = head.toString('latin1', 0, PACK_HEADER.length)
  if (magic === PACK2_HEADER) return PackV2.decode(id, head, more, source, readAt, what, size)
  if (magic === PACK_HEADER) return PackV1.decode(id, head, more, source, readAt, what, size)
  throw Errors.CORRUPT_OBJECT(`${what} is not a tree pack: no header`, { object: id })
}
