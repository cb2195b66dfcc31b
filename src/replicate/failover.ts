/**
 * Failover (`noa replicate promote` and `resync`, docs/replication.md "Failover").
 *
 * promote: a mirror takes over writing workspaces. For each, it first checks that its log holds
 * everything the stream holds (same last entry seq, same bytes there), else refuses and writes
 * nothing. Then it publishes a fence (message.ts) expecting the subject's last sequence it
 * checked: the old writer's next publish, which still expects the sequence before the fence, is
 * refused; and a write of the old writer that landed after the check makes the fence itself
 * refused, instead of fencing over an entry the mirror lacks. Last it records (writers.ts) that
 * this root writes the workspace: pull leaves it alone, push publishes its new entries after the
 * fence.
 *
 * resync: a fenced writer comes back to the stream's history. Its entries the stream does not
 * have are written aside, durably, into `<root>/replication/diverged/` before anything else
 * changes; the log is cut after the last entry it shares with the stream (as recovery cuts a
 * torn tail: under the log's lock, ftruncate then fdatasync); then the stream's entries after
 * it are appended through the engine, so the log is byte-equal to the stream's entries, and
 * this root mirrors the workspace.
 */
import { hostname } from 'node:os'
import { join } from 'node:path'
import { DeliverPolicy } from '@nats-io/jetstream'
import { AgentLog } from '../engine/agent-log.js'
import { mkdirDurable, writeFileAtomic } from '../engine/atomic.js'
import { isWorkspaceName } from '../engine/entry.js'
import { Errors, NoaError } from '../engine/errors.js'
import { checkRoot } from '../engine/files.js'
import { cutLogAfter, existingLog, logPath, recoverLog, resolveRoot } from '../engine/logs.js'
import { replicationDir } from './checkpoint.js'
import {
  asNoaError,
  Backoff,
  describeError,
  isTransient,
  isWrongLastSequence,
  replicationError,
  sleep,
} from './failures.js'
import { type Examined, examine, findMessage, isRacer, localLast, subjectTail } from './history.js'
import { SeqCursor, sameBytes } from './lines.js'
import { checkKnownOptions, closeLink, type Link, type NatsTarget, openLink } from './link.js'
import { decodeMessage, encodeFence, HDR_FENCE } from './message.js'
import { messageAt, resolveStream, type StreamRef } from './stream.js'
import { checkPrefix, DEFAULT_PREFIX, isSubjectSafe, workspaceSubject } from './subjects.js'
import { fencedOn, ownedOn, recordWriter } from './writers.js'

export interface PromoteOptions {
  nats: NatsTarget
  /** The mirror's root (default `$NOA_ROOT` or `./.noa`). */
  root?: string
  prefix?: string
  stream?: string
  workspaces: readonly string[]
  /** The id the fence names (default: this host's name). */
  writer?: string
  /** Test seam: awaited after every workspace is checked, before its fence is published. */
  beforeFence?: (workspace: string) => Promise<void> | void
}

export interface PromotedWorkspace {
  workspace: string
  writer: string
  /** The last entry seq before the fence. */
  after: number
  /** The fence's stream sequence: this root's first publish expects it. */
  fenceStreamSeq: number
  /** This root already wrote it (promoted before): nothing was published. */
  already: boolean
}

export interface PromoteReport {
  stream: string
  prefix: string
  writer: string
  workspaces: PromotedWorkspace[]
  durationMs: number
}

export interface ResyncOptions {
  nats: NatsTarget
  root?: string
  prefix?: string
  stream?: string
  workspaces: readonly string[]
}

export interface ResyncedWorkspace {
  workspace: string
  /**
   * The local entries the stream did not have, now in `file` (not in the log any more); none
   * (file '') when this run finished a resync that a crash cut short after the cut.
   */
  kept: { file: string; seqs: number[] }
  /** The last seq the log and the stream shared: the log was cut after it. */
  common: number
  /** Entries of the stream appended after it. */
  applied: number
  /** The log's last seq now (the stream's last entry). */
  last: number
}

export interface ResyncReport {
  stream: string
  prefix: string
  workspaces: ResyncedWorkspace[]
  durationMs: number
}

const PROMOTE_KEYS = new Set(['nats', 'root', 'prefix', 'stream', 'workspaces', 'writer', 'beforeFence'])
const RESYNC_KEYS = new Set(['nats', 'root', 'prefix', 'stream', 'workspaces'])
const WRITER_RE = /^[A-Za-z0-9_.-]{1,128}$/
/** A promote's attempts at a publish that fails for a transient reason (connection, timeout). */
const ATTEMPTS = 10
const APPLY_BATCH = 1000

/** This host's name as a writer id (characters a fence cannot carry are dropped). */
export function defaultWriter(): string {
  const name = hostname()
    .replace(/[^A-Za-z0-9_.-]/g, '')
    .slice(0, 128)
  return name === '' ? 'noa' : name
}

function checkWorkspaces(list: unknown, what: string): string[] {
  if (!Array.isArray(list) || list.length === 0) {
    throw Errors.BAD_OPTION(`${what} needs workspaces: a non-empty array of workspace names`, {
      field: 'workspaces',
    })
  }
  for (const ws of list) {
    if (!isWorkspaceName(ws)) {
      throw Errors.BAD_WORKSPACE(`${what}: ${JSON.stringify(ws)} is not a workspace name`, {
        field: 'workspaces',
      })
    }
    if (!isSubjectSafe(ws)) {
      throw Errors.BAD_WORKSPACE(
        `${what}: workspace ${ws} cannot be a subject (an empty token: ".." or a trailing "."), so it is never replicated`,
        { workspace: ws, field: 'workspaces' },
      )
    }
  }
  return [...new Set(list as string[])]
}

/** A mirror takes over writing workspaces (see the module comment). */
export function promote(options: PromoteOptions): Promise<PromoteReport> {
  return asNoaError('promote', () => promoteNow(options))
}

async function promoteNow(options: PromoteOptions): Promise<PromoteReport> {
  const started = performance.now()
  checkKnownOptions(options, PROMOTE_KEYS, 'promote')
  const prefix = checkPrefix(options.prefix ?? DEFAULT_PREFIX)
  const root = resolveRoot(options.root)
  const workspaces = checkWorkspaces(options.workspaces, 'promote')
  const writer = options.writer ?? defaultWriter()
  if (typeof writer !== 'string' || !WRITER_RE.test(writer)) {
    throw Errors.BAD_OPTION(
      `option writer must be 1 to 128 letters, digits, _ . or -, got ${JSON.stringify(writer)}`,
      { field: 'writer' },
    )
  }
  checkRoot(root, true)
  const link = await openLink(options.nats, { name: `noa promote ${root}` })
  try {
    const ref = await resolveStream(link, prefix, options.stream)
    const owned = ownedOn(root, prefix, ref)
    const out: PromotedWorkspace[] = []
    const plans: Array<{ ws: string; subject: string; after: number; expect: number; fenced: number }> = []
    // Every workspace is checked before any fence is published: a refusal writes nothing.
    for (const ws of workspaces) {
      const subject = workspaceSubject(prefix, ws)
      const mine = owned.get(ws)
      if (mine) {
        out.push({
          workspace: ws,
          writer: mine.writer,
          after: mine.after,
          fenceStreamSeq: mine.fenceStreamSeq,
          already: true,
        })
        continue
      }
      const tail = await subjectTail(link, ref.name, subject, ws)
      const file = logPath(root, ws)
      const local = localLast(file).seq
      const streamSeq = tail?.entry?.seq ?? 0
      if (tail === null && local === 0) {
        throw replicationError(
          `workspace ${ws}: neither ${root} nor ${subject} holds it; nothing to take over`,
          {
            workspace: ws,
          },
        )
      }
      if (local < streamSeq) {
        throw replicationError(
          `workspace ${ws}: mirror is behind: local seq ${local}, stream seq ${streamSeq}; run noa replicate pull first`,
          { workspace: ws, localSeq: local, streamSeq },
        )
      }
      if (local > streamSeq) {
        throw replicationError(
          `workspace ${ws}: this log is ahead of the stream (local seq ${local}, stream seq ${streamSeq}): its entries after seq ${streamSeq} were never replicated, so ${root} is not a mirror of it; nothing was fenced`,
          { workspace: ws, localSeq: local, streamSeq },
        )
      }
      if (tail?.entry) {
        const cursor = new SeqCursor(file)
        const line = await cursor.lineAt(streamSeq).finally(() => cursor.close())
        if (line === null || !sameBytes(line, tail.entry.line)) {
          throw replicationError(
            `workspace ${ws}: the local entry seq ${streamSeq} differs from the stream's (stream seq ${tail.entry.streamSeq}): this log is not a mirror of it; nothing was fenced`,
            { workspace: ws, seq: streamSeq },
          )
        }
      }
      // Already fenced by an earlier promote of this writer that could not record it: only the
      // record is written, below.
      const done = tail?.fence && tail.fence.writer === writer && tail.fence.after === local
      plans.push({
        ws,
        subject,
        after: local,
        expect: tail?.lastStreamSeq ?? 0,
        fenced: done ? (tail?.fence?.streamSeq ?? 0) : 0,
      })
    }
    for (const p of plans) {
      let fenceStreamSeq = p.fenced
      if (fenceStreamSeq === 0) {
        await options.beforeFence?.(p.ws)
        fenceStreamSeq = await publishFence(link, ref, p, writer, out)
      }
      recordWriter(root, prefix, ref, p.ws, {
        writer,
        after: p.after,
        fenceStreamSeq,
        promotedAt: new Date().toISOString(),
      })
      out.push({ workspace: p.ws, writer, after: p.after, fenceStreamSeq, already: p.fenced !== 0 })
    }
    return { stream: ref.name, prefix, writer, workspaces: out, durationMs: performance.now() - started }
  } finally {
    await closeLink(link)
  }
}

async function publishFence(
  link: Link,
  ref: StreamRef,
  p: { ws: string; subject: string; after: number; expect: number },
  writer: string,
  done: readonly PromotedWorkspace[],
): Promise<number> {
  const fence = encodeFence(p.ws, p.after, writer)
  const backoff = new Backoff()
  for (let attempt = 1; ; attempt++) {
    try {
      const ack = await link.guard(
        link.publish(p.subject, fence.data, fence.msgId, p.expect, { [HDR_FENCE]: writer }),
      )
      if (ack.duplicate) {
        // The same id: this very fence, published by a retry whose first ack was lost.
        const stored = await link.guard(messageAt(link, ref.name, ack.seq))
        if (!stored || stored.subject !== p.subject || stored.header?.get('Nats-Msg-Id') !== fence.msgId)
          throw replicationError(
            `workspace ${p.ws}: the fence was taken as a duplicate of stream seq ${ack.seq}, which is another message`,
            { workspace: p.ws },
          )
      }
      // nats-server 2.9 may have stored the old writer's publish, made with the same
      // expectation, before this fence (nats-io/nats-server#4320): then the fence is a racer,
      // skipped by every reader, and the old writer still writes.
      if (
        !ack.duplicate &&
        (await isRacer(link, ref.name, {
          seq: ack.seq,
          subject: p.subject,
          header: {
            get: (n: string) => (n === 'Nats-Expected-Last-Subject-Sequence' ? String(p.expect) : ''),
          },
        }))
      ) {
        const fenced = done.filter((d) => !d.already).map((d) => d.workspace)
        throw replicationError(
          `workspace ${p.ws}: the old writer published at the same moment as the fence and the stream took its message first (stream seq ${ack.seq}, the fence, is void: every reader skips it); nothing was recorded for it${fenced.length > 0 ? ` (already fenced and recorded: ${fenced.join(', ')})` : ''}; run noa replicate pull, then promote again`,
          { workspace: p.ws, expected: p.expect, fenced },
        )
      }
      return ack.seq
    } catch (err) {
      if (err instanceof NoaError) throw err
      if (isWrongLastSequence(err)) {
        // Our own fence, stored by an attempt whose ack was lost (outside the duplicate window)?
        const tail = await subjectTail(link, ref.name, p.subject, p.ws).catch(() => null)
        if (tail?.fence && tail.fence.writer === writer && tail.fence.after === p.after)
          return tail.fence.streamSeq
        const fenced = done.filter((d) => !d.already).map((d) => d.workspace)
        throw replicationError(
          `workspace ${p.ws}: the stream moved while it was being promoted (its last message is no longer stream seq ${p.expect}: the old writer published meanwhile); nothing was fenced for it${fenced.length > 0 ? ` (already fenced and recorded: ${fenced.join(', ')})` : ''}; run noa replicate pull, then promote again`,
          { workspace: p.ws, expected: p.expect, fenced },
        )
      }
      if (!isTransient(err) || attempt >= ATTEMPTS) {
        throw replicationError(
          `workspace ${p.ws}: publishing its fence failed: ${describeError(err)}`,
          { workspace: p.ws },
          err,
        )
      }
      await sleep(backoff.next())
    }
  }
}

/** A fenced writer comes back to the stream's history (see the module comment). */
export function resync(options: ResyncOptions): Promise<ResyncReport> {
  return asNoaError('resync', () => resyncNow(options))
}

async function resyncNow(options: ResyncOptions): Promise<ResyncReport> {
  const started = performance.now()
  checkKnownOptions(options, RESYNC_KEYS, 'resync')
  const prefix = checkPrefix(options.prefix ?? DEFAULT_PREFIX)
  const root = resolveRoot(options.root)
  const workspaces = checkWorkspaces(options.workspaces, 'resync')
  checkRoot(root, true)
  for (const ws of workspaces) existingLog(root, ws) // a workspace with no log here cannot have diverged
  const link = await openLink(options.nats, { name: `noa resync ${root}` })
  try {
    const ref = await resolveStream(link, prefix, options.stream)
    const owned = ownedOn(root, prefix, ref)
    const fenced = fencedOn(root, prefix, ref)
    const look = (ws: string) => {
      const before = fenced.get(ws)
      return examine(
        link,
        ref.name,
        workspaceSubject(prefix, ws),
        ws,
        logPath(root, ws),
        owned.get(ws)?.fenceStreamSeq ?? 0,
        undefined,
        before ? { writer: before.writer, after: before.after, streamSeq: before.streamSeq } : null,
      )
    }
    // A resync cut short after the cut (a crash): the log is a prefix of the stream's, behind it,
    // and the fence is recorded; what is left is to append the stream's entries.
    const resumable = (ws: string, ex: Examined) =>
      ex.diverged.length === 0 &&
      fenced.has(ws) &&
      ex.fence !== null &&
      ex.common === ex.local &&
      ex.local < (ex.tail?.entry?.seq ?? 0)
    // Every workspace is checked before anything is written: one that did not diverge is refused.
    for (const ws of workspaces) {
      const ex = await look(ws)
      if (ex.diverged.length === 0 && !resumable(ws, ex)) {
        throw replicationError(
          `workspace ${ws} did not diverge: ${notDiverged(ex)}; nothing to resync${ex.local < (ex.tail?.entry?.seq ?? 0) ? ' (noa replicate pull brings it up to date)' : ''}`,
          { workspace: ws },
        )
      }
    }
    const out: ResyncedWorkspace[] = []
    for (const ws of workspaces) {
      // The log made whole first (a dead writer's journal replayed, a torn tail cut); refused
      // (NOA_WORKSPACE_LOCKED) while another process writes it.
      recoverLog(root, ws)
      const ex = await look(ws)
      let kept: ResyncedWorkspace['kept'] = { file: '', seqs: [] }
      if (ex.diverged.length > 0) {
        // In this order, each step durable before the next: a crash anywhere leaves the entries
        // in the log or in the kept file (or both), and a resync run again finishes the work.
        kept = await keepAside(root, ws, ex)
        // No longer this root's to write: its new entries stay fenced until it promotes again.
        const f = ex.fence as NonNullable<Examined['fence']>
        recordWriter(root, prefix, ref, ws, null, {
          writer: f.writer,
          after: f.after,
          streamSeq: f.streamSeq,
          resyncedAt: new Date().toISOString(),
        })
        cutLogAfter(root, ws, ex.common, ex.local)
      } else if (!resumable(ws, ex)) {
        throw replicationError(`workspace ${ws} did not diverge: ${notDiverged(ex)}`, { workspace: ws })
      }
      const applied = await applyAfter(link, ref, root, workspaceSubject(prefix, ws), ws, ex)
      out.push({
        workspace: ws,
        kept,
        common: ex.common,
        applied,
        last: localLast(logPath(root, ws)).seq,
      })
    }
    return { stream: ref.name, prefix, workspaces: out, durationMs: performance.now() - started }
  } finally {
    await closeLink(link)
  }
}

function notDiverged(ex: Examined): string {
  const streamSeq = ex.tail?.entry?.seq ?? 0
  if (ex.fence === null)
    return `no other writer's fence follows its last entry shared with the stream (local seq ${ex.local}, stream seq ${streamSeq})`
  return `this log holds nothing after seq ${ex.common}, where writer ${ex.fence.writer} took it over (local seq ${ex.local}, stream seq ${streamSeq})`
}

/**
 * Writes the divergent lines into `<root>/replication/diverged/<ws>.<time>.log`, durably
 * (temp, fsync, rename, folder fsync), before the log is touched.
 */
async function keepAside(root: string, ws: string, ex: Examined): Promise<{ file: string; seqs: number[] }> {
  const cursor = new SeqCursor(logPath(root, ws))
  const lines: Buffer[] = []
  try {
    for (const seq of ex.diverged) {
      const line = await cursor.lineAt(seq)
      if (line === null)
        throw replicationError(
          `workspace ${ws}: entry ${seq} could not be read back from its log; nothing was changed`,
          { workspace: ws, seq },
        )
      lines.push(line, Buffer.from('\n'))
    }
  } finally {
    await cursor.close()
  }
  const dir = join(replicationDir(root), 'diverged')
  mkdirDurable(root, dir)
  const stamp = new Date().toISOString().replace(/[:.]/g, '-')
  const file = join(dir, `${ws}.${stamp}.log`)
  writeFileAtomic(file, Buffer.concat(lines), { base: root, what: 'diverged entries' })
  return { file, seqs: ex.diverged }
}

/** Appends the stream's entries after `ex.common` (up to the subject's last message now). */
async function applyAfter(
  link: Link,
  ref: StreamRef,
  root: string,
  subj: string,
  ws: string,
  ex: Examined,
): Promise<number> {
  const tail = ex.tail
  if (tail === null || (tail.entry?.seq ?? 0) <= ex.common) return 0
  const from =
    ex.common === 0
      ? 1
      : ((await findMessage(link, ref.name, subj, ws, ex.common, tail.lastStreamSeq))?.streamSeq ?? 0) + 1
  const consumer = await link.js.consumers.get(ref.name, {
    filter_subjects: subj,
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: from,
  })
  const log = await AgentLog.open({ root, workers: 0 })
  let applied = 0
  try {
    let batch: string[] = []
    const flush = async () => {
      if (batch.length === 0) return
      await log.appendReplicated(ws, batch)
      applied += batch.length
      batch = []
    }
    const messages = await consumer.consume({ max_messages: APPLY_BATCH })
    try {
      for await (const m of messages) {
        const d = decodeMessage(ws, m.seq, m.data, m.headers)
        if (d.kind === 'entries') {
          for (let i = 0; i < d.lines.length; i++) {
            if (d.first + i > ex.common) batch.push((d.lines[i] as Buffer).toString('utf8'))
          }
        }
        if (batch.length >= APPLY_BATCH) await flush()
        if (m.seq >= tail.lastStreamSeq) break
      }
    } finally {
      messages.stop()
    }
    await flush()
  } finally {
    await log.close()
  }
  return applied
}
