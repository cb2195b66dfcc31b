/**
 * The store side of `noa verify`, on top of the engine's line scan: every snapshot and merge
 * entry names a record of the right workspace (records.ts), and with `objects`, every object
 * the workspace reaches (the roots gc keeps, reach.ts) is stored and whole: records and trees
 * are read and hash-checked, blobs are looked up (their content is checked when read), and the
 * chunks of a blob stored in chunks are read and hash-checked: a missing or damaged one is named
 * with the blob that lists it.
 */
import { NoaError } from '../engine/errors.js'
import { MarkSet, type Referrer, walkWorkspace } from './reach.js'
import { type RecordProblem, scanRecords, writeSeqs } from './records.js'
import type { SnapshotEngine } from './snapshot.js'

export interface StoreProblem {
  workspace: string
  kind: RecordProblem['kind'] | 'missing-object' | 'missing-chunk' | 'damaged-chunk'
  reason: string
  /** The entry concerned (a write, or the snapshot entry), when known. */
  seq?: number
  snapshot?: string
  path?: string
  blob?: string
  /** A chunk of `blob` (missing-chunk, damaged-chunk). */
  chunk?: string
  /** Set on a meaningless snapshot entry a later snapshot recorded as no effect: a note, not a failure. */
  recordedBy?: string
}

export async function verifyStore(
  engine: SnapshotEngine,
  workspace: string,
  options: { objects?: boolean } = {},
): Promise<StoreProblem[]> {
  const problems: StoreProblem[] = [...(await scanRecords(engine.store, workspace))]
  if (!options.objects) return problems
  const seen = new MarkSet()
  const missingByRecord = new Map<string, Array<{ path: string; blob: string }>>()
  const chunks: Array<{ id: string; from: Referrer }> = []
  await walkWorkspace(engine, workspace, {
    paths: true,
    object(kind, id, from) {
      if (!seen.add(id)) return false
      if (kind === 'chunk') {
        chunks.push({ id, from })
        return true
      }
      if (kind !== 'blob') return true // records and trees are read by the walk
      if (engine.store.has(id)) return true
      if (from.snapshot !== undefined) {
        const list = missingByRecord.get(from.snapshot) ?? []
        list.push({ path: from.path ?? '', blob: id })
        missingByRecord.set(from.snapshot, list)
      } else {
        problems.push({
          workspace,
          kind: 'missing-blob',
          seq: from.seq,
          path: from.path,
          blob: id,
          reason: `seq ${from.seq} wrote ${JSON.stringify(from.path)} as blob ${id}, which is not in the object store`,
        })
      }
      return true
    },
    missing(kind, id, from, err: NoaError) {
      problems.push({
        workspace,
        kind: 'missing-object',
        seq: from.seq,
        snapshot: from.snapshot,
        reason: `${kind} ${id}${from.snapshot ? ` (of snapshot ${from.snapshot})` : ''}: ${err.message}`,
      })
    },
  })
  for (const { id, from } of chunks) {
    const what = `chunk ${id} of blob ${from.blob}`
    try {
      await engine.store.read(id, what)
    } catch (err) {
      if (!(err instanceof NoaError)) throw err
      const held =
        from.path === undefined
          ? ''
          : `; the blob is ${JSON.stringify(from.path)}${from.snapshot ? ` in snapshot ${from.snapshot}` : from.seq !== undefined ? `, written at seq ${from.seq}` : ''}`
      problems.push({
        workspace,
        kind: err.code === 'NOA_NOT_FOUND' ? 'missing-chunk' : 'damaged-chunk',
        ...(from.seq !== undefined ? { seq: from.seq } : {}),
        ...(from.snapshot !== undefined ? { snapshot: from.snapshot } : {}),
        ...(from.path !== undefined ? { path: from.path } : {}),
        blob: from.blob,
        chunk: id,
        reason: `${err.message}${held}`,
      })
    }
  }
  for (const [snapshot, list] of missingByRecord) {
    const record = await engine.getSnapshot(snapshot)
    let seqs = new Map<string, number>()
    try {
      seqs = await writeSeqs(engine.root, record.workspace, 0, record.seq, new Set(list.map((m) => m.blob)))
    } catch {
      // that log is gone
    }
    for (const m of list) {
      const seq = seqs.get(m.blob)
      problems.push({
        workspace,
        kind: 'missing-blob',
        snapshot,
        path: m.path,
        blob: m.blob,
        ...(seq !== undefined ? { seq } : {}),
        reason: `snapshot ${snapshot} holds ${JSON.stringify(m.path)} as blob ${m.blob}, which is not in the object store${seq !== undefined ? ` (written at seq ${seq} of ${record.workspace})` : ''}`,
      })
    }
  }
  return problems
}
