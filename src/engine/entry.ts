/**
 * Log entries: the five ops of the seed, their exact field sets, and the line format.
 *
 * A stored line is `{"seq":N,<body>,"ts":T}\n`. The caller's thread validates an entry and
 * renders its body (everything between seq and ts, keys in the seed's order); the owner worker
 * only wraps the body with the seq and ts it assigns. So a bad entry is refused before anything
 * crosses to a worker, and the worker does no JSON work on the hot path.
 */
import { NoaError } from './errors.js'

export interface WriteEntry {
  op: 'write'
  path: string
  blob: string
}
export interface DeleteEntry {
  op: 'delete'
  path: string
}
export interface RenameEntry {
  op: 'rename'
  from: string
  to: string
}
export interface SnapshotEntry {
  op: 'snapshot'
  snapshot_id: string
  parent?: string
  message: string
}
export interface MergeEntry {
  op: 'merge'
  from_workspace: string
  from_snapshot: string
  base?: string
}

/** What a caller appends: seq and ts are the owner's to assign. */
export type EntryInput = WriteEntry | DeleteEntry | RenameEntry | SnapshotEntry | MergeEntry
export type Op = EntryInput['op']

/** A stored entry, as read back. */
export type Entry = EntryInput & { seq: number; ts: number }

export interface Ack {
  seq: number
  ts: number
}

export const OPS: readonly Op[] = ['write', 'delete', 'rename', 'snapshot', 'merge']

/** Field order of each op's body, required and optional. */
const FIELDS: Record<
  Op,
  { required: readonly string[]; optional: readonly string[]; order: readonly string[] }
> = {
  write: { required: ['path', 'blob'], optional: [], order: ['path', 'blob'] },
  delete: { required: ['path'], optional: [], order: ['path'] },
  rename: { required: ['from', 'to'], optional: [], order: ['from', 'to'] },
  snapshot: {
    required: ['snapshot_id', 'message'],
    optional: ['parent'],
    order: ['snapshot_id', 'parent', 'message'],
  },
  merge: {
    required: ['from_workspace', 'from_snapshot'],
    optional: ['base'],
    order: ['from_workspace', 'from_snapshot', 'base'],
  },
}

export const WORKSPACE_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/
const BLOB_RE = /^[0-9a-f]{64}$/
const SNAPSHOT_RE = /^noa_[0-9A-Za-z_]{1,128}$/
export const MAX_PATH_BYTES = 4096
export const MAX_MESSAGE_BYTES = 65536

function bad(field: string, message: string, where?: string): NoaError {
  return new NoaError('NOA_BAD_ENTRY', `${where ? `${where}: ` : ''}${field}: ${message}`, { field })
}

/** An empty, `.` or `..` segment, or a leading `/` (an empty first segment). */
const BAD_SEGMENT = /(?:^|\/)\.{0,2}(?:\/|$)/

/** Relative POSIX path: no empty, `.` or `..` segment, no leading `/`, no NUL. */
export function checkPath(value: unknown, field: string, where?: string): string {
  if (typeof value !== 'string') throw bad(field, `must be a string, got ${typeName(value)}`, where)
  // The common case in one regex test; the checks below only say precisely what is wrong.
  if (
    !BAD_SEGMENT.test(value) &&
    !value.includes('\0') &&
    value.isWellFormed() &&
    (value.length * 3 <= MAX_PATH_BYTES || Buffer.byteLength(value) <= MAX_PATH_BYTES)
  ) {
    return value
  }
  if (value.length === 0) throw bad(field, 'must not be empty', where)
  if (value.includes('\0')) throw bad(field, 'must not contain NUL', where)
  if (!value.isWellFormed()) throw bad(field, 'has a lone UTF-16 surrogate (not encodable as UTF-8)', where)
  if (value.startsWith('/')) throw bad(field, `must be relative, got ${JSON.stringify(value)}`, where)
  if (Buffer.byteLength(value) > MAX_PATH_BYTES)
    throw bad(field, `longer than ${MAX_PATH_BYTES} bytes`, where)
  for (const segment of value.split('/')) {
    if (segment === '') throw bad(field, `has an empty segment in ${JSON.stringify(value)}`, where)
    if (segment === '.' || segment === '..') {
      throw bad(field, `has a '${segment}' segment in ${JSON.stringify(value)}`, where)
    }
  }
  return value
}

export function checkBlob(value: unknown, field = 'blob', where?: string): string {
  if (typeof value !== 'string' || !BLOB_RE.test(value)) {
    throw bad(field, `must be 64 lowercase hex characters (a SHA-256), got ${preview(value)}`, where)
  }
  return value
}

export function checkSnapshotId(value: unknown, field: string, where?: string): string {
  if (typeof value !== 'string' || !SNAPSHOT_RE.test(value)) {
    throw bad(field, `must be a snapshot id like noa_<hex>, got ${preview(value)}`, where)
  }
  return value
}

export function isWorkspaceName(name: unknown): name is string {
  return typeof name === 'string' && WORKSPACE_RE.test(name) && name !== '.' && name !== '..'
}

/** Workspace names become file names: anything that could leave the log folder is refused. */
export function checkWorkspace(name: unknown): string {
  if (!isWorkspaceName(name)) {
    const shown =
      typeof name === 'string'
        ? JSON.stringify(name.length > 60 ? `${name.slice(0, 60)}…` : name)
        : typeName(name)
    const why =
      typeof name !== 'string'
        ? 'must be a string'
        : name.length === 0
          ? 'must not be empty'
          : name.length > 128
            ? `is ${name.length} characters, the limit is 128`
            : 'must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ (letters, digits, ".", "_", "-"; no "/", no leading dot)'
    throw new NoaError('NOA_BAD_WORKSPACE', `workspace name ${shown} ${why}`, {
      workspace: typeof name === 'string' ? name : undefined,
    })
  }
  return name
}

function checkString(value: unknown, field: string, max: number, where?: string): string {
  if (typeof value !== 'string') throw bad(field, `must be a string, got ${typeName(value)}`, where)
  if (!value.isWellFormed()) throw bad(field, 'has a lone UTF-16 surrogate (not encodable as UTF-8)', where)
  if (value.length * 3 > max && Buffer.byteLength(value) > max)
    throw bad(field, `longer than ${max} bytes`, where)
  return value
}

function checkField(op: Op, field: string, value: unknown, where?: string): string {
  switch (field) {
    case 'path':
    case 'from':
    case 'to':
      return checkPath(value, field, where)
    case 'blob':
      return checkBlob(value, field, where)
    case 'snapshot_id':
    case 'parent':
    case 'from_snapshot':
    case 'base':
      return checkSnapshotId(value, field, where)
    case 'message':
      return checkString(value, field, MAX_MESSAGE_BYTES, where)
    case 'from_workspace':
      if (!isWorkspaceName(value)) throw bad(field, `must be a workspace name, got ${preview(value)}`, where)
      return value
    default:
      throw bad(field, `is not a field of ${op}`, where)
  }
}

function checkOp(value: unknown, where?: string): Op {
  if (typeof value !== 'string' || !(OPS as readonly string[]).includes(value)) {
    throw bad('op', `must be one of ${OPS.join(', ')}, got ${preview(value)}`, where)
  }
  return value as Op
}

/**
 * Checks an entry's op and exact field set, and every field's rule. `stored`: seq and ts must be
 * there (a line read back); otherwise they must not (a caller's entry).
 */
function checkFields(input: unknown, stored: boolean, where?: string): Op {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new NoaError(
      'NOA_BAD_ENTRY',
      `${where ? `${where}: ` : ''}${stored ? 'not a JSON object' : 'an entry must be a JSON object'}`,
      {},
    )
  }
  const obj = input as Record<string, unknown>
  if (stored) {
    checkCounter(obj.seq, 'seq', 1)
    checkCounter(obj.ts, 'ts', 0)
  }
  const op = checkOp(obj.op, where)
  const spec = FIELDS[op]
  for (const key in obj) {
    if (key === 'op') continue
    if (key === 'seq' || key === 'ts') {
      if (stored) continue
      throw bad(key, 'is assigned by the workspace owner; leave it out', where)
    }
    if (!spec.order.includes(key))
      throw bad(key, `is not a field of ${op} (fields: ${spec.order.join(', ')})`, where)
  }
  for (const field of spec.order) {
    const value = obj[field]
    if (value === undefined) {
      if (spec.required.includes(field)) throw bad(field, `is required for ${op}`, where)
      continue
    }
    checkField(op, field, value, where)
  }
  if (op === 'rename' && obj.from === obj.to) throw bad('to', 'must differ from from', where)
  return op
}

/**
 * Validates a caller's entry and renders its body: `"op":"write","path":"…","blob":"…"`.
 * `where` prefixes messages (e.g. `entry 3`) when validating a batch.
 */
export function encodeBody(input: unknown, where?: string): string {
  const op = checkFields(input, false, where)
  const obj = input as Record<string, unknown>
  let body = `"op":"${op}"`
  for (const field of FIELDS[op].order) {
    const value = obj[field] as string | undefined
    if (value !== undefined)
      body += `,"${field}":${NEEDS_ESCAPE.test(value) ? JSON.stringify(value) : `"${value}"`}`
  }
  // Flat, not a rope of the pieces concatenated: 124 bytes of heap for a typical write entry
  // instead of 326, for every append queued or in flight.
  body.charCodeAt(0)
  return body
}

/** What JSON.stringify would escape in a well-formed string (every field here is one). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: JSON escapes exactly these characters
const NEEDS_ESCAPE = /["\\\u0000-\u001f]/

export function formatLine(seq: number, body: string, ts: number): string {
  return `{"seq":${seq},${body},"ts":${ts}}\n`
}

function checkCounter(value: unknown, field: 'seq' | 'ts', min: number): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    throw bad(field, `must be an integer >= ${min}, got ${preview(value)}`)
  }
  return value
}

/** Parses one stored line (without its newline) and checks every field. */
export function parseEntry(line: string): Entry {
  let obj: unknown
  try {
    obj = JSON.parse(line)
  } catch (err) {
    throw new NoaError('NOA_BAD_ENTRY', `not JSON: ${(err as Error).message}`, {})
  }
  checkFields(obj, true)
  return obj as Entry
}

/** Reads only what recovery needs from a line: its seq and ts. */
export function parseCounters(line: string): { seq: number; ts: number } {
  let obj: unknown
  try {
    obj = JSON.parse(line)
  } catch (err) {
    throw new NoaError('NOA_BAD_ENTRY', `not JSON: ${(err as Error).message}`, {})
  }
  const o = (obj ?? {}) as Record<string, unknown>
  return { seq: checkCounter(o.seq, 'seq', 1), ts: checkCounter(o.ts, 'ts', 0) }
}

function typeName(v: unknown): string {
  return v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v
}

function preview(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v.length > 80 ? `${v.slice(0, 80)}…` : v)
  if (v === undefined) return 'nothing'
  const s = JSON.stringify(v) ?? String(v)
  return s.length > 80 ? `${s.slice(0, 80)}…` : s
}
