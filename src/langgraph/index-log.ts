/**
 * What the saver knows of a thread, read from its log (layout.ts): every checkpoint record and
 * every task's writes ever written, by namespace and id, and the snapshot made with each
 * checkpoint. A `write` of `deleted` forgets everything before it.
 *
 * A thread forked by noa (its first entry a `snapshot` entry naming another workspace's record)
 * inherits that workspace's history up to the record's seq: the base's log is read first, the
 * way a replay starts from the base's tree.
 */
import { readLog } from '../adapters/follow.js'
import type { Entry } from '../engine/entry.js'
import { statFile } from '../engine/files.js'
import { logPath } from '../engine/logs.js'
import type { ObjectStore } from '../store/objects.js'
import { parsePath } from './layout.js'

export interface CheckpointRef {
  /** The record's blob. */
  blob: string
  /** The snapshot appended with it (the entry right after its write). */
  snapshot?: string
}

/** Forks of forks are followed this deep at most (a cycle cannot be made, this is a guard). */
const MAX_LINEAGE = 64

export class ThreadIndex {
  /** ns → checkpoint id → record. */
  readonly checkpoints = new Map<string, Map<string, CheckpointRef>>()
  /** ns → greatest checkpoint id (ids are uuid6: their order is their time order). */
  readonly latest = new Map<string, string>()
  /** `ns NUL id` → task id → writes blob. */
  readonly writes = new Map<string, Map<string, string>>()
  /** Blob of the `thread` file (threads whose workspace name is a hash). */
  threadBlob: string | undefined
  /** ns → checkpoint ids in the order their records were applied (an id written again comes again). */
  readonly applied = new Map<string, string[]>()
  /**
   * Channel lookups (channelAt) that found no record with the channel at that version: key →
   * how much of `applied` they had looked through. The next lookup reads only what came since,
   * instead of every record of the thread again at each step.
   */
  readonly misses = new Map<string, number>()
  private last: { ref: CheckpointRef; seq: number } | null = null

  reset(): void {
    this.checkpoints.clear()
    this.latest.clear()
    this.writes.clear()
    this.applied.clear()
    this.misses.clear()
    this.last = null
  }

  get size(): number {
    let n = 0
    for (const m of this.checkpoints.values()) n += m.size
    return n
  }

  get(ns: string, id: string): CheckpointRef | undefined {
    return this.checkpoints.get(ns)?.get(id)
  }

  writesOf(ns: string, id: string): Map<string, string> | undefined {
    return this.writes.get(`${ns}\0${id}`)
  }

  apply(e: Entry): void {
    if (e.op === 'snapshot') {
      if (this.last && this.last.seq === e.seq - 1) this.last.ref.snapshot = e.snapshot_id
      this.last = null
      return
    }
    if (e.op !== 'write') return
    const p = parsePath(e.path)
    if (!p) return
    switch (p.kind) {
      case 'checkpoint': {
        let m = this.checkpoints.get(p.ns)
        if (!m) {
          m = new Map()
          this.checkpoints.set(p.ns, m)
        }
        const ref: CheckpointRef = { blob: e.blob }
        m.set(p.id, ref)
        let order = this.applied.get(p.ns)
        if (!order) {
          order = []
          this.applied.set(p.ns, order)
        }
        order.push(p.id)
        const latest = this.latest.get(p.ns)
        if (latest === undefined || p.id > latest) this.latest.set(p.ns, p.id)
        this.last = { ref, seq: e.seq }
        return
      }
      case 'writes': {
        const key = `${p.ns}\0${p.id}`
        let m = this.writes.get(key)
        if (!m) {
          m = new Map()
          this.writes.set(key, m)
        }
        m.set(p.task, e.blob)
        return
      }
      case 'value':
        return
      case 'thread':
        this.threadBlob = e.blob
        return
      case 'deleted':
        this.reset()
        return
    }
  }

  /**
   * Reads a workspace's log (up to `end` bytes; `until`: up to that seq) into the index,
   * starting with the history of the workspace it was forked from. Returns the last seq read.
   */
  async scan(
    root: string,
    store: ObjectStore,
    workspace: string,
    opts: { end?: number; until?: number } = {},
    depth = 0,
  ): Promise<number> {
    const file = logPath(root, workspace)
    if (!statFile(file, 'workspace log')) return 0
    const entries = await readLog(file, opts.end ?? Number.MAX_SAFE_INTEGER)
    let lastSeq = 0
    for (const [i, e] of entries.entries()) {
      if (opts.until !== undefined && e.seq > opts.until) break
      if (i === 0 && e.op === 'snapshot' && depth < MAX_LINEAGE) {
        const record = await store.getSnapshot(e.snapshot_id)
        const own = record.workspace === workspace && record.seq < e.seq
        if (!own && !record.merged) {
          await this.scan(root, store, record.workspace, { until: record.seq }, depth + 1)
          this.last = null
        }
      }
      this.apply(e)
      lastSeq = e.seq
    }
    return lastSeq
  }
}
