/**
 * Exactly once, in order: one entry published with the previous message's stream sequence
 * expected and a duplicate acknowledgement checked against the stored message (publishEntry);
 * continuing after what the stream holds for a workspace, its junction entry byte-equal in both
 * (reconcile); a compacted log's base that the stream has not reached (behindBase); and the
 * error of a stream and log that disagree (diverged).
 */
import { closeSync } from 'node:fs'
import { type LogBase, readBase } from '../engine/base.js'
import { Errors, NoaError } from '../engine/errors.js'
import { openFileSync, READ } from '../engine/files.js'
import { seekSeq } from '../engine/reader.js'
import { inspectTail } from '../engine/recovery.js'
import {
  Backoff,
  describeError,
  isTransient,
  isWrongLastSequence,
  replicationError,
  sleep,
} from './failures.js'
import { divergedError, type Examined, examine, type StreamEntry } from './history.js'
import { countersOf, sameBytes } from './lines.js'
import { Aborted } from './link.js'
import { PublisherObjects } from './publisher-objects.js'
import { LogProblem, local, Stopped, type WorkspaceState } from './publisher-state.js'
import { messageAt, resolveStream } from './stream.js'
import { entryMsgId } from './subjects.js'
import { fencedOn, ownedOn } from './writers.js'

export abstract class PublisherExact extends PublisherObjects {
  protected async publishEntry(
    st: WorkspaceState,
    line: Buffer,
    seq: number,
    ts: number,
    lineEnd: number,
  ): Promise<'ok' | 'moved'> {
    await this.s.beforePublish?.(st.ws, seq)
    const backoff = new Backoff()
    let failures = 0
    for (;;) {
      if (this.signal.aborted) throw new Stopped()
      try {
        const ack = await this.link.guard(
          this.link.publish(st.subject, line, entryMsgId(st.ws, seq), st.pos.streamSeq),
          this.signal,
        )
        if (ack.duplicate) {
          // Acknowledged as a duplicate before the expected sequence was looked at: make sure
          // the stored message is this very entry.
          const stored = await this.link.guard(messageAt(this.link, this.ref.name, ack.seq), this.signal)
          if (!stored || stored.subject !== st.subject || !sameBytes(stored.data, line)) {
            throw this.diverged(
              st,
              seq,
              `the server took it as a duplicate of stream seq ${ack.seq} (same Nats-Msg-Id ${entryMsgId(st.ws, seq)}), which holds a different entry: another publisher has this workspace`,
            )
          }
        }
        const pos = st.pos
        pos.seq = seq
        pos.ts = ts
        pos.offset = lineEnd
        pos.streamSeq = ack.seq
        if (st.published) {
          st.published.to = seq
          st.published.entries++
        } else st.published = { from: seq, to: seq, entries: 1 }
        this.entries++
        this.s.onProgress?.({ entries: this.entries, objects: this.objectsSent })
        this.checkpointDirty = true
        return 'ok'
      } catch (err) {
        if (err instanceof NoaError || err instanceof Stopped) throw err
        if (err instanceof Aborted || this.signal.aborted) throw new Stopped()
        if (isWrongLastSequence(err)) {
          await this.reconcile(st, { seq, expected: st.pos.streamSeq })
          return 'moved'
        }
        if (!isTransient(err)) {
          throw replicationError(
            `workspace ${st.ws}: publishing seq ${seq} on ${st.subject} failed: ${describeError(err)}`,
            { workspace: st.ws, seq },
            err,
          )
        }
        failures++
        if (failures % 8 === 0) await this.checkStreamStillThere()
        const delayMs = backoff.next()
        this.s.onEvent?.({
          type: 'retry',
          what: `publish ${st.ws} seq ${seq}`,
          error: describeError(err),
          delayMs,
        })
        await sleep(delayMs, this.signal)
      }
    }
  }

  /**
   * Continues after what the stream holds for this workspace. The junction (the last entry
   * both have) must be byte-equal in the log and in the stream, or the two have diverged. The
   * subject's last message may be a fence (promote): the next publish expects the fence's stream
   * seq, but only a fence this root wrote lets it publish; after another's, its entries the
   * stream does not have are NOA_REPLICA_DIVERGED (the workspace stops, its log is untouched).
   */
  protected async reconcile(
    st: WorkspaceState,
    refused: { seq: number; expected: number } | null,
  ): Promise<void> {
    const ex = await this.examine(st)
    const why = refused
      ? `the server refused seq ${refused.seq} (expected last subject sequence ${refused.expected} is stale)`
      : null
    const tail = ex.tail
    if (tail === null) {
      st.pos = { seq: 0, ts: 0, offset: 0, streamSeq: 0 }
      st.junction = null
      st.fenced = false
      st.reconciled = true
      return
    }
    if (ex.diverged.length > 0) throw new LogProblem(divergedError(st.ws, st.subject, ex))
    const serverSeq = tail.entry?.seq ?? 0
    const localLast = ex.local
    const junction = Math.min(localLast, serverSeq)
    const base = await local(() => baseOf(st.file))
    if (base !== null && junction < base.seq) throw new LogProblem(this.behindBase(st, base, serverSeq))
    if (ex.mismatch) {
      throw this.diverged(
        st,
        junction,
        `${why ? `${why}; ` : ''}the stream's entry for seq ${junction} differs from the local one`,
      )
    }
    st.fenced = ex.fence !== null
    const at = { seq: serverSeq, ts: tail.entry?.ts ?? 0, streamSeq: tail.lastStreamSeq }
    if (serverSeq <= localLast) {
      st.pos = { ...at, offset: await local(() => seekSeq(st.file, serverSeq + 1)) }
      st.junction = null
    } else {
      // The stream is ahead of this log (a mirror copy, or entries not durable here yet).
      st.pos = { ...at, offset: await local(() => seekSeq(st.file, localLast + 1)) }
      st.junction = { seq: serverSeq, data: Uint8Array.from((tail.entry as StreamEntry).line) }
    }
    st.reconciled = true
    this.checkpointDirty = true
  }

  /** The log against its subject (history.ts); a failure to read the log is the workspace's own. */
  protected async examine(st: WorkspaceState): Promise<Examined> {
    const own = ownedOn(this.s.root, this.s.prefix, this.ref).get(st.ws)?.fenceStreamSeq ?? 0
    const before = fencedOn(this.s.root, this.s.prefix, this.ref).get(st.ws)
    try {
      return await examine(
        this.link,
        this.ref.name,
        st.subject,
        st.ws,
        st.file,
        own,
        (what, fn) => this.retry(what, fn),
        before ? { writer: before.writer, after: before.after, streamSeq: before.streamSeq } : null,
      )
    } catch (err) {
      if (err instanceof Stopped || err instanceof LogProblem || isTransient(err)) throw err
      // The stream's side failing stops the run; the log's own (corrupt, unreadable) its workspace.
      if (err instanceof NoaError && (err.code === 'NOA_REPLICATION' || err.code === 'NOA_STREAM_CONFIG'))
        throw err
      if (typeof (err as NodeJS.ErrnoException).code === 'string') throw new LogProblem(err)
      throw err
    }
  }

  /** NOA_REPLICA_DIVERGED for a fenced workspace whose log went on (the seqs read again). */
  protected async fencedError(st: WorkspaceState): Promise<LogProblem> {
    const ex = await this.examine(st)
    if (ex.fence !== null && ex.diverged.length > 0)
      return new LogProblem(divergedError(st.ws, st.subject, ex))
    return new LogProblem(
      this.diverged(st, ex.common + 1, 'another writer took the workspace over (a fence) before this entry'),
    )
  }

  protected localLastSeq(st: WorkspaceState): number {
    return lastSeqOfLog(st.file)
  }

  /** NOA_COMPACTED: the stream ends before this log's base, whose entries the log no longer has. */
  protected behindBase(st: WorkspaceState, base: LogBase, streamLast = st.pos.seq): NoaError {
    return Errors.COMPACTED(
      `workspace ${st.ws}: ${st.file} was compacted up to seq ${base.seq} (snapshot ${base.snapshotId}), but ${st.subject} ends at seq ${streamLast}: entries ${streamLast + 1}..${base.seq} are no longer in the log (push before compacting, or push to a new stream); nothing more was published`,
      {
        file: st.file,
        workspace: st.ws,
        baseSeq: base.seq,
        snapshotId: base.snapshotId,
        seq: streamLast + 1,
      },
    )
  }

  protected diverged(st: WorkspaceState, seq: number, why: string): NoaError {
    return replicationError(
      `workspace ${st.ws} (seq ${seq}): the stream and ${st.file} disagree: ${why}. Two publishers for one workspace, or a log that was rewritten; nothing more is published for it`,
      { workspace: st.ws, seq, subject: st.subject },
    )
  }

  protected async checkStreamStillThere(): Promise<void> {
    try {
      await resolveStream(this.link, this.s.prefix, this.ref.name)
    } catch (err) {
      // Only a stream that is gone or no longer fit stops the run: a timeout while the cluster
      // elects a leader comes back from resolveStream as NOA_REPLICATION, and is waited out.
      if (err instanceof NoaError && err.code === 'NOA_STREAM_CONFIG') throw err
    }
  }
}

/** The seq of a log's last complete line (0: empty or missing). Replicated acks read it too. */
export function lastSeqOfLog(file: string): number {
  let fd: number
  try {
    fd = openFileSync(file, READ, { what: 'workspace log' })
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 0
    throw err
  }
  try {
    const tail = inspectTail(fd)
    return tail.lastLine === null ? 0 : countersOf(Buffer.from(tail.lastLine, 'utf8')).seq
  } finally {
    closeSync(fd)
  }
}

/** A log's base record (engine/base.ts), or null (none, or the log is gone). */
export function baseOf(file: string): LogBase | null {
  try {
    return readBase(file)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
    throw err
  }
}
