/**
 * `noa replicate status`: per workspace, how far the local log and the stream are apart, in
 * entries and in seconds. The seconds are the age of the oldest entry that has not crossed yet
 * (now minus its ts, which the origin's clock assigned): 0 when both sides hold the same last
 * seq.
 *
 * With a server, the stream's side is read from it (the last message of each workspace
 * subject). Without one, the push checkpoint stands in for it: what the publisher had
 * acknowledged when it last saved (at most about a second old while `push --follow` runs).
 */
import { closeSync } from 'node:fs'
import { nowMicros } from '../engine/clock.js'
import { Errors, isNoaError, NoaError } from '../engine/errors.js'
import { checkRoot, openFileSync, READ } from '../engine/files.js'
import { logPath, resolveRoot, scanLogDir } from '../engine/logs.js'
import { inspectTail } from '../engine/recovery.js'
import { loadCheckpoint } from './checkpoint.js'
import { asNoaError } from './failures.js'
import {
  decodeStored,
  divergedError,
  examine,
  findStreamEntry,
  type SubjectTail,
  subjectTail,
} from './history.js'
import { countersOf, lineAtSeq } from './lines.js'
import { closeLink, type Link, type NatsTarget, openLink } from './link.js'
import { nextOnSubject, resolveStream } from './stream.js'
import {
  checkPrefix,
  DEFAULT_PREFIX,
  isSubjectSafe,
  parseSubject,
  wildcardOf,
  workspaceSubject,
} from './subjects.js'
import { fencedOn, ownedOn } from './writers.js'

export interface StatusOptions {
  root?: string
  prefix?: string
  stream?: string
  /** Server URL(s) or a connection; without it, status comes from the checkpoints. */
  nats?: NatsTarget
}

export interface Position {
  seq: number
  /** ts of that entry, unix µs (0 when seq is 0). */
  ts: number
}

/** diverged: a writer took the workspace over and this log holds entries the stream does not (see `diverged`). */
export type Direction = 'in-sync' | 'push' | 'pull' | 'unknown' | 'diverged'

export interface WorkspaceReplication {
  workspace: string
  /** Last entry of the local log (seq 0: none). */
  local: Position
  /** Last entry of the workspace in the stream (or as the push checkpoint last saw it); null: unknown. */
  stream: Position | null
  /** push: the local log is ahead; pull: the stream is ahead. */
  direction: Direction
  lagEntries: number | null
  /** Age of the oldest entry not yet on the other side, in seconds (null: unknown). */
  lagSeconds: number | null
  /** false for names that cannot be a subject (`a..b`, `a.`): never replicated. */
  replicable: boolean
  /** Why the local log could not be read (its position is then unknown: seq 0, direction unknown). */
  error?: { file: string; code: string; message: string }
  /**
   * NOA_REPLICA_DIVERGED (from the server's view only): another writer fenced this root, and
   * these local seqs are not in the stream (`noa replicate resync` moves them aside).
   */
  diverged?: { code: 'NOA_REPLICA_DIVERGED'; message: string; seqs: number[] }
}

/** A local log whose position could not be read. */
export interface StatusFailure {
  workspace?: string
  file: string
  code: string
  message: string
}

export interface ReplicationStatus {
  prefix: string
  stream: string | null
  source: 'server' | 'checkpoint'
  at: string
  workspaces: WorkspaceReplication[]
  push: { savedAt: string } | null
  pull: { savedAt: string; streamSeq: number; pending: number } | null
  /** Logs that could not be read (corrupt, unreadable, not regular files), each by file. */
  failed: StatusFailure[]
}

/** The last entry of the local log: seq 0 when there is none, an error when it cannot be read. */
function localPosition(root: string, ws: string): Position | { error: StatusFailure } {
  const file = logPath(root, ws)
  let fd: number
  try {
    fd = openFileSync(file, READ, { what: 'workspace log' })
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { seq: 0, ts: 0 }
    return { error: failureOf(err, file, ws) }
  }
  try {
    const tail = inspectTail(fd)
    return tail.lastLine === null ? { seq: 0, ts: 0 } : countersOf(Buffer.from(tail.lastLine, 'utf8'))
  } catch (err) {
    const e = err instanceof NoaError ? err : null
    const message = e ? `${file}: ${e.message}` : (err as Error).message
    return { error: { ...failureOf(err, file, ws), message } }
  } finally {
    closeSync(fd)
  }
}

function failureOf(err: unknown, file: string, workspace: string): StatusFailure {
  const e = err as { code?: unknown; message?: unknown }
  return {
    workspace,
    file,
    code: typeof e?.code === 'string' ? e.code : 'ERROR',
    message: typeof e?.message === 'string' ? e.message : String(err),
  }
}

function byFile<T extends { file: string }>(list: T[]): T[] {
  return list.sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : 0))
}

function failuresOf(workspaces: readonly WorkspaceReplication[]): StatusFailure[] {
  const out: StatusFailure[] = []
  for (const w of workspaces) if (w.error) out.push({ workspace: w.workspace, ...w.error })
  return out
}

function ageSeconds(ts: number, now: number): number {
  return Math.max(0, (now - ts) / 1e6)
}

/** Lag of one workspace, given both sides; `nextStreamTs` finds the ts of a stream entry. */
async function lagOf(
  root: string,
  ws: string,
  position: Position | { error: StatusFailure },
  stream: Position | null,
  nextStreamTs: ((seq: number) => Promise<number | null>) | null,
  now: number,
): Promise<WorkspaceReplication> {
  const replicable = isSubjectSafe(ws)
  if ('error' in position) {
    const { file, code, message } = position.error
    return {
      workspace: ws,
      local: { seq: 0, ts: 0 },
      stream,
      replicable,
      direction: 'unknown',
      lagEntries: null,
      lagSeconds: null,
      error: { file, code, message },
    }
  }
  const local = position
  const base = { workspace: ws, local, stream, replicable }
  if (stream === null) return { ...base, direction: 'unknown', lagEntries: null, lagSeconds: null }
  if (local.seq === stream.seq) return { ...base, direction: 'in-sync', lagEntries: 0, lagSeconds: 0 }
  if (local.seq > stream.seq) {
    const file = logPath(root, ws)
    let line: Buffer | null
    try {
      line = await lineAtSeq(file, stream.seq + 1)
    } catch (err) {
      // The last line read fine but an earlier one does not: the lag in seconds is unknown.
      return {
        ...base,
        direction: 'push',
        lagEntries: local.seq - stream.seq,
        lagSeconds: null,
        error: failureOf(err, file, ws),
      }
    }
    return {
      ...base,
      direction: 'push',
      lagEntries: local.seq - stream.seq,
      lagSeconds: line === null ? null : ageSeconds(countersOf(line).ts, now),
    }
  }
  const ts = nextStreamTs ? await nextStreamTs(local.seq + 1) : null
  return {
    ...base,
    direction: 'pull',
    lagEntries: stream.seq - local.seq,
    lagSeconds: ts === null ? null : ageSeconds(ts, now),
  }
}

async function mapLimited<T, R>(items: T[], limit: number, fn: (t: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length)
  let next = 0
  const worker = async () => {
    while (next < items.length) {
      const i = next++
      out[i] = await fn(items[i] as T)
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker))
  return out
}

export function replicationStatus(options: StatusOptions = {}): Promise<ReplicationStatus> {
  return asNoaError('status', () => statusNow(options))
}

async function statusNow(options: StatusOptions): Promise<ReplicationStatus> {
  if (typeof options !== 'object' || options === null) {
    throw Errors.BAD_OPTION('status options must be an object', { field: 'options' })
  }
  const prefix = checkPrefix(options.prefix ?? DEFAULT_PREFIX)
  const root = resolveRoot(options.root)
  checkRoot(root, true)
  const pushCp = loadCheckpoint(root, 'push', prefix)
  const pullCp = loadCheckpoint(root, 'pull', prefix)
  const push = pushCp ? { savedAt: pushCp.savedAt } : null
  const pull = pullCp
    ? { savedAt: pullCp.savedAt, streamSeq: pullCp.streamSeq, pending: pullCp.pending }
    : null
  const at = new Date().toISOString()
  const now = nowMicros()
  const scan = scanLogDir(root)
  const local = scan.workspaces
  const unusable = scan.problems.filter((p) => p.code !== 'NOA_BAD_WORKSPACE')

  if (options.nats === undefined) {
    const names = [...new Set([...local, ...Object.keys(pushCp?.workspaces ?? {})])].sort()
    const workspaces = await mapLimited(names, 16, (ws) => {
      const p = pushCp?.workspaces[ws]
      const stream = pushCp ? (p ? { seq: p.seq, ts: p.ts } : { seq: 0, ts: 0 }) : null
      return lagOf(root, ws, localPosition(root, ws), stream, null, now)
    })
    return {
      prefix,
      stream: pushCp?.stream ?? pullCp?.stream ?? null,
      source: 'checkpoint',
      at,
      workspaces,
      push,
      pull,
      failed: byFile([...unusable, ...failuresOf(workspaces)]),
    }
  }

  const link: Link = await openLink(options.nats, { name: `noa status ${root}` })
  try {
    const ref = await resolveStream(link, prefix, options.stream)
    const info = await link.jsm.streams.info(ref.name, { subjects_filter: wildcardOf(prefix) })
    const inStream = new Set<string>()
    for (const subject of Object.keys(info.state.subjects ?? {})) {
      const kind = parseSubject(prefix, subject)
      if (kind?.kind === 'workspace') inStream.add(kind.workspace)
    }
    const names = [...new Set([...local, ...inStream])].sort()
    const owned = ownedOn(root, prefix, ref)
    const fenced = fencedOn(root, prefix, ref)
    const workspaces = await mapLimited(names, 16, async (ws) => {
      const subject = workspaceSubject(prefix, ws)
      let stream: Position = { seq: 0, ts: 0 }
      let lastStreamSeq = 0
      let tail: SubjectTail | null = null
      if (inStream.has(ws)) {
        tail = await subjectTail(link, ref.name, subject, ws)
        if (tail?.entry) stream = { seq: tail.entry.seq, ts: tail.entry.ts }
        lastStreamSeq = tail?.lastStreamSeq ?? 0
      }
      const nextStreamTs = async (seq: number): Promise<number | null> => {
        // The pull checkpoint says where the mirror's last entry sits in the stream.
        const hint = pullCp?.workspaces[ws]
        if (hint && hint.seq === seq - 1 && hint.streamSeq > 0) {
          const m = await nextOnSubject(link, ref.name, subject, hint.streamSeq + 1)
          const d = m ? decodeStored(ws, m) : null
          if (d?.kind === 'entries' && d.first === seq) return countersOf(d.lines[0] as Buffer).ts
        }
        const e = await findStreamEntry(link, ref.name, subject, ws, seq, lastStreamSeq)
        return e ? e.ts : null
      }
      const position = localPosition(root, ws)
      const row = await lagOf(root, ws, position, isSubjectSafe(ws) ? stream : null, nextStreamTs, now)
      if (tail !== null && isSubjectSafe(ws) && !('error' in position) && position.seq > 0) {
        const before = fenced.get(ws)
        // A log that cannot be compared (corrupt before its tail) is shown by its tail alone.
        const ex = await examine(
          link,
          ref.name,
          subject,
          ws,
          logPath(root, ws),
          owned.get(ws)?.fenceStreamSeq ?? 0,
          undefined,
          before ? { writer: before.writer, after: before.after, streamSeq: before.streamSeq } : null,
        ).catch((err: unknown) => {
          if (isNoaError(err, 'NOA_REPLICATION')) throw err
          return null
        })
        if (ex !== null && ex.diverged.length > 0) {
          const err = divergedError(ws, subject, ex)
          row.direction = 'diverged'
          row.diverged = { code: 'NOA_REPLICA_DIVERGED', message: err.message, seqs: ex.diverged }
        }
      }
      return row
    })
    return {
      prefix,
      stream: ref.name,
      source: 'server',
      at,
      workspaces,
      push,
      pull,
      failed: byFile([...unusable, ...failuresOf(workspaces)]),
    }
  } finally {
    await closeLink(link)
  }
}
