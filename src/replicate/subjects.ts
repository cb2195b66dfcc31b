/**
 * Names on the NATS side: the subject prefix, one subject per workspace, one per object, the
 * headers noa sets, and the default stream name. Kept in one place so that the publisher, the
 * mirror and `status` can never disagree on a name.
 */
import { isWorkspaceName } from '../engine/entry.js'
import { Errors } from '../engine/errors.js'

export const DEFAULT_PREFIX = 'noa'

/** Tokens of letters, digits, `_` and `-`, joined by dots: a valid subject and a safe file name. */
const PREFIX_RE = /^[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64}){0,7}$/
const STREAM_NAME_RE = /^[A-Za-z0-9_-]{1,128}$/

/**
 * Objects travel on `<prefix>._obj.<id>`. A workspace name starts with a letter or digit, so no
 * workspace subject can begin with this token.
 */
export const OBJECT_TOKEN = '_obj'

/** Headers noa adds besides Nats-Msg-Id (objects only: where this part sits in the object). */
export const HDR_OBJECT_SIZE = 'Noa-Object-Size'
export const HDR_OBJECT_OFFSET = 'Noa-Object-Offset'
/** `0` when the object's bytes do not hash to its id (a tree stored as a delta). */
export const HDR_OBJECT_EXACT = 'Noa-Object-Exact'
/**
 * On a shared workspace's entries message: the objects its entries need (comma-separated ids),
 * published on their own subjects before it; a host writes them into its root before it applies
 * the entries (shared-objects.ts).
 */
export const HDR_OBJECTS = 'Noa-Objects'

export function checkPrefix(prefix: unknown): string {
  if (typeof prefix !== 'string' || !PREFIX_RE.test(prefix)) {
    throw Errors.BAD_OPTION(
      `prefix must be dot-separated tokens of letters, digits, _ and - (at most 8), got ${JSON.stringify(prefix)}`,
      { field: 'prefix' },
    )
  }
  return prefix
}

export function checkStreamName(name: unknown): string {
  if (typeof name !== 'string' || !STREAM_NAME_RE.test(name)) {
    throw Errors.BAD_OPTION(
      `stream name must be 1 to 128 letters, digits, _ or -, got ${JSON.stringify(name)}`,
      { field: 'stream' },
    )
  }
  return name
}

/** `noa` → `NOA`, `site1.noa` → `SITE1_NOA`. */
export function defaultStreamName(prefix: string): string {
  return prefix.toUpperCase().replace(/\./g, '_')
}

/** Everything noa publishes under a prefix: what the stream must capture. */
export function wildcardOf(prefix: string): string {
  return `${prefix}.>`
}

/**
 * Workspace names may hold dots, which NATS reads as token separators: `a.b` is fine, but `a..b`
 * or `a.` would make an empty token, which no subject may have. Such workspaces cannot be sent
 * on `<prefix>.<workspace>` and are reported instead of replicated.
 */
export function isSubjectSafe(workspace: string): boolean {
  return !workspace.includes('..') && !workspace.endsWith('.')
}

export function workspaceSubject(prefix: string, workspace: string): string {
  return `${prefix}.${workspace}`
}

export function objectSubject(prefix: string, id: string): string {
  return `${prefix}.${OBJECT_TOKEN}.${id}`
}

export function entryMsgId(workspace: string, seq: number): string {
  return `${workspace}:${seq}`
}

export function objectMsgId(id: string, offset: number): string {
  return `${OBJECT_TOKEN}:${id}:${offset}`
}

export type SubjectKind = { kind: 'workspace'; workspace: string } | { kind: 'object'; id: string }

const OBJECT_ID_RE = /^[0-9a-f]{64}$/

/** What a subject under the prefix carries, or null for a subject noa did not write. */
export function parseSubject(prefix: string, subject: string): SubjectKind | null {
  if (!subject.startsWith(`${prefix}.`)) return null
  const rest = subject.slice(prefix.length + 1)
  if (rest.startsWith(`${OBJECT_TOKEN}.`)) {
    const id = rest.slice(OBJECT_TOKEN.length + 1)
    return OBJECT_ID_RE.test(id) ? { kind: 'object', id } : null
  }
  return isWorkspaceName(rest) && isSubjectSafe(rest) ? { kind: 'workspace', workspace: rest } : null
}

/**
 * Whether a stream subject pattern captures every subject `<prefix>.…`: each prefix token must
 * be matched literally or by `*`, and what follows by `>` (or a `>` may come earlier).
 */
export function patternCoversPrefix(pattern: string, prefix: string): boolean {
  const p = pattern.split('.')
  const want = prefix.split('.')
  for (let i = 0; i < p.length; i++) {
    const tok = p[i] as string
    if (tok === '>') return true
    if (i >= want.length) return false // a literal or `*` after the prefix: not every workspace
    if (tok !== '*' && tok !== want[i]) return false
  }
  return false
}
