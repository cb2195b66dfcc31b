/**
 * Merge (seed: 統合; design.md §4). For a target and sources:
 *
 * 1. The base is the newest snapshot that every participant's head descends from (through
 *    parents and merged sources); none when they share no snapshot (then: the empty tree).
 * 2. Each participant's history since the base is walked through snapshot records (never by
 *    scanning logs): log segments (workspace, after seq, up to seq), crossing into the parent
 *    workspace at a fork. A merge snapshot on the way stands for all it brought in: its tree's
 *    difference from the base, dated by the merge snapshot.
 * 3. Each participant's segments are replayed in seq order on the base tree (with the same
 *    total rules as a snapshot: see replay.ts), giving its net change per path and the entry
 *    that made it.
 * 4. A path two participants changed to different values is a conflict. The seed's rule
 *    decides: the change whose entry is last in (ts, workspace, seq) order wins. That is the
 *    seed's flattened, time-ordered replay evaluated per path, so two sources deleting the same
 *    file, or editing different files, never make the replay fail.
 * 5. Writes, only once all of that succeeded: a source whose latest entries are not in a
 *    snapshot gets one (so `from_snapshot` names exactly what was merged), then the merged tree
 *    and record, then in the target one `merge` entry per source and the `snapshot` entry last.
 *
 * The target takes part like a source: its own entries since the base are merged too. When no
 * source brings anything the target's history lacks, nothing is written ("already up to date").
 */
import { nowMicros } from '../engine/clock.js'
import { type Ack, checkWorkspace, type EntryInput, encodeBody, type MergeEntry } from '../engine/entry.js'
import { Errors, type NoaError } from '../engine/errors.js'
import { existingLog, logPath } from '../engine/logs.js'
import { checkOptionKeys } from '../engine/options.js'
import { type Head, lengthOfLog } from './heads.js'
import type { KeyedMutex } from './mutex.js'
import {
  type ConflictSide,
  type MergeConflict,
  type ObjectStore,
  type SnapshotRecord,
  type SnapshotRecordInput,
  snapshotEntry,
} from './objects.js'
import { type ChangeMark, type NoEffect, type ReplayProgress, replaySegment } from './replay.js'
import { comparePaths, diffTrees, EMPTY_TREE, type Tree, TreeBuilder } from './tree.js'

export type ConflictPolicy = 'lww' | 'fail'

export interface MergeOptions {
  /** `lww` (default): the later change wins and the conflict is reported; `fail`: refuse. */
  onConflict?: ConflictPolicy
  message?: string
  /** Refuse entries that cannot apply (NOA_REPLAY) instead of giving them no effect. */
  strict?: boolean
  onProgress?: (p: ReplayProgress) => void
}

const MERGE_KEYS = new Set(['onConflict', 'message', 'strict', 'onProgress'])

export type { ConflictSide, MergeConflict }

export interface MergeResult {
  /** false: already up to date (every source's state is in the target's history), nothing written. */
  created: boolean
  /** The merge snapshot (not created: the target's head, null when it has none). */
  snapshotId: string | null
  base: string | null
  conflicts: MergeConflict[]
  tree: string
  /** The target's previous head. */
  parent: string | null
  /** Last seq of the target's log the merge covers. */
  seq: number
  workspace: string
  /** Each source's snapshot that was merged; `created` when the merge had to make it. */
  sources: Array<{ workspace: string; snapshotId: string | null; created: boolean }>
  /** Entries replayed over all participants. */
  entriesReplayed: number
  /** The target's entries since its head that changed nothing (kept in the merge record). */
  noEffect: NoEffect[]
  /** The target's `snapshot` entry (null when nothing was written). */
  entry: Ack | null
}

/** What the engine lends the merge. */
export interface MergeContext {
  root: string
  store: ObjectStore
  /** The store's own appends (records it has just written). */
  append(workspace: string, entries: readonly EntryInput[]): Promise<Ack[]>
  openWorkspace(workspace: string): Promise<void>
  mutex: KeyedMutex
  /** The head and the meaningless snapshot entries after it. */
  head(workspace: string): Promise<{ head: Head | null; ignored: Map<number, NoEffect> }>
  storeSnapshot(input: Omit<SnapshotRecordInput, 'tree'>, built: TreeBuilder): Promise<SnapshotRecord>
  treeOf(record: SnapshotRecord): Promise<Tree>
}

interface Segment {
  workspace: string
  since: number
  /** Last seq, inclusive; undefined for the participant's live segment (up to the log's end). */
  until: number | undefined
}

interface Change {
  value: string | null
  mark: ChangeMark
}

interface View {
  workspace: string
  head: Head | null
  segments: Segment[]
  builder: TreeBuilder
  /** Last seq read of the participant's own log. */
  lastSeq: number
  /** Entries after the head that could change the tree or had no effect: 0 means the head is the state. */
  liveOps: number
  /** Of the live segment: entries that changed nothing. */
  noEffect: NoEffect[]
  applied: number
  changes: Map<string, Change>
}

function badArgument(message: string): NoaError {
  return Errors.BAD_ARGUMENT(message)
}

function parentsOf(r: SnapshotRecord): string[] {
  const out = r.parent ? [r.parent] : []
  if (r.merged) out.push(...r.merged)
  return out
}

async function ancestry(store: ObjectStore, id: string): Promise<Set<string>> {
  const seen = new Set<string>()
  const stack = [id]
  while (stack.length > 0) {
    const next = stack.pop() as string
    if (seen.has(next)) continue
    seen.add(next)
    stack.push(...parentsOf(await store.getSnapshot(next)))
  }
  return seen
}

/**
 * The newest snapshot every head descends from: among the common ancestors, those that are
 * not an ancestor of another common ancestor; if several remain (criss-cross merges), the one
 * made last.
 */
export async function mergeBase(
  store: ObjectStore,
  heads: ReadonlyArray<SnapshotRecord | null>,
): Promise<SnapshotRecord | null> {
  if (heads.length === 0 || heads.some((h) => h === null)) return null
  const sets = await Promise.all(heads.map((h) => ancestry(store, (h as SnapshotRecord).id)))
  const [first, ...rest] = sets as [Set<string>, ...Set<string>[]]
  const common = [...first].filter((id) => rest.every((s) => s.has(id)))
  if (common.length === 0) return null
  const dominated = new Set<string>()
  for (const c of common) {
    if (dominated.has(c)) continue
    const stack = parentsOf(await store.getSnapshot(c))
    while (stack.length > 0) {
      const id = stack.pop() as string
      if (dominated.has(id)) continue
      dominated.add(id)
      stack.push(...parentsOf(await store.getSnapshot(id)))
    }
  }
  const best = await Promise.all(common.filter((c) => !dominated.has(c)).map((c) => store.getSnapshot(c)))
  best.sort((a, b) => b.ts - a.ts || (a.id < b.id ? -1 : 1))
  return best[0] ?? null
}

/** The log segments (oldest first) and merge snapshot that lead from `base` to the workspace now. */
async function historySince(
  store: ObjectStore,
  workspace: string,
  head: Head | null,
  base: SnapshotRecord | null,
): Promise<{ segments: Segment[]; diff: SnapshotRecord | null }> {
  const newestFirst: Segment[] = []
  const push = (s: Segment) => {
    if (s.until !== undefined && s.since >= s.until) return
    const later = newestFirst[newestFirst.length - 1]
    if (later && later.until !== undefined && later.workspace === s.workspace && later.since === s.until) {
      later.since = s.since
    } else newestFirst.push(s)
  }
  let ws = workspace
  let since = head?.pos ?? 0
  let until: number | undefined
  let record = head?.record ?? null
  let diff: SnapshotRecord | null = null
  const seen = new Set<string>()
  for (;;) {
    push({ workspace: ws, since, until })
    if (record === null) {
      if (base !== null) {
        throw Errors.NOT_FOUND(`merge base ${base.id} is not in the history of ${workspace}`, {
          workspace,
        })
      }
      break
    }
    if (base !== null && record.id === base.id) break
    if (record.merged) {
      diff = record
      break
    }
    if (seen.has(record.id)) {
      throw Errors.CORRUPT_OBJECT(`snapshot ${record.id} is its own ancestor`, {
        object: record.id,
      })
    }
    seen.add(record.id)
    // This record's tree = its parent's + its workspace's entries in (since, seq].
    ws = record.workspace
    since = record.since
    until = record.seq
    record = record.parent ? await store.getSnapshot(record.parent) : null
  }
  return { segments: newestFirst.reverse(), diff }
}

function byEntryOrder(a: ChangeMark, b: ChangeMark): number {
  return a.ts - b.ts || (a.workspace < b.workspace ? -1 : a.workspace > b.workspace ? 1 : 0) || a.seq - b.seq
}

function sameMark(a: ChangeMark, b: ChangeMark): boolean {
  return a.workspace === b.workspace && a.seq === b.seq && a.op === b.op
}

/** Whether a participant's history holds a given log entry. */
function covers(view: View, mark: ChangeMark): boolean {
  if (mark.op === 'merge') return false
  return view.segments.some(
    (s) => s.workspace === mark.workspace && s.since < mark.seq && mark.seq <= (s.until ?? view.lastSeq),
  )
}

async function buildView(
  ctx: MergeContext,
  workspace: string,
  head: Head | null,
  ignored: Map<number, NoEffect>,
  strict: boolean,
  endByte: number,
  base: SnapshotRecord | null,
  baseTree: Tree,
  onProgress: MergeOptions['onProgress'],
): Promise<View> {
  const { segments, diff } = await historySince(ctx.store, workspace, head, base)
  const builder = new TreeBuilder(baseTree)
  const marks = new Map<string, ChangeMark>()
  if (diff) {
    const mark: ChangeMark = { workspace: diff.workspace, seq: diff.seq, ts: diff.ts, op: 'merge' }
    for (const c of diffTrees(baseTree, await ctx.treeOf(diff))) {
      if (c.after === null) builder.remove(c.path)
      else builder.set(c.path, c.after)
      marks.set(c.path, mark)
    }
  }
  const view: View = {
    workspace,
    head,
    segments,
    builder,
    lastSeq: 0,
    liveOps: 0,
    noEffect: [],
    applied: 0,
    changes: new Map(),
  }
  for (const seg of segments) {
    const live = seg.until === undefined
    const r = await replaySegment(ctx.root, seg.workspace, builder, {
      since: seg.since,
      until: seg.until,
      endByte: live ? endByte : undefined,
      snapshotsUpTo: live ? (head?.entrySeq ?? 0) : undefined,
      ignoredSnapshots: live ? ignored : undefined,
      strict,
      track: (path, _value, mark) => marks.set(path, mark),
      onProgress,
    })
    view.applied += r.applied
    if (live) {
      view.lastSeq = r.lastSeq
      view.liveOps = r.treeOps + r.noEffect.length
      view.noEffect = r.noEffect
    }
  }
  for (const [path, value] of builder.touched()) {
    const before = baseTree.get(path) ?? null
    if (value !== before) view.changes.set(path, { value, mark: marks.get(path) as ChangeMark })
  }
  return view
}

interface Plan {
  base: SnapshotRecord | null
  views: View[]
  merged: TreeBuilder
  conflicts: MergeConflict[]
}

async function planMerge(
  ctx: MergeContext,
  participants: readonly string[],
  strict: boolean,
  onProgress: MergeOptions['onProgress'],
): Promise<Plan> {
  const ends = participants.map((ws) => lengthOfLog(logPath(ctx.root, ws)))
  const heads: Array<Head | null> = []
  const ignored: Array<Map<number, NoEffect>> = []
  for (const ws of participants) {
    const found = await ctx.head(ws)
    heads.push(found.head)
    ignored.push(found.ignored)
  }
  const base = await mergeBase(
    ctx.store,
    heads.map((h) => h?.record ?? null),
  )
  const baseTree = base ? await ctx.treeOf(base) : EMPTY_TREE
  const views: View[] = []
  for (let i = 0; i < participants.length; i++) {
    views.push(
      await buildView(
        ctx,
        participants[i] as string,
        heads[i] ?? null,
        ignored[i] as Map<number, NoEffect>,
        strict,
        ends[i] as number,
        base,
        baseTree,
        onProgress,
      ),
    )
  }

  const byPath = new Map<string, Array<{ view: View; change: Change }>>()
  for (const view of views) {
    for (const [path, change] of view.changes) {
      const sides = byPath.get(path)
      if (sides) sides.push({ view, change })
      else byPath.set(path, [{ view, change }])
    }
  }
  const merged = new TreeBuilder(baseTree)
  const conflicts: MergeConflict[] = []
  for (const [path, all] of byPath) {
    let sides = all
    if (sides.length > 1) {
      // A participant that only carries an older version of a change another participant made
      // and then changed again (nested forks) has not changed the path itself.
      sides = sides.filter(
        ({ view, change }) =>
          !views.some((other) => {
            if (other === view || !covers(other, change.mark)) return false
            const theirs = all.find((s) => s.view === other)
            return theirs === undefined || !sameMark(theirs.change.mark, change.mark)
          }),
      )
    }
    if (sides.length === 0) continue
    sides.sort((a, b) => byEntryOrder(a.change.mark, b.change.mark))
    const winner = sides[sides.length - 1] as { view: View; change: Change }
    if (sides.some((s) => s.change.value !== winner.change.value)) {
      conflicts.push({
        path,
        sides: sides.map(({ view, change }) => {
          const side: ConflictSide = {
            workspace: view.workspace,
            op: change.mark.op,
            blob: change.value,
            ts: change.mark.ts,
            seq: change.mark.seq,
          }
          if (change.mark.workspace !== view.workspace) side.log = change.mark.workspace
          return side
        }),
        winner: winner.view.workspace,
      })
    }
    if (winner.change.value === null) merged.remove(path)
    else merged.set(path, winner.change.value)
  }
  conflicts.sort((a, b) => comparePaths(a.path, b.path))
  return { base, views, merged, conflicts }
}

function describeConflicts(conflicts: readonly MergeConflict[]): string {
  const shown = conflicts.slice(0, 5).map((c) => c.path)
  const more = conflicts.length > shown.length ? ` and ${conflicts.length - shown.length} more` : ''
  return `${shown.map((p) => JSON.stringify(p)).join(', ')}${more}`
}

export async function mergeWorkspaces(
  ctx: MergeContext,
  target: string,
  sources: readonly string[],
  options: MergeOptions = {},
): Promise<MergeResult> {
  checkOptionKeys(options, MERGE_KEYS, 'merge')
  checkWorkspace(target)
  if (!Array.isArray(sources) || sources.length === 0)
    throw badArgument('merge needs at least one source workspace')
  for (const s of sources) checkWorkspace(s)
  if (new Set(sources).size !== sources.length)
    throw badArgument(`a source is named twice in ${sources.join(', ')}`)
  if (sources.includes(target))
    throw badArgument(`workspace ${target} is the target; it cannot be a source too`)
  const policy = options.onConflict ?? 'lww'
  if (policy !== 'lww' && policy !== 'fail') {
    throw Errors.BAD_OPTION(`option onConflict must be 'lww' or 'fail', got ${JSON.stringify(policy)}`, {
      field: 'onConflict',
    })
  }
  const message = options.message ?? `merge ${sources.join(', ')} into ${target}`
  encodeBody({ op: 'snapshot', snapshot_id: 'noa_0', message })
  const participants = [target, ...sources]
  for (const ws of participants) existingLog(ctx.root, ws)

  return ctx.mutex.run(participants, async () => {
    for (const ws of participants) await ctx.openWorkspace(ws) // locks, torn tails cut
    const plan = await planMerge(ctx, participants, options.strict ?? false, options.onProgress)
    const upToDate = await alreadyUpToDate(ctx.store, plan)
    if (upToDate) return upToDate
    if (policy === 'fail' && plan.conflicts.length > 0) {
      throw Errors.CONFLICT(
        `${plan.conflicts.length} conflicting path${plan.conflicts.length === 1 ? '' : 's'} (${describeConflicts(plan.conflicts)}); nothing was written`,
        { workspace: target, base: plan.base?.id ?? null, conflicts: plan.conflicts },
      )
    }
    return commit(ctx, plan, target, message)
  })
}

/**
 * Nothing to merge: every source's state is a snapshot (nothing after its head) that the
 * target's head already descends from. Then, as git says "Already up to date", nothing is
 * written; the target's own new entries wait for its next snapshot.
 */
async function alreadyUpToDate(store: ObjectStore, plan: Plan): Promise<MergeResult | null> {
  const [target, ...sources] = plan.views as [View, ...View[]]
  const history = target.head ? await ancestry(store, target.head.record.id) : new Set<string>()
  for (const v of sources) {
    if (v.liveOps > 0) return null
    if (v.head && !history.has(v.head.record.id)) return null
  }
  const r = target.head?.record
  return {
    created: false,
    snapshotId: r?.id ?? null,
    base: plan.base?.id ?? null,
    conflicts: [],
    tree: r?.tree ?? EMPTY_TREE.id,
    parent: r?.parent ?? null,
    seq: target.lastSeq,
    workspace: target.workspace,
    sources: sources.map((v) => ({
      workspace: v.workspace,
      snapshotId: v.head?.record.id ?? null,
      created: false,
    })),
    entriesReplayed: 0,
    noEffect: [],
    entry: null,
  }
}

async function commit(ctx: MergeContext, plan: Plan, target: string, message: string): Promise<MergeResult> {
  const ts = nowMicros()
  const [targetView, ...sourceViews] = plan.views as [View, ...View[]]
  const sources: MergeResult['sources'] = []
  for (const v of sourceViews) {
    if (v.head && v.liveOps === 0) {
      sources.push({ workspace: v.workspace, snapshotId: v.head.record.id, created: false })
      continue
    }
    const sourceMessage = `merge into ${target}`
    const record = await ctx.storeSnapshot(
      {
        workspace: v.workspace,
        parent: v.head?.record.id,
        since: v.head?.pos ?? 0,
        seq: v.lastSeq,
        noEffect: v.noEffect.map((n) => ({ seq: n.seq, reason: n.reason })),
        message: sourceMessage,
        ts,
      },
      v.builder,
    )
    await ctx.append(v.workspace, [snapshotEntry(record, sourceMessage)])
    sources.push({ workspace: v.workspace, snapshotId: record.id, created: true })
  }
  const input: Omit<SnapshotRecordInput, 'tree'> = {
    workspace: target,
    parent: targetView.head?.record.id,
    merged: sources.map((s) => s.snapshotId as string),
    since: targetView.head?.pos ?? 0,
    seq: targetView.lastSeq,
    noEffect: targetView.noEffect.map((n) => ({ seq: n.seq, reason: n.reason })),
    conflicts: plan.conflicts,
    message,
    ts,
  }
  if (plan.base) input.base = plan.base.id
  const record = await ctx.storeSnapshot(input, plan.merged)
  const entries: Array<MergeEntry | ReturnType<typeof snapshotEntry>> = sources.map((s) => {
    const e: MergeEntry = { op: 'merge', from_workspace: s.workspace, from_snapshot: s.snapshotId as string }
    if (plan.base) e.base = plan.base.id
    return e
  })
  entries.push(snapshotEntry(record, message))
  const acks = await ctx.append(target, entries)
  return {
    created: true,
    snapshotId: record.id,
    base: plan.base?.id ?? null,
    conflicts: plan.conflicts,
    tree: record.tree,
    parent: record.parent ?? null,
    seq: record.seq,
    workspace: target,
    sources,
    entriesReplayed: plan.views.reduce((n, v) => n + v.applied, 0),
    noEffect: targetView.noEffect,
    entry: acks[acks.length - 1] as Ack,
  }
}
