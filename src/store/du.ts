/**
 * Where the bytes of a root are (`noa du`): every regular file under the root by what it is
 * (workspace logs, their checksum sidecars, loose objects, object logs, commit journals, the
 * rest), and for each workspace its log, its sidecar and the objects its snapshots and writes
 * reach (reach.ts, as gc marks them), split into those no other workspace reaches (own) and
 * those another one reaches too (shared; counted in full for each). An object's bytes are its
 * file's, or its record's in an object log.
 *
 * And what each tool would free, computed without writing anything:
 * - gc: a dry run of gc with no grace period (unreachable objects, temp files, and what writing
 *   object logs again with only their reachable objects saves);
 * - prune: the objects only the snapshots that are not heads reach (what `noa prune
 *   --keep-last 1 --yes` then gc would free; forks, merges and snapshots that drop others, a
 *   retention's, are kept, as prune keeps them);
 * - compact: the log bytes before each workspace's head snapshot entry (what compacting the log
 *   behind its head would take out, less the one base line that replaces them).
 */
import { lstatSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { NoaError } from '../engine/errors.js'
import { logPath, workspaceNames } from '../engine/logs.js'
import { SIDECAR_DIR, sidecarPath } from '../engine/sidecar.js'
import { collectGarbage } from './gc.js'
import { snapshotEntriesBackward } from './heads.js'
import { objectLogIndex } from './object-logs.js'
import type { SnapshotRecord } from './objects.js'
import { type ReachSink, snapshotObjects, writesAfter } from './reach.js'
import type { SnapshotView } from './view.js'

export interface DuCategories {
  /** agent-logs/: the workspace logs. */
  logs: number
  /** checksums/: the logs' checksum sidecars. */
  checksums: number
  /** objects/: objects in files of their own (reachable or not). */
  objects: number
  /** object-logs/: objects appended to packed object logs (reachable or not, with their framing). */
  packs: number
  /** journal/: the owners' commit journals (preallocated). */
  journals: number
  /** Everything else under the root (transcripts, memory, context, locks, the daemon's files). */
  other: number
}

export interface DuWorkspace {
  workspace: string
  log: number
  checksums: number
  /** Objects only this workspace reaches. */
  own: { objects: number; bytes: number }
  /** Objects this and another workspace reach (their full size, here and there). */
  shared: { objects: number; bytes: number }
  /** Bytes of objects only its non-head snapshots reach (prune to the head, then gc). */
  prunable: number
  /** Log bytes before its head snapshot's entry (0 without a snapshot). */
  compactable: number
}

export interface DuResult {
  root: string
  /** Every regular file under the root. */
  total: number
  categories: DuCategories
  /** Objects some log reaches, and their bytes (each once). */
  reachable: { objects: number; bytes: number }
  workspaces: DuWorkspace[]
  free: { gc: number; prune: number; compact: number }
}

const CATEGORY: Record<string, keyof DuCategories> = {
  'agent-logs': 'logs',
  [SIDECAR_DIR]: 'checksums',
  objects: 'objects',
  'object-logs': 'packs',
  journal: 'journals',
}

/** Sizes of the regular files under `dir` (symlinks are not followed), summed. */
function bytesUnder(dir: string): number {
  let n = 0
  let names: string[]
  try {
    names = readdirSync(dir)
  } catch {
    return 0
  }
  for (const name of names) {
    const p = join(dir, name)
    const st = lstatSync(p, { throwIfNoEntry: false })
    if (!st) continue
    if (st.isDirectory()) n += bytesUnder(p)
    else if (st.isFile()) n += st.size
  }
  return n
}

function fileSize(file: string): number {
  const st = lstatSync(file, { throwIfNoEntry: false })
  return st?.isFile() ? st.size : 0
}

export async function diskUsage(engine: SnapshotView): Promise<DuResult> {
  const root = engine.root
  const categories: DuCategories = { logs: 0, checksums: 0, objects: 0, packs: 0, journals: 0, other: 0 }
  let names: string[] = []
  try {
    names = readdirSync(root)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
  }
  for (const name of names) {
    const p = join(root, name)
    const st = lstatSync(p, { throwIfNoEntry: false })
    if (!st) continue
    const bytes = st.isDirectory() ? bytesUnder(p) : st.isFile() ? st.size : 0
    categories[CATEGORY[name] ?? 'other'] += bytes
  }
  const total = Object.values(categories).reduce((a, b) => a + b, 0)

  // Which workspaces reach each object, and which objects the heads alone reach.
  const reachers = new Map<string, string[]>()
  const headOnly = new Set<string>()
  const headSink: ReachSink = {
    object: (_k, id) => !headOnly.has(id) && headOnly.add(id) !== undefined,
    missing: () => {},
  }
  const workspaces = workspaceNames(root)
  const compactable = new Map<string, number>()
  for (const ws of workspaces) {
    const seen = new Set<string>()
    const sink: ReachSink = {
      object: (_kind, id) => {
        if (seen.has(id)) return false
        seen.add(id)
        const list = reachers.get(id)
        if (list) list.push(ws)
        else reachers.set(id, [ws])
        return true
      },
      missing: () => {},
    }
    const head = await engine.head(ws)
    for await (const info of engine.snapshots(ws)) {
      let record: SnapshotRecord
      try {
        record = await engine.getSnapshot(info.snapshotId)
      } catch (err) {
        if (err instanceof NoaError) continue
        throw err
      }
      const from = { workspace: ws, seq: info.entry.seq, snapshot: info.snapshotId }
      const kept = !info.pruned || record.merged !== undefined
      await snapshotObjects(engine, record, sink, from, kept)
      // What prune keeps: the head, forks, merges, and snapshots that drop others themselves.
      const stays = info.snapshotId === head?.record.id || info.kind !== 'snapshot' || info.prunes.length > 0
      await snapshotObjects(engine, record, headSink, from, kept && stays)
    }
    await writesAfter(engine, ws, head?.pos ?? 0, sink)
    await writesAfter(engine, ws, head?.pos ?? 0, headSink)
    let before = 0
    if (head) {
      for (const { entry, offset } of snapshotEntriesBackward(logPath(root, ws))) {
        if (entry.seq === head.entrySeq) {
          before = offset
          break
        }
      }
    }
    compactable.set(ws, before)
  }

  const sizes = objectSizes(engine, reachers.keys())
  const perWs = new Map<string, DuWorkspace>()
  for (const ws of workspaces) {
    perWs.set(ws, {
      workspace: ws,
      log: fileSize(logPath(root, ws)),
      checksums: fileSize(sidecarPath(root, ws)),
      own: { objects: 0, bytes: 0 },
      shared: { objects: 0, bytes: 0 },
      prunable: 0,
      compactable: compactable.get(ws) ?? 0,
    })
  }
  let reachableBytes = 0
  let reachableCount = 0
  let prune = 0
  for (const [id, list] of reachers) {
    const size = sizes.get(id) ?? -1
    if (size < 0) continue // missing: verify --objects names it
    reachableBytes += size
    reachableCount++
    const dropped = !headOnly.has(id)
    if (dropped) prune += size
    for (const ws of list) {
      const w = perWs.get(ws) as DuWorkspace
      const part = list.length === 1 ? w.own : w.shared
      part.objects++
      part.bytes += size
      if (dropped && list.length === 1) w.prunable += size
    }
  }
  const gc = await collectGarbage(engine, { dryRun: true, graceMs: 0 })
  return {
    root,
    total,
    categories,
    reachable: { objects: reachableCount, bytes: reachableBytes },
    workspaces: [...perWs.values()],
    free: {
      gc: gc.removedBytes + gc.tempBytes + gc.logBytes,
      prune,
      compact: [...compactable.values()].reduce((a, b) => a + b, 0),
    },
  }
}

/** Each object's bytes: its own file's size, else its record's length in an object log (-1: neither). */
function objectSizes(engine: SnapshotView, ids: Iterable<string>): Map<string, number> {
  const out = new Map<string, number>()
  const logs = objectLogIndex(engine.root)
  for (const id of ids) {
    const st = lstatSync(engine.store.pathOf(id), { throwIfNoEntry: false })
    out.set(id, st?.isFile() ? st.size : (logs.find(id)?.length ?? -1))
  }
  return out
}
