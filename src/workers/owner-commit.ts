/**
 * The owner's commits: the journal (allocated in the background), commit rounds (one frame with
 * every batch pending, one write + fdatasync, inline on an idle worker or on the addon's pool),
 * direct commits to a file (fdatasync mode, or before the journal is ready), and checkpoints that
 * make the files durable and free journal space (header writes).
 */
import { Errors, serializeError, withPath } from '../engine/errors.js'
import {
  encodeFrame,
  encodeHeader,
  FLAG_END,
  FRAME_HEADER,
  type FramePart,
  fileRecordHeader,
  HEADER_SLOTS,
  SECTOR,
  wrapFrame,
} from '../engine/journal-format.js'
import { SYNC_FDATASYNC, SYNC_SYNCFS, type SyncMode } from '../engine/native.js'
import { PHASE, stamp } from '../engine/phases.js'
import type { FromOwner } from '../engine/protocol.js'
import type { FrameFile, Journal } from './journal.js'
import { OwnerPlace } from './owner-place.js'
import {
  type AtomicGroup,
  type Batch,
  EMPTY,
  filesBytes,
  type Job,
  NO_REQS,
  OwnedFile,
  type Req,
  type Round,
  recordBytes,
  recordOf,
  WrittenFiles,
} from './owner-state.js'

/** A checkpoint starts when this share of the journal is live, or its oldest frame is this old. */
const CHECKPOINT_FILL = 0.25
const CHECKPOINT_AGE_MS = 1000

export abstract class OwnerCommit extends OwnerPlace {
  protected abstract post(msg: FromOwner): void
  protected abstract pump(): void
  protected abstract flushAcks(): void
  protected abstract fail(reqs: Req[], err: unknown): void

  /** Allocates the journal in the background; commits go to the files directly meanwhile. */
  protected createJournal(j: Journal): void {
    j.create(this.io).then(() => {
      if (this.closing && this.held.length === 0) {
        this.checkAllIdle()
        return
      }
      const held = this.held
      this.held = []
      if (j.state !== 'ready') {
        // Held batches go file by file after all, their files fsynced first.
        for (const batch of held) this.placeThen(batch, true, () => this.commitOne(batch, false))
        // Atomic groups waiting for it cannot be committed file by file.
        for (const item of this.pending) {
          if (!('own' in item)) continue
          for (const b of item.own) this.finish(b, j.error, true)
          this.post({ t: 'reply', id: item.replyId, error: serializeError(j.error) })
        }
        this.pending = this.pending.filter((item) => !('own' in item))
        return
      }
      this.timer = setInterval(() => this.maybeCheckpoint(), CHECKPOINT_AGE_MS / 4)
      this.timer.unref()
      for (const batch of held) {
        this.placeThen(batch, false, () => {
          this.pending.push(batch)
          this.startRound()
        })
      }
      this.pump()
      this.startRound()
    })
  }

  /** A commit straight to its file: one write + one fdatasync (the `fdatasync` mode's commit). */
  protected commitOne(batch: Batch, inline: boolean): void {
    this.stats.commits++
    if (this.journal) this.stats.directCommits++
    if (!inline) {
      this.submit({ kind: 'files', batches: [batch] }, batch.file.fd, batch.data, SYNC_FDATASYNC)
      return
    }
    this.stats.inlineCommits++
    let error: unknown = null
    try {
      this.io.write(batch.file.fd, batch.data)
      this.io.fdatasync(batch.file.fd)
    } catch (err) {
      error = err
    }
    this.finish(batch, error)
    this.flushAcks() // the serial path: the submitter is waiting for exactly this ack
  }

  protected override submit(job: Job, fd: number, data: Buffer, mode: SyncMode): void {
    const id = this.nextJob++
    this.jobs.set(id, job)
    this.inFlight++
    this.io.commit(id, fd, data, mode)
  }

  /**
   * One journal round: as many pending batches as fit in a frame, written to the journal at its
   * head with one pwritev and one fdatasync; then each batch's bytes are appended to its file,
   * and only then are they acknowledged. One round at a time: what arrives meanwhile waits for
   * the next, which is how many appends share one sync.
   */
  protected startRound(): void {
    const j = this.journal as Journal
    if (this.round !== null || this.pending.length === 0 || this.needSpace || j.state !== 'ready') return
    const parts: FramePart[] = []
    const taken: Batch[] = []
    const groups: AtomicGroup[] = []
    let items = 0
    let length = FRAME_HEADER
    for (const item of this.pending) {
      const own = 'own' in item ? item.own : [item]
      let size = 0
      for (const b of own) size += recordOf(b.file).length + b.data.length + filesBytes(b)
      if ('own' in item) for (const f of item.foreign) size += f.header.length + (f.data?.length ?? 0)
      if (items > 0 && length + size > j.maxFrame) break
      items++
      length += size
      for (const b of own) {
        if (b.files) {
          for (const f of b.files) {
            parts.push({
              header: fileRecordHeader(f.path, f.data.length, f.readOnly === true),
              data: asBuffer(f.data),
            })
          }
        }
        parts.push({ header: recordOf(b.file), offset: b.file.size, data: b.data })
        taken.push(b)
      }
      if ('own' in item) {
        for (const f of item.foreign) parts.push(f)
        groups.push(item)
      }
    }
    const padded = Math.ceil(length / SECTOR) * SECTOR
    if (padded > j.maxFrame && groups.length > 0 && items === 1) {
      // An atomic batch is one frame, or nothing.
      this.pending = this.pending.slice(1)
      const err = Errors.BAD_ARGUMENT(
        `an atomic batch of ${length} bytes does not fit in one journal frame (${j.maxFrame} bytes): split it, or give the log a larger journalSize`,
      )
      const g = groups[0] as AtomicGroup
      for (const b of g.own) this.finish(b, err, true)
      this.post({ t: 'reply', id: g.replyId, error: serializeError(err) })
      this.startRound()
      return
    }
    const place = j.place(padded)
    if (place === null) {
      // The live part of the journal reaches the head: a checkpoint must free space first.
      this.needSpace = true
      this.stats.spaceWaits++
      this.startCheckpoint()
      return
    }
    this.pending = this.pending.slice(items)
    const wrapped = place.wrapAt !== null
    if (wrapped || place.offset < j.head) this.stats.wraps++
    const frame = encodeFrame(j.id, j.nextLsn + (wrapped ? 1 : 0), FLAG_END, parts)
    stamp(PHASE.framed)
    const round: Round = { id: this.nextJob++, batches: taken, groups, frame, offset: place.offset, wrapped }
    this.round = round
    this.stats.rounds++
    this.stats.commits++
    try {
      // The marker that sends replay back to the start: page cache only, the round's fdatasync covers it.
      if (place.wrapAt !== null) this.io.pwrite(j.fd, wrapFrame(j.id, j.nextLsn).pieces, place.wrapAt)
    } catch (err) {
      this.roundDone(round, err, null)
      return
    }
    // Not while files are being written for other batches: those join the next round, which
    // an inline round (this thread blocked in the fdatasync) would keep from forming.
    const alone = taken.length === 1 && groups.length === 0 && this.placing === 0
    if (this.init.inlineCommit && this.inFlight === 0 && alone) {
      this.stats.inlineCommits++
      this.inlineRound(j, round)
      return
    }
    this.jobs.set(round.id, { kind: 'round', round })
    this.inFlight++
    this.io.commitRound(
      round.id,
      j.fd,
      frame.pieces,
      place.offset,
      SYNC_FDATASYNC,
      taken.map((b) => b.file.fd),
      taken.map((b) => b.data),
    )
  }

  /** The serial path: the lone round written and synced on this thread, no hop to the pool. */
  protected inlineRound(j: Journal, round: Round): void {
    let error: unknown = null
    let logErrors: Array<number | Error> | null = null
    try {
      this.io.pwrite(j.fd, round.frame.pieces, round.offset)
      stamp(PHASE.pwritten)
      this.io.fdatasync(j.fd)
      stamp(PHASE.synced)
    } catch (err) {
      error = err
    }
    if (error === null) {
      round.batches.forEach((batch, i) => {
        try {
          this.io.write(batch.file.fd, batch.data)
        } catch (err) {
          logErrors ??= []
          logErrors.push(i, err as Error)
        }
      })
      stamp(PHASE.logged)
    }
    this.roundDone(round, error, logErrors)
    if (!this.ackStamped) stamp(PHASE.finished)
    this.ackStamped = false
    this.flushAcks()
  }

  protected roundDone(round: Round, err: unknown, logErrors: ReadonlyArray<number | Error> | null): void {
    const j = this.journal as Journal
    this.round = null
    if (err !== null) {
      // Nothing reached the files. The frame's space is reused by the next round (same lsn),
      // so no invalid frame is ever left between valid ones.
      withPath(err, j.path)
      for (const batch of round.batches) this.finish(batch, err)
      for (const g of round.groups) {
        this.atomics.delete(g.batch)
        this.post({ t: 'reply', id: g.replyId, error: serializeError(err) })
      }
    } else {
      const files: FrameFile[] = round.batches.map((b) => b.file)
      for (const g of round.groups) if (g.pin) files.push(g.pin)
      const written: string[] = []
      const parents: string[] = []
      for (const b of round.batches) {
        if (b.written) for (const f of b.written) written.push(f)
        if (b.parents) for (const d of b.parents) parents.push(d)
      }
      if (written.length > 0) files.push(new WrittenFiles(written, parents))
      j.written(round.frame, round.offset, files, round.wrapped)
      const failed = new Map<number, Error>()
      if (logErrors)
        for (let i = 0; i < logErrors.length; i += 2)
          failed.set(logErrors[i] as number, logErrors[i + 1] as Error)
      round.batches.forEach((batch, i) => {
        batch.file.lastLsn = round.frame.lsn
        const logErr = failed.get(i)
        if (logErr) this.committedUnwritten(batch, logErr)
        else this.finish(batch, null)
      })
      for (const g of round.groups) {
        this.atomics.delete(g.batch)
        if (g.pin) this.pins.set(g.batch, g.pin)
        this.post({ t: 'reply', id: g.replyId, value: true })
      }
      this.maybeCheckpoint()
    }
    this.startRound()
    if (this.ready.size > 0 && !this.pumpScheduled) {
      this.pumpScheduled = true
      queueMicrotask(() => this.pump())
    }
  }

  /**
   * The round is durable in the journal, but its bytes did not reach this file (ENOSPC, EIO):
   * the entries are committed (a crash replays them from the journal), so they are
   * acknowledged; the file refuses further appends until it is reopened, which writes them again.
   */
  protected committedUnwritten(batch: Batch, err: Error): void {
    const file = batch.file
    withPath(err, file.path)
    try {
      this.io.ftruncate(file.fd, file.size) // no partial line left for readers
    } catch {
      // the journal holds the bytes either way
    }
    this.finish(batch, null)
    file.unapplied = true
    file.poisoned = Errors.WORKSPACE_POISONED(
      `${this.describe(file)} refuses appends: its last commit is durable in the journal but could not be written to ${file.path} (${err.message}); reopen it (recover) to write it there and continue`,
      { workspace: file.kind === 'ws' ? file.key : undefined, file: file.path },
    )
    const queued = file.queue
    file.queue = NO_REQS
    this.fail(queued, file.poisoned)
  }

  protected describe(file: OwnedFile): string {
    return file.kind === 'ws' ? `workspace ${file.key}` : `file ${file.path}`
  }

  /** Starts a checkpoint when enough of the journal is live or its oldest frame is old enough. */
  protected maybeCheckpoint(): void {
    const j = this.journal
    if (j === null || j.state !== 'ready' || this.checkpoint !== null) return
    const oldest = j.frames[0]
    if (oldest === undefined) return
    if (j.used() > j.size * CHECKPOINT_FILL || performance.now() - oldest.at > CHECKPOINT_AGE_MS) {
      this.startCheckpoint()
    }
  }

  /**
   * A checkpoint: fdatasync every open file with journaled bytes not yet durable in it (many at
   * once, on the addon's pool, while rounds go on), then write the header naming the new tail.
   */
  protected startCheckpoint(): void {
    const j = this.journal as Journal
    if (this.checkpoint !== null) return
    this.stats.checkpoints++
    const targets = new Set<OwnedFile>()
    const written = new Set<WrittenFiles>()
    for (const frame of j.frames) {
      for (const f of frame.files) {
        if (f instanceof OwnedFile && f.dirty && f.fd >= 0 && !f.unapplied && !f.syncing) targets.add(f)
        else if (f instanceof WrittenFiles && f.syncedLsn < frame.lsn) written.add(f)
      }
    }
    const files = written.size > 0 && this.fileSyncs === null
    const together = this.onLogDirFs(targets)
    this.checkpoint = {
      left: targets.size - together.length + (together.length > 0 ? 1 : 0) + (files ? 1 : 0),
    }
    if (this.checkpoint.left === 0) {
      this.writeHeader()
      return
    }
    if (together.length > 0) {
      this.stats.logSyncfs++
      for (const file of together) {
        file.syncing = true
        targets.delete(file)
      }
      const job: Job = { kind: 'logSyncfs', files: together.map((f): [OwnedFile, number] => [f, f.lastLsn]) }
      this.submit(job, this.logDirFd, EMPTY, SYNC_SYNCFS)
    }
    for (const file of targets) this.syncOne(file)
    if (files) this.syncWrittenFiles([...written])
  }

  protected syncDone(file: OwnedFile, lsn: number, err: Error | null): void {
    file.syncing = false
    if (err === null) {
      if (lsn > file.syncedLsn) file.syncedLsn = lsn
      // Durable and quiet: its record header goes until its next round (recordOf), so that an
      // idle workspace keeps no buffer.
      if (!file.dirty && file.inFlight === null && file.queue.length === 0) file.record = null
    } else {
      // Its bytes stay in the journal (the tail cannot pass them) until it is reopened.
      withPath(err, file.path)
      file.unapplied = true
      file.poisoned = Errors.WORKSPACE_POISONED(
        `${this.describe(file)} refuses appends after a failed checkpoint fdatasync (${err.message}); its entries are kept in the journal; reopen it (recover) to write them again`,
        { workspace: file.kind === 'ws' ? file.key : undefined, file: file.path },
      )
    }
    this.settled(file)
    const c = this.checkpoint as { left: number }
    if (--c.left === 0) this.writeHeader()
  }

  /** The header naming the new tail, written and fdatasynced before the space before it is reused. */
  protected override writeHeader(): void {
    const j = this.journal as Journal
    const tail = j.reclaimable()
    if (tail === null) {
      this.checkpointDone()
      return
    }
    const generation = j.generation + 1
    const bytes = encodeHeader({
      journalId: j.id,
      size: j.size,
      generation,
      tailLsn: tail.lsn,
      tailOffset: tail.offset >= j.size ? 4096 : tail.offset,
    })
    const id = this.nextJob++
    this.jobs.set(id, { kind: 'header', tail, generation })
    this.inFlight++
    this.io.commitRound(id, j.fd, [bytes], HEADER_SLOTS[generation % 2] as number, SYNC_FDATASYNC, [], [])
  }

  protected headerDone(
    tail: { lsn: number; offset: number; drop: number },
    generation: number,
    err: Error | null,
  ): void {
    const j = this.journal as Journal
    if (err === null) {
      j.generation = generation
      j.reclaimed(tail)
    }
    // A failed header write leaves the other slot, with the older tail, as the valid one.
    this.checkpointDone()
  }

  protected checkpointDone(): void {
    this.checkpoint = null
    if (this.needSpace) {
      const j = this.journal as Journal
      const first = this.pending[0]
      if (first === undefined || j.place(this.frameSize(first)) !== null) {
        this.needSpace = false
      } else {
        // Still no room. An atomic batch's other owner will unpin its frame soon (it is making
        // its parts durable): wait for that. Files whose writes failed pin it until recovered.
        const blocking = j.frames[0]?.files ?? []
        const lsn = j.frames[0]?.lsn ?? 0
        const waitingForPin = blocking.some(
          (f) => !(f instanceof OwnedFile) && !(f instanceof WrittenFiles) && f.syncedLsn < lsn,
        )
        const dirty = blocking.some(
          (f) =>
            (f instanceof OwnedFile && f.dirty && !f.unapplied) ||
            (f instanceof WrittenFiles && f.syncedLsn < lsn && this.fileSyncError === null),
        )
        if (dirty) this.startCheckpoint()
        else if (!waitingForPin) {
          this.needSpace = false
          this.journalFull(j)
        }
      }
    }
    this.startRound()
    if (this.closing) this.checkAllIdle()
  }

  /** Bytes a pending batch or atomic group takes in a frame, padded. */
  protected frameSize(item: Batch | AtomicGroup): number {
    let size = FRAME_HEADER
    const own = 'own' in item ? item.own : [item]
    for (const b of own) size += recordBytes(b.file, 0) + b.data.length + filesBytes(b)
    if ('own' in item) for (const f of item.foreign) size += f.header.length + (f.data?.length ?? 0)
    return Math.ceil(size / SECTOR) * SECTOR
  }

  /**
   * No space, and none can be freed: the oldest frames belong to files whose bytes did not reach
   * them (failed write or fdatasync). Pending appends fail, naming those files, rather than wait.
   */
  protected journalFull(j: Journal): void {
    const pinned = new Set<string>()
    for (const f of j.frames[0]?.files ?? []) {
      if (f instanceof OwnedFile && f.dirty) pinned.add(f.path)
      else if (f instanceof WrittenFiles && f.syncedLsn < (j.frames[0]?.lsn ?? 0))
        pinned.add(
          `files written beside entries (${f.paths[0]}…: ${this.fileSyncError?.message ?? 'not yet durable'})`,
        )
      else if (!(f instanceof OwnedFile) && f.syncedLsn < (j.frames[0]?.lsn ?? 0))
        pinned.add('an atomic batch another worker is still writing')
    }
    const err = Errors.JOURNAL(
      `the commit journal ${j.path} is full: its oldest entries are for ${[...pinned].join(', ')}, whose writes failed; reopen (recover) them to free it`,
      { journal: j.path },
    )
    const items = this.pending
    this.pending = []
    for (const item of items) {
      if ('own' in item) {
        for (const b of item.own) this.finish(b, err, true)
        this.atomics.delete(item.batch)
        this.post({ t: 'reply', id: item.replyId, error: serializeError(err) })
      } else {
        this.finish(item, err, true)
      }
    }
  }
}

function asBuffer(data: Uint8Array): Buffer {
  return Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength)
}
