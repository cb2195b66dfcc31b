/**
 * A workspace's history: the graph of snapshot records its log reaches (parents, merged
 * sources, fork bases), oldest first, from the records alone (their logs are not read).
 */
import { NoaError } from '../engine/errors.js'
import type { MergeConflict, SnapshotRecord } from './objects.js'
import type { Skipped } from './replay.js'
import type { SnapshotView } from './view.js'

export type HistoryKind = 'snapshot' | 'fork' | 'merge' | 'prune'

export interface HistoryNode {
  snapshotId: string
  kind: HistoryKind
  /** Workspace the record belongs to. */
  workspace: string
  /** The previous snapshot first, then any merged sources. */
  parents: string[]
  /** Merges: the common base, if any. */
  base: string | null
  /** Merges: the conflicts met, with the side kept. */
  conflicts: MergeConflict[]
  /** Last seq of `workspace`'s log the snapshot covers. */
  seq: number
  message: string
  ts: number
  /** Entries of its replay that had no effect. */
  noEffect: number
  /** Damaged parts of the log its replay left out (`skipDamaged`). */
  skipped: Skipped[]
  /** Dropped by a later prune of its workspace. */
  pruned: boolean
  /** Snapshots this one dropped (a prune). */
  prunes: string[]
  /** Not in the object store (its parent chain ends here). */
  missing?: boolean
}

export async function historyOf(engine: SnapshotView, workspace: string): Promise<HistoryNode[]> {
  const roots: SnapshotRecord[] = []
  const forks = new Set<string>()
  for await (const s of engine.snapshots(workspace)) {
    roots.push(await engine.getSnapshot(s.snapshotId))
    if (s.kind === 'fork') forks.add(s.snapshotId)
  }
  const nodes = new Map<string, HistoryNode>()
  const pruned = new Set<string>()
  const stack = [...roots]
  while (stack.length > 0) {
    const r = stack.pop() as SnapshotRecord
    if (nodes.has(r.id)) continue
    const parents = [...(r.parent ? [r.parent] : []), ...(r.merged ?? [])]
    for (const p of r.pruned ?? []) pruned.add(p)
    nodes.set(r.id, {
      snapshotId: r.id,
      kind: r.merged ? 'merge' : r.pruned ? 'prune' : 'snapshot',
      workspace: r.workspace,
      parents,
      base: r.base ?? null,
      conflicts: r.conflicts ?? [],
      seq: r.seq,
      message: r.message,
      ts: r.ts,
      noEffect: r.noEffect?.length ?? 0,
      skipped: r.skipped ?? [],
      pruned: false,
      prunes: r.pruned ?? [],
    })
    for (const id of parents) {
      if (nodes.has(id)) continue
      try {
        stack.push(await engine.getSnapshot(id))
      } catch (err) {
        if (!(err instanceof NoaError && err.code === 'NOA_NOT_FOUND')) throw err
        nodes.set(id, {
          snapshotId: id,
          kind: 'snapshot',
          workspace: '?',
          parents: [],
          base: null,
          conflicts: [],
          seq: 0,
          message: '',
          ts: 0,
          noEffect: 0,
          skipped: [],
          pruned: false,
          prunes: [],
          missing: true,
        })
      }
    }
  }
  for (const id of pruned) {
    const n = nodes.get(id)
    if (n) n.pruned = true
  }
  for (const id of forks) {
    const n = nodes.get(id)
    if (n && n.workspace !== workspace && n.kind === 'snapshot') n.kind = 'fork'
  }
  return topoOldestFirst([...nodes.values()])
}

/** Parents before children; among the ready, the oldest first (then by id, for a stable order). */
function topoOldestFirst(nodes: HistoryNode[]): HistoryNode[] {
  const byId = new Map(nodes.map((n) => [n.snapshotId, n]))
  const waiting = new Map<string, number>()
  const children = new Map<string, string[]>()
  for (const n of nodes) {
    const ps = n.parents.filter((p) => byId.has(p))
    waiting.set(n.snapshotId, ps.length)
    for (const p of ps) children.set(p, [...(children.get(p) ?? []), n.snapshotId])
  }
  const order = (a: HistoryNode, b: HistoryNode) => a.ts - b.ts || (a.snapshotId < b.snapshotId ? -1 : 1)
  const ready = nodes.filter((n) => waiting.get(n.snapshotId) === 0).sort(order)
  const out: HistoryNode[] = []
  while (ready.length > 0) {
    const n = ready.shift() as HistoryNode
    out.push(n)
    for (const c of children.get(n.snapshotId) ?? []) {
      const left = (waiting.get(c) as number) - 1
      waiting.set(c, left)
      if (left === 0) {
        ready.push(byId.get(c) as HistoryNode)
        ready.sort(order)
      }
    }
  }
  return out
}

/**
 * Lines of a text graph, oldest first, as `git log --graph` draws newest first: `*` is a
 * snapshot in its lane, `\` a lane that starts (a fork, or a merge source going its own way),
 * `/` lanes that join (a merge).
 */
export function drawGraph(nodes: readonly HistoryNode[], label: (n: HistoryNode) => string): string[] {
  const children = new Map<string, string[]>()
  for (const n of nodes)
    for (const p of n.parents) children.set(p, [...(children.get(p) ?? []), n.snapshotId])
  const byId = new Map(nodes.map((n) => [n.snapshotId, n]))
  const lanes: string[] = [] // the node each lane waits for
  const lines: string[] = []
  const row = (marks: string[]) => marks.join(' ').trimEnd()
  for (const n of nodes) {
    let at = lanes.filter((l) => l === n.snapshotId).length > 0 ? lanes.indexOf(n.snapshotId) : -1
    if (at < 0) {
      lanes.push(n.snapshotId)
      at = lanes.length - 1
    }
    // Lanes that also wait for this node join it (a merge).
    const joining = lanes.map((l, i) => (l === n.snapshotId && i !== at ? i : -1)).filter((i) => i >= 0)
    if (joining.length > 0) {
      lines.push(row(lanes.map((_, i) => (joining.includes(i) ? '/' : '|'))))
      for (const i of joining.reverse()) lanes.splice(i, 1)
      at = lanes.indexOf(n.snapshotId)
    }
    lines.push(`${row(lanes.map((_, i) => (i === at ? '*' : '|')))}  ${label(n)}`)
    // The child that goes on this node's own line (its first parent, same workspace) keeps the lane.
    const rank = (k: string) => {
      const c = byId.get(k) as HistoryNode
      return (c.parents[0] === n.snapshotId ? 0 : 2) + (c.workspace === n.workspace ? 0 : 1)
    }
    const kids = (children.get(n.snapshotId) ?? [])
      .filter((k) => byId.has(k))
      .sort((a, b) => rank(a) - rank(b))
    if (kids.length === 0) {
      lanes.splice(at, 1)
      continue
    }
    lanes[at] = kids[0] as string
    if (kids.length > 1) {
      for (const k of kids.slice(1)) lanes.push(k)
      lines.push(row(lanes.map((_, i) => (i >= lanes.length - (kids.length - 1) ? '\\' : '|'))))
    }
  }
  return lines
}
