/**
 * A LangGraph thread (NoaSaver's, saver.ts): its operations queued and committed in batches, one
 * append each; in process under the workspace's lock, through a daemon as a compare-and-append
 * built again when another client went first. Reads bring its index up to date with the log.
 * The batch itself is built by the layer below (thread-build.ts).
 */
import { LOG_END, LOG_HELD, STORE_APPEND } from '../engine/checks.js'
import type { Ack, EntryInput } from '../engine/entry.js'
import { Errors, isNoaError } from '../engine/errors.js'
import { readThroughJournals } from '../engine/journal-view.js'
import { looksLikeChunkList, parseChunkList } from '../store/chunks.js'
import type { StoredObject } from '../store/objects.js'
import { parsePath } from './layout.js'
import { ThreadBuild } from './thread-build.js'
import { GIVE_UP_MS, type Op, type Pending, type TreeState } from './thread-state.js'

export class Thread extends ThreadBuild {
  /**
   * Brings the index up to date with the log. Reads skip it while this thread's own commit is
   * in flight (the commit brings the index up to date itself); one refresh runs at a time.
   */
  async refresh(force = false): Promise<void> {
    if (this.committing && !force) return
    while (this.refreshing) await this.refreshing
    const run = this.readLog().finally(() => {
      this.refreshing = null
    })
    this.refreshing = run
    await run
  }

  private async readLog(): Promise<void> {
    if (!this.loaded) {
      // After a power loss the last entries may be only in a dead process's commit journal.
      // Through a daemon that is the daemon's to replay (it did when it opened the root), not a
      // client's: this process takes no lock on a root the daemon serves.
      if (!this.saver.viaDaemon) readThroughJournals(this.saver.root)
      const size = this.follower.size()
      this.index.reset()
      const lastSeq = await this.index.scan(this.saver.root, this.saver.store, this.workspace, { end: size })
      this.follower.accept(lastSeq, size)
      this.loaded = true
      return
    }
    const change = await this.follower.changes()
    if (change.kind === 'none') return
    // Someone else wrote this log: what the next snapshot builds on must be read again.
    this.tree = null
    if (change.kind === 'reset') {
      this.loaded = false
      await this.readLog()
      return
    }
    await this.index.applyAll(this.saver.store, change.entries)
  }

  /** Resolves once every operation queued so far is settled. */
  async idle(): Promise<void> {
    while (this.draining) await this.draining
  }

  enqueue(op: Op): void {
    this.queue.push(op)
    if (!this.draining) {
      this.draining = this.drain().finally(() => {
        this.draining = null
      })
    }
  }

  private async drain(): Promise<void> {
    await Promise.resolve() // operations submitted in the same turn go out together
    while (this.queue.length > 0) {
      const batch = this.queue
      this.queue = []
      await this.saver.mutex.run([this.workspace], () => this.commit(batch))
    }
  }

  /**
   * Commits a batch. In process this thread's workspace is locked to this process, so the first
   * try is the only one. Through a daemon another client may append to the workspace between
   * the read a commit is built on and its append: the append is a compare-and-append on the
   * seq it was built after, and a batch that lost is built again on the log as it is then (the
   * daemon orders the two writers; LangGraph sees both checkpoints, as with any shared store).
   */
  private async commit(batch: Op[]): Promise<void> {
    let settle: () => void
    this.committing = true
    const started = performance.now()
    try {
      for (let attempt = 1; ; attempt++) {
        const done = await this.attempt(batch)
        if (done) {
          settle = done
          break
        }
        if (performance.now() - started > GIVE_UP_MS) {
          const err = Errors.CONFLICT(
            `workspace ${this.workspace}: for ${GIVE_UP_MS / 1000} s (${attempt} tries), other clients of the daemon appended to it before each try of this commit went in; nothing of it was written`,
            { workspace: this.workspace },
          )
          settle = () => {
            for (const op of batch) op.reject(err)
          }
          break
        }
      }
    } catch (err) {
      this.tree = null
      settle = () => {
        for (const op of batch) op.reject(err)
      }
    } finally {
      this.committing = false
    }
    settle()
  }

  /**
   * One try at a batch: how to settle its operations, or null when (through a daemon) another
   * client appended first and nothing of the batch was appended.
   */
  private async attempt(batch: Op[]): Promise<(() => void) | null> {
    const saver = this.saver
    const entries: EntryInput[] = []
    const objects: StoredObject[] = []
    const trees: string[] = []
    const done: Op[] = []
    const rejectAll = (err: unknown) => () => {
      for (const op of batch) op.reject(err)
    }
    let state: TreeState | null
    try {
      await this.refresh(true)
      state = this.tree ?? (await this.loadTree())
    } catch (err) {
      return rejectAll(err)
    }
    if (state === null) return null
    // Chunks the thread's tree reaches now, through its large values: stored, and kept by gc
    // (the head reaches them until this commit's tree does), so not appended again.
    const held = this.heldChunks(state)
    const pending: Pending = { records: new Map(), writes: new Map(), dropped: new Set() }
    for (const op of batch) {
      const e: EntryInput[] = []
      const o: StoredObject[] = []
      try {
        if (op.kind === 'put') await this.buildPut(op, state, pending, e, o)
        else if (op.kind === 'writes') await this.buildWrites(op, state, pending, e, o)
        else this.buildDelete(state, e, o)
        if (op.kind !== 'writes' && e.length > 0) {
          this.snapshotInto(state, e, o, trees, entries.length, op, pending)
        }
      } catch (err) {
        // The tree state may be half changed by this operation: nothing of the batch is written.
        this.tree = null
        return rejectAll(err)
      }
      entries.push(...e)
      objects.push(...o)
      done.push(op)
    }
    const resolveDone = () => {
      for (const op of done) op.resolve()
    }
    if (entries.length === 0) return resolveDone
    if (held.size > 0) {
      const all = objects.splice(0)
      for (const o of all) if (!(o.exact && held.has(o.id))) objects.push(o)
    }
    try {
      const first = state.lastSeq + 1
      let acks: Ack[] & { [LOG_END]?: number; [LOG_HELD]?: () => boolean }
      if (saver.viaDaemon) {
        // The objects first, as files of their own: the daemon checks each snapshot entry
        // against the record it names. Then the entries, committed only if nobody appended
        // since the seq they were built after. A try that lost leaves its objects unnamed
        // (content addressed: the next try writes most of them again; gc takes the rest).
        await saver.store.write(objects)
        for (const id of trees) saver.store.stored(id)
        try {
          acks = await saver.log.appendMany(this.workspace, entries, { ifLastSeq: state.lastSeq })
        } catch (err) {
          if (!isNoaError(err, 'NOA_SEQ_MISMATCH')) throw err
          this.tree = null
          return null
        }
      } else {
        // The objects go with the entries: in the same journal frame, one sync for both (the
        // records the snapshot entries name are among them, so this is the store's own path).
        // Appended to the owner's object log (packed), not each a file of its own.
        const files = saver.store.filesFor(objects, true)
        acks = await saver.log[STORE_APPEND](
          this.workspace,
          entries,
          files.length > 0 ? { files } : undefined,
        )
        for (const id of trees) saver.store.stored(id)
      }
      for (const o of objects) {
        if (!o.exact && looksLikeChunkList(o.data)) {
          this.chunkLists.set(
            o.id,
            parseChunkList(o.id, Buffer.from(o.data), o.id).chunks.map((c) => c.id),
          )
        }
      }
      const unexpected = acks.findIndex((a, i) => a.seq !== first + i)
      const last = acks[acks.length - 1]?.seq ?? state.lastSeq
      for (let i = 0; i < acks.length; i++) {
        const a = acks[i] as Ack
        this.index.applyAt(entries[i] as EntryInput, a.seq, a.ts)
      }
      this.index.drop(pending.dropped)
      if (saver.viaDaemon) this.follower.acceptAppended(last)
      // The owner says where our last line ends: what the follower has accounted for.
      else this.follower.accept(last, acks[LOG_END] ?? this.follower.size(), acks[LOG_HELD])
      state.lastSeq = last
      if (unexpected >= 0) {
        // Another writer in this process appended between our entries: the snapshot records
        // name the wrong seqs. A fresh snapshot from a full replay supersedes them.
        this.tree = null
        await this.repairHead()
        throw Errors.CONFLICT(
          `workspace ${this.workspace} was appended to by someone else during a checkpoint commit (expected seq ${first + unexpected}, got ${acks[unexpected]?.seq}); write a thread only through its saver`,
          { workspace: this.workspace },
        )
      }
    } catch (err) {
      this.tree = null
      return () => {
        for (const op of done) op.reject(err)
      }
    }
    return resolveDone
  }

  /**
   * The chunks of the chunked values in the thread's tree (store/chunks.ts). A value that grew
   * at its end since the last checkpoint (a message list) shares all but its last chunks with
   * the one in the tree: only the new ones are appended. Lists are read once per value.
   */
  private heldChunks(state: TreeState): Set<string> {
    const held = new Set<string>()
    for (const [path, blob] of state.files) {
      if (parsePath(path)?.kind !== 'value') continue
      let chunks = this.chunkLists.get(blob)
      if (chunks === undefined) {
        try {
          chunks = this.saver.store.chunksOf(blob)?.chunks.map((c) => c.id) ?? []
        } catch {
          chunks = [] // unreadable here: its chunks are appended again, which is only larger
        }
        this.chunkLists.set(blob, chunks)
      }
      for (const c of chunks) held.add(c)
    }
    return held
  }
}
