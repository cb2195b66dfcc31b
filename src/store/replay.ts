/**
 * Replaying log entries onto a tree (seed: スナップショット計算): write sets tree[path] = blob,
 * delete removes the path, rename moves the blob from `from` to `to`. Snapshot and merge entries
 * change no file.
 *
 * Replay is total: every entry `append` accepts has a defined effect, so no entry can block a
 * workspace. The seed's rules read as map operations decide the edge cases, which is also what
 * git does: deleting a missing path changes nothing (`tree.remove(path)` of an absent key), and
 * neither does renaming one; renaming onto an existing path replaces it (`tree[to] = …`, as
 * rename(2) does). An entry that changed nothing is reported (`NoEffect`: its seq and why), and
 * the snapshot records it, so nothing is silent. `strict` refuses those entries instead
 * (NOA_REPLAY naming the workspace and seq), and a rename onto an existing path too.
 *
 * Every entry is read with the full validation of `parseEntry` (the line scanner makes it
 * cheaper than a bare JSON.parse), so a snapshot never takes in a line `verify` would refuse.
 */
import { closeSync, readSync } from 'node:fs'
import { type Entry, parseCounters } from '../engine/entry.js'
import { NoaError } from '../engine/errors.js'
import { openFileSync, READ } from '../engine/files.js'
import { existingLog } from '../engine/logs.js'
import { endOfCompleteLines, readEntryBatches, seekSeq } from '../engine/reader.js'
import { inspectTail } from '../engine/recovery.js'
import { BadLine, LineScanner, parseLines } from '../engine/scan.js'
import type { TreeBuilder } from './tree.js'

/**
 * A range up to this size is read in one synchronous call: an incremental snapshot's few
 * hundred KB would otherwise pay several thread-pool round trips, which dominate on a busy host.
 * Larger ranges stream a chunk at a time, so memory stays flat whatever the log's size.
 */
const SYNC_RANGE = 4 << 20

/** A tree-changing op, or `merge` for changes that came in through a merge snapshot. */
export type ChangeOp = 'write' | 'delete' | 'rename' | 'merge'

/** Why an entry changed nothing (stable codes, stored in snapshot records as `no_effect`). */
export type NoEffectReason =
  /** A delete of a path that is not in the tree. */
  | 'delete-missing'
  /** A rename whose `from` is not in the tree. */
  | 'rename-missing'
  /** A snapshot entry naming no snapshot record in the object store (forged, or its record lost). */
  | 'unknown-snapshot'
  /** A snapshot entry naming another workspace's record that is not a fork (the log's first entry). */
  | 'foreign-snapshot'

export const NO_EFFECT_REASONS: readonly NoEffectReason[] = [
  'delete-missing',
  'rename-missing',
  'unknown-snapshot',
  'foreign-snapshot',
]

/** An entry that changed nothing. */
export interface NoEffect {
  seq: number
  reason: NoEffectReason
  /** The path the entry named (delete: path; rename: from). */
  path?: string
  /** The snapshot the entry named (snapshot reasons). */
  snapshotId?: string
}

/** Where one path's current value came from. */
export interface ChangeMark {
  /** Workspace whose log holds the entry (or that made the merge snapshot). */
  workspace: string
  seq: number
  ts: number
  op: ChangeOp
}

export interface ReplayProgress {
  workspace: string
  /** Last seq applied. */
  seq: number
  /** Seqs in this replay: `first` is the first one wanted, `last` the last (when known). */
  first: number
  last: number | undefined
  /** Entries read so far. */
  entries: number
}

export interface SegmentOptions {
  /** Replay entries after this seq … */
  since: number
  /** … up to and including this one (default: up to `endByte` or the end of the log). */
  until?: number
  /** Stop at this byte offset of the log (a line boundary). */
  endByte?: number
  /** Called for each path an entry changes, with its value after the entry (null: removed). */
  track?: (path: string, value: string | null, mark: ChangeMark) => void
  /** A snapshot entry after this seq is a concurrent snapshot: refuse instead of guessing. */
  snapshotsUpTo?: number
  /** Snapshot entries already found to have no effect (by seq): reported, never a conflict. */
  ignoredSnapshots?: ReadonlyMap<number, NoEffect>
  /** Called with each snapshot entry met (seq, id, and whether it is the log's first entry). */
  onSnapshot?: (seq: number, snapshotId: string, first: boolean) => void
  /** Refuse entries that cannot apply instead of reporting them (today's rule, kept on request). */
  strict?: boolean
  onProgress?: (p: ReplayProgress) => void
}

export interface SegmentResult {
  /** Entries that changed the tree. */
  applied: number
  /** Entries that could change the tree (write, delete, rename), whether they did or not. */
  treeOps: number
  /** Entries that changed nothing, in seq order (ignored snapshot entries included). */
  noEffect: NoEffect[]
  /** Last seq read (since, when nothing was). */
  lastSeq: number
}

export function replayError(
  workspace: string,
  seq: number,
  what: string,
  details: Record<string, unknown> = {},
): NoaError {
  return new NoaError('NOA_REPLAY', `workspace ${workspace} seq ${seq}: ${what}`, {
    workspace,
    seq,
    ...details,
  })
}

function corrupt(workspace: string, seq: unknown, what: string): NoaError {
  return new NoaError(
    'NOA_CORRUPT_LOG',
    `workspace ${workspace} seq ${JSON.stringify(seq)}: ${what} (noa verify ${workspace} checks the whole log)`,
    { workspace, seq: typeof seq === 'number' ? seq : undefined },
  )
}

function checkPathField(workspace: string, seq: number, value: unknown, field: string): string {
  if (typeof value !== 'string' || value.length === 0 || value.indexOf('\0') >= 0) {
    throw corrupt(workspace, seq, `${field} is not a path`)
  }
  return value
}

export interface ApplyOptions {
  /** Called for each path an entry changes, with its value after the entry (null: removed). */
  track?: SegmentOptions['track']
  /** Refuse entries that cannot apply (NOA_REPLAY) instead of reporting them. */
  strict?: boolean
  /** Entries that changed nothing are pushed here. */
  noEffect?: NoEffect[]
}

/** Applies one batch of entries in order; returns how many changed the tree. */
export function applyEntries(
  tree: TreeBuilder,
  workspace: string,
  batch: readonly Entry[],
  options: ApplyOptions = {},
): number {
  const { track, strict, noEffect } = options
  let applied = 0
  for (const e of batch) {
    const seq = e.seq
    switch (e.op) {
      case 'write': {
        const path = checkPathField(workspace, seq, e.path, 'path')
        const blob = e.blob
        // Only the length here (a regex per entry costs a tenth of a replay); the tree checks
        // every blob it encodes is 64 lowercase hex.
        if (typeof blob !== 'string' || blob.length !== 64)
          throw corrupt(workspace, seq, 'blob is not a hash')
        tree.set(path, blob)
        track?.(path, blob, { workspace, seq, ts: e.ts, op: 'write' })
        applied++
        break
      }
      case 'delete': {
        const path = checkPathField(workspace, seq, e.path, 'path')
        if (!tree.has(path)) {
          if (strict) {
            throw replayError(workspace, seq, `cannot delete ${JSON.stringify(path)}: no such path`, {
              op: 'delete',
              path,
            })
          }
          noEffect?.push({ seq, reason: 'delete-missing', path })
          break
        }
        tree.remove(path)
        track?.(path, null, { workspace, seq, ts: e.ts, op: 'delete' })
        applied++
        break
      }
      case 'rename': {
        const from = checkPathField(workspace, seq, e.from, 'from')
        const to = checkPathField(workspace, seq, e.to, 'to')
        const blob = tree.get(from)
        const what = `cannot rename ${JSON.stringify(from)} to ${JSON.stringify(to)}`
        if (blob === undefined) {
          if (strict) {
            throw replayError(workspace, seq, `${what}: no such path ${JSON.stringify(from)}`, {
              op: 'rename',
              path: from,
            })
          }
          noEffect?.push({ seq, reason: 'rename-missing', path: from })
          break
        }
        if (from === to) throw corrupt(workspace, seq, 'rename to the same path')
        if (strict && tree.has(to)) {
          throw replayError(workspace, seq, `${what}: ${JSON.stringify(to)} already exists`, {
            op: 'rename',
            path: to,
          })
        }
        tree.remove(from)
        tree.set(to, blob)
        if (track) {
          const mark: ChangeMark = { workspace, seq, ts: e.ts, op: 'rename' }
          track(from, null, mark)
          track(to, blob, mark)
        }
        applied++
        break
      }
      case 'snapshot':
      case 'merge':
        break
      default:
        throw corrupt(workspace, seq, `unknown op ${JSON.stringify((e as { op: unknown }).op)}`)
    }
  }
  return applied
}

/**
 * Replays the entries of `workspace` in (since, until] onto `tree`, streaming the log a chunk at
 * a time from the line found by binary search: the cost is the entries replayed, not the log.
 */
export async function replaySegment(
  root: string,
  workspace: string,
  tree: TreeBuilder,
  options: SegmentOptions,
): Promise<SegmentResult> {
  const { since, until, track, onProgress } = options
  let lastSeq = since
  let applied = 0
  let treeOps = 0
  let entries = 0
  const noEffect: NoEffect[] = []
  const ignored = options.ignoredSnapshots
  const last = until ?? (onProgress ? lastSeqBefore(root, workspace, options.endByte) : undefined)
  const file = existingLog(root, workspace)
  const start = since > 0 ? seekSeq(file, since + 1) : 0
  const end = options.endByte ?? logEnd(file)
  const batches =
    end - start <= SYNC_RANGE
      ? oneBatch(file, start, end)
      : readEntryBatches(file, { fromSeq: since + 1, end })
  const pendingSnapshots: NoEffect[] = []
  for await (let batch of batches) {
    let done = false
    // Seqs must increase (the reader relies on it to seek); ts is only carried along.
    for (let i = 0; i < batch.length; i++) {
      const e = batch[i] as Entry
      const seq = e.seq
      if (typeof seq !== 'number' || seq <= lastSeq) {
        throw corrupt(workspace, seq, `seq does not increase (previous ${lastSeq})`)
      }
      if (until !== undefined && seq > until) {
        batch = batch.slice(0, i)
        done = true
        break
      }
      if (e.op === 'snapshot') {
        options.onSnapshot?.(seq, e.snapshot_id, start === 0 && entries === 0 && i === 0)
        const skip = ignored?.get(seq)
        if (skip) {
          // Pushed in seq order together with the batch's own (applyEntries runs after this loop).
          pendingSnapshots.push(skip)
          lastSeq = seq
          continue
        }
      } else if (e.op !== 'merge') treeOps++
      if (e.op === 'snapshot' && options.snapshotsUpTo !== undefined && seq > options.snapshotsUpTo) {
        throw new NoaError(
          'NOA_CONFLICT',
          `workspace ${workspace} got snapshot ${e.snapshot_id} (seq ${seq}) while it was being replayed; try again`,
          { workspace, seq },
        )
      }
      lastSeq = seq
    }
    const before = noEffect.length
    applied += applyEntries(tree, workspace, batch, { track, strict: options.strict, noEffect })
    if (pendingSnapshots.length > 0) {
      noEffect.push(...pendingSnapshots)
      pendingSnapshots.length = 0
      if (noEffect.length - before > 1) sortTail(noEffect, before)
    }
    entries += batch.length
    onProgress?.({ workspace, seq: lastSeq, first: since + 1, last, entries })
    if (done) break // leaving the loop closes the file
  }
  return { applied, treeOps, noEffect, lastSeq }
}

function sortTail(list: NoEffect[], from: number): void {
  const tail = list.splice(from).sort((a, b) => a.seq - b.seq)
  list.push(...tail)
}

/** Seq of the last complete line before `end` (for progress), or undefined. */
function lastSeqBefore(root: string, workspace: string, end: number | undefined): number | undefined {
  const fd = openFileSync(existingLog(root, workspace), READ, { what: 'log' })
  try {
    const line = end === undefined ? inspectTail(fd).lastLine : inspectTail(fd, end).lastLine
    return line === null ? undefined : parseCounters(line).seq
  } catch {
    return undefined
  } finally {
    closeSync(fd)
  }
}

function logEnd(file: string): number {
  const fd = openFileSync(file, READ, { what: 'log' })
  try {
    return endOfCompleteLines(fd)
  } finally {
    closeSync(fd)
  }
}

/** The entries in [start, end) of a log, read in one call (end is a line boundary). */
async function* oneBatch(file: string, start: number, end: number): AsyncGenerator<Entry[]> {
  if (end <= start) return
  const buf = Buffer.allocUnsafe(end - start)
  const fd = openFileSync(file, READ, { what: 'log' })
  let got = 0
  try {
    while (got < buf.length) {
      const n = readSync(fd, buf, got, buf.length - got, start + got)
      if (n === 0) break
      got += n
    }
  } finally {
    closeSync(fd)
  }
  const last = buf.lastIndexOf(0x0a, got - 1)
  if (last < 0) return
  const out: Entry[] = []
  try {
    parseLines(new LineScanner(), buf.subarray(0, last + 1), out, { validate: true, fromSeq: 1 })
  } catch (err) {
    if (!(err instanceof BadLine)) throw err
    const offset = start + err.offset
    throw new NoaError('NOA_CORRUPT_LOG', `${file} (line at byte ${offset}): corrupt entry: ${err.message}`, {
      file,
      offset,
    })
  }
  yield out
}
