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
 *
 * Here: the BaseCheckpointSaver methods and the threads by id. Reading history is the layer of
 * the class below (saver-read.ts); a thread's commits are thread.ts, built on thread-build.ts and
 * thread-state.ts.
 */
import { statSync } from 'node:fs'
import type { RunnableConfig } from '@langchain/core/runnables'
import {
  type ChannelVersions,
  type Checkpoint,
  type CheckpointListOptions,
  type CheckpointMetadata,
  type CheckpointTuple,
  copyCheckpoint,
  getCheckpointId,
  type PendingWrite,
  type SerializerProtocol,
  WRITES_IDX_MAP,
} from '@langchain/langgraph-checkpoint'
import { borrowedLog, type LogLease, leaseLog } from '../adapters/logs.js'
import { checkId, checkText, decodeWorkspace, describe, workspaceFor } from '../adapters/names.js'
import { checkRetention, type Retention } from '../adapters/retention.js'
import type { AgentLog } from '../engine/agent-log.js'
import { checkPath } from '../engine/entry.js'
import { Errors, type NoaError } from '../engine/errors.js'
import { workspaceNames } from '../engine/logs.js'
import { checkOptionKeys } from '../engine/options.js'
import { type KeyedMutex, mutexFor } from '../store/mutex.js'
import { ObjectStore, sha256 } from '../store/objects.js'
import { SnapshotEngine } from '../store/snapshot.js'
import type { CheckpointRef } from './index-log.js'
import { checkpointPath, THREAD_FILE, writesPath } from './layout.js'
import { SaverReads } from './saver-read.js'
import { checkStorable } from './storable.js'
import { Thread } from './thread.js'
import { checkpointName, named, type Serialized, THREADS } from './thread-state.js'

export { THREADS } from './thread-state.js'

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

export class NoaSaver extends SaverReads {
  readonly engine: SnapshotEngine
  /** @internal */ readonly mutex: KeyedMutex
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
    super(serde, lease.log.root)
    this.retention = retention
    this.lease = lease
    this.viaDaemon = lease.viaDaemon
    this.engine = new SnapshotEngine({ log: lease.log, store: this.store })
    this.mutex = mutexFor(lease.log)
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
}
