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
import { countersOf, lineAtSeq, sameBytes } from './lines.js'
import { Aborted } from './link.js'
import { PublisherObjects } from './publisher-objects.js'
import { LogProblem, local, Stopped, type WorkspaceState } from './publisher-state.js'
import { findEntryOnSubject, lastOnSubject, messageAt, resolveStream } from './stream.js'
import { entryMsgId } from './subjects.js'

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
   * both have) must be byte-equal in the log and in the stream, or the two have diverged.
   */
  protected async reconcile(
    st: WorkspaceState,
    refused: { seq: number; expected: number } | null,
  ): Promise<void> {
    const last = await this.retry(`read the last message of ${st.subject}`, () =>
      lastOnSubject(this.link, this.ref.name, st.subject),
    )
    const why = refused
      ? `the server refused seq ${refused.seq} (expected last subject sequence ${refused.expected} is stale)`
      : null
    if (last === null) {
      st.pos = { seq: 0, ts: 0, offset: 0, streamSeq: 0 }
      st.junction = null
      st.reconciled = true
      return
    }
    let counters: { seq: number; ts: number }
    try {
      counters = countersOf(last.data)
    } catch (err) {
      throw replicationError(
        `workspace ${st.ws}: the last message on ${st.subject} (stream seq ${last.seq}) is not a log entry: ${(err as Error).message}`,
        { workspace: st.ws },
      )
    }
    const serverSeq = counters.seq
    const msgId = last.header?.get('Nats-Msg-Id')
    if (msgId !== entryMsgId(st.ws, serverSeq)) {
      throw replicationError(
        `workspace ${st.ws}: the last message on ${st.subject} (stream seq ${last.seq}) has Nats-Msg-Id ${JSON.stringify(msgId ?? '')}, not ${entryMsgId(st.ws, serverSeq)}: not written by noa`,
        { workspace: st.ws },
      )
    }
    const localLast = await local(() => this.localLastSeq(st))
    const junction = Math.min(localLast, serverSeq)
    const base = await local(() => baseOf(st.file))
    if (base !== null && junction < base.seq) throw new LogProblem(this.behindBase(st, base, serverSeq))
    if (junction > 0 && base?.seq !== junction) {
      // (At the base's own seq the stream may hold the entry it stands for: that is no divergence.)
      const mine = await local(() => lineAtSeq(st.file, junction))
      const remote =
        junction === serverSeq ? last.data : ((await this.findEntry(st, junction, last.seq))?.data ?? null)
      if (mine === null || remote === null || !sameBytes(mine, remote)) {
        throw this.diverged(
          st,
          junction,
          `${why ? `${why}; ` : ''}the stream's entry for seq ${junction} ${remote === null ? 'is missing' : 'differs from the local one'}`,
        )
      }
    }
    if (serverSeq <= localLast) {
      st.pos = {
        seq: serverSeq,
        ts: counters.ts,
        offset: await local(() => seekSeq(st.file, serverSeq + 1)),
        streamSeq: last.seq,
      }
      st.junction = null
    } else {
      // The stream is ahead of this log (a mirror copy, or entries not durable here yet).
      st.pos = {
        seq: serverSeq,
        ts: counters.ts,
        offset: await local(() => seekSeq(st.file, localLast + 1)),
        streamSeq: last.seq,
      }
      st.junction = { seq: serverSeq, data: Uint8Array.from(last.data) }
    }
    st.reconciled = true
    this.checkpointDirty = true
  }

  protected localLastSeq(st: WorkspaceState): number {
    return lastSeqOfLog(st.file)
  }

  protected findEntry(st: WorkspaceState, seq: number, hiStreamSeq: number) {
    return findEntryOnSubject(
      this.link,
      this.ref.name,
      st.subject,
      seq,
      hiStreamSeq,
      (data) => countersOf(data).seq,
      (what, fn) => this.retry(what, fn),
    )
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
      if (err instanceof NoaError) throw err
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
