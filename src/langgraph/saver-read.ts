/**
 * NoaSaver's reading of history (a layer of its class, saver.ts): checkpoint and writes records
 * by blob (cached), a channel's value at a version, stored values through the serializer, and a
 * checkpoint as LangGraph's CheckpointTuple with its pending writes in LangGraph's order.
 */
import {
  BaseCheckpointSaver,
  type Checkpoint,
  type CheckpointMetadata,
  type CheckpointPendingWrite,
  type CheckpointTuple,
  maxChannelVersion,
  type SerializerProtocol,
  TASKS,
} from '@langchain/langgraph-checkpoint'
import { BlobCache, type StoredValue, valueData } from '../adapters/values.js'
import { Errors } from '../engine/errors.js'
import { ObjectStore } from '../store/objects.js'
import type { CheckpointRef } from './index-log.js'
import {
  type CheckpointRecord,
  parseCheckpointRecord,
  parseWritesRecord,
  type StoredChannel,
  type StoredWrite,
  type WritesRecord,
} from './layout.js'
import { checkpointName, LruMap, named, nsKey, type Pending, type ThreadState } from './thread-state.js'

const RECORD_CACHE = 4096

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

export abstract class SaverReads extends BaseCheckpointSaver {
  readonly root: string
  readonly store: ObjectStore
  /** @internal */ readonly records = new LruMap<CheckpointRecord>(RECORD_CACHE)
  /** @internal */ readonly writeRecords = new LruMap<WritesRecord>(RECORD_CACHE)
  protected readonly blobs: BlobCache

  protected constructor(serde: SerializerProtocol | undefined, root: string) {
    super(serde)
    this.root = root
    this.store = new ObjectStore(this.root)
    this.blobs = new BlobCache(this.store)
  }

  /** @internal A checkpoint's record (from the commit being built, or the log). */
  async record(
    t: ThreadState,
    ns: string,
    id: string,
    pending?: Pending,
  ): Promise<CheckpointRecord | undefined> {
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
    t: ThreadState,
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
  async writesRecord(
    t: ThreadState,
    ns: string,
    id: string,
    task: string,
  ): Promise<WritesRecord | undefined> {
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
  protected async load(v: StoredValue, what: string, record: string): Promise<unknown> {
    // A value kept in its record as text (most are) is there already: no read to wait for.
    const data = 'text' in v ? v.text : await named(what, valueData(v, this.blobs))
    try {
      return await this.serde.loadsTyped(v.type, data)
    } catch (err) {
      const where = 'blob' in v ? `blob ${v.blob}` : `record ${record}`
      throw Errors.CORRUPT_OBJECT(
        `${what}: the serializer cannot read the stored value (${v.type}, in ${where}) back: ${(err as Error)?.message?.split('\n')[0]}`,
        { object: 'blob' in v ? v.blob : record },
        { cause: err },
      )
    }
  }

  /** A checkpoint's pending writes in LangGraph's order: (task path, task id, idx). */
  protected async pendingWrites(
    t: ThreadState,
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

  protected async tuple(
    t: ThreadState,
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
