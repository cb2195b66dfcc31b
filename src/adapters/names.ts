/**
 * Framework ids (LangGraph thread ids, Agents SDK session ids) are arbitrary strings; workspace
 * names are `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`. The mapping is reversible, never a lossy
 * truncation:
 *
 * - `<prefix>.<escaped id>` when it fits in 128 characters: letters, digits, `.` and `-` stay as
 *   they are (a UUID keeps its shape), every other UTF-8 byte is `_` + two lowercase hex digits.
 *   Only the canonical escaping decodes, so one id has exactly one name and back.
 * - `<prefix>h.<SHA-256 of the id>` otherwise; the id itself is then stored in the workspace
 *   (the caller writes it as a file), since a hash cannot be reversed.
 *
 * Tree paths hold ids as single segments: `encodeURIComponent`, with `%` standing for the empty
 * string and `.`/`..` spelled with `%2E` (a path may have no empty, `.` or `..` segment).
 */
import { createHash } from 'node:crypto'
import { NoaError } from '../engine/errors.js'

const MAX_NAME = 128
const SAFE = /^[A-Za-z0-9.-]$/
const HEX64 = /^[0-9a-f]{64}$/
const utf8 = new TextDecoder('utf-8', { fatal: true })

/** How ids of one kind map to workspaces: `lg` gives `lg.<id>` and `lgh.<hash>`. */
export interface NameScheme {
  prefix: string
  /** What the ids are, for error messages ("thread id"). */
  what: string
}

export type DecodedName = { kind: 'plain'; id: string } | { kind: 'hashed'; hash: string }

/** A non-empty string without lone surrogates (it must survive UTF-8), or NOA_BAD_ARGUMENT. */
export function checkId(id: unknown, what: string): string {
  if (typeof id !== 'string' || id === '') {
    throw new NoaError(
      'NOA_BAD_ARGUMENT',
      `${what} must be a non-empty string, got ${id === '' ? 'an empty string' : describe(id)}`,
      { field: what },
    )
  }
  if (!id.isWellFormed()) {
    throw new NoaError('NOA_BAD_ARGUMENT', `${what} ${JSON.stringify(id)} holds a lone UTF-16 surrogate`, {
      field: what,
    })
  }
  return id
}

export function describe(v: unknown): string {
  if (v === null) return 'null'
  if (Array.isArray(v)) return 'an array'
  return typeof v === 'string' ? JSON.stringify(v) : typeof v
}

function escapeId(id: string): string {
  let out = ''
  for (const ch of id) {
    if (SAFE.test(ch)) out += ch
    else for (const b of Buffer.from(ch, 'utf8')) out += `_${b.toString(16).padStart(2, '0')}`
  }
  return out
}

/** The workspace holding an id (checked with checkId first). */
export function workspaceFor(scheme: NameScheme, id: string): string {
  checkId(id, scheme.what)
  const plain = `${scheme.prefix}.${escapeId(id)}`
  if (plain.length <= MAX_NAME) return plain
  return `${scheme.prefix}h.${createHash('sha256').update(id, 'utf8').digest('hex')}`
}

/** What a workspace name stands for under a scheme, or null when it is not one of its names. */
export function decodeWorkspace(scheme: NameScheme, name: string): DecodedName | null {
  const hashed = `${scheme.prefix}h.`
  if (name.startsWith(hashed)) {
    const hash = name.slice(hashed.length)
    return HEX64.test(hash) ? { kind: 'hashed', hash } : null
  }
  const plain = `${scheme.prefix}.`
  if (!name.startsWith(plain)) return null
  const rest = name.slice(plain.length)
  const bytes: number[] = []
  for (let i = 0; i < rest.length; i++) {
    const ch = rest[i] as string
    if (ch === '_') {
      const hex = rest.slice(i + 1, i + 3)
      if (!/^[0-9a-f]{2}$/.test(hex)) return null
      bytes.push(Number.parseInt(hex, 16))
      i += 2
    } else if (SAFE.test(ch)) {
      bytes.push(ch.charCodeAt(0))
    } else {
      return null
    }
  }
  let id: string
  try {
    id = utf8.decode(Uint8Array.from(bytes))
  } catch {
    return null
  }
  // Only the canonical spelling is a name of this scheme (e.g. `_61` for `a` is not).
  if (id === '' || escapeId(id) !== rest) return null
  return { kind: 'plain', id }
}

/** A string (possibly empty) that can be stored in a tree path, or NOA_BAD_ARGUMENT naming it. */
export function checkText(s: unknown, what: string): string {
  if (typeof s !== 'string') {
    throw new NoaError('NOA_BAD_ARGUMENT', `${what} must be a string, got ${describe(s)}`, { field: what })
  }
  if (!s.isWellFormed()) {
    throw new NoaError('NOA_BAD_ARGUMENT', `${what} ${JSON.stringify(s)} holds a lone UTF-16 surrogate`, {
      field: what,
    })
  }
  return s
}

/** One path segment for an arbitrary string (reversed by `fromSegment`; checked with checkText). */
export function toSegment(s: string): string {
  if (s === '') return '%'
  const e = encodeURIComponent(s)
  return e === '.' ? '%2E' : e === '..' ? '%2E%2E' : e
}

/** The string a segment stands for, or null when `toSegment` cannot have made it. */
export function fromSegment(seg: string): string | null {
  if (seg === '%') return ''
  let s: string
  try {
    s = decodeURIComponent(seg)
  } catch {
    return null
  }
  return toSegment(s) === seg ? s : null
}
