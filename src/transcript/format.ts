/** One record to its line, for tools that rewrite or copy transcripts. */
import { encodeBytes } from '../gocompat/index.js'
import { encodeRecordBody, encodeRecordHead } from './encode.js'
import type { TranscriptRecord } from './types.js'
import { checkRecord } from './validate.js'

/**
 * The JSON text of a record (without the `\n`), byte for byte what Norma's `json.Marshal` writes
 * for it; keys Norma does not know follow. A loaded Norma line comes back unchanged. Refuses
 * (NOA_BAD_RECORD) a field of the wrong JSON type or a tool input that is not JSON.
 */
export function formatRecord(record: TranscriptRecord): string {
  checkRecord(record)
  return encodeRecordHead(record) + encodeRecordBody(record)
}

/**
 * The line's bytes (without the `\n`): `formatRecord`'s text, with each byte that was not UTF-8
 * in a loaded tool input written back as itself, as Go writes a `json.RawMessage`.
 */
export function formatRecordBytes(record: TranscriptRecord): Buffer {
  return encodeBytes(formatRecord(record))
}
