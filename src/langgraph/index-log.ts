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
import type { Entry, EntryInput } from '../engine/entry.js'
import { NoaError } from '../engine/errors.js'
import { statFile } from '../engine/files.js'
import { logPath } from '../engine/logs.js'
import type { ObjectStore } from '../store/objects.js'
import { parsePath } from './layout.js'

export interface CheckpointRef {
  /** The record's blob. */
  blob: string
  /** The snapshot appended with it (the entry right after its write). */
  snapshot?: string
  /** When its record was written (the write entry's ts, unix µs): what a retention age counts from. */
  ts: number
}

/**
 * A put's snapshot message says so when its record drops older checkpoints (`pruned`): the
 * index reads the records of such snapshot entries, and of any snapshot entry that does not
 * follow a checkpoint write (`noa prune`, `noa snapshot prune`, a fork), to forget what they drop.
 */
export const RETENTION_MARK = '; retention dropped '

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
  /** Snapshot id → the checkpoint made with it (what a record's `pruned` names). */
  readonly bySnapshot = new Map<string, { ns: string; id: string }>()
  /**
   * `ns NUL id` of every checkpoint the thread had when it was deleted (deleteThread): a put or
   * writes against one of them is a late writer's, refused instead of bringing the thread back.
   */
  readonly tombstones = new Set<string>()
  private last: { ref: CheckpointRef; seq: number; ns: string; id: string } | null = null

  reset(): void {
    this.forgetAll()
    this.tombstones.clear()
  }

  private forgetAll(): void {
    this.bySnapshot.clear()
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

  /**
   * Forgets the checkpoints made with these snapshots (a record's `pruned`: retention, `noa
   * prune`), and their pending writes. gc frees what only they held.
   */
  drop(snapshotIds: Iterable<string>): void {
    for (const sid of snapshotIds) {
      const c = this.bySnapshot.get(sid)
      if (!c) continue
      this.bySnapshot.delete(sid)
      const m = this.checkpoints.get(c.ns)
      if (m?.get(c.id)?.snapshot !== sid) continue
      m.delete(c.id)
      this.writes.delete(`${c.ns}\0${c.id}`)
      const order = this.applied.get(c.ns)
      if (order) {
        this.applied.set(
          c.ns,
          order.filter((id) => id !== c.id),
        )
        this.misses.clear()
      }
      if (this.latest.get(c.ns) === c.id) {
        let newest: string | undefined
        for (const id of m.keys()) if (newest === undefined || id > newest) newest = id
        if (newest === undefined) this.latest.delete(c.ns)
        else this.latest.set(c.ns, newest)
      }
    }
  }

  /** Whether a checkpoint id is from before a deleteThread (and not put again since). */
  tombstoned(ns: string, id: string): boolean {
    return this.tombstones.has(`${ns}\0${id}`) && this.get(ns, id) === undefined
  }

  /**
   * Applies an entry. True for a snapshot entry whose record may drop checkpoints (see
   * RETENTION_MARK): the caller reads the record and calls `drop` with its `pruned`.
   */
  apply(e: Entry): boolean {
    return this.applyAt(e, e.seq, e.ts)
  }

  /**
   * `apply` for an entry just appended, with the seq and ts of its ack: the entry is not copied
   * into an Entry first (a copy of each of a commit's entries, of a different shape each, was
   * most of what applying them cost).
   */
  applyAt(e: EntryInput, seq: number, ts: number): boolean {
    if (e.op === 'snapshot') {
      const own = this.last !== null && this.last.seq === seq - 1
      if (own && this.last) {
        this.last.ref.snapshot = e.snapshot_id
        this.bySnapshot.set(e.snapshot_id, { ns: this.last.ns, id: this.last.id })
      }
      this.last = null
      return !own || e.message.includes(RETENTION_MARK)
    }
    if (e.op !== 'write') return false
    const p = parsePath(e.path)
    if (!p) return false
    switch (p.kind) {
      case 'checkpoint': {
        let m = this.checkpoints.get(p.ns)
        if (!m) {
          m = new Map()
          this.checkpoints.set(p.ns, m)
        }
        const ref: CheckpointRef = { blob: e.blob, ts }
        m.set(p.id, ref)
        let order = this.applied.get(p.ns)
        if (!order) {
          order = []
          this.applied.set(p.ns, order)
        }
        order.push(p.id)
        const latest = this.latest.get(p.ns)
        if (latest === undefined || p.id > latest) this.latest.set(p.ns, p.id)
        this.last = { ref, seq, ns: p.ns, id: p.id }
        return false
      }
      case 'writes': {
        const key = `${p.ns}\0${p.id}`
        let m = this.writes.get(key)
        if (!m) {
          m = new Map()
          this.writes.set(key, m)
        }
        m.set(p.task, e.blob)
        return false
      }
      case 'value':
        return false
      case 'thread':
        this.threadBlob = e.blob
        return false
      case 'deleted':
        for (const [ns, m] of this.checkpoints) for (const id of m.keys()) this.tombstones.add(`${ns}\0${id}`)
        this.forgetAll()
        return false
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
      if (opts.until !== undefined && e.seq > opts.until) {
        if (depth > 0) await this.laterDrops(store, entries.slice(i))
        break
      }
      if (i === 0 && e.op === 'snapshot' && depth < MAX_LINEAGE) {
        const record = await store.getSnapshot(e.snapshot_id)
        const own = record.workspace === workspace && record.seq < e.seq
        if (!own && !record.merged) {
          await this.scan(root, store, record.workspace, { until: record.seq }, depth + 1)
          this.last = null
        }
      }
      if (this.apply(e) && e.op === 'snapshot') await this.dropsOf(store, e.snapshot_id)
      lastSeq = e.seq
    }
    return lastSeq
  }

  /**
   * What the base of a fork dropped after the fork (its retention, a prune): those of its
   * checkpoints the fork inherited are gone too once gc ran. The fork's own base checkpoint is
   * not among them: the fork's first entry keeps its snapshot (and no snapshot is known for it here).
   */
  private async laterDrops(store: ObjectStore, entries: Entry[]): Promise<void> {
    for (const [i, e] of entries.entries()) {
      if (e.op !== 'snapshot') continue
      const before = entries[i - 1]
      const put =
        before?.op === 'write' && parsePath(before.path)?.kind === 'checkpoint' && before.seq === e.seq - 1
      if (!put || e.message.includes(RETENTION_MARK)) await this.dropsOf(store, e.snapshot_id)
    }
  }

  /** Applies entries read from the log (another writer's), reading the records that may drop. */
  async applyAll(store: ObjectStore, entries: Iterable<Entry>): Promise<void> {
    for (const e of entries) {
      if (this.apply(e) && e.op === 'snapshot') await this.dropsOf(store, e.snapshot_id)
    }
  }

  /** Forgets what a snapshot record drops. A record that cannot be read drops nothing (verify names it). */
  private async dropsOf(store: ObjectStore, snapshotId: string): Promise<void> {
    if (this.size === 0) return
    let pruned: string[] | undefined
    try {
      pruned = (await store.getSnapshot(snapshotId)).pruned
    } catch (err) {
      if (err instanceof NoaError) return
      throw err
    }
    if (pruned) this.drop(pruned)
  }
}
