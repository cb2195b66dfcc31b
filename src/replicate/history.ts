/**
 * Reading a workspace subject as issue 34's message contract has it (message.ts): a message
 * carries one or more entries, or a fence that carries none. The subject's last entry is then
 * the last entries-message's last line, while the stream sequence the next publish must expect
 * is the subject's last message, fence or not. Entries are found by binary search over stream
 * sequences (each message covers a range of seqs, a fence an empty one between two).
 *
 * `examine` compares a local log with its subject: the last seq both hold with the same bytes,
 * and whether a fence that this root did not write follows it, which makes the local seqs after
 * it divergent (NOA_REPLICA_DIVERGED): a fenced writer's entries.
 */
import { closeSync } from 'node:fs'
import type { StoredMsg } from '@nats-io/jetstream'
import { readBase } from '../engine/base.js'
import { Errors, type NoaError } from '../engine/errors.js'
import { openFileSync, READ } from '../engine/files.js'
import { inspectTail } from '../engine/recovery.js'
import { replicationError } from './failures.js'
import { countersOf, SeqCursor, sameBytes } from './lines.js'
import type { Link } from './link.js'
import { type DecodedMessage, decodeMessage } from './message.js'
import { lastOnSubject, nextOnSubject } from './stream.js'

export type Retry = <T>(what: string, fn: () => Promise<T>) => Promise<T>
const once: Retry = (_what, fn) => fn()

export type EntriesMessage = Extract<DecodedMessage, { kind: 'entries' }>
export interface Fence {
  writer: string
  after: number
  streamSeq: number
}

/** An entry as the stream holds it. */
export interface StreamEntry {
  seq: number
  ts: number
  line: Buffer
  /** Stream sequence of the message carrying it. */
  streamSeq: number
}

export interface SubjectTail {
  /** Stream sequence of the subject's last message: what the next publish must expect. */
  lastStreamSeq: number
  /** The subject's last entry (null: none yet). */
  entry: StreamEntry | null
  /** The subject's last message, when it is a fence. */
  fence: Fence | null
}

export function decodeStored(ws: string, m: StoredMsg): DecodedMessage {
  return decodeMessage(ws, m.seq, m.data, m.header)
}

export function entryIn(d: EntriesMessage, seq: number, streamSeq: number): StreamEntry {
  const line = d.lines[seq - d.first] as Buffer
  return { seq, ts: countersOf(line).ts, line, streamSeq }
}

/** The message on `subject` carrying entry `seq`, at stream seq ≤ `hi`, or null. */
export async function findMessage(
  link: Link,
  stream: string,
  subject: string,
  ws: string,
  seq: number,
  hi: number,
  retry: Retry = once,
): Promise<{ streamSeq: number; d: EntriesMessage } | null> {
  let lo = 1
  while (lo <= hi) {
    const mid = Math.floor((lo + hi) / 2)
    const m = await retry(`search ${subject}`, () => nextOnSubject(link, stream, subject, mid))
    if (m === null || m.seq > hi) {
      hi = mid - 1
      continue
    }
    const d = decodeStored(ws, m)
    // A fence sits between its `after` and the next seq: an empty range there.
    const first = d.kind === 'entries' ? d.first : d.after + 1
    const last = d.kind === 'entries' ? d.last : d.after
    if (d.kind === 'entries' && first <= seq && seq <= last) return { streamSeq: m.seq, d }
    if (last < seq) lo = m.seq + 1
    else hi = mid - 1
  }
  return null
}

/** The entry `seq` of a subject as the stream holds it, or null. */
export async function findStreamEntry(
  link: Link,
  stream: string,
  subject: string,
  ws: string,
  seq: number,
  hi: number,
  retry: Retry = once,
): Promise<StreamEntry | null> {
  const m = await findMessage(link, stream, subject, ws, seq, hi, retry)
  return m ? entryIn(m.d, seq, m.streamSeq) : null
}

/** The subject's last message and last entry (see SubjectTail), or null when it has none. */
/**
 * Whether a stored message is a racer: nats-server 2.9 can store two publishes made with the
 * same Nats-Expected-Last-Subject-Sequence on a clustered stream (nats-io/nats-server#4320),
 * which hosts of a shared workspace make, and a promote's fence with its old writer's last
 * publish. The first stored is the order's; a later one, whose expectation another message
 * answered before it, is not part of the order, and every reader skips it. One request.
 */
export async function isRacer(
  link: Link,
  stream: string,
  m: { seq: number; subject: string; header?: { get(name: string): string } | undefined },
  retry: Retry = once,
): Promise<boolean> {
  const raw = m.header?.get('Nats-Expected-Last-Subject-Sequence') ?? ''
  if (!/^\d+$/.test(raw)) return false
  const first = await retry(`read the message that answered stream seq ${raw}`, () =>
    nextOnSubject(link, stream, m.subject, Number(raw) + 1),
  )
  return first !== null && first.seq < m.seq
}

export async function subjectTail(
  link: Link,
  stream: string,
  subject: string,
  ws: string,
  retry: Retry = once,
): Promise<SubjectTail | null> {
  const last = await retry(`read the last message of ${subject}`, () => lastOnSubject(link, stream, subject))
  if (last === null) return null
  let d = decodeStored(ws, last)
  if (d.kind === 'fence' && (await isRacer(link, stream, last, retry))) {
    // A fence that lost its race with the old writer's publish (promote saw it and recorded
    // nothing): not part of the order. The tail is the last message before it that is.
    let prev: StoredMsg | null = null
    // From the message that answered the fence's expectation (the old writer's) on.
    for (let from = Number(last.header?.get('Nats-Expected-Last-Subject-Sequence')) + 1; ; ) {
      const m = await retry(`read ${subject}`, () => nextOnSubject(link, stream, subject, from))
      if (m === null || m.seq >= last.seq) break
      const md = decodeStored(ws, m)
      if (md.kind === 'entries' && !(await isRacer(link, stream, m, retry))) prev = m
      from = m.seq + 1
    }
    if (prev === null) return { lastStreamSeq: last.seq, entry: null, fence: null }
    d = decodeStored(ws, prev)
    if (d.kind === 'entries')
      return { lastStreamSeq: last.seq, entry: entryIn(d, d.last, prev.seq), fence: null }
  }
  if (d.kind === 'entries') {
    return { lastStreamSeq: last.seq, entry: entryIn(d, d.last, last.seq), fence: null }
  }
  const fence = { writer: d.writer, after: d.after, streamSeq: last.seq }
  if (d.after === 0) return { lastStreamSeq: last.seq, entry: null, fence }
  const entry = await findStreamEntry(link, stream, subject, ws, d.after, last.seq - 1, retry)
  if (entry === null) {
    throw replicationError(
      `workspace ${ws}: the fence at stream seq ${last.seq} follows entry ${d.after}, which ${subject} does not hold`,
      { workspace: ws, streamSeq: last.seq },
    )
  }
  return { lastStreamSeq: last.seq, entry, fence }
}

/** The last seq and ts of a local log (0 when it has none or does not exist). */
export function localLast(file: string): { seq: number; ts: number } {
  let fd: number
  try {
    fd = openFileSync(file, READ, { what: 'workspace log' })
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { seq: 0, ts: 0 }
    throw err
  }
  try {
    const tail = inspectTail(fd)
    return tail.lastLine === null ? { seq: 0, ts: 0 } : countersOf(Buffer.from(tail.lastLine, 'utf8'))
  } finally {
    closeSync(fd)
  }
}

export interface Examined {
  tail: SubjectTail | null
  /** The local log's last seq. */
  local: number
  /** The last seq that the local log and the stream hold with the same bytes (0: none). */
  common: number
  /** A fence this root did not write, right after the common entry (the last of a run of fences). */
  fence: Fence | null
  /** Local seqs the stream does not have, after a fence that is not this root's: a fenced writer's. */
  diverged: number[]
  /** The log and the stream disagree at `common + 1` with no fence between: two publishers. */
  mismatch: boolean
}

/**
 * Compares a local log with its subject (see the module comment). `ownFence` is the stream seq
 * of the fence this root published for the workspace (0: none): a fence of its own never
 * fences it; `fencedBy` one that fenced it before (a resync since made it a mirror). Assumes what the two share is a prefix (a log and its stream agree up to where
 * they part, and disagree after).
 */
export async function examine(
  link: Link,
  stream: string,
  subject: string,
  ws: string,
  file: string,
  ownFence: number,
  retry: Retry = once,
  /** The fence that ended this root's writing (resync): it still fences whatever the log gains. */
  fencedBy: Fence | null = null,
): Promise<Examined> {
  const tail = await subjectTail(link, stream, subject, ws, retry)
  // An empty subject: nothing to compare (the log is not even read).
  if (tail === null) return { tail, local: 0, common: 0, fence: null, diverged: [], mismatch: false }
  const local = localLast(file).seq
  const streamLast = tail.entry?.seq ?? 0
  const cursor = new SeqCursor(file)
  let base: number
  try {
    base = readBase(file)?.seq ?? 0
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
    base = 0
  }
  const same = async (seq: number): Promise<boolean> => {
    if (seq === 0 || seq < base) return true // before a compacted log's base: not kept here
    const mine = await cursor.lineAt(seq)
    const theirs =
      seq === streamLast
        ? tail.entry
        : await findStreamEntry(link, stream, subject, ws, seq, tail.lastStreamSeq, retry)
    if (mine === null || theirs === null) return false
    // At the base's own seq the stream may hold the entry it stands for.
    return seq === base || sameBytes(mine, theirs.line)
  }
  let common: number
  try {
    const j = Math.min(local, streamLast)
    if (await same(j)) common = j
    else {
      let lo = 0
      let hi = j
      while (hi - lo > 1) {
        const mid = Math.floor((lo + hi) / 2)
        if (await same(mid)) lo = mid
        else hi = mid
      }
      common = lo
    }
  } finally {
    await cursor.close()
  }
  // What follows the common entry on the subject: a fence (or a run of them), or entries.
  let next: StoredMsg | null = null
  if (common === 0 && streamLast > 0) {
    next = await retry(`read ${subject}`, () => nextOnSubject(link, stream, subject, 1))
  } else if (common > 0 && common < streamLast) {
    const at = await findMessage(link, stream, subject, ws, common, tail.lastStreamSeq, retry)
    // Parting inside a message is no fence's doing.
    if (at !== null && at.d.last === common) {
      next = await retry(`read ${subject}`, () => nextOnSubject(link, stream, subject, at.streamSeq + 1))
    }
  }
  let fence: Fence | null = common === streamLast ? tail.fence : null
  while (next !== null) {
    const d = decodeStored(ws, next)
    if (d.kind !== 'fence') break
    fence = { writer: d.writer, after: d.after, streamSeq: next.seq }
    const after = next.seq + 1
    next = await retry(`read ${subject}`, () => nextOnSubject(link, stream, subject, after))
  }
  if (fence !== null && fence.streamSeq === ownFence) fence = null
  if (fence === null && fencedBy !== null && fencedBy.streamSeq > ownFence) fence = fencedBy
  const diverged: number[] = []
  if (fence !== null) for (let s = common + 1; s <= local; s++) diverged.push(s)
  const mismatch = fence === null && common < Math.min(local, streamLast)
  return { tail, local, common, fence, diverged, mismatch }
}

export function divergedError(ws: string, subject: string, ex: Examined): NoaError {
  const seqs = ex.diverged
  const f = ex.fence as Fence
  const range = seqs.length === 1 ? `seq ${seqs[0]}` : `seqs ${seqs[0]}..${seqs[seqs.length - 1]}`
  return Errors.REPLICA_DIVERGED(
    `workspace ${ws}: writer ${f.writer} took it over (fence at stream seq ${f.streamSeq} on ${subject}, after seq ${f.after}); this log's ${range} are not in the stream and are not published. They are kept in the log: \`noa replicate resync ${ws}\` moves them aside and makes the log the stream's`,
    { workspace: ws, seqs, fence: f },
  )
}
