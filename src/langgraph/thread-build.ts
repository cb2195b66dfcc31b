/**
 * A LangGraph thread's commit, built (a layer of Thread, over thread-state.ts): the tree state
 * read from the log, each operation turned into entries and objects (put, writes, deleteThread,
 * tombstones), the values a tree keeps, retention's drops, and the snapshot record each put ends
 * with, whose seq is known before the append.
 */
import { droppedBy } from '../adapters/retention.js'
import { encodeValue } from '../adapters/values.js'
import { nowMicros } from '../engine/clock.js'
import type { EntryInput } from '../engine/entry.js'
import { Errors } from '../engine/errors.js'
import {
  encodeSnapshotRecord,
  type SnapshotRecord,
  type StoredObject,
  sha256,
  snapshotEntry,
} from '../store/objects.js'
import { recorded } from '../store/snapshot.js'
import { TreeBuilder } from '../store/tree.js'
import { RETENTION_MARK } from './index-log.js'
import {
  CHECKPOINT_FORMAT,
  type CheckpointRecord,
  checkpointPath,
  DELETED_FILE,
  DELETED_FORMAT,
  encodeRecord,
  parsePath,
  type StoredChannel,
  type StoredWrite,
  THREAD_FILE,
  valueBlobs,
  valuePath,
  WRITES_FORMAT,
  type WritesRecord,
  writesPath,
} from './layout.js'
import {
  checkpointName,
  nsKey,
  type Op,
  type Pending,
  ThreadState,
  type TreeState,
  WHOLE_TREE_FILES,
} from './thread-state.js'

export abstract class ThreadBuild extends ThreadState {
  /**
   * The thread's files and head, from the log (takes the workspace's lock first). Null when,
   * through a daemon, another client appended while the log was read: try again.
   */
  protected async loadTree(): Promise<TreeState | null> {
    const saver = this.saver
    // In process, with the lock held nobody else appends: the log as read now is what the next
    // commit follows. Through a daemon this opens it there (cutting a torn tail; nothing is
    // locked here), which is needed once, not at each try that lost.
    if (!saver.viaDaemon || !this.opened) await saver.log.openWorkspace(this.workspace)
    this.opened = true
    await this.refresh(true) // opening may have cut a torn tail
    const lastSeq = this.follower.lastSeq
    if (lastSeq === 0) {
      this.tree = {
        files: new Map(),
        builder: new TreeBuilder(),
        head: undefined,
        headPos: 0,
        lastSeq: 0,
        fresh: new Set(),
        noEffect: [],
      }
      return this.tree
    }
    const s = await saver.engine.replay(this.workspace)
    if (s.seq !== lastSeq) {
      if (saver.viaDaemon) return null
      throw Errors.CONFLICT(
        `workspace ${this.workspace} changed while it was read (seq ${lastSeq}, then ${s.seq}); is another writer in this process appending to it?`,
        { workspace: this.workspace },
      )
    }
    const headTree = s.parent === null ? null : await saver.engine.tree(s.parent)
    const fresh = new Set<string>()
    for (const [path, blob] of s.tree.entries()) {
      if (parsePath(path)?.kind === 'writes' && headTree?.get(path) !== blob) fresh.add(path)
    }
    this.tree = {
      files: s.tree.toMap(),
      builder: new TreeBuilder(s.tree),
      head: s.parent ?? undefined,
      headPos: s.since,
      lastSeq,
      fresh,
      noEffect: recorded(s.noEffect),
    }
    return this.tree
  }

  protected async repairHead(): Promise<void> {
    const saver = this.saver
    const s = await saver.engine.replay(this.workspace, { fromScratch: true })
    const lastSeq = this.follower.lastSeq
    const head = await saver.engine.head(this.workspace)
    // Stored in its own format (a folder tree is a pack, not its flat listing), so that the
    // tree the record names hashes to its id.
    await saver.store.putWholeTree(s.tree)
    const input = {
      workspace: this.workspace,
      tree: s.tree.id,
      parent: head?.record.id,
      since: s.since,
      seq: lastSeq,
      message: 'repair after a foreign append',
      ts: nowMicros(),
    }
    const record = await saver.store.putSnapshot(input)
    const ack = await saver.log.append(this.workspace, snapshotEntry(record, input.message))
    this.follower.accept(ack.seq)
  }

  private change(state: TreeState, e: EntryInput[], path: string, blob: string | null): void {
    if (blob === null) {
      e.push({ op: 'delete', path })
      state.files.delete(path)
      state.builder?.remove(path)
    } else {
      e.push({ op: 'write', path, blob })
      state.files.set(path, blob)
      state.builder?.set(path, blob)
    }
  }

  protected async buildPut(
    op: Extract<Op, { kind: 'put' }>,
    state: TreeState,
    pending: Pending,
    e: EntryInput[],
    o: StoredObject[],
  ): Promise<void> {
    const saver = this.saver
    if (op.parent !== undefined && !pending.records.has(nsKey(op.ns, op.parent))) {
      this.refuseDeleted(op.ns, op.parent, 'a put')
    }
    const parent = op.parent === undefined ? undefined : await saver.record(this, op.ns, op.parent, pending)
    const channels: Record<string, StoredChannel> = {}
    for (const [ch, version] of Object.entries(op.versions)) {
      const fresh = op.fresh.get(ch)
      if (fresh !== undefined) {
        if (fresh !== null) channels[ch] = { version, value: encodeValue(fresh.type, fresh.data, o) }
        continue
      }
      const carried =
        parent?.channels[ch]?.version === version
          ? parent.channels[ch]
          : await saver.channelAt(this, op.ns, ch, version, pending)
      if (carried) channels[ch] = carried
    }
    const record: CheckpointRecord = {
      format: CHECKPOINT_FORMAT,
      checkpoint_ns: op.ns,
      checkpoint_id: op.id,
      ...(op.parent === undefined ? {} : { parent_checkpoint_id: op.parent }),
      checkpoint: encodeValue(op.checkpoint.type, op.checkpoint.data, o),
      metadata: encodeValue(op.metadata.type, op.metadata.data, o),
      channels,
    }
    const bytes = encodeRecord(record)
    const blob = sha256(bytes)
    o.push({ id: blob, data: bytes, exact: true })
    // The tree keeps this checkpoint (and the root namespace's, when this one is a subgraph's):
    // a snapshot is the thread at one step, not its whole history, which is in the log.
    const keep = checkpointPath(op.ns, op.id)
    const needed = new Set(valueBlobs(record))
    for (const path of [...state.files.keys()]) {
      const p = parsePath(path)
      // A `thread` file names the id of a hashed workspace; one forked from elsewhere is stale.
      if (p?.kind === 'thread' && !this.hashed) this.change(state, e, path, null)
      if (!p || p.kind === 'thread' || p.kind === 'value' || path === keep) continue
      const rootNs = op.ns !== '' && (p.kind === 'checkpoint' || p.kind === 'writes') && p.ns === ''
      // Writes made since the last snapshot are named only by the log until a snapshot's tree
      // holds them, and gc keeps no more than trees and the writes after the head name.
      if (rootNs || (p.kind === 'writes' && state.fresh.has(path))) {
        for (const v of await this.valuesOf(p.kind, state.files.get(path) as string, pending)) needed.add(v)
        continue
      }
      this.change(state, e, path, null)
    }
    this.syncValues(state, e, needed)
    if (this.threadId !== undefined && !state.files.has(THREAD_FILE) && this.hashed) {
      const id = Buffer.from(this.threadId, 'utf8')
      const idBlob = sha256(id)
      o.push({ id: idBlob, data: id, exact: true })
      this.change(state, e, THREAD_FILE, idBlob)
    }
    this.change(state, e, keep, blob)
    pending.records.set(nsKey(op.ns, op.id), { blob, record })
    saver.records.set(blob, record)
  }

  /** The large values a kept record names (records of this commit are not stored yet). */
  private async valuesOf(kind: 'checkpoint' | 'writes', blob: string, pending: Pending): Promise<string[]> {
    const map: Map<string, { blob: string; record: CheckpointRecord | WritesRecord }> =
      kind === 'checkpoint' ? pending.records : pending.writes
    for (const p of map.values()) if (p.blob === blob) return valueBlobs(p.record)
    return valueBlobs(
      kind === 'checkpoint' ? await this.saver.recordAt(blob) : await this.saver.writesAt(blob),
    )
  }

  /** The tree's `values/` files become exactly the values its records name. */
  private syncValues(state: TreeState, e: EntryInput[], needed: ReadonlySet<string>): void {
    for (const path of [...state.files.keys()]) {
      const p = parsePath(path)
      if (p?.kind === 'value' && !needed.has(p.blob)) this.change(state, e, path, null)
    }
    for (const v of needed) if (!state.files.has(valuePath(v))) this.change(state, e, valuePath(v), v)
  }

  protected async buildWrites(
    op: Extract<Op, { kind: 'writes' }>,
    state: TreeState,
    pending: Pending,
    e: EntryInput[],
    o: StoredObject[],
  ): Promise<void> {
    const saver = this.saver
    if (!pending.records.has(nsKey(op.ns, op.id))) this.refuseDeleted(op.ns, op.id, 'writes')
    const key = `${nsKey(op.ns, op.id)}\0${op.task}`
    const before = pending.writes.get(key)?.record ?? (await saver.writesRecord(this, op.ns, op.id, op.task))
    const byIdx = new Map<number, StoredWrite>()
    for (const w of before?.writes ?? []) byIdx.set(w.idx, w)
    let changed = false
    for (const w of op.writes) {
      // A retried task writes the same regular writes again: the first ones stay. Special
      // writes (errors, interrupts, resumes: negative idx) replace what was there.
      if (w.idx >= 0 && byIdx.has(w.idx)) continue
      byIdx.set(w.idx, { idx: w.idx, channel: w.channel, value: encodeValue(w.value.type, w.value.data, o) })
      changed = true
    }
    if (!changed) return
    const record: WritesRecord = {
      format: WRITES_FORMAT,
      checkpoint_ns: op.ns,
      checkpoint_id: op.id,
      task_id: op.task,
      task_path: op.taskPath ?? before?.task_path ?? '',
      writes: [...byIdx.values()].sort((a, b) => a.idx - b.idx),
    }
    const bytes = encodeRecord(record)
    const blob = sha256(bytes)
    o.push({ id: blob, data: bytes, exact: true })
    const path = writesPath(op.ns, op.id, op.task)
    this.change(state, e, path, blob)
    state.fresh.add(path)
    for (const v of valueBlobs(record)) {
      if (!state.files.has(valuePath(v))) this.change(state, e, valuePath(v), v)
    }
    pending.writes.set(key, { blob, record })
    saver.writeRecords.set(blob, record)
  }

  /**
   * The tombstone: a checkpoint from before a deleteThread is gone for good, so a put or writes
   * against it (a late writer that read the thread before the delete) is refused rather than
   * bringing the thread back. A put with no parent starts the thread anew.
   */
  private refuseDeleted(ns: string, id: string, what: string): void {
    if (!this.index.tombstoned(ns, id)) return
    const name = checkpointName(this.threadId ?? this.workspace, ns, id)
    throw Errors.CONFLICT(
      `${what} against ${name} refused: the thread was deleted (deleteThread) after that checkpoint, and a deleted thread is not brought back by a late writer; a put with no parent checkpoint starts it anew`,
      { workspace: this.workspace, checkpoint: id, deleted: true },
    )
  }

  protected buildDelete(state: TreeState, e: EntryInput[], o: StoredObject[]): void {
    if (this.index.size === 0 && this.index.writes.size === 0) return
    for (const path of [...state.files.keys()]) {
      const p = parsePath(path)
      if (p && p.kind !== 'thread') this.change(state, e, path, null)
    }
    const bytes = encodeRecord({ format: DELETED_FORMAT, deleted_at: new Date().toISOString() })
    const blob = sha256(bytes)
    o.push({ id: blob, data: bytes, exact: true })
    this.change(state, e, DELETED_FILE, blob)
  }

  /**
   * The snapshots of the checkpoints of op's namespace that the saver's retention no longer
   * keeps once op's checkpoint is put. The put's snapshot record lists them in `pruned` (as
   * `noa snapshot prune` does): gc then keeps neither their trees nor what only those held, and
   * the index forgets them (here after the commit; on a later read from that record).
   */
  private retentionDrops(op: Extract<Op, { kind: 'put' }>, pending: Pending): string[] {
    const policy = this.saver.retention
    const m = this.index.checkpoints.get(op.ns)
    if (!policy || !m) return []
    const nowUs = nowMicros()
    const items: Array<{ id: string; ts: number; snapshot: string | undefined }> = [
      { id: op.id, ts: nowUs, snapshot: undefined },
    ]
    for (const [id, ref] of m) if (id !== op.id) items.push({ id, ts: ref.ts, snapshot: ref.snapshot })
    // Checkpoint ids are uuid6: their order is their time order (as `latest` has it).
    items.sort((a, b) => (a.id < b.id ? 1 : a.id > b.id ? -1 : 0))
    const out: string[] = []
    for (const d of droppedBy(policy, items, nowUs)) {
      if (d.snapshot === undefined || d.id === op.id || pending.dropped.has(d.snapshot)) continue
      pending.dropped.add(d.snapshot)
      out.push(d.snapshot)
    }
    return out
  }

  /**
   * Appends the snapshot of the tree as it stands to `e`: its tree and record join the batch's
   * objects, and the record names the seq the entry before it will get (`offset` entries of the
   * batch come first).
   */
  protected snapshotInto(
    state: TreeState,
    e: EntryInput[],
    o: StoredObject[],
    trees: string[],
    offset: number,
    op: Op,
    pending: Pending,
  ): void {
    const store = this.saver.store
    // A thread's tree is small (its checkpoint, the writes since, their values): built whole,
    // it is one short sorted pass, cheaper than rebuilding changed folders in place on the
    // previous pack. The same tree id either way (the folders' canonical bytes).
    let builder = state.builder
    if (builder === null || state.files.size <= WHOLE_TREE_FILES) {
      builder = new TreeBuilder()
      for (const [path, blob] of state.files) builder.set(path, blob)
    }
    const tree = store.treeObject(null, builder)
    const seq = state.lastSeq + offset + e.length
    const pruned = op.kind === 'put' ? this.retentionDrops(op, pending) : []
    const message =
      (op.kind === 'put'
        ? `checkpoint ${op.id}${op.ns === '' ? '' : ` in ${op.ns}`} (step ${String(op.step)}, ${String(op.source)})`
        : 'deleteThread') + (pruned.length === 0 ? '' : `${RETENTION_MARK}${pruned.length}`)
    const input = {
      workspace: this.workspace,
      tree: tree.id,
      ...(state.head === undefined ? {} : { parent: state.head }),
      since: state.headPos,
      seq,
      ...(state.noEffect.length === 0 ? {} : { noEffect: state.noEffect }),
      ...(pruned.length === 0 ? {} : { pruned }),
      message,
      ts: nowMicros(),
    }
    const recordBytes = encodeSnapshotRecord(input)
    const recordId = sha256(recordBytes)
    const record: SnapshotRecord = { id: `noa_${recordId}`, ...input }
    o.push(tree, { id: recordId, data: recordBytes, exact: true })
    trees.push(tree.id)
    e.push(snapshotEntry(record, message))
    state.head = record.id
    state.headPos = seq
    state.fresh = new Set()
    state.noEffect = []
    state.builder = state.files.size <= WHOLE_TREE_FILES ? null : new TreeBuilder(store.builtTree(tree.id))
  }
}
