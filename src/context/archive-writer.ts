/**
 * Writing an archive that reads back whole (`renderArchive`): the document's fields checked
 * (a JS caller may pass anything), its text rendered as Norma's RenderArchive does, and the
 * document refused, naming the first field, unless `parseArchive` (archive-reader.ts) gives it
 * back equal. `renderArchiveUnchecked` (archive.ts) writes any document.
 */
import { Errors, NoaError } from '../engine/errors.js'
import { isGoInt } from '../gocompat/index.js'
import { type ArchiveDocument, renderArchiveUnchecked } from './archive.js'
import { parseArchive } from './archive-reader.js'

function refusal(doc: { blockId?: unknown }, field: string, reason: string): NoaError {
  const id = typeof doc.blockId === 'string' ? doc.blockId : '?'
  return Errors.BAD_ARCHIVE(`archive of block ${JSON.stringify(id)}: ${field} ${reason}`, {
    field,
    reason,
  })
}

const ENTRY_TYPES: ReadonlySet<string> = new Set(['text', 'thinking', 'tool_use', 'tool_result'])

function checkFields(
  doc: ArchiveDocument,
  o: Record<string, unknown>,
  prefix: string,
  strings: readonly string[],
  ints: readonly string[],
): void {
  for (const k of strings)
    if (typeof o[k] !== 'string') throw refusal(doc, `${prefix}${k}`, `must be a string, got ${typeof o[k]}`)
  for (const k of ints)
    if (!isGoInt(o[k])) throw refusal(doc, `${prefix}${k}`, `must be an integer (int64), got ${String(o[k])}`)
}

/** The document's fields are of the types `ArchiveDocument` says (a JS caller may pass anything). */
function checkDocument(doc: ArchiveDocument): void {
  if (typeof doc !== 'object' || doc === null) throw refusal({}, 'document', 'must be an object')
  const o = doc as unknown as Record<string, unknown>
  checkFields(
    doc,
    o,
    '',
    ['blockId', 'session', 'created', 'startRef', 'endRef', 'topic', 'summary'],
    ['tier', 'originalTokens'],
  )
  if (!Array.isArray(doc.entries)) throw refusal(doc, 'entries', 'must be an array')
  doc.entries.forEach((e, i) => {
    const p = `entries[${i}].`
    if (typeof e !== 'object' || e === null) throw refusal(doc, `entries[${i}]`, 'must be an object')
    const x = e as unknown as Record<string, unknown>
    if (e.kind === 'message') {
      checkFields(doc, x, p, ['ref', 'role', 'type', 'toolName', 'text'], [])
      if (!ENTRY_TYPES.has(e.type))
        throw refusal(
          doc,
          `${p}type`,
          `must be text, thinking, tool_use or tool_result, got ${JSON.stringify(e.type)}`,
        )
    } else if (e.kind === 'block') {
      checkFields(
        doc,
        x,
        p,
        ['blockId', 'startRef', 'endRef', 'topic', 'summary', 'childRel', 'childLink', 'absolutePath'],
        ['tier'],
      )
    } else throw refusal(doc, `${p}kind`, `must be "message" or "block", got ${JSON.stringify(x.kind)}`)
  })
}

function show(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v.length > 60 ? `${v.slice(0, 59)}…` : v)
  return typeof v === 'bigint' ? v.toString() : String(v)
}

const DOC_FIELDS = [
  'blockId',
  'tier',
  'session',
  'created',
  'startRef',
  'endRef',
  'originalTokens',
  'topic',
  'summary',
] as const
const MESSAGE_FIELDS = ['kind', 'ref', 'role', 'type', 'toolName', 'text'] as const
const BLOCK_FIELDS = [
  'kind',
  'blockId',
  'tier',
  'startRef',
  'endRef',
  'topic',
  'summary',
  'childRel',
  'childLink',
  'absolutePath',
] as const

/** The first field where `back` is not `doc`: its path, what the document has, what came back. */
function firstDifference(
  doc: ArchiveDocument,
  back: ArchiveDocument,
): [string, unknown, unknown] | undefined {
  for (const k of DOC_FIELDS) if (doc[k] !== back[k]) return [k, doc[k], back[k]]
  const n = Math.max(doc.entries.length, back.entries.length)
  for (let i = 0; i < n; i++) {
    const a = doc.entries[i] as unknown as Record<string, unknown> | undefined
    const b = back.entries[i] as unknown as Record<string, unknown> | undefined
    if (!a || !b) return [`entries[${i}]`, a ? 'an entry' : 'no entry', b ? 'an entry' : 'no entry']
    const fields = a.kind === 'block' ? BLOCK_FIELDS : MESSAGE_FIELDS
    for (const k of fields) if (a[k] !== b[k]) return [`entries[${i}].${k}`, a[k], b[k]]
  }
  return undefined
}

/**
 * The archive's text (Norma's RenderArchive, byte for byte) for a document the reader gives back
 * whole: `parseArchive(renderArchive(doc))` deep-equals `doc`. A document it could not give back
 * is refused (NOA_BAD_ARCHIVE, `details.field` naming the first field that would come back
 * otherwise): a fenced (tool) body without its final `\n` (the fence adds one), an untrimmed
 * summary, a text body holding what reads as the next entry's heading, a ref the heading cannot
 * hold. `renderArchiveUnchecked` writes any document, as Norma does.
 */
export function renderArchive(doc: ArchiveDocument): string {
  checkDocument(doc)
  const text = renderArchiveUnchecked(doc)
  let back: ArchiveDocument
  try {
    back = parseArchive(text)
  } catch (err) {
    if (!(err instanceof NoaError)) throw err
    throw refusal(
      doc,
      'document',
      `cannot be read back from its text: ${String(err.details.reason ?? err.message)}`,
    )
  }
  const diff = firstDifference(doc, back)
  if (diff) {
    const [field, had, got] = diff
    throw refusal(
      doc,
      field,
      `would be read back as ${show(got)}, not ${show(had)}; the archive text cannot tell them apart`,
    )
  }
  return text
}
