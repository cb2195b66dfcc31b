/**
 * An owner worker's commit journal: its file, where the next frame goes, and which frames are
 * still needed. The space between the tail (the oldest frame whose files are not all durable
 * yet) and the head is live; a checkpoint fdatasyncs the files those frames wrote, then moves the
 * tail in the header, and the space before it is reused.
 */
import { randomBytes } from 'node:crypto'
import { dirname, join } from 'node:path'
import { Errors } from '../engine/errors.js'
import { mkdirBelow } from '../engine/files.js'
import {
  DATA_START,
  type EncodedFrame,
  encodeHeader,
  HEADER_SLOTS,
  SECTOR,
} from '../engine/journal-format.js'
import { JOURNAL_SUFFIX, JOURNAL_TEMP_SUFFIX, withRootLock } from '../engine/journal-recovery.js'
import type { LogIo } from './io.js'

/** A frame written and not yet reclaimed: the files it wrote must be durable before it is. */
export interface LiveFrame {
  lsn: number
  offset: number
  length: number
  /** Keys of the files (OwnedFile) whose records it holds. */
  files: readonly FrameFile[]
  /** When it was written (ms, performance.now): checkpoints bound the age of the oldest. */
  at: number
}

/** What the journal needs of an owned file: whether its bytes up to a frame are durable. */
export interface FrameFile {
  syncedLsn: number
}

export type JournalState = 'none' | 'creating' | 'ready' | 'failed'

/**
 * Only its owner may write a journal: replay refuses one that others can write (journal-trust.ts).
 */
const JOURNAL_MODE = 0o600

/** Zero-fill in steps of this, so that a close can stop an allocation between two. */
const ZERO_CHUNK = 1 << 20

export class Journal {
  state: JournalState = 'none'
  fd = -1
  readonly path: string
  readonly id: number
  /** Why creating it failed (the owner then keeps committing straight to the files). */
  error: Error | null = null
  /** Next frame's lsn and offset. */
  nextLsn = 1
  head = DATA_START
  /** The header's tail (durable): replay starts here. */
  tailLsn = 1
  tailOffset = DATA_START
  generation = 1
  readonly frames: LiveFrame[] = []
  private io: LogIo | null = null
  private aborted = false

  constructor(
    private readonly root: string,
    readonly dir: string,
    private readonly name: string,
    readonly size: number,
  ) {
    this.path = join(dir, `${name}${JOURNAL_SUFFIX}`)
    this.id = randomBytes(4).readUInt32LE(0)
  }

  /** The largest frame a round may write: rounds bigger than this go straight to the files. */
  get maxFrame(): number {
    return Math.max(SECTOR * 8, Math.floor((this.size - DATA_START) / 8 / SECTOR) * SECTOR)
  }

  /**
   * Allocates the journal in the background: a temp file, created and locked under the root
   * lock (so a recovering process never takes it for a dead one), written once with zeros at
   * full size (blocks allocated and written: a later overwrite and its fdatasync commit no size
   * and no extent change), given its header, fdatasynced, then renamed into place.
   */
  async create(io: LogIo): Promise<void> {
    this.io = io
    this.state = 'creating'
    const temp = join(this.dir, `${this.name}${JOURNAL_TEMP_SUFFIX}`)
    let fd = -1
    try {
      fd = withRootLock(this.root, () => {
        for (const created of mkdirBelow(this.root, this.dir)) io.fsyncDir(dirname(created))
        const f = io.createFile(temp, JOURNAL_MODE)
        try {
          io.flock(f, true, true)
        } catch (err) {
          io.close(f)
          throw err
        }
        return f
      })
      for (let pos = 0; pos < this.size; pos += ZERO_CHUNK) {
        if (this.aborted) throw new Error('aborted: the log is closing')
        await io.zeroFill(fd, pos, Math.min(ZERO_CHUNK, this.size - pos))
      }
      io.pwrite(fd, this.headerBytes(), HEADER_SLOTS[this.generation % 2] as number)
      io.fdatasync(fd)
      io.rename(temp, this.path)
      io.fsyncDir(this.dir)
      this.fd = fd
      this.state = 'ready'
    } catch (err) {
      if (fd >= 0) {
        io.close(fd)
        try {
          io.unlink(temp)
        } catch {
          // not created, or already gone
        }
      }
      this.state = this.aborted ? 'none' : 'failed'
      if (this.aborted) return
      this.error = Errors.JOURNAL(
        `cannot allocate the commit journal ${this.path} (${this.size} bytes): ${(err as Error).message}; appends are committed file by file instead`,
        { journal: this.path, cause: (err as NodeJS.ErrnoException).code },
      )
    }
  }

  /** Gives up an allocation in progress (the owner is closing): it ends as `none`, nothing left behind. */
  abort(): void {
    this.aborted = true
  }

  headerBytes(): Buffer {
    return encodeHeader({
      journalId: this.id,
      size: this.size,
      generation: this.generation,
      tailLsn: this.tailLsn,
      tailOffset: this.tailOffset,
    })
  }

  /** Bytes between the tail and the head (live), counting a wrap's unused end as live. */
  used(): number {
    const tail = this.frames[0]?.offset ?? this.head
    return this.head >= tail ? this.head - tail : this.size - tail + (this.head - DATA_START)
  }

  /**
   * Where a frame of `length` bytes goes, or null when it does not fit before the live region:
   * `wrapAt` is set when the marker frame must be written at the old head first.
   */
  place(length: number): { offset: number; wrapAt: number | null } | null {
    const tail = this.frames[0]?.offset ?? null
    if (tail === null) {
      // Nothing live: the whole data region is free.
      if (this.head + length <= this.size) return { offset: this.head, wrapAt: null }
      if (DATA_START + length > this.size) return null
      return { offset: DATA_START, wrapAt: this.head < this.size ? this.head : null }
    }
    if (this.head >= tail) {
      if (this.head + length <= this.size) return { offset: this.head, wrapAt: null }
      // Wrap: the frame goes to the start, which must end before the tail; the marker needs a sector.
      if (DATA_START + length < tail && (this.head === this.size || this.head + SECTOR <= this.size)) {
        return { offset: DATA_START, wrapAt: this.head < this.size ? this.head : null }
      }
      return null
    }
    return this.head + length < tail ? { offset: this.head, wrapAt: null } : null
  }

  /**
   * Records a frame as written at `offset`, and the wrap marker written at the old head before
   * it, if one was. The marker is live like a frame: the durable header may name it as the tail
   * (a checkpoint that reclaimed every frame names the head), so its sector must not be written
   * over before a later header moves the tail past it. It names no file, so the next checkpoint
   * reclaims it.
   */
  written(frame: EncodedFrame, offset: number, files: readonly FrameFile[], wrapped: boolean): void {
    const at = performance.now()
    if (wrapped) {
      this.frames.push({ lsn: this.nextLsn, offset: this.head, length: SECTOR, files: [], at })
      this.nextLsn++
    }
    this.frames.push({ lsn: frame.lsn, offset, length: frame.length, files, at })
    this.nextLsn = frame.lsn + 1
    this.head = offset + frame.length
  }

  /**
   * The tail after a checkpoint: the first frame some file of which is not durable up to it.
   * Returns null when it does not move.
   */
  reclaimable(): { lsn: number; offset: number; drop: number } | null {
    let drop = 0
    for (const f of this.frames) {
      if (f.files.some((file) => file.syncedLsn < f.lsn)) break
      drop++
    }
    if (drop === 0) return null
    const next = this.frames[drop]
    return next
      ? { lsn: next.lsn, offset: next.offset, drop }
      : { lsn: this.nextLsn, offset: this.head, drop }
  }

  /** After the header naming the new tail is durable: the frames before it are free. */
  reclaimed(tail: { lsn: number; offset: number; drop: number }): void {
    this.frames.splice(0, tail.drop)
    this.tailLsn = tail.lsn
    this.tailOffset = tail.offset >= this.size ? DATA_START : tail.offset
  }

  /**
   * Removes the journal after a clean close (every file it covers is durable): unlinked while
   * still locked, then closed; the folder goes too when no other journal is in it.
   */
  remove(): void {
    const io = this.io
    if (this.fd < 0 || io === null) return
    withRootLock(this.root, () => {
      io.unlink(this.path)
      io.fsyncDir(this.dir)
      io.close(this.fd)
      this.fd = -1
      this.state = 'none'
      // The folder goes too unless another process's journal is in it.
      if (io.rmdir(this.dir)) io.fsyncDir(this.root)
    })
  }

  /** Closes without removing: the records are still needed, and the next opener replays them. */
  abandon(): void {
    if (this.fd >= 0) this.io?.close(this.fd)
    this.fd = -1
    this.state = 'none'
  }
}
