/**
 * Differences between two trees (any of snapshot ids, `ws`, `ws@seq`): paths added, removed and
 * changed, in path order, and for text blobs line counts and a unified diff. A blob is binary,
 * as git decides, when its first 8000 bytes hold a NUL, or when it is not valid UTF-8.
 */
import { structuredPatch } from 'diff'
import type { ObjectStore } from './objects.js'
import { diffTrees } from './tree.js'
import type { SnapshotView } from './view.js'

export type DiffStatus = 'added' | 'removed' | 'changed'

export interface DiffEntry {
  path: string
  status: DiffStatus
  /** Blob before (null: added). */
  before: string | null
  /** Blob after (null: removed). */
  after: string | null
}

export interface DiffSide {
  ref: string
  tree: string
  snapshotId: string | null
}

export interface DiffResult {
  a: DiffSide
  b: DiffSide
  changes: DiffEntry[]
  added: number
  removed: number
  changed: number
}

export async function diffRefs(engine: SnapshotView, a: string, b: string): Promise<DiffResult> {
  const ra = await engine.resolve(a)
  const rb = await engine.resolve(b)
  const changes: DiffEntry[] = diffTrees(ra.tree, rb.tree).map((c) => ({
    path: c.path,
    status: c.before === null ? 'added' : c.after === null ? 'removed' : 'changed',
    before: c.before,
    after: c.after,
  }))
  const count = (s: DiffStatus) => changes.filter((c) => c.status === s).length
  return {
    a: { ref: a, tree: ra.tree.id, snapshotId: ra.snapshotId },
    b: { ref: b, tree: rb.tree.id, snapshotId: rb.snapshotId },
    changes,
    added: count('added'),
    removed: count('removed'),
    changed: count('changed'),
  }
}

export interface FileDiff {
  path: string
  status: DiffStatus
  binary: boolean
  /** A blob that is not in the object store (the diff cannot show its content). */
  missing: string[]
  insertions: number
  deletions: number
  /** Unified diff text (`--- a/…`, `+++ b/…`, hunks), or a "Binary files … differ" line. */
  patch: string
  /** Not diffed: a side larger than `limits.maxBytes`, or more edits than the limits allow. */
  tooLarge?: true
}

/**
 * Bounds on one file's diff, for a caller that must stay responsive (the web view, whose
 * server may share its thread with `noa serve`): a side over `maxBytes` is not read, and the
 * line diff gives up past `maxEditLength` edits or `timeoutMs` (jsdiff's own bounds). Without
 * limits (the CLI) every diff is computed whole.
 */
export interface DiffLimits {
  maxBytes: number
  maxEditLength: number
  timeoutMs: number
}

const decoder = new TextDecoder('utf-8', { fatal: true })

async function text(
  store: ObjectStore,
  blob: string | null,
  maxBytes: number,
): Promise<{ text: string | null; missing: boolean; tooLarge?: true }> {
  if (blob === null) return { text: '', missing: false }
  if (!store.has(blob)) return { text: null, missing: true }
  if (store.blobSize(blob) > maxBytes) return { text: null, missing: false, tooLarge: true }
  const bytes = await store.getBlob(blob)
  if (bytes.subarray(0, 8000).includes(0)) return { text: null, missing: false }
  try {
    return { text: decoder.decode(bytes), missing: false }
  } catch {
    return { text: null, missing: false }
  }
}

/** Line counts and a unified diff of one change. */
export async function fileDiff(
  store: ObjectStore,
  change: DiffEntry,
  limits?: DiffLimits,
): Promise<FileDiff> {
  const maxBytes = limits?.maxBytes ?? Number.POSITIVE_INFINITY
  const a = await text(store, change.before, maxBytes)
  const b = await text(store, change.after, maxBytes)
  const missing = [
    ...(a.missing && change.before ? [change.before] : []),
    ...(b.missing && change.after ? [change.after] : []),
  ]
  const from = change.before === null ? '/dev/null' : `a/${change.path}`
  const to = change.after === null ? '/dev/null' : `b/${change.path}`
  const out: FileDiff = {
    path: change.path,
    status: change.status,
    binary: false,
    missing,
    insertions: 0,
    deletions: 0,
    patch: '',
  }
  if (missing.length > 0) {
    out.patch = `--- ${from}\n+++ ${to}\n(blob ${missing.join(' and ')} is not in the object store)\n`
    return out
  }
  if (a.tooLarge || b.tooLarge) {
    out.tooLarge = true
    out.patch = `--- ${from}\n+++ ${to}\n(not diffed here: larger than ${maxBytes} bytes)\n`
    return out
  }
  if (a.text === null || b.text === null) {
    out.binary = true
    out.patch = `Binary files ${from} and ${to} differ\n`
    return out
  }
  const p = limits
    ? structuredPatch(from, to, a.text, b.text, '', '', {
        context: 3,
        maxEditLength: limits.maxEditLength,
        timeout: limits.timeoutMs,
      })
    : structuredPatch(from, to, a.text, b.text, '', '', { context: 3 })
  if (p === undefined) {
    out.tooLarge = true
    out.patch = `--- ${from}\n+++ ${to}\n(not diffed here: more than ${limits?.maxEditLength} line edits)\n`
    return out
  }
  let body = `--- ${from}\n+++ ${to}\n`
  for (const h of p.hunks) {
    body += `@@ -${range(h.oldStart, h.oldLines)} +${range(h.newStart, h.newLines)} @@\n`
    for (const line of h.lines) {
      if (line.startsWith('+')) out.insertions++
      else if (line.startsWith('-')) out.deletions++
      body += `${line}\n`
    }
  }
  out.patch = body
  return out
}

/** A hunk's range as git writes it: `start,count`, `start` alone for one line, `start-1,0` for none. */
function range(start: number, count: number): string {
  if (count === 0) return `${start - 1},0`
  return count === 1 ? `${start}` : `${start},${count}`
}
