/**
 * What the root's logs reach in the object store: gc's mark phase and `verify --objects` walk
 * the same roots, so what gc keeps is exactly what verify checks.
 *
 * The roots, for every workspace log:
 * - each snapshot entry that means something (records.ts): its record, the records it descends
 *   from (parents, merged sources, base: history and merge bases need them), and its tree (the
 *   tree's objects, its delta chain included, and the tree's blobs). A snapshot dropped by
 *   `snapshot prune` keeps its record but not its tree: that tree can be rebuilt from its
 *   parent's and the log, which is never pruned (a merge's tree cannot, so it is always kept);
 * - the blobs of the `write` entries after the head (not yet in any snapshot).
 * Records reached only through history, whose workspace log is gone, keep their trees (nothing
 * could rebuild them).
 *
 * Nothing else in a root references objects: transcripts, memory and context files do not, the
 * adapters name every object they read back in a tree or a write (langgraph/layout.ts), and
 * replication's lists of published objects are hints (an object removed locally was published
 * or is not needed); a mirror writes objects before the entries that name them, which the gc
 * grace period covers.
 */
import { existsSync } from 'node:fs'
import { NoaError } from '../engine/errors.js'
import { readThroughJournals } from '../engine/journal-view.js'
import { logPath, workspaceNames } from '../engine/logs.js'
import { readEntryBatches } from '../engine/reader.js'
import type { SnapshotRecord } from './objects.js'
import { lastSeqOf } from './records.js'
import type { SnapshotView } from './view.js'

export type ObjectKind = 'record' | 'tree' | 'blob'

/** Where a reference to an object was found. */
export interface Referrer {
  workspace: string
  /** The entry (a write's seq, or a snapshot entry's). */
  seq?: number
  /** The snapshot whose tree holds it. */
  snapshot?: string
  path?: string
}

export interface ReachSink {
  /** Called for each reference; returns true the first time an id is seen (the walk goes into it). */
  object(kind: ObjectKind, id: string, from: Referrer): boolean
  /** A record or tree that should be there is not (or is damaged): `err` says which. */
  missing(kind: ObjectKind, id: string, from: Referrer, err: NoaError): void
  /** Give each tree blob's path in `from` (verify names them; gc does not need the strings). */
  paths?: boolean
}

/**
 * A set of object ids kept as 64-bit prefixes in an open-addressing table: 16 bytes a slot at
 * most half full, against ~100 for a Set of hex strings, so gc's mark of a million objects stays
 * small. Two ids with the same prefix collide: that only keeps an object gc could have removed.
 */
export class MarkSet {
  private table = new Uint32Array(1 << 16)
  private count = 0

  get size(): number {
    return this.count
  }

  /** Adds an id (64 hex); true when it was not there. */
  add(id: string): boolean {
    return this.put(prefix(id, 0), prefix(id, 8), true)
  }

  has(id: string): boolean {
    return !this.put(prefix(id, 0), prefix(id, 8), false)
  }

  private put(hi: number, lo: number, insert: boolean): boolean {
    if (hi === 0 && lo === 0) lo = 1 // (0, 0) marks an empty slot
    const t = this.table
    const mask = (t.length >>> 1) - 1
    let i = (lo ^ Math.imul(hi, 0x9e3779b1)) & mask
    for (;;) {
      const a = t[2 * i] as number
      const b = t[2 * i + 1] as number
      if (a === 0 && b === 0) break
      if (a === hi && b === lo) return false
      i = (i + 1) & mask
    }
    if (!insert) return true
    t[2 * i] = hi
    t[2 * i + 1] = lo
    if (++this.count * 2 > t.length >>> 1) this.grow()
    return true
  }

  private grow(): void {
    const old = this.table
    this.table = new Uint32Array(old.length * 2)
    this.count = 0
    for (let i = 0; i < old.length; i += 2) {
      const a = old[i] as number
      const b = old[i + 1] as number
      if (a !== 0 || b !== 0) this.put(a, b, true)
    }
  }
}

function prefix(id: string, at: number): number {
  return Number.parseInt(id.slice(at, at + 8), 16) >>> 0
}

export interface WalkResult {
  /** Each workspace's last seq when its log was read (gc reads what came after again). */
  lastSeqs: Map<string, number>
}

/** Walks every root of the store (see the top of this file). */
export async function walkRoots(
  engine: SnapshotView,
  sink: ReachSink,
  onWorkspace?: (workspace: string) => void,
): Promise<WalkResult> {
  const lastSeqs = new Map<string, number>()
  for (const workspace of workspaceNames(engine.root)) {
    onWorkspace?.(workspace)
    lastSeqs.set(workspace, lastSeqOf(engine.root, workspace))
    await walkWorkspace(engine, workspace, sink)
  }
  return { lastSeqs }
}

/** One workspace's roots: its snapshots and the writes after its head. */
export async function walkWorkspace(engine: SnapshotView, workspace: string, sink: ReachSink): Promise<void> {
  for await (const info of engine.snapshots(workspace)) {
    const from: Referrer = { workspace, seq: info.entry.seq, snapshot: info.snapshotId }
    let record: SnapshotRecord
    try {
      record = await engine.getSnapshot(info.snapshotId)
    } catch (err) {
      if (err instanceof NoaError) sink.missing('record', info.snapshotId.slice(4), from, err)
      continue
    }
    await snapshotObjects(engine, record, sink, from, !info.pruned || record.merged !== undefined)
  }
  const head = await engine.head(workspace)
  await writesAfter(engine, workspace, head?.pos ?? 0, sink)
}

/** The blobs of `write` entries after `since`. */
export async function writesAfter(
  engine: SnapshotView,
  workspace: string,
  since: number,
  sink: ReachSink,
): Promise<void> {
  readThroughJournals(engine.root)
  for await (const batch of readEntryBatches(logPath(engine.root, workspace), {
    fromSeq: since + 1,
    validate: false,
  })) {
    for (const e of batch) {
      if (e.op === 'write') sink.object('blob', e.blob, { workspace, seq: e.seq, path: e.path })
    }
  }
}

/**
 * The objects a snapshot reaches: its record, the records it descends from, and (`withTree`)
 * its tree's objects and blobs. The one place that knows how a snapshot is stored, so a change
 * of the tree format changes only this and the object store.
 */
export async function snapshotObjects(
  engine: SnapshotView,
  record: SnapshotRecord,
  sink: ReachSink,
  from: Referrer,
  withTree: boolean,
): Promise<void> {
  const stack: Array<{ record: SnapshotRecord; tree: boolean }> = [{ record, tree: withTree }]
  const treesDone = new Set<string>()
  while (stack.length > 0) {
    const { record: r, tree } = stack.pop() as { record: SnapshotRecord; tree: boolean }
    const first = sink.object('record', r.id.slice(4), { ...from, snapshot: r.id })
    if (tree && !treesDone.has(r.id)) {
      treesDone.add(r.id)
      await treeObjects(engine, r, sink, { ...from, snapshot: r.id })
    }
    if (!first) continue
    for (const id of [r.parent, ...(r.merged ?? []), r.base]) {
      if (id === undefined) continue
      let next: SnapshotRecord
      try {
        next = await engine.getSnapshot(id)
      } catch (err) {
        if (err instanceof NoaError) sink.missing('record', id.slice(4), { ...from, snapshot: id }, err)
        continue
      }
      // History's records are kept; their trees too when no log is left to rebuild them from.
      const orphan = !existsSync(logPath(engine.root, next.workspace))
      stack.push({ record: next, tree: orphan || next.merged !== undefined })
    }
  }
}

/**
 * Trees whose blobs a sink has been given. Apart from the marks: a tree can be marked first as
 * a link of another tree's delta chain, which says nothing of its own blobs.
 */
const walkedTrees = new WeakMap<ReachSink, Set<string>>()

async function treeObjects(
  engine: SnapshotView,
  record: SnapshotRecord,
  sink: ReachSink,
  from: Referrer,
): Promise<void> {
  let walked = walkedTrees.get(sink)
  if (!walked) {
    walked = new Set()
    walkedTrees.set(sink, walked)
  }
  let chain: string[]
  try {
    chain = await engine.store.treeObjects(record.tree)
  } catch (err) {
    if (!(err instanceof NoaError)) throw err
    sink.missing('tree', record.tree, from, err)
    return
  }
  for (const id of chain) sink.object('tree', id, from)
  if (walked.has(record.tree)) return
  walked.add(record.tree)
  let tree: Awaited<ReturnType<SnapshotView['treeOf']>>
  try {
    tree = await engine.treeOf(record)
  } catch (err) {
    if (!(err instanceof NoaError)) throw err
    sink.missing('tree', record.tree, from, err)
    return
  }
  if (sink.paths) {
    for (let i = 0; i < tree.size; i++) sink.object('blob', tree.blobAt(i), { ...from, path: tree.pathAt(i) })
  } else {
    for (let i = 0; i < tree.size; i++) sink.object('blob', tree.blobAt(i), from)
  }
}
