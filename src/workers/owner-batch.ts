/**
 * Building a file's batch from its queued requests (seq and ts assigned, lines formatted), and
 * finishing it once committed: the file's new size and sums, the acks (the ack slot for a lone
 * append, or an acks message), or the failure of its requests.
 */
import { nextTs, nowMicros } from '../engine/clock.js'
import { formatLine } from '../engine/entry.js'
import { Errors, serializeError, withPath } from '../engine/errors.js'
import { PHASE, stamp } from '../engine/phases.js'
import { ACK_SLOT, type FileWrite } from '../engine/protocol.js'
import { OwnerCommit } from './owner-commit.js'
import { type Batch, NO_BODIES, NO_REQS, type OwnedFile, type Req } from './owner-state.js'

export abstract class OwnerBatch extends OwnerCommit {
  protected abstract atomicFailed(batch: number, err: unknown): void
  protected abstract foreignSynced(file: OwnedFile, batch: number, err: Error | null): void

  protected build(file: OwnedFile): Batch | null {
    // An atomic part is built alone (it waits for its batch); what is queued before it goes first.
    let cut = -1
    for (let i = 0; i < file.queue.length && cut < 0; i++) if (file.queue[i]?.atomic !== undefined) cut = i
    let reqs = cut === 0 ? file.queue.slice(0, 1) : cut > 0 ? file.queue.slice(0, cut) : file.queue
    file.queue = cut >= 0 ? file.queue.slice(reqs.length) : NO_REQS
    const atomic = reqs[0]?.atomic
    if (atomic !== undefined && this.atomics.get(atomic)?.state !== 'preparing') {
      // Its batch failed or was aborted meanwhile: nothing to build.
      if (file.queue.length > 0) queueMicrotask(() => this.markReady(file))
      else this.settled(file)
      return null
    }
    // (id, firstSeq, firstTs, end) per request, in an array of its exact size: pushed, a lone
    // request's would get room for 17 numbers, kept by every append while its round runs.
    const acks: number[] = new Array(reqs.length * 4)
    let n = 0
    let text = ''
    let seq = file.lastSeq
    let ts = file.lastTs
    if (file.kind === 'ws') {
      const now = nowMicros()
      let refused: Req[] | null = null
      for (const req of reqs) {
        if (req.replica) {
          const r = req.replica
          // A compacted origin's base record starts an empty log at its seq (engine/base.ts).
          const follows = r.base ? seq === 0 && file.size === 0 : r.firstSeq === seq + 1 && r.firstTs > ts
          if (!follows) {
            refused ??= []
            refused.push(req)
            this.fail(
              [req],
              Errors.REPLICA_GAP(
                `workspace ${file.key}: copied lines start at seq ${r.firstSeq} ts ${r.firstTs}, but the log is at seq ${seq} ts ${ts}`,
                { workspace: file.key, seq: r.firstSeq },
              ),
            )
            continue
          }
          for (const line of req.bodies) text += line
          n = putAck(acks, n, req.id, r.firstSeq, r.firstTs, text.length)
          seq = r.lastSeq
          ts = r.lastTs
          continue
        }
        if (req.expect !== undefined && req.expect !== seq) {
          refused ??= []
          refused.push(req)
          this.fail(
            [req],
            Errors.SEQ_MISMATCH(
              `workspace ${file.key}: the append expected last seq ${req.expect}, but it is ${seq}; nothing was written`,
              { workspace: file.key, lastSeq: seq, expected: req.expect },
            ),
          )
          continue
        }
        const firstSeq = seq + 1
        const firstTs = nextTs(ts, now)
        for (const body of req.bodies) {
          seq++
          ts = nextTs(ts, now)
          text += formatLine(seq, body, ts)
        }
        n = putAck(acks, n, req.id, firstSeq, firstTs, text.length)
      }
      if (refused) reqs = reqs.filter((r) => !refused.includes(r))
      if (reqs.length === 0) {
        this.settled(file)
        return null
      }
    } else {
      for (const req of reqs) {
        text += req.bodies[0]
        n = putAck(acks, n, req.id, 0, 0, text.length)
      }
    }
    acks.length = n // refused requests have none
    const all: FileWrite[] = []
    for (const req of reqs) if (req.files) for (const f of req.files) all.push(f)
    const files = all.length > 0 ? all : null
    const data = Buffer.from(text, 'utf8')
    if (data.length !== text.length) {
      // Not all ASCII: the ends counted UTF-16 units, the file counts bytes.
      for (let i = 3; i < acks.length; i += 4) acks[i] = Buffer.byteLength(text.slice(0, acks[i]), 'utf8')
    }
    const batch: Batch = {
      file,
      reqs,
      acks,
      data,
      lastSeq: seq,
      lastTs: ts,
      files,
    }
    if (atomic !== undefined) batch.atomic = atomic
    // Its lines are in `data` now: the bodies go at once instead of with the round, so that they
    // die young rather than being carried into the old generation of the owner's heap.
    for (const req of reqs) req.bodies = NO_BODIES
    file.inFlight = batch
    return batch
  }

  protected override completed(
    id: number,
    err: Error | null,
    logErrors: ReadonlyArray<number | Error> | null,
  ): void {
    const job = this.jobs.get(id)
    if (!job) return
    this.jobs.delete(id)
    this.inFlight--
    switch (job.kind) {
      case 'files':
        for (const batch of job.batches) this.finish(batch, err)
        break
      case 'round':
        this.roundDone(job.round, err, logErrors)
        break
      case 'sync':
        this.syncDone(job.file, job.lsn, err)
        break
      case 'foreign':
        this.foreignSynced(job.file, job.batch, err)
        break
      case 'header':
        this.headerDone(job.tail, job.generation, err)
        break
      case 'fileSync':
        this.fileSynced(job.fd, job.path, err)
        break
      case 'logSyncfs':
        this.logsSynced(job.files, err)
        break
    }
  }

  /** `untouched`: the batch was refused before anything was written (nothing to cut back). */
  protected override finish(batch: Batch, err: unknown, untouched = false): void {
    const file = batch.file
    file.inFlight = null
    if (untouched) {
      this.fail(batch.reqs, err)
    } else if (err === null) {
      file.size += batch.data.length
      file.lastSeq = batch.lastSeq
      file.lastTs = batch.lastTs
      let entries = 0
      for (const r of batch.reqs) entries += r.count
      if (file.sum !== null) this.summed(file, batch.data, entries, false)
      this.stats.entries += entries
      const start = file.size - batch.data.length
      // Read while the file is open and locked: a close after this adds to it first.
      const closes = Atomics.load(this.init.closes, 0)
      for (let i = 0; i < batch.acks.length; i += 4) {
        if (this.slotTag !== 0 && batch.acks[i] === this.slotId) {
          const d = this.slotData as Float64Array
          d[0] = batch.acks[i] as number
          d[1] = batch.acks[i + 1] as number
          d[2] = batch.acks[i + 2] as number
          d[3] = start + (batch.acks[i + 3] as number)
          d[4] = closes
          if (this.answerSlot(ACK_SLOT.ack)) {
            this.stats.slotAcks++
            continue
          }
        }
        this.acks.push(
          batch.acks[i] as number,
          batch.acks[i + 1] as number,
          batch.acks[i + 2] as number,
          start + (batch.acks[i + 3] as number),
          closes,
        )
      }
      if (!this.acksScheduled) {
        this.acksScheduled = true
        queueMicrotask(() => this.flushAcks())
      }
    } else {
      withPath(err, file.path)
      const failedSync = (err as NodeJS.ErrnoException).syscall !== 'write'
      const syncCall = (err as NodeJS.ErrnoException).syscall ?? 'sync'
      let cutFailed: unknown = null
      try {
        // Cut the file back to what was acknowledged, so no unacknowledged bytes stay behind.
        this.io.ftruncate(file.fd, file.size)
        this.io.fdatasync(file.fd)
      } catch (e) {
        cutFailed = e
      }
      this.fail(batch.reqs, err)
      if (failedSync || cutFailed !== null) {
        // After a failed fdatasync the kernel may have dropped the dirty pages and a retry can
        // report success: refuse appends until the workspace is reopened.
        const what = file.kind === 'ws' ? `workspace ${file.key}` : `file ${file.path}`
        file.poisoned = Errors.WORKSPACE_POISONED(
          `${what} refuses appends after a failed ${failedSync ? syncCall : 'truncate'} (${(err as Error).message}); reopen it (recover) to continue`,
          { workspace: file.kind === 'ws' ? file.key : undefined, file: file.path },
        )
        const queued = file.queue
        file.queue = NO_REQS
        this.fail(queued, file.poisoned)
      }
    }
    if (file.queue.length > 0) this.markReady(file)
    else this.settled(file)
  }

  protected override flushAcks(): void {
    this.acksScheduled = false
    if (this.acks.length === 0) return
    const data = Float64Array.from(this.acks)
    this.acks = []
    this.post({ t: 'acks', data })
    stamp(PHASE.ackPosted)
  }

  protected override fail(reqs: Req[], err: unknown): void {
    const ids: number[] = []
    for (const r of reqs) {
      if (r.atomic !== undefined) this.atomicFailed(r.atomic, err)
      else ids.push(r.id)
    }
    if (ids.length > 0) this.post({ t: 'fail', ids, error: serializeError(err) })
    if (this.slotTag !== 0 && ids.includes(this.slotId)) this.answerSlot(ACK_SLOT.port)
  }

  /**
   * Answers the caller waiting in the ack slot: the ack is there (SLOT_ACK, data written first)
   * or comes by the port (SLOT_PORT). False when the caller stopped waiting first: then the ack
   * goes by the port as any other.
   */
  protected answerSlot(answer: number): boolean {
    const slot = this.slot as Int32Array
    const tag = this.slotTag
    this.slotTag = 0
    if (Atomics.compareExchange(slot, 0, tag, answer) !== tag) return false
    Atomics.notify(slot, 0)
    if (answer === ACK_SLOT.ack) {
      // The round is settled as far as the caller can tell (npm run bench's breakdown).
      stamp(PHASE.finished)
      stamp(PHASE.ackPosted)
      this.ackStamped = true
    }
    return true
  }

  // appendAtomic. The caller's thread drives the steps (prepare everywhere, commit on one
  // owner, apply on the others); see AgentLog.appendAtomic.
}

/** Writes a request's ack fields at `n` of a batch's acks; returns where the next one goes. */
function putAck(
  acks: number[],
  n: number,
  id: number,
  firstSeq: number,
  firstTs: number,
  end: number,
): number {
  acks[n] = id
  acks[n + 1] = firstSeq
  acks[n + 2] = firstTs
  acks[n + 3] = end
  return n + 4
}
