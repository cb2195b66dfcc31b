/**
 * NoaSaver: a LangGraph checkpoint saver whose threads are noa workspaces (layout.ts).
 *
 * Durability: `put`, `putWrites` and `deleteThread` resolve once their objects and their log
 * entries are durable together: the objects are files the append writes beside the entries
 * (AppendOptions.files), in the same commit-journal frame, so one fdatasync covers both and an
 * entry never names an object a crash could lose. Operations on one thread that arrive while its
 * previous commit is in flight go out together in the next one: one append.
 *
 * Each `put` ends its commit with a `snapshot` entry whose record the saver builds itself: the
 * workspace is written only by this process while it holds the workspace's lock, and only through
 * this thread's queue, so the seqs its entries will get are known (and checked on the acks). The
 * record is exactly what SnapshotEngine.snapshot would make at that point, without a second
 * round of fsyncs. Through a daemon (`noa serve`) nothing is locked here: the seqs are known only
 * if nobody appends first, so the append is a compare-and-append, built again when it lost.
 */
import { statSync } from 'node:fs'
import type { RunnableConfig } from '@langchain/core/runnables'
import {
  BaseCheckpointSaver,
  type ChannelVersions,
  type Checkpoint,
  type CheckpointListOptions,
  type CheckpointMetadata,
  type CheckpointPendingWrite,
  type CheckpointTuple,
  copyCheckpoint,
  getCheckpointId,
  maxChannelVersion,
  type PendingWrite,
  type SerializerProtocol,
  TASKS,
  WRITES_IDX_MAP,
} from '@langchain/langgraph-checkpoint'
import { LogFollower } from '../adapters/follow.js'
import { borrowedLog, type LogLease, leaseLog } from '../adapters/logs.js'
import {
  checkId,
  checkText,
  decodeWorkspace,
  describe,
  type NameScheme,
  workspaceFor,
} from '../adapters/names.js'
import { checkRetention, droppedBy, type Retention } from '../adapters/retention.js'
import { BlobCache, encodeValue, type StoredValue, valueData } from '../adapters/values.js'
import type { AgentLog } from '../engine/agent-log.js'
import { LOG_END, LOG_HELD, STORE_APPEND } from '../engine/checks.js'
import { nowMicros } from '../engine/clock.js'
import { type Ack, checkPath, type Entry, type EntryInput } from '../engine/entry.js'
import { Errors, isNoaError, NoaError, rewrap } from '../engine/errors.js'
import { readThroughJournals } from '../engine/journal-view.js'
import { workspaceNames } from '../engine/logs.js'
import { checkOptionKeys } from '../engine/options.js'
import { looksLikeChunkList, parseChunkList } from '../store/chunks.js'
import { type KeyedMutex, mutexFor } from '../store/mutex.js'
import {
  encodeSnapshotRecord,
  ObjectStore,
  type RecordedNoEffect,
  type SnapshotRecord,
  type StoredObject,
  sha256,
  snapshotEntry,
} from '../store/objects.js'
import { recorded, SnapshotEngine } from '../store/snapshot.js'
import { TreeBuilder } from '../store/tree.js'
import { type CheckpointRef, RETENTION_MARK, ThreadIndex } from './index-log.js'
import {
  CHECKPOINT_FORMAT,
  type CheckpointRecord,
  checkpointPath,
  DELETED_FILE,
  DELETED_FORMAT,
  encodeRecord,
  parseCheckpointRecord,
  parsePath,
  parseWritesRecord,
  type StoredChannel,
  type StoredWrite,
  THREAD_FILE,
  valueBlobs,
  valuePath,
  WRITES_FORMAT,
  type WritesRecord,
  writesPath,
} from './layout.js'
import { checkStorable } from './storable.js'

export const THREADS: NameScheme = { prefix: 'lg', what: 'thread id' }

export interface NoaSaverOptions {
  /** noa root (default `$NOA_ROOT`, else `./.noa`); ignored when `log` is given. */
  root?: string
  /** An open AgentLog to write through (left open by `close`). Default: one per root per process. */
  log?: AgentLog
  /** Owner worker threads, when the saver starts the root's pool (default 0: the owner on the caller's thread). */
  workers?: number
  /** LangGraph serializer (default: LangGraph's JsonPlusSerializer). */
  serde?: SerializerProtocol
  /**
   * Keep only some checkpoints of each thread and namespace (default: all): each put drops
   * those the policy no longer keeps (adapters/retention.ts); `noa gc` then frees their bytes.
   */
  retention?: Retention
}

const OPTION_KEYS = new Set(['root', 'log', 'workers', 'serde', 'retention'])
const RECORD_CACHE = 4096
/**
 * How long a commit through a daemon goes on trying while other clients' commits to the same
 * thread keep going in first. Each lost try means one of theirs went in; 4 processes stepping one
 * thread as fast as they can lost up to 53 tries in a row (a few hundred ms) on the 2-core VM.
 */
const GIVE_UP_MS = 30_000

interface Serialized {
  type: string
  data: Uint8Array
}

type Op = { resolve(): void; reject(err: unknown): void } & (
  | {
      kind: 'put'
      ns: string
      id: string
      parent: string | undefined
      checkpoint: Serialized
      metadata: Serialized
      step: unknown
      source: unknown
      versions: Record<string, number | string>
      fresh: Map<string, Serialized | null>
    }
  | {
      kind: 'writes'
      ns: string
      id: string
      task: string
      taskPath: string | undefined
      writes: Array<{ idx: number; channel: string; value: Serialized }>
    }
  | { kind: 'delete' }
)

/** Trees of up to this many files are built whole at each snapshot (see snapshotInto). */
const WHOLE_TREE_FILES = 256

/** What the next snapshot of a thread builds on: its files now and its head. */
interface TreeState {
  files: Map<string, string>
  /** The files as a builder on the head's tree; null while the tree is small (built whole). */
  builder: TreeBuilder | null
  head: string | undefined
  /** The head's position in the log (the next record's `since`). */
  headPos: number
  lastSeq: number
  /** Writes files written since the head: in no snapshot's tree yet. */
  fresh: Set<string>
  /** Entries since the head that changed nothing (another writer's): the next record lists them. */
  noEffect: RecordedNoEffect[]
}

/** Records and writes made by the commit being built, seen by its later operations. */
interface Pending {
  records: Map<string, { blob: string; record: CheckpointRecord }>
  writes: Map<string, { blob: string; record: WritesRecord }>
  /** Snapshots (of checkpoints) the batch's puts drop by retention. */
  dropped: Set<string>
}

class LruMap<V> {
  private readonly map = new Map<string, V>()
  constructor(private readonly max: number) {}
  get(k: string): V | undefined {
    const v = this.map.get(k)
    if (v !== undefined) {
      this.map.delete(k)
      this.map.set(k, v)
    }
    return v
  }
  set(k: string, v: V): void {
    this.map.set(k, v)
    if (this.map.size > this.max) this.map.delete(this.map.keys().next().value as string)
  }
}

/**
 * Each put appends a snapshot entry naming a record the saver wrote, and a log lets such an
 * entry through only when its `objects` vouch for the record: refused here, before any commit.
 */
function checkLog(log: AgentLog): void {
  const objects = log?.objects
  const fix = `open it with AgentLog.open({ root, objects: new ObjectStore(root) })`
  if (objects === undefined) {
    throw Errors.BAD_OPTION(
      `NoaSaver option log has no object store, so it refuses the snapshot entries the saver appends: ${fix}`,
      { field: 'log' },
    )
  }
  if (objects instanceof ObjectStore && objects.root !== log.root) {
    throw Errors.BAD_OPTION(
      `NoaSaver option log checks records against the object store of ${objects.root}, not of its root ${log.root}: ${fix}`,
      { field: 'log' },
    )
  }
}

function configError(what: string): NoaError {
  return Errors.BAD_ARGUMENT(what, { field: 'config.configurable' })
}

/** `checkpoint <id> of thread <id>` (and its namespace), for messages. */
function checkpointName(threadId: string, ns: string, id: string): string {
  return `checkpoint ${id}${ns === '' ? '' : ` (namespace ${JSON.stringify(ns)})`} of thread ${JSON.stringify(threadId)}`
}

/** A read's NoaError, with what was being read put in front of its message (its code kept). */
async function named<T>(what: string, p: Promise<T>): Promise<T> {
  try {
    return await p
  } catch (err) {
    throw err instanceof NoaError ? rewrap(err, `${what}: ${err.message}`) : err
  }
}

function nsKey(ns: string, id: string): string {
  return `${ns}\0${id}`
}

/** Code point order (Python's str order), which is what LangGraph sorts writes by. */
function compareCodePoints(a: string, b: string): number {
  const x = [...a]
  const y = [...b]
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = ((x[i] as string).codePointAt(0) as number) - ((y[i] as string).codePointAt(0) as number)
    if (d !== 0) return d
  }
  return x.length - y.length
}

function sameValue(a: unknown, b: unknown): boolean {
  if (a === b) return true
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false
  if (Array.isArray(a) !== Array.isArray(b)) return false
  const ka = Object.keys(a)
  const kb = Object.keys(b)
  return (
    ka.length === kb.length &&
    ka.every((k) => sameValue((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]))
  )
}

class Thread {
  readonly index = new ThreadIndex()
  readonly follower: LogFollower
  loaded = false
  /** Null until the first write, and again after anything unexpected (then rebuilt by replay). */
  tree: TreeState | null = null
  private queue: Op[] = []
  private draining: Promise<void> | null = null
  private refreshing: Promise<void> | null = null
  committing = false
  /** The workspace was opened through the saver's AgentLog (see loadTree). */
  private opened = false
  /** Whether the workspace's name is a hash of the thread id (`lgh.`), not the id itself. */
  readonly hashed: boolean
  /** Chunk ids of chunked values lately in the tree, by value blob (see heldChunks). */
  private readonly chunkLists = new LruMap<string[]>(64)

  constructor(
    readonly saver: NoaSaver,
    readonly workspace: string,
    public threadId: string | undefined,
  ) {
    this.follower = new LogFollower(saver.root, workspace)
    this.hashed = decodeWorkspace(THREADS, workspace)?.kind === 'hashed'
  }

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
      for (const [i, a] of acks.entries()) this.index.apply({ ...entries[i], seq: a.seq, ts: a.ts } as Entry)
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

  /**
   * The thread's files and head, from the log (takes the workspace's lock first). Null when,
   * through a daemon, another client appended while the log was read: try again.
   */
  private async loadTree(): Promise<TreeState | null> {
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

  private async repairHead(): Promise<void> {
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

  private async buildPut(
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

  private async buildWrites(
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

  private buildDelete(state: TreeState, e: EntryInput[], o: StoredObject[]): void {
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
  private snapshotInto(
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

export class NoaSaver extends BaseCheckpointSaver {
  readonly root: string
  readonly store: ObjectStore
  readonly engine: SnapshotEngine
  /** @internal */ readonly mutex: KeyedMutex
  /** @internal */ readonly records = new LruMap<CheckpointRecord>(RECORD_CACHE)
  /** @internal */ readonly writeRecords = new LruMap<WritesRecord>(RECORD_CACHE)
  private readonly blobs: BlobCache
  private readonly threads = new Map<string, Thread>()
  /** The same threads by thread id (the name mapping is done once per thread). */
  private readonly byId = new Map<string, Thread>()
  /** @internal Whether the log is a daemon's client (adapters/logs.ts, viaDaemon). */
  readonly viaDaemon: boolean
  /** @internal The retention policy, or undefined (keep every checkpoint). */
  readonly retention: Retention | undefined
  private readonly lease: LogLease
  private closed = false
  private released = false

  private constructor(lease: LogLease, serde?: SerializerProtocol, retention?: Retention) {
    super(serde)
    this.retention = retention
    this.lease = lease
    this.viaDaemon = lease.viaDaemon
    this.root = lease.log.root
    this.store = new ObjectStore(this.root)
    this.engine = new SnapshotEngine({ log: lease.log, store: this.store })
    this.mutex = mutexFor(lease.log)
    this.blobs = new BlobCache(this.store)
  }

  /** Opens a saver on a noa root; `close()` releases it. */
  static async open(options: NoaSaverOptions = {}): Promise<NoaSaver> {
    checkOptionKeys(options, OPTION_KEYS, 'NoaSaver')
    if (options.log !== undefined) checkLog(options.log)
    const retention = checkRetention(options.retention, 'NoaSaver')
    const lease = options.log
      ? borrowedLog(options.log)
      : await leaseLog({ root: options.root, workers: options.workers })
    return new NoaSaver(lease, options.serde, retention)
  }

  /** @internal */
  get log(): AgentLog {
    if (this.released) throw Errors.CLOSED('the NoaSaver is closed')
    return this.lease.log
  }

  /** Waits for commits in flight, then releases the root's AgentLog (closing it if this opened it). */
  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    for (const t of this.threads.values()) await t.idle()
    this.released = true
    await this.lease.release()
  }

  /** The workspace that holds a thread (`lg.<id>`, or `lgh.<hash>` for a long id). */
  static workspaceOf(threadId: string): string {
    return workspaceFor(THREADS, threadId)
  }

  private thread(threadId: string): Thread {
    const known = this.byId.get(threadId)
    if (known) return known
    const ws = workspaceFor(THREADS, threadId)
    let t = this.threads.get(ws)
    if (!t) {
      t = new Thread(this, ws, threadId)
      this.threads.set(ws, t)
    } else if (t.threadId === undefined) {
      t.threadId = threadId
    }
    this.byId.set(threadId, t)
    return t
  }

  private async loaded(threadId: string): Promise<Thread> {
    const t = this.open(threadId)
    await t.refresh()
    return t
  }

  /** The thread, as this process last read it. */
  private open(threadId: string): Thread {
    if (this.closed) throw Errors.CLOSED('the NoaSaver is closed')
    return this.thread(threadId)
  }

  private threadIdOf(config: RunnableConfig, required: boolean): string | undefined {
    const id = config.configurable?.thread_id
    if (id === undefined && !required) return undefined
    if (id === undefined) {
      throw configError(
        'config.configurable.thread_id is missing: a checkpointer needs a thread id, as in graph.invoke(input, { configurable: { thread_id: "t-1" } })',
      )
    }
    return checkId(id, 'config.configurable.thread_id')
  }

  private nsOf(config: RunnableConfig): string {
    return checkText(config.configurable?.checkpoint_ns ?? '', 'config.configurable.checkpoint_ns')
  }

  async getTuple(config: RunnableConfig): Promise<CheckpointTuple | undefined> {
    const threadId = this.threadIdOf(config, false)
    if (threadId === undefined) return undefined
    const ns = this.nsOf(config)
    const t = await this.loaded(threadId)
    const id = getCheckpointId(config) || t.index.latest.get(ns)
    if (!id) return undefined
    const ref = t.index.get(ns, id)
    return ref ? this.tuple(t, threadId, ns, id, ref) : undefined
  }

  async *list(config: RunnableConfig, options: CheckpointListOptions = {}): AsyncGenerator<CheckpointTuple> {
    checkOptionKeys(options, new Set(['limit', 'before', 'filter']), 'list')
    const { before, filter } = options
    let limit = options.limit
    if (limit !== undefined && (typeof limit !== 'number' || Number.isNaN(limit))) {
      throw Errors.BAD_ARGUMENT(`list option limit must be a number, got ${describe(limit)}`, {
        field: 'limit',
      })
    }
    const threadId = this.threadIdOf(config, false)
    const ns = config.configurable?.checkpoint_ns as string | undefined
    const onlyId = config.configurable?.checkpoint_id as string | undefined
    const beforeId = before?.configurable?.checkpoint_id as string | undefined
    const threads: Array<[string, Thread]> = []
    if (threadId !== undefined) {
      threads.push([threadId, await this.loaded(threadId)])
    } else {
      for (const [id, t] of await this.allThreads()) threads.push([id, t])
    }
    const found: Array<{ threadId: string; t: Thread; ns: string; id: string; ref: CheckpointRef }> = []
    for (const [tid, t] of threads) {
      for (const [cns, ids] of t.index.checkpoints) {
        if (ns !== undefined && cns !== ns) continue
        for (const [id, ref] of ids) {
          if (onlyId && id !== onlyId) continue
          if (beforeId !== undefined && !(id < beforeId)) continue
          found.push({ threadId: tid, t, ns: cns, id, ref })
        }
      }
    }
    found.sort((a, b) =>
      a.id !== b.id ? (a.id < b.id ? 1 : -1) : a.threadId < b.threadId ? -1 : a.threadId > b.threadId ? 1 : 0,
    )
    const wanted = Object.entries(filter ?? {}).filter(([, v]) => v !== undefined)
    for (const c of found) {
      if (limit !== undefined && limit <= 0) return
      const of = checkpointName(c.threadId, c.ns, c.id)
      const record = await named(of, this.recordAt(c.ref.blob))
      if (wanted.length > 0) {
        const metadata = (await this.load(record.metadata, `the metadata of ${of}`, c.ref.blob)) as Record<
          string,
          unknown
        >
        if (!wanted.every(([k, v]) => sameValue(metadata?.[k], v))) continue
      }
      if (limit !== undefined) limit--
      yield await this.tuple(c.t, c.threadId, c.ns, c.id, c.ref)
    }
  }

  async put(
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    newVersions: ChannelVersions,
  ): Promise<RunnableConfig> {
    if (!config.configurable) throw configError('config.configurable is missing')
    const threadId = this.threadIdOf(config, true) as string
    const ns = this.nsOf(config)
    const id = checkId(checkpoint?.id, 'checkpoint.id')
    // Refused here, not in the commit, where it would fail the operations batched with it.
    checkPath(checkpointPath(ns, id), 'checkpoint path')
    const parentId = config.configurable.checkpoint_id
    const parent =
      parentId === undefined || parentId === ''
        ? undefined
        : checkId(parentId, 'config.configurable.checkpoint_id')
    const copy = copyCheckpoint(checkpoint)
    const values = copy.channel_values as Record<string, unknown>
    copy.channel_values = {}
    const versions: Record<string, number | string> = {}
    for (const [ch, v] of Object.entries(copy.channel_versions ?? {}))
      versions[checkText(ch, 'channel name')] = v
    const fresh = new Map<string, Serialized | null>()
    const of = checkpointName(threadId, ns, id)
    // Refused here, before anything is queued, when the serializer cannot give it back.
    const serialize = async (v: unknown, what: string, field: string): Promise<Serialized> => {
      const [type, data] = await this.serde.dumpsTyped(v)
      const loading = checkStorable(this.serde, v, type, data, { what, of, field })
      if (loading) await loading
      return { type, data }
    }
    await Promise.all(
      Object.keys(newVersions ?? {}).map(async (ch) => {
        fresh.set(
          ch,
          Object.hasOwn(values, ch) && values[ch] !== undefined
            ? await serialize(values[ch], `channel ${JSON.stringify(ch)}`, `checkpoint.channel_values.${ch}`)
            : null,
        )
      }),
    )
    const [cp, md] = await Promise.all([
      serialize(copy, 'the checkpoint (but its channel values)', 'checkpoint'),
      serialize(metadata, 'the metadata', 'metadata'),
    ])
    // Not brought up to date here: the commit does that itself, under the workspace's lock.
    const t = this.open(threadId)
    await new Promise<void>((resolve, reject) =>
      t.enqueue({
        kind: 'put',
        ns,
        id,
        parent,
        checkpoint: cp,
        metadata: md,
        step: metadata?.step,
        source: metadata?.source,
        versions,
        fresh,
        resolve,
        reject,
      }),
    )
    return { configurable: { thread_id: threadId, checkpoint_ns: ns, checkpoint_id: id } }
  }

  async putWrites(
    config: RunnableConfig,
    writes: PendingWrite[],
    taskId: string,
    taskPath?: string,
  ): Promise<void> {
    if (!config.configurable) throw configError('config.configurable is missing')
    const threadId = this.threadIdOf(config, true) as string
    const ns = this.nsOf(config)
    const cid = config.configurable.checkpoint_id
    if (cid === undefined || cid === '') {
      throw configError('config.configurable.checkpoint_id is missing: writes belong to a checkpoint')
    }
    const id = checkId(cid, 'config.configurable.checkpoint_id')
    const task = checkId(taskId, 'task id')
    checkPath(writesPath(ns, id, task), 'writes path')
    if (taskPath !== undefined) checkText(taskPath, 'task path')
    if (!Array.isArray(writes))
      throw Errors.BAD_ARGUMENT('putWrites takes an array of [channel, value] writes')
    const of = checkpointName(threadId, ns, id)
    const serialized = await Promise.all(
      writes.map(async ([channel, value], i) => {
        checkText(channel, 'write channel')
        const [type, data] = await this.serde.dumpsTyped(value)
        const loading = checkStorable(this.serde, value, type, data, {
          what: `write ${i} (channel ${JSON.stringify(channel)}) of task ${task}`,
          of,
          field: `writes[${i}]`,
        })
        if (loading) await loading
        return {
          idx: (WRITES_IDX_MAP as Record<string, number>)[channel] ?? i,
          channel,
          value: { type, data },
        }
      }),
    )
    const t = this.open(threadId) // the commit brings it up to date
    await new Promise<void>((resolve, reject) =>
      t.enqueue({ kind: 'writes', ns, id, task, taskPath, writes: serialized, resolve, reject }),
    )
  }

  async deleteThread(threadId: string): Promise<void> {
    const t = await this.loaded(checkId(threadId, 'thread id'))
    if (!t.follower.exists()) return
    await new Promise<void>((resolve, reject) => t.enqueue({ kind: 'delete', resolve, reject }))
  }

  /**
   * Starts a new thread at a checkpoint of another (time travel into a thread of its own): a noa
   * fork of the workspace at the snapshot made with that checkpoint. The new thread's history is
   * the old one's up to that checkpoint, as it was when it was put: writes made against it later
   * (the outcome of the step that followed) stay behind, so the step runs again. `noa fork` at
   * the same snapshot makes the same thread.
   */
  async fork(config: RunnableConfig, toThreadId: string): Promise<RunnableConfig> {
    const threadId = this.threadIdOf(config, true) as string
    const ns = this.nsOf(config)
    const target = checkId(toThreadId, 'thread id')
    const t = await this.loaded(threadId)
    const id = getCheckpointId(config) || t.index.latest.get(ns)
    const ref = id ? t.index.get(ns, id) : undefined
    if (!id || !ref) {
      throw Errors.NOT_FOUND(
        `thread ${threadId} has no checkpoint ${id ?? '(none at all)'}${ns ? ` in namespace ${ns}` : ''}`,
      )
    }
    if (!ref.snapshot) {
      throw Errors.NOT_FOUND(`checkpoint ${id} of thread ${threadId} has no snapshot to fork from`)
    }
    const to = this.thread(target)
    await this.engine.fork(to.workspace, ref.snapshot, {
      message: `langgraph fork of thread ${threadId} at ${id}`,
    })
    if (to.hashed) {
      const bytes = Buffer.from(target, 'utf8')
      const blob = sha256(bytes)
      await this.mutex.run([to.workspace], async () => {
        await this.store.write([{ id: blob, data: bytes, exact: true }])
        await this.log.append(to.workspace, { op: 'write', path: THREAD_FILE, blob })
      })
    }
    return { configurable: { thread_id: target, checkpoint_ns: ns, checkpoint_id: id } }
  }

  /** Every thread of the root with at least one checkpoint, by thread id. */
  private async allThreads(): Promise<Map<string, Thread>> {
    const out = new Map<string, Thread>()
    // A root nothing was written to yet has no threads (and no folder).
    if (!statSync(this.root, { throwIfNoEntry: false })) return out
    for (const ws of workspaceNames(this.root)) {
      const name = decodeWorkspace(THREADS, ws)
      if (!name) continue
      let t = this.threads.get(ws)
      if (!t) {
        t = new Thread(this, ws, name.kind === 'plain' ? name.id : undefined)
        this.threads.set(ws, t)
      }
      await t.refresh()
      if (t.threadId === undefined && name.kind === 'hashed' && t.index.threadBlob) {
        const id = (await this.blobs.get(t.index.threadBlob)).toString('utf8')
        if (sha256(id) === name.hash) t.threadId = id
      }
      if (t.threadId !== undefined && t.index.size > 0) out.set(t.threadId, t)
    }
    return out
  }

  /** @internal A checkpoint's record (from the commit being built, or the log). */
  async record(t: Thread, ns: string, id: string, pending?: Pending): Promise<CheckpointRecord | undefined> {
    const p = pending?.records.get(nsKey(ns, id))
    if (p) return p.record
    const ref = t.index.get(ns, id)
    return ref ? this.recordAt(ref.blob) : undefined
  }

  /**
   * @internal A channel's value at a version, from the newest checkpoint of the namespace that
   * has it: what `put` needs when a channel is neither new nor the parent's (a copied checkpoint).
   */
  async channelAt(
    t: Thread,
    ns: string,
    ch: string,
    version: number | string,
    pending: Pending,
  ): Promise<StoredChannel | undefined> {
    for (const { record } of [...pending.records.values()].reverse()) {
      if (record.checkpoint_ns === ns && record.channels[ch]?.version === version) return record.channels[ch]
    }
    // The newest checkpoint (by id) that has it. After a miss, only records applied since are
    // read: a channel that never had a value at this version is asked for at every step.
    const key = `${ns}\0${ch}\0${typeof version}:${version}`
    const order = t.index.applied.get(ns) ?? []
    const from = t.index.misses.get(key) ?? 0
    const checked = new Set<string>()
    const ids = order
      .slice(from)
      .filter((id) => !checked.has(id) && checked.add(id) !== undefined)
      .sort()
      .reverse()
    for (const id of ids) {
      const record = await this.record(t, ns, id)
      const c = record?.channels[ch]
      if (c?.version === version) {
        t.index.misses.delete(key)
        return c
      }
    }
    t.index.misses.set(key, order.length)
    return undefined
  }

  /** @internal */
  async writesRecord(t: Thread, ns: string, id: string, task: string): Promise<WritesRecord | undefined> {
    const blob = t.index.writesOf(ns, id)?.get(task)
    return blob ? this.writesAt(blob) : undefined
  }

  /** @internal */
  async recordAt(blob: string): Promise<CheckpointRecord> {
    const hit = this.records.get(blob)
    if (hit) return hit
    const record = parseCheckpointRecord(await this.blobs.get(blob), blob)
    this.records.set(blob, record)
    return record
  }

  /** @internal */
  async writesAt(blob: string): Promise<WritesRecord> {
    const hit = this.writeRecords.get(blob)
    if (hit) return hit
    const record = parseWritesRecord(await this.blobs.get(blob), blob)
    this.writeRecords.set(blob, record)
    return record
  }

  /**
   * A stored value through the serializer. Bytes it cannot read (a value stored before such
   * values were refused, or by another serializer) are a named error, never its raw SyntaxError.
   */
  private async load(v: StoredValue, what: string, record: string): Promise<unknown> {
    const where = 'blob' in v ? `blob ${v.blob}` : `record ${record}`
    const data = await named(what, valueData(v, this.blobs))
    try {
      return await this.serde.loadsTyped(v.type, data)
    } catch (err) {
      throw Errors.CORRUPT_OBJECT(
        `${what}: the serializer cannot read the stored value (${v.type}, in ${where}) back: ${(err as Error)?.message?.split('\n')[0]}`,
        { object: 'blob' in v ? v.blob : record },
        { cause: err },
      )
    }
  }

  /** A checkpoint's pending writes in LangGraph's order: (task path, task id, idx). */
  private async pendingWrites(
    t: Thread,
    ns: string,
    id: string,
    of: string,
  ): Promise<CheckpointPendingWrite[]> {
    const keyed: Array<{ path: string; task: string; idx: number; write: StoredWrite; blob: string }> = []
    for (const blob of t.index.writesOf(ns, id)?.values() ?? []) {
      const r = await named(`the writes of ${of}`, this.writesAt(blob))
      for (const w of r.writes) keyed.push({ path: r.task_path, task: r.task_id, idx: w.idx, write: w, blob })
    }
    keyed.sort(
      (a, b) =>
        (a.path !== b.path ? compareCodePoints(a.path, b.path) : 0) ||
        (a.task !== b.task ? compareCodePoints(a.task, b.task) : 0) ||
        a.idx - b.idx,
    )
    return Promise.all(
      keyed.map(
        async ({ task, write, blob }) =>
          [
            task,
            write.channel,
            await this.load(
              write.value,
              `write ${write.idx} (channel ${JSON.stringify(write.channel)}) of task ${task} against ${of}`,
              blob,
            ),
          ] as CheckpointPendingWrite,
      ),
    )
  }

  private async tuple(
    t: Thread,
    threadId: string,
    ns: string,
    id: string,
    ref: CheckpointRef,
  ): Promise<CheckpointTuple> {
    const of = checkpointName(threadId, ns, id)
    const record = await named(of, this.recordAt(ref.blob))
    const checkpoint = (await this.load(record.checkpoint, of, ref.blob)) as Checkpoint
    const values: Record<string, unknown> = {}
    for (const [ch, c] of Object.entries(record.channels)) {
      values[ch] = await this.load(c.value, `channel ${JSON.stringify(ch)} of ${of}`, ref.blob)
    }
    checkpoint.channel_values = values
    const parent = record.parent_checkpoint_id
    if (checkpoint.v < 4 && parent !== undefined) {
      // Checkpoints before format 4 kept pending sends as the parent's TASKS writes.
      const sends = (await this.pendingWrites(t, ns, parent, checkpointName(threadId, ns, parent)))
        .filter((w) => w[1] === TASKS)
        .map((w) => w[2])
      checkpoint.channel_values[TASKS] = sends
      const versions = Object.values(checkpoint.channel_versions)
      checkpoint.channel_versions[TASKS] =
        versions.length > 0 ? maxChannelVersion(...versions) : this.getNextVersion(undefined)
    }
    const tuple: CheckpointTuple = {
      config: { configurable: { thread_id: threadId, checkpoint_ns: ns, checkpoint_id: id } },
      checkpoint,
      metadata: (await this.load(record.metadata, `the metadata of ${of}`, ref.blob)) as CheckpointMetadata,
      pendingWrites: await this.pendingWrites(t, ns, id, of),
    }
    if (parent !== undefined) {
      tuple.parentConfig = { configurable: { thread_id: threadId, checkpoint_ns: ns, checkpoint_id: parent } }
    }
    return tuple
  }
}
