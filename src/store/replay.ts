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
import { closeSync, fstatSync, readSync } from 'node:fs'
import { compactedError, readBase } from '../engine/base.js'
import { type Entry, parseCounters } from '../engine/entry.js'
import { Errors, type NoaError } from '../engine/errors.js'
import { openFileSync, READ } from '../engine/files.js'
import { readThroughJournals } from '../engine/journal-view.js'
import { existingLog } from '../engine/logs.js'
import { endOfCompleteLines, readChunks, readEntryBatches, seekSeq } from '../engine/reader.js'
import { inspectTail } from '../engine/recovery.js'
import { BadLine, LineScanner, parseLines } from '../engine/scan.js'
import { damagedBlocks, readSidecar, type SumBlock, sidecarPath } from '../engine/sidecar.js'
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

/** Why a part of the log was left out of a replay (stable codes, stored in snapshot records). */
export type SkipReason =
  /** A line that is not a valid entry (not JSON, a field missing or of the wrong type). */
  | 'corrupt-line'
  /** A valid entry whose seq is not above the one before it. */
  | 'seq-order'
  /** A block whose bytes do not match the checksum kept beside the log. */
  | 'damaged-block'

export const SKIP_REASONS: readonly SkipReason[] = ['corrupt-line', 'seq-order', 'damaged-block']

/**
 * A damaged part of the log a replay left out (`skipDamaged`). The byte range is there when the
 * damage is a line or a block; the seqs when they are known: read from a valid entry, or
 * forced by the seqs around the damage (one slot between the good seqs on either side for each
 * damaged line). A line whose seq cannot be known this way is named by its bytes alone.
 */
export interface Skipped {
  offset?: number
  length?: number
  firstSeq?: number
  lastSeq?: number
  reason: SkipReason
}

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
  /**
   * Leave damaged lines (and entries out of seq order) out instead of refusing the segment,
   * and say which in `skipped`: a way past damage that loses nothing silently.
   */
  skipDamaged?: boolean
}

export interface SegmentResult {
  /** Entries that changed the tree. */
  applied: number
  /** Entries that could change the tree (write, delete, rename), whether they did or not. */
  treeOps: number
  /** Entries that changed nothing, in seq order (ignored snapshot entries included). */
  noEffect: NoEffect[]
  /** Last seq read (since, when nothing was); a skipped seq counts. */
  lastSeq: number
  /** What `skipDamaged` left out, by byte offset (entries out of seq order, which have none, last). */
  skipped: Skipped[]
}

export function replayError(
  workspace: string,
  seq: number,
  what: string,
  details: Record<string, unknown> = {},
): NoaError {
  return Errors.REPLAY(`workspace ${workspace} seq ${seq}: ${what}`, {
    workspace,
    seq,
    ...details,
  })
}

function corrupt(workspace: string, seq: unknown, what: string): NoaError {
  return Errors.CORRUPT_LOG(
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
  // Entries a dead process left only in its commit journal are read from there (nothing is written).
  readThroughJournals(root)
  const last = until ?? (onProgress ? lastSeqBefore(root, workspace, options.endByte) : undefined)
  const file = existingLog(root, workspace)
  // A compacted log holds no entry up to its base: a segment from before it is refused by name
  // (its caller starts from the base's snapshot instead), never replayed with a gap.
  const logBase = readBase(file)
  if (logBase !== null && since < logBase.seq) throw compactedError(file, since + 1, logBase, workspace)
  const start =
    logBase !== null && since === logBase.seq ? logBase.bytes : since > 0 ? seekSeq(file, since + 1) : 0
  const end = options.endByte ?? logEnd(file)
  const skipped: Skipped[] = []
  const passed = { lastSeq: 0 }
  // A flipped byte inside a string is still a valid entry: the checksums beside the log are
  // what show it, so the blocks the segment reads are checked before anything is applied.
  const damaged = damagedBlocksIn(root, workspace, file, start, end)
  if (damaged.length > 0 && !options.skipDamaged) {
    const b = damaged[0] as SumBlock
    const more = damaged.length > 1 ? ` (and ${damaged.length - 1} more damaged blocks)` : ''
    throw Errors.CORRUPT_LOG(
      `workspace ${workspace}: damaged block: bytes ${b.offset}-${b.offset + b.length - 1}, seqs ${b.firstSeq}-${b.firstSeq + b.entries - 1} do not match their checksum${more}`,
      {
        workspace,
        file,
        offset: b.offset,
        length: b.length,
        firstSeq: b.firstSeq,
        lastSeq: b.firstSeq + b.entries - 1,
      },
    )
  }
  const batches = options.skipDamaged
    ? skipDamaged(file, start, end, since, until, skipped, passed, damaged)
    : end - start <= SYNC_RANGE
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
        throw Errors.CONFLICT(
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
  // Lines are recorded when the next good entry places them, blocks when met: by offset again
  // (entries out of seq order, which have none, go last).
  const byOffset = skipped
    .filter((k) => k.offset !== undefined)
    .sort((a, b) => (a.offset ?? 0) - (b.offset ?? 0))
  const ordered = [...byOffset, ...skipped.filter((k) => k.offset === undefined)]
  // A skipped seq after the last good one is covered too, so the next snapshot does not meet it again.
  return { applied, treeOps, noEffect, lastSeq: Math.max(lastSeq, passed.lastSeq), skipped: ordered }
}

/** A damaged line met while reading, before it is known which seqs it held. */
interface PendingLine {
  offset: number
  length: number
  /** The seq the line's text names, if it names one (the damage may be elsewhere). */
  named: number | null
}

const SEQ_AT_START = /^\{"seq":(\d{1,15}),/

/**
 * The entries of (since, until] in [start, end), with every damaged line and every entry out
 * of seq order left out and pushed to `skipped`. Damaged lines are held until the next good
 * entry: its seq says whether they came after `since` at all, and, with the good seq before
 * them, whether their seqs are forced. Reads on this thread, in chunks (a repair, not the
 * common path).
 */
async function* skipDamaged(
  file: string,
  start: number,
  end: number,
  since: number,
  until: number | undefined,
  skipped: Skipped[],
  passed: { lastSeq: number },
  damaged: readonly SumBlock[],
): AsyncGenerator<Entry[]> {
  // A damaged block is left out whole (which of its entries is wrong cannot be told), recorded
  // where it comes in log order; its seqs as far as the segment goes.
  let nextBlock = 0
  const blockBefore = (offset: number) => {
    while (nextBlock < damaged.length && (damaged[nextBlock] as SumBlock).offset <= offset) {
      const b = damaged[nextBlock++] as SumBlock
      const first = Math.max(b.firstSeq, since + 1)
      const last = Math.min(b.firstSeq + b.entries - 1, until ?? Number.POSITIVE_INFINITY)
      const k: Skipped = { offset: b.offset, length: b.length, reason: 'damaged-block' }
      if (first <= last) {
        k.firstSeq = first
        k.lastSeq = last
        if (last > passed.lastSeq) passed.lastSeq = last
      }
      skipped.push(k)
    }
  }
  const inBlock = (seq: number | null, offset: number | null) =>
    damaged.some((b) =>
      offset !== null
        ? offset >= b.offset && offset < b.offset + b.length
        : seq !== null && seq >= b.firstSeq && seq < b.firstSeq + b.entries,
    )
  // The good seq before the damage; unknown after a seek (the line before the start is not read).
  let prev: number | null = start === 0 ? 0 : null
  let pending: PendingLine[] = []
  const flush = (next: number | null) => {
    if (pending.length === 0) return
    const lines = pending
    pending = []
    if (next !== null && next <= since) return // before the segment: an earlier snapshot's business
    const forced = prev !== null && next !== null && next - prev - 1 === lines.length
    let floor = prev ?? since
    for (const [i, l] of lines.entries()) {
      let seq: number | null = forced ? (prev as number) + 1 + i : null
      if (seq === null && l.named !== null && l.named > floor && (next === null || l.named < next))
        seq = l.named
      if (seq !== null && until !== undefined && seq > until) continue
      if (seq !== null && seq <= since) continue
      const k: Skipped = { offset: l.offset, length: l.length, reason: 'corrupt-line' }
      if (seq !== null) {
        k.firstSeq = seq
        k.lastSeq = seq
        floor = seq
        if (seq > passed.lastSeq) passed.lastSeq = seq
      }
      skipped.push(k)
    }
  }
  const scanner = new LineScanner()
  let base = start
  for await (const chunk of readChunks(file, { start, end })) {
    const out: Entry[] = []
    const bad: Array<{ at: number; line: PendingLine }> = []
    parseLines(scanner, chunk, out, {
      validate: true,
      fromSeq: 1,
      onBad: (offset, length, line) => {
        if (inBlock(null, base + offset)) return
        const m = SEQ_AT_START.exec(line)
        bad.push({ at: out.length, line: { offset: base + offset, length, named: m ? Number(m[1]) : null } })
      },
    })
    base += chunk.length
    const keep: Entry[] = []
    let b = 0
    for (let i = 0; i <= out.length; i++) {
      while (b < bad.length && (bad[b] as (typeof bad)[number]).at === i)
        pending.push((bad[b++] as (typeof bad)[number]).line)
      if (i === out.length) break
      const e = out[i] as Entry
      if (inBlock(e.seq, null)) {
        blockBefore(blockStartOf(damaged, e.seq))
        continue
      }
      if (prev !== null && e.seq <= prev) {
        if (e.seq > since && (until === undefined || e.seq <= until)) {
          skipped.push({ firstSeq: e.seq, lastSeq: e.seq, reason: 'seq-order' })
        }
        continue
      }
      flush(e.seq)
      prev = e.seq
      if (until !== undefined && e.seq > until) {
        if (keep.length > 0) yield keep
        return
      }
      if (e.seq > since) keep.push(e)
    }
    if (keep.length > 0) yield keep
  }
  flush(null)
  blockBefore(Number.POSITIVE_INFINITY)
}

/** Offset of the damaged block holding `seq`. */
function blockStartOf(blocks: readonly SumBlock[], seq: number): number {
  for (const b of blocks) if (seq >= b.firstSeq && seq < b.firstSeq + b.entries) return b.offset
  return 0
}

/**
 * The blocks of [start, end) of a log whose bytes do not match the checksum sidecar, in order;
 * none when it has no usable sidecar (another tool's log, an older one, or one replaced since).
 */
export function damagedBlocksIn(
  root: string,
  workspace: string,
  file: string,
  start: number,
  end: number,
): SumBlock[] {
  if (end <= start) return []
  const fd = openFileSync(file, READ, { what: 'log' })
  try {
    const st = fstatSync(fd, { bigint: true })
    let sidecar: ReturnType<typeof readSidecar>
    try {
      sidecar = readSidecar(sidecarPath(root, workspace), st.ino, Number(st.size), true)
    } catch {
      return [] // unreadable: the log is read by its lines alone, as without one
    }
    if (sidecar === null) return []
    const wanted = sidecar.blocks.filter((b) => b.offset < end && b.offset + b.length > start)
    return wanted.length === 0 ? [] : damagedBlocks(fd, wanted)
  } finally {
    closeSync(fd)
  }
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
    throw Errors.CORRUPT_LOG(`${file} (line at byte ${offset}): corrupt entry: ${err.message}`, {
      file,
      offset,
    })
  }
  yield out
}
