/**
 * How a LangGraph thread lives in a noa workspace (`lg.<thread id>`, see adapters/names.ts).
 *
 * Files (paths of the workspace's tree; `<ns>/` only for a subgraph's namespace, the root
 * namespace has none; every id is one segment, see toSegment):
 *
 *     checkpoints/[<ns>/]<checkpoint id>    a checkpoint record (JSON, below)
 *     writes/[<ns>/]<checkpoint id>/<task>  a task's pending writes against that checkpoint
 *     values/<sha-256>                      a value too large for its record (the blob itself)
 *     thread                                the thread id, for a thread whose name is a hash
 *     deleted                               written by deleteThread: history before it is gone, and
 *                                           a put against a checkpoint from before it is refused
 *
 * Each `put` appends, in one commit, a `write` of the checkpoint's record, `delete`s of the
 * files of the previous checkpoint, and a `snapshot` entry: the tree of each snapshot is the
 * thread at that checkpoint (its record; the root namespace's too when it is in a subgraph),
 * so `noa snapshots` lists the graph's steps and `noa fork` starts a new thread at one. The
 * history itself is the log: every record and writes file ever written is named by a `write`
 * entry, and that is what the saver reads (a fork also reads its base's log up to the fork).
 *
 * What the saver reads later must also be in some snapshot's tree, because `noa gc` keeps only
 * what trees and the writes after a workspace's head name: so a large value nested in a record
 * is a file of its own (`values/`) beside each record naming it, and a put keeps the writes
 * files made since the last snapshot (they are then in its tree) and deletes them at the next.
 */
import { fromSegment, toSegment } from '../adapters/names.js'
import { isStoredValue, type StoredValue } from '../adapters/values.js'
import { Errors, type NoaError } from '../engine/errors.js'

export const THREAD_FILE = 'thread'
export const VALUES_DIR = 'values'
export const DELETED_FILE = 'deleted'
export const CHECKPOINT_FORMAT = 'noa-langgraph-checkpoint 1'
export const WRITES_FORMAT = 'noa-langgraph-writes 1'
export const DELETED_FORMAT = 'noa-langgraph-deleted 1'

export function checkpointPath(ns: string, id: string): string {
  return ns === '' ? `checkpoints/${toSegment(id)}` : `checkpoints/${toSegment(ns)}/${toSegment(id)}`
}

export function writesPath(ns: string, id: string, task: string): string {
  const base = ns === '' ? `writes/${toSegment(id)}` : `writes/${toSegment(ns)}/${toSegment(id)}`
  return `${base}/${toSegment(task)}`
}

export function valuePath(blob: string): string {
  return `${VALUES_DIR}/${blob}`
}

export type ThreadPath =
  | { kind: 'checkpoint'; ns: string; id: string }
  | { kind: 'writes'; ns: string; id: string; task: string }
  | { kind: 'value'; blob: string }
  | { kind: 'thread' }
  | { kind: 'deleted' }

const VALUE_PATH = /^values\/([0-9a-f]{64})$/

/**
 * Paths parsed lately: a saver parses the same few paths of a thread's tree at every step (its
 * entries, then each file of the tree at the next put). Cleared when full.
 */
const parsed = new Map<string, Readonly<ThreadPath> | null>()
const PARSED_MAX = 8192

/** What a path of a thread's tree holds, or null for a file the saver does not own. */
export function parsePath(path: string): Readonly<ThreadPath> | null {
  let p = parsed.get(path)
  if (p === undefined) {
    if (parsed.size >= PARSED_MAX) parsed.clear()
    p = parseUncached(path)
    parsed.set(path, p)
  }
  return p
}

function parseUncached(path: string): ThreadPath | null {
  if (path === THREAD_FILE) return { kind: 'thread' }
  if (path === DELETED_FILE) return { kind: 'deleted' }
  const value = VALUE_PATH.exec(path)
  if (value) return { kind: 'value', blob: value[1] as string }
  const parts = path.split('/')
  const segs = parts.slice(1).map(fromSegment)
  if (segs.some((s) => s === null)) return null
  const s = segs as string[]
  if (parts[0] === 'checkpoints') {
    if (s.length === 1) return { kind: 'checkpoint', ns: '', id: s[0] as string }
    if (s.length === 2 && s[0] !== '') return { kind: 'checkpoint', ns: s[0] as string, id: s[1] as string }
  } else if (parts[0] === 'writes') {
    if (s.length === 2) return { kind: 'writes', ns: '', id: s[0] as string, task: s[1] as string }
    if (s.length === 3 && s[0] !== '') {
      return { kind: 'writes', ns: s[0] as string, id: s[1] as string, task: s[2] as string }
    }
  }
  return null
}

/** A checkpoint as stored: the serialized checkpoint without its channel values, which follow. */
export interface CheckpointRecord {
  format: typeof CHECKPOINT_FORMAT
  checkpoint_ns: string
  checkpoint_id: string
  parent_checkpoint_id?: string
  checkpoint: StoredValue
  metadata: StoredValue
  /** Every channel that has a value at this checkpoint (new in it, or carried over). */
  channels: Record<string, StoredChannel>
}

/** A channel's value at a checkpoint, with the version it has there. */
export interface StoredChannel {
  version: number | string
  value: StoredValue
}

export interface StoredWrite {
  idx: number
  channel: string
  value: StoredValue
}

/** One task's pending writes against one checkpoint. */
export interface WritesRecord {
  format: typeof WRITES_FORMAT
  checkpoint_ns: string
  checkpoint_id: string
  task_id: string
  task_path: string
  writes: StoredWrite[]
}

/** The blobs of the large values a record names (each is a `values/` file beside it). */
export function valueBlobs(record: CheckpointRecord | WritesRecord): string[] {
  const values: StoredValue[] =
    'writes' in record
      ? record.writes.map((w) => w.value)
      : [record.checkpoint, record.metadata, ...Object.values(record.channels).map((c) => c.value)]
  const out: string[] = []
  for (const v of values) if ('blob' in v) out.push(v.blob)
  return out
}

export function encodeRecord(record: CheckpointRecord | WritesRecord | Record<string, unknown>): Buffer {
  return Buffer.from(`${JSON.stringify(record)}\n`, 'utf8')
}

function corrupt(what: string, blob: string, why: string): NoaError {
  return Errors.CORRUPT_OBJECT(`${what} ${blob} is not a ${why}`, { object: blob })
}

function parseJson(bytes: Buffer, what: string, blob: string): Record<string, unknown> {
  let o: unknown
  try {
    o = JSON.parse(bytes.toString('utf8'))
  } catch {
    throw corrupt(what, blob, 'JSON record')
  }
  if (typeof o !== 'object' || o === null || Array.isArray(o)) throw corrupt(what, blob, 'JSON object')
  return o as Record<string, unknown>
}

export function parseCheckpointRecord(bytes: Buffer, blob: string): CheckpointRecord {
  const o = parseJson(bytes, 'checkpoint record', blob)
  const channels = o.channels
  if (
    o.format !== CHECKPOINT_FORMAT ||
    typeof o.checkpoint_ns !== 'string' ||
    typeof o.checkpoint_id !== 'string' ||
    (o.parent_checkpoint_id !== undefined && typeof o.parent_checkpoint_id !== 'string') ||
    !isStoredValue(o.checkpoint) ||
    !isStoredValue(o.metadata) ||
    typeof channels !== 'object' ||
    channels === null ||
    Object.values(channels).some(
      (c) =>
        typeof c !== 'object' ||
        c === null ||
        (typeof c.version !== 'number' && typeof c.version !== 'string') ||
        !isStoredValue(c.value),
    )
  ) {
    throw corrupt('checkpoint record', blob, `"${CHECKPOINT_FORMAT}" record`)
  }
  return o as unknown as CheckpointRecord
}

export function parseWritesRecord(bytes: Buffer, blob: string): WritesRecord {
  const o = parseJson(bytes, 'writes record', blob)
  if (
    o.format !== WRITES_FORMAT ||
    typeof o.task_id !== 'string' ||
    typeof o.task_path !== 'string' ||
    !Array.isArray(o.writes) ||
    o.writes.some(
      (w: unknown) =>
        typeof w !== 'object' ||
        w === null ||
        !Number.isSafeInteger((w as StoredWrite).idx) ||
        typeof (w as StoredWrite).channel !== 'string' ||
        !isStoredValue((w as StoredWrite).value),
    )
  ) {
    throw corrupt('writes record', blob, `"${WRITES_FORMAT}" record`)
  }
  return o as unknown as WritesRecord
}
