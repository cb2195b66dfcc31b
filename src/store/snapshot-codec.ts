/**
 * A snapshot record's canonical bytes (design.md §4): `noa-snapshot 1` then one JSON line, keys in
 * a fixed order, optional keys left out; parsing checks every field. The record is named by the
 * SHA-256 of these bytes (its snapshot id is `noa_` + that hash). The shape is snapshot-record.ts.
 */
import { isWorkspaceName, type SnapshotEntry } from '../engine/entry.js'
import { Errors } from '../engine/errors.js'
import { NO_EFFECT_REASONS, SKIP_REASONS, type Skipped } from './replay.js'
import type {
  ConflictSide,
  RecordedNoEffect,
  SnapshotRecord,
  SnapshotRecordInput,
} from './snapshot-record.js'

const HASH_RE = /^[0-9a-f]{64}$/
export const NOA_ID_RE = /^noa_[0-9a-f]{64}$/
export const SNAPSHOT_HEADER = 'noa-snapshot 1\n'

/** Canonical bytes of a snapshot record: fixed key order, optional keys left out. */
export function encodeSnapshotRecord(r: SnapshotRecordInput): Buffer {
  const o: Record<string, unknown> = { workspace: r.workspace, tree: r.tree }
  if (r.parent !== undefined) o.parent = r.parent
  if (r.merged !== undefined) o.merged = r.merged
  if (r.base !== undefined) o.base = r.base
  o.since = r.since
  o.seq = r.seq
  if (r.noEffect !== undefined && r.noEffect.length > 0) {
    o.no_effect = r.noEffect.map((n) => ({ seq: n.seq, reason: n.reason }))
  }
  if (r.skipped !== undefined && r.skipped.length > 0) {
    o.skipped = r.skipped.map((k) => {
      const x: Record<string, unknown> = {}
      if (k.offset !== undefined) x.offset = k.offset
      if (k.length !== undefined) x.length = k.length
      if (k.firstSeq !== undefined) x.first_seq = k.firstSeq
      if (k.lastSeq !== undefined) x.last_seq = k.lastSeq
      x.reason = k.reason
      return x
    })
  }
  if (r.conflicts !== undefined && r.conflicts.length > 0) {
    o.conflicts = r.conflicts.map((c) => ({
      path: c.path,
      winner: c.winner,
      sides: c.sides.map((x) => {
        const side: Record<string, unknown> = {
          workspace: x.workspace,
          op: x.op,
          blob: x.blob,
          ts: x.ts,
          seq: x.seq,
        }
        if (x.log !== undefined) side.log = x.log
        return side
      }),
    }))
  }
  if (r.pruned !== undefined && r.pruned.length > 0) o.pruned = r.pruned
  o.message = r.message
  o.ts = r.ts
  return Buffer.from(`${SNAPSHOT_HEADER}${JSON.stringify(o)}\n`, 'utf8')
}

export function parseSnapshotRecord(id: string, bytes: Buffer): SnapshotRecord {
  const text = bytes.toString('utf8')
  const bad = (why: string) =>
    Errors.CORRUPT_OBJECT(`snapshot record ${id} is malformed: ${why}`, { object: id })
  if (!text.startsWith(SNAPSHOT_HEADER) || !text.endsWith('\n')) throw bad('no "noa-snapshot 1" header')
  let o: Record<string, unknown>
  try {
    o = JSON.parse(text.slice(SNAPSHOT_HEADER.length)) as Record<string, unknown>
  } catch (err) {
    throw bad((err as Error).message)
  }
  const isCount = (v: unknown) => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0
  if (!isWorkspaceName(o.workspace)) throw bad('workspace')
  if (typeof o.tree !== 'string' || !HASH_RE.test(o.tree)) throw bad('tree')
  if (o.parent !== undefined && (typeof o.parent !== 'string' || !NOA_ID_RE.test(o.parent)))
    throw bad('parent')
  if (
    o.merged !== undefined &&
    (!Array.isArray(o.merged) || o.merged.some((m) => typeof m !== 'string' || !NOA_ID_RE.test(m)))
  )
    throw bad('merged')
  if (o.base !== undefined && (typeof o.base !== 'string' || !NOA_ID_RE.test(o.base))) throw bad('base')
  if (!isCount(o.since) || !isCount(o.seq) || !isCount(o.ts)) throw bad('since, seq or ts')
  if (typeof o.message !== 'string') throw bad('message')
  const record: SnapshotRecord = {
    id,
    workspace: o.workspace,
    tree: o.tree,
    since: o.since as number,
    seq: o.seq as number,
    message: o.message,
    ts: o.ts as number,
  }
  if (o.parent !== undefined) record.parent = o.parent as string
  if (o.merged !== undefined) record.merged = o.merged as string[]
  if (o.base !== undefined) record.base = o.base as string
  // Fields added later: absent in older records; unknown keys are ignored, as older readers do.
  if (o.no_effect !== undefined) {
    const list = o.no_effect
    if (
      !Array.isArray(list) ||
      list.some(
        (n) =>
          typeof n !== 'object' ||
          n === null ||
          !isCount(n.seq) ||
          !(NO_EFFECT_REASONS as readonly unknown[]).includes(n.reason),
      )
    )
      throw bad('no_effect')
    record.noEffect = (list as RecordedNoEffect[]).map((n) => ({ seq: n.seq, reason: n.reason }))
  }
  if (o.skipped !== undefined) {
    const list = o.skipped
    const optCount = (v: unknown) => v === undefined || isCount(v)
    if (
      !Array.isArray(list) ||
      list.some(
        (k) =>
          typeof k !== 'object' ||
          k === null ||
          !optCount(k.offset) ||
          !optCount(k.length) ||
          !optCount(k.first_seq) ||
          !optCount(k.last_seq) ||
          !(SKIP_REASONS as readonly unknown[]).includes(k.reason),
      )
    )
      throw bad('skipped')
    record.skipped = (list as Array<Record<string, number | undefined> & { reason: Skipped['reason'] }>).map(
      (k) => {
        const x: Skipped = { reason: k.reason }
        if (k.offset !== undefined) x.offset = k.offset
        if (k.length !== undefined) x.length = k.length
        if (k.first_seq !== undefined) x.firstSeq = k.first_seq
        if (k.last_seq !== undefined) x.lastSeq = k.last_seq
        return x
      },
    )
  }
  if (o.conflicts !== undefined) {
    if (!Array.isArray(o.conflicts)) throw bad('conflicts')
    record.conflicts = o.conflicts.map((c: Record<string, unknown>) => {
      if (typeof c?.path !== 'string' || typeof c.winner !== 'string' || !Array.isArray(c.sides))
        throw bad('conflicts')
      return {
        path: c.path,
        winner: c.winner,
        sides: c.sides.map((x: Record<string, unknown>) => {
          if (typeof x?.workspace !== 'string' || !isCount(x.seq) || !isCount(x.ts)) throw bad('conflicts')
          const side: ConflictSide = {
            workspace: x.workspace,
            op: x.op as ConflictSide['op'],
            blob: typeof x.blob === 'string' ? x.blob : null,
            ts: x.ts as number,
            seq: x.seq as number,
          }
          if (typeof x.log === 'string') side.log = x.log
          return side
        }),
      }
    })
  }
  if (o.pruned !== undefined) {
    if (!Array.isArray(o.pruned) || o.pruned.some((m) => typeof m !== 'string' || !NOA_ID_RE.test(m)))
      throw bad('pruned')
    record.pruned = o.pruned as string[]
  }
  return record
}

/** The `snapshot` log entry for a record: `parent` is the workspace's previous head. */
export function snapshotEntry(record: SnapshotRecord, message: string): SnapshotEntry {
  const e: SnapshotEntry = { op: 'snapshot', snapshot_id: record.id, message }
  if (record.parent !== undefined) e.parent = record.parent
  return e
}
