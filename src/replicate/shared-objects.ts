/**
 * The objects of a shared workspace's entries travel ahead of them (shared.ts). A `write` names a
 * blob, and the store's records (`snapshot`, `merge`) name a record, which names its tree (packs
 * of folders), its blobs, and the records it descends from. Before a host publishes such entries
 * it publishes each object they need on `<prefix>._obj.<id>`, exactly as `replicate push` does
 * (objects.ts), and lists their ids on the entries message (`Noa-Objects`); every host that
 * applies the message first fetches the listed objects it lacks from their subjects and writes
 * them into its root, verified, as the mirror does (ObjectSink). So the objects are in the stream
 * before the entry that names them, and on every host before the entry reaches its log.
 *
 * What is listed is what the hosts may lack: the closure of the entries' records, stopping at
 * records a snapshot entry of the workspace's log already names (they travelled with that entry,
 * or with the log's history), and of each record's tree the packs its shipped parents' trees do
 * not hold and the blobs that differ from its first parent's tree (with their chunks).
 */
import type { EntryInput } from '../engine/entry.js'
import { Errors, isNoaError, NoaError } from '../engine/errors.js'
import type { SnapshotRecord } from '../store/objects.js'
import { ObjectStore } from '../store/objects.js'
import { type ReachSink, reachBlob } from '../store/reach.js'
import type { SnapshotEngine } from '../store/snapshot.js'
import { diffTrees, EMPTY_TREE, type Tree } from '../store/tree.js'
import type { Link } from './link.js'
import { ObjectSink, publishObject } from './objects.js'
import { nextOnSubject } from './stream.js'
import { HDR_OBJECT_EXACT, HDR_OBJECT_OFFSET, HDR_OBJECT_SIZE, objectSubject } from './subjects.js'

const ID_RE = /^[0-9a-f]{64}$/

/** Requests in flight at once when objects are published or fetched. */
export const OBJECT_WORKERS = 8

/**
 * The ids of the objects `entries` need on another host, in the order found. A record an entry
 * names that this root does not hold is refused (NOA_NOT_FOUND, naming the entry): the other
 * hosts could never read it. A blob a `write` names that is not stored is left out, as a
 * snapshot leaves it out (it reports it in `missingBlobs`).
 */
export async function objectsOfEntries(
  engine: SnapshotEngine,
  workspace: string,
  entries: readonly EntryInput[],
): Promise<string[]> {
  const ids = new Set<string>()
  const sink: ReachSink = {
    object: (_kind, id) => {
      if (ids.has(id)) return false
      ids.add(id)
      return true
    },
    missing: () => {},
  }
  const store = engine.store
  const records: string[] = []
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i] as EntryInput
    if (e.op === 'write') {
      if (ID_RE.test(e.blob) && store.has(e.blob)) reachBlob(store, sink, e.blob, { workspace })
    } else if (e.op === 'snapshot' || e.op === 'merge') {
      const named = e.op === 'snapshot' ? [e.snapshot_id] : [e.from_snapshot, ...(e.base ? [e.base] : [])]
      for (const id of named) {
        try {
          await engine.getSnapshot(id)
        } catch (err) {
          if (!(err instanceof NoaError)) throw err
          throw Errors.NOT_FOUND(
            `entry ${i + 1} (${e.op}) names snapshot ${id}, which this root's object store cannot read (${err.message}): the other hosts could not either; nothing was published`,
            { workspace, snapshot: id },
          )
        }
        records.push(id)
      }
    }
  }
  if (records.length === 0) return [...ids]
  const shipped = new Set<string>()
  try {
    for await (const info of engine.snapshots(workspace)) shipped.add(info.snapshotId)
  } catch (err) {
    // No log yet (a fork into a new shared workspace): nothing shipped.
    if (!isNoaError(err, 'NOA_NOT_FOUND')) throw err
  }
  const seen = new Set<string>()
  const stack = records.reverse()
  while (stack.length > 0) {
    const id = stack.pop() as string
    if (seen.has(id)) continue
    seen.add(id)
    let record: SnapshotRecord
    try {
      record = await engine.getSnapshot(id)
    } catch (err) {
      // An ancestor this root cannot read: the hosts go without it, as they would here.
      if (err instanceof NoaError) continue
      throw err
    }
    sink.object('record', id.slice(4), { workspace, snapshot: id })
    if (shipped.has(id)) continue
    await treeChanges(engine, record, shipped, sink)
    for (const p of parentsOf(record)) stack.push(p)
  }
  return [...ids]
}

function parentsOf(r: SnapshotRecord): string[] {
  const out: string[] = []
  if (r.parent) out.push(r.parent)
  if (r.merged) out.push(...r.merged)
  if (r.base) out.push(r.base)
  return out
}

/** A record's tree objects its shipped parents' trees do not hold, and its blobs changed since its first parent. */
async function treeChanges(
  engine: SnapshotEngine,
  record: SnapshotRecord,
  shipped: ReadonlySet<string>,
  sink: ReachSink,
): Promise<void> {
  const from = { workspace: record.workspace, snapshot: record.id }
  let packs: string[]
  let tree: Tree
  try {
    packs = await engine.store.treeObjects(record.tree)
    tree = await engine.treeOf(record)
  } catch (err) {
    // Not stored (a pruned snapshot whose tree gc took): nothing of it to send.
    if (err instanceof NoaError) return
    throw err
  }
  const held = new Set<string>()
  for (const p of parentsOf(record)) {
    if (!shipped.has(p)) continue
    try {
      const parent = await engine.getSnapshot(p)
      for (const id of await engine.store.treeObjects(parent.tree)) held.add(id)
    } catch (err) {
      if (!(err instanceof NoaError)) throw err
    }
  }
  for (const id of packs) if (!held.has(id)) sink.object('tree', id, from)
  let before: Tree = EMPTY_TREE
  const first = record.parent ?? record.base
  if (first) {
    try {
      before = await engine.treeOf(await engine.getSnapshot(first))
    } catch (err) {
      if (!(err instanceof NoaError)) throw err
    }
  }
  const store = engine.store
  for (const c of diffTrees(before, tree)) {
    if (c.after !== null && store.has(c.after)) reachBlob(store, sink, c.after, from)
  }
}

/** The ids a `Noa-Objects` header lists (nothing that is not an object id). */
export function listedObjects(header: string | undefined): string[] {
  if (!header) return []
  return header.split(',').filter((id) => ID_RE.test(id))
}

export interface ObjectContext {
  link: Link
  stream: string
  prefix: string
  root: string
  /** Largest part of an object per message. */
  partSize: number
  retry<T>(what: string, fn: () => Promise<T>): Promise<T>
}

/** Ids a SharedWorkspaces remembers as in the stream (about 100 bytes each): 65,536 at most. */
export const KNOWN_OBJECTS_MAX = 65_536

/**
 * The objects known to be in the stream, bounded: a long-running host publishes and fetches
 * without end, so the oldest ids are forgotten past `max`. Forgetting one costs a look at the
 * stream the next time an entry names it (publishObject finds it there and sends nothing).
 */
export class KnownObjects extends Set<string> {
  constructor(readonly max = KNOWN_OBJECTS_MAX) {
    super()
  }

  override add(id: string): this {
    if (!this.has(id) && this.size >= this.max) {
      const oldest = this.values().next()
      if (oldest.done !== true) this.delete(oldest.value)
    }
    return super.add(id)
  }
}

/**
 * Publishes the objects the stream may lack (not in `known`) as push does, a few at once, and
 * adds them to `known`. Returns how many this call stored (the others were there already).
 */
export async function publishObjects(
  ctx: ObjectContext,
  ids: readonly string[],
  known: Set<string>,
): Promise<number> {
  const todo = ids.filter((id) => !known.has(id))
  let stored = 0
  let next = 0
  const worker = async () => {
    while (next < todo.length) {
      const id = todo[next++] as string
      if ((await publishObject(ctx, ctx.root, id)) > 0) stored++
      known.add(id)
    }
  }
  await Promise.all(Array.from({ length: Math.min(OBJECT_WORKERS, todo.length) }, worker))
  return stored
}

/**
 * Writes into the root the listed objects it does not hold, read from their subjects (all parts,
 * in order, each object checked as the mirror checks it), and adds them to `known`. Returns the
 * ids the stream does not hold (the caller warns: they were published before the entries, so
 * only a purge removes them).
 */
export async function fetchObjects(
  ctx: ObjectContext,
  ids: readonly string[],
  known: Set<string>,
): Promise<string[]> {
  const store = new ObjectStore(ctx.root)
  const wanted = ids.filter((id) => !store.has(id))
  const absent: string[] = []
  if (wanted.length > 0) {
    const sink = new ObjectSink(ctx.root)
    let next = 0
    const worker = async () => {
      while (next < wanted.length) {
        const id = wanted[next++] as string
        if (!(await fetchObject(ctx, sink, id))) absent.push(id)
      }
    }
    try {
      await Promise.all(Array.from({ length: Math.min(OBJECT_WORKERS, wanted.length) }, worker))
    } finally {
      await sink.close()
    }
  }
  for (const id of ids) if (!absent.includes(id)) known.add(id)
  return absent
}

/** One object's parts, from its subject into the sink; false when the stream has none. */
async function fetchObject(ctx: ObjectContext, sink: ObjectSink, id: string): Promise<boolean> {
  const subject = objectSubject(ctx.prefix, id)
  let from = 1
  for (;;) {
    const at = from
    const m = await ctx.retry(`fetch object ${id}`, () => nextOnSubject(ctx.link, ctx.stream, subject, at))
    if (m === null) return false
    const size = Number(m.header?.get(HDR_OBJECT_SIZE))
    const offset = Number(m.header?.get(HDR_OBJECT_OFFSET))
    const exact = m.header?.get(HDR_OBJECT_EXACT) !== '0'
    await sink.put(id, size, offset, m.data, m.seq, exact)
    from = m.seq + 1
    if (offset + m.data.length >= size) return true
  }
}
