/**
 * Snapshot and merge entries are the store's records: a `snapshot` entry names a record in the
 * object store, a `merge` entry a source's snapshot merged into this workspace. Only the store
 * writes them in the ordinary course; an entry appended by hand, copied from another log or
 * forged could otherwise point a workspace at a tree that is not its own. This module says which
 * such entries mean something:
 *
 * - a snapshot entry naming a record of this workspace that covers seqs before the entry (the
 *   store's snapshots and merges; appended again by hand, it makes that snapshot the head: the
 *   files are its tree plus this workspace's entries after it);
 * - a snapshot entry that is the log's first entry, naming any record (a fork);
 * - merge entries directly followed by the snapshot entry of this workspace's merge record that
 *   lists their `from_snapshot` (the store appends them together).
 *
 * Anything else is refused at append (with `objects`, see AgentLog.open) and reported by verify;
 * replay gives a snapshot entry that names no record, or a record of another workspace that is
 * not a fork, no effect (recorded as `unknown-snapshot` / `foreign-snapshot`), so a workspace
 * that holds one from before these checks goes on.
 */
import { closeSync, existsSync } from 'node:fs'
import type { Entry, EntryInput, MergeEntry, SnapshotEntry } from '../engine/entry.js'
import { Errors, type NoaError } from '../engine/errors.js'
import { openFileSync, READ } from '../engine/files.js'
import { readThroughJournals } from '../engine/journal-view.js'
import { existingLog, logPath } from '../engine/logs.js'
import { readEntryBatches } from '../engine/reader.js'
import { countersOf, inspectTail } from '../engine/recovery.js'
import type { SnapshotRecord } from './snapshot-record.js'

/** What the record rules read of the object store (ObjectStore is one). */
export interface RecordStore {
  /** The root the store belongs to. */
  readonly root: string
  /** The objects folder, for messages. */
  readonly dir: string
  has(id: string): boolean
  /** The snapshot record stored under `id`, or null when there is none. */
  peekSnapshot(id: string): SnapshotRecord | null
}

/** Last seq of a workspace's log (0 when it has none). */
export function lastSeqOf(root: string, workspace: string): number {
  const file = logPath(root, workspace)
  if (!existsSync(file)) return 0
  readThroughJournals(root)
  const fd = openFileSync(file, READ, { what: 'workspace log' })
  try {
    return countersOf(file, inspectTail(fd)).lastSeq
  } finally {
    closeSync(fd)
  }
}

function refuse(where: string, why: string, details: Record<string, unknown> = {}): NoaError {
  return Errors.BAD_ENTRY(`${where}: ${why}`, { field: 'snapshot_id', ...details })
}

/** A record, or a NOA_BAD_ENTRY naming the field when there is none. */
function recordFor(store: RecordStore, id: string, where: string, field: string): SnapshotRecord {
  const record = store.peekSnapshot(id)
  if (!record) {
    throw refuse(where, `${field} ${id} names no snapshot record in ${store.dir}`, { field })
  }
  return record
}

/**
 * Refuses snapshot and merge entries of a batch about to be appended to `workspace` that do not
 * name this workspace's records (the rules at the top of this file).
 */
export function checkRecordEntries(
  store: RecordStore,
  workspace: string,
  entries: readonly EntryInput[],
  where: (i: number) => string,
): void {
  let lastSeq: number | undefined
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i] as EntryInput
    if (e.op === 'snapshot') {
      lastSeq ??= lastSeqOf(store.root, workspace)
      // The seq this entry gets is at least lastSeq + i + 1 (more if others append meanwhile,
      // which only makes an own record's seq the more before it).
      checkSnapshotEntry(store, workspace, e, lastSeq + i, where(i))
    } else if (e.op === 'merge') {
      let j = i
      while (j < entries.length && entries[j]?.op === 'merge') j++
      const snap = entries[j]
      if (snap?.op !== 'snapshot') {
        throw refuse(
          where(i),
          'merge entries are written by the store (SnapshotEngine.merge) followed by their merge snapshot in the same append; a merge entry without it is refused',
          { field: 'op' },
        )
      }
      checkMergeEntry(store, workspace, e, snap, where(i))
    }
  }
}

function checkSnapshotEntry(
  store: RecordStore,
  workspace: string,
  e: SnapshotEntry,
  before: number,
  where: string,
): void {
  const record = recordFor(store, e.snapshot_id, where, 'snapshot_id')
  if (record.workspace !== workspace) {
    if (before === 0 && e.parent === undefined) return // the log's first entry: a fork
    throw refuse(
      where,
      `snapshot_id ${e.snapshot_id} is a snapshot of workspace ${record.workspace}, not of ${workspace} (copying a log? a fork is made with noa fork or SnapshotEngine.fork)`,
    )
  }
  if (record.seq > before) {
    throw refuse(
      where,
      `snapshot_id ${e.snapshot_id} covers seq ${record.seq} of ${workspace}, but its log ends at seq ${before}: not a snapshot of this log`,
    )
  }
  if (e.parent !== record.parent) {
    throw refuse(
      where,
      `parent ${e.parent ?? '(none)'} is not the parent of ${e.snapshot_id} (${record.parent ?? 'none'})`,
      { field: 'parent' },
    )
  }
}

function checkMergeEntry(
  store: RecordStore,
  workspace: string,
  e: MergeEntry,
  snap: SnapshotEntry,
  where: string,
): void {
  recordFor(store, e.from_snapshot, where, 'from_snapshot')
  if (e.base !== undefined) recordFor(store, e.base, where, 'base')
  const merged = store.peekSnapshot(snap.snapshot_id)
  if (
    !merged ||
    merged.workspace !== workspace ||
    !merged.merged?.includes(e.from_snapshot) ||
    merged.base !== e.base
  ) {
    throw refuse(
      where,
      `merge of ${e.from_snapshot} is not followed by a merge snapshot of ${workspace} that lists it (merge entries are written by SnapshotEngine.merge)`,
      { field: 'from_snapshot' },
    )
  }
}

export interface RecordProblem {
  workspace: string
  seq: number
  /** What is wrong, naming the ids involved. */
  reason: string
  kind: 'unknown-snapshot' | 'foreign-snapshot' | 'bad-parent' | 'bad-merge' | 'missing-blob' | 'bad-object'
  blob?: string
  path?: string
  /**
   * A snapshot entry that means nothing, which a later snapshot of this workspace has recorded
   * as having no effect: handled (replay is total), reported as a note, not a failure.
   */
  recordedBy?: string
}

export interface RecordScanOptions {
  /** Also check that every `write` entry's blob is stored. */
  blobs?: boolean
  /** Called with each valid snapshot entry's record (verify --objects checks their trees). */
  onRecord?: (record: SnapshotRecord, entry: { seq: number; fork: boolean }) => void
}

/**
 * The store side of verify for one workspace: every snapshot and merge entry names an existing
 * record of the right workspace (the rules above); with `blobs`, every write's blob is stored.
 * Reads the log once; problems in seq order.
 */
export async function scanRecords(
  store: RecordStore,
  workspace: string,
  options: RecordScanOptions = {},
): Promise<RecordProblem[]> {
  const file = existingLog(store.root, workspace)
  const problems: RecordProblem[] = []
  const known = new Set<string>() // blobs seen present (bounded)
  const recordedAt = new Map<number, string>() // seq → the snapshot that recorded it as no effect
  let first = true
  let pendingMerges: Array<Entry & MergeEntry> = []
  const settleMerges = (next: Entry | null) => {
    for (const m of pendingMerges) {
      const snap = next?.op === 'snapshot' ? safePeek(store, next.snapshot_id) : null
      const ok =
        snap && snap.workspace === workspace && snap.merged?.includes(m.from_snapshot) && snap.base === m.base
      if (!ok) {
        problems.push({
          workspace,
          seq: m.seq,
          kind: 'bad-merge',
          reason: `merge of ${m.from_snapshot} (from ${m.from_workspace}) is not followed by a merge snapshot of ${workspace} that lists it: not written by noa merge`,
        })
      }
      for (const [field, id] of [
        ['from_snapshot', m.from_snapshot],
        ['base', m.base],
      ] as const) {
        if (id !== undefined && safePeek(store, id) === null) {
          problems.push({
            workspace,
            seq: m.seq,
            kind: 'unknown-snapshot',
            reason: `merge entry's ${field} ${id} names no snapshot record in ${store.dir}`,
          })
        }
      }
    }
    pendingMerges = []
  }
  for await (const batch of readEntryBatches(file, { validate: false })) {
    for (const e of batch) {
      const isFirst = first
      first = false
      if (e.op === 'merge') {
        pendingMerges.push(e as Entry & MergeEntry)
        continue
      }
      if (pendingMerges.length > 0) settleMerges(e)
      if (e.op === 'snapshot') {
        let record: SnapshotRecord | null
        try {
          record = store.peekSnapshot(e.snapshot_id)
        } catch (err) {
          problems.push({ workspace, seq: e.seq, kind: 'bad-object', reason: (err as Error).message })
          continue
        }
        if (!record) {
          problems.push({
            workspace,
            seq: e.seq,
            kind: 'unknown-snapshot',
            reason: `snapshot_id ${e.snapshot_id} names no snapshot record in ${store.dir} (replay gives it no effect)`,
          })
          continue
        }
        const own = record.workspace === workspace && record.seq < e.seq
        if (!own && !isFirst) {
          problems.push({
            workspace,
            seq: e.seq,
            kind: 'foreign-snapshot',
            reason:
              record.workspace === workspace
                ? `snapshot_id ${e.snapshot_id} covers seq ${record.seq}, not before its entry: not a snapshot of this log (replay gives it no effect)`
                : `snapshot_id ${e.snapshot_id} is a snapshot of workspace ${record.workspace}, not of ${workspace}, and not a fork (the log's first entry): forged or copied (replay gives it no effect)`,
          })
          continue
        }
        if (own && e.parent !== record.parent) {
          problems.push({
            workspace,
            seq: e.seq,
            kind: 'bad-parent',
            reason: `parent ${e.parent ?? '(none)'} of snapshot ${e.snapshot_id} is not its record's (${record.parent ?? 'none'})`,
          })
        }
        if (own) for (const n of record.noEffect ?? []) recordedAt.set(n.seq, record.id)
        options.onRecord?.(record, { seq: e.seq, fork: !own })
      } else if (options.blobs && e.op === 'write') {
        const blob = e.blob
        if (known.has(blob)) continue
        if (typeof blob === 'string' && /^[0-9a-f]{64}$/.test(blob) && store.has(blob)) {
          if (known.size >= 1_000_000) known.clear()
          known.add(blob)
          continue
        }
        problems.push({
          workspace,
          seq: e.seq,
          kind: 'missing-blob',
          blob,
          path: e.path,
          reason: `blob ${blob} of ${JSON.stringify(e.path)} is not in the object store`,
        })
      }
    }
  }
  if (pendingMerges.length > 0) settleMerges(null)
  for (const p of problems) {
    if (p.kind !== 'unknown-snapshot' && p.kind !== 'foreign-snapshot') continue
    const by = recordedAt.get(p.seq)
    if (by) p.recordedBy = by
  }
  return problems
}

function safePeek(store: RecordStore, id: string): SnapshotRecord | null {
  try {
    return store.peekSnapshot(id)
  } catch {
    return null
  }
}

/** Seq of the last `write` of each wanted blob in (since, until] of a log. */
export async function writeSeqs(
  root: string,
  workspace: string,
  since: number,
  until: number,
  wanted: ReadonlySet<string>,
): Promise<Map<string, number>> {
  const out = new Map<string, number>()
  const file = existingLog(root, workspace)
  for await (const batch of readEntryBatches(file, {
    fromSeq: since + 1,
    validate: false,
    skipBadLines: true,
  })) {
    for (const e of batch) {
      if (e.seq > until) return out
      if (e.op === 'write' && wanted.has(e.blob)) out.set(e.blob, e.seq)
    }
  }
  return out
}
