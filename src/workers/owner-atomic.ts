/**
 * appendAtomic across owners: preparing this owner's parts, committing a batch's parts in one
 * journal frame, applying parts another owner committed, and aborting.
 */
import { Errors, serializeError, withPath } from '../engine/errors.js'
import { type FramePart, recordHeader, setRecord } from '../engine/journal-format.js'
import { SYNC_FDATASYNC } from '../engine/native.js'
import type { AbortMsg, ApplyMsg, AtomicCommitMsg, AtomicPart, PrepareMsg } from '../engine/protocol.js'
import { OwnerBatch } from './owner-batch.js'
import { type Atomic, type AtomicGroup, type Batch, EMPTY, type OwnedFile, type Req } from './owner-state.js'

export abstract class OwnerAtomic extends OwnerBatch {
  protected abstract wsFile(name: string): OwnedFile
  protected abstract enqueue(file: OwnedFile, req: Req): void

  protected prepare(msg: PrepareMsg): void {
    const a: Atomic = {
      replyId: msg.id,
      expected: msg.ws.length,
      prepared: [],
      state: 'preparing',
      syncing: 0,
      failed: false,
    }
    this.atomics.set(msg.batch, a)
    let b = 0
    for (let i = 0; i < msg.ws.length; i++) {
      const count = msg.counts[i] as number
      const bodies = msg.bodies.slice(b, b + count)
      b += count
      this.enqueue(this.wsFile(msg.ws[i] as string), { id: 0, bodies, count, atomic: msg.batch })
    }
  }

  /** A workspace's part is built and held: once all of this owner's are, the caller hears of them. */
  protected prepared(batch: Batch): void {
    const a = this.atomics.get(batch.atomic as number)
    if (a?.state !== 'preparing') {
      this.release(batch)
      return
    }
    a.prepared.push(batch)
    if (a.prepared.length < a.expected) return
    a.state = 'prepared'
    const parts: AtomicPart[] = a.prepared.map((p) => ({
      ws: p.file.key,
      ino: p.file.ino,
      offset: p.file.size,
      data: p.data,
      firstSeq: p.acks[1] as number,
      firstTs: p.acks[2] as number,
      count: p.reqs[0]?.count ?? 0,
    }))
    this.post({ t: 'reply', id: a.replyId, value: parts })
  }

  /** Gives a held part up: nothing was written, its seqs are free again. */
  protected release(batch: Batch): void {
    const file = batch.file
    if (file.inFlight === batch) file.inFlight = null
    if (file.queue.length > 0) this.markReady(file)
    else this.settled(file)
  }

  protected override atomicFailed(batch: number, err: unknown): void {
    const a = this.atomics.get(batch)
    if (!a || a.state === 'done' || a.state === 'failed') return
    const replying = a.state === 'preparing'
    // Dropped: parts of it still queued are skipped when built (their batch is unknown).
    this.atomics.delete(batch)
    a.state = 'failed'
    for (const p of a.prepared) this.release(p)
    a.prepared = []
    if (replying) this.post({ t: 'reply', id: a.replyId, error: serializeError(err) })
  }

  protected atomicCommit(msg: AtomicCommitMsg): void {
    const a = this.atomics.get(msg.batch)
    const j = this.journal
    if (a?.state !== 'prepared' || j === null || j.state === 'failed') {
      const err =
        a?.state !== 'prepared'
          ? Errors.JOURNAL(`atomic batch ${msg.batch} is not prepared here`)
          : j === null
            ? Errors.BAD_OPTION("appendAtomic needs the commit journal (durability: 'journal')", {
                field: 'durability',
              })
            : (j.error as Error)
      if (a) this.atomicFailed(msg.batch, err)
      this.post({ t: 'reply', id: msg.id, error: serializeError(err) })
      return
    }
    if (j.state === 'none') this.createJournal(j) // the group waits in pending until it is ready
    a.state = 'committing'
    const foreign: FramePart[] = msg.foreign.map((p) => ({
      header: setRecord(recordHeader(p.ws, p.ino), p.offset, p.data.length),
      data: Buffer.from(p.data.buffer, p.data.byteOffset, p.data.length),
    }))
    const group: AtomicGroup = {
      batch: msg.batch,
      replyId: msg.id,
      own: a.prepared,
      foreign,
      pin: foreign.length > 0 ? { syncedLsn: 0 } : null,
    }
    this.pending.push(group)
    this.startRound()
  }

  /** Another owner committed the batch: write the held parts, and make them durable after. */
  protected apply(msg: ApplyMsg): void {
    const a = this.atomics.get(msg.batch)
    if (a?.state !== 'prepared') {
      this.post({
        t: 'reply',
        id: msg.id,
        error: serializeError(Errors.JOURNAL(`atomic batch ${msg.batch} is not prepared here`)),
      })
      return
    }
    a.state = 'done'
    for (const batch of a.prepared) {
      const file = batch.file
      try {
        this.io.write(file.fd, batch.data)
      } catch (err) {
        // Committed in the other owner's journal: acknowledged, written again when reopened.
        file.foreign ??= []
        file.foreign.push({ offset: file.size, data: batch.data })
        a.failed = true
        this.committedUnwritten(batch, err as Error)
        continue
      }
      // The fdatasync is submitted before finish() settles the file: settling runs a release
      // waiting for it, which would close the descriptor first, and `applying` keeps the file
      // from counting as idle (released, evicted) until the sync is done.
      a.syncing++
      file.applying++
      this.submit({ kind: 'foreign', file, batch: msg.batch }, file.fd, EMPTY, SYNC_FDATASYNC)
      this.finish(batch, null)
    }
    this.post({ t: 'reply', id: msg.id, value: true })
    if (a.syncing === 0) {
      this.atomics.delete(msg.batch)
      this.post({ t: 'applied', batch: msg.batch, ok: false })
    }
  }

  protected override foreignSynced(file: OwnedFile, batch: number, err: Error | null): void {
    file.applying--
    const a = this.atomics.get(batch)
    if (err !== null) {
      withPath(err, file.path)
      file.unapplied = true
      file.poisoned = Errors.WORKSPACE_POISONED(
        `${this.describe(file)} refuses appends after a failed fdatasync (${err.message}); reopen it (recover) to continue`,
        { workspace: file.key, file: file.path },
      )
      if (a) a.failed = true
    }
    if (a && --a.syncing === 0) {
      this.atomics.delete(batch)
      // Only when every part (not just this file's) is durable in its log may the committing
      // owner reuse the frame.
      this.post({ t: 'applied', batch, ok: !a.failed })
    }
    // Last: a close waiting for this owner to be idle looks again (the batch is gone now).
    this.settled(file)
  }

  protected abort(msg: AbortMsg): void {
    const a = this.atomics.get(msg.batch)
    if (a && (a.state === 'preparing' || a.state === 'prepared')) {
      a.state = 'failed'
      for (const p of a.prepared) this.release(p)
      this.atomics.delete(msg.batch)
    }
    this.post({ t: 'reply', id: msg.id, value: true })
  }
}
