/**
 * The daemon's one budget for what it holds on behalf of its clients (`maxBufferedBytes`): the
 * answers they have not taken yet, the request lines they are still sending, and a fixed share
 * for each open stream reader. Answers already owed are counted as they come (an append that
 * committed is answered); what is asked for anew is refused with NOA_BUSY once it would not fit:
 * a stream whose reader does not fit, a read-only answer that does not, a request line that
 * grows past it.
 */
import { Errors, type NoaError } from '../engine/errors.js'

/**
 * The share of the budget an open stream reader takes while it reads: two 64 KiB read buffers
 * and the entries of one (a read), or a watch's 64 KiB follow buffer and the entries of a chunk.
 */
export const READER_BYTES = 256 << 10
/**
 * The share of a watch that has read everything and waits for a commit: its follow buffer and
 * watcher stay (1,000 of them, caught up on a 1,000-entry log, added 78 MB to the daemon's RSS).
 */
export const TAIL_BYTES = 128 << 10

export class Budget {
  /** Bytes counted now. */
  used = 0
  /** Open stream readers. */
  readers = 0
  /** Refusals with NOA_BUSY since the daemon started. */
  refusals = 0
  private readonly waiting = new Set<() => void>()

  constructor(readonly max: number) {}

  /** Bytes that are held whether or not they fit (answers owed). */
  add(bytes: number): void {
    this.used += bytes
  }

  free(bytes: number): void {
    this.used -= bytes
    if (this.waiting.size > 0) this.wake()
  }

  /** Whether `bytes` more would go past the budget. */
  over(bytes: number): boolean {
    return this.used + bytes > this.max
  }

  /** Takes a reader's share, or returns false when it does not fit. */
  takeReader(): boolean {
    if (this.over(READER_BYTES)) return false
    this.used += READER_BYTES
    this.readers++
    return true
  }

  /** A reader closed, with the share it held (READER_BYTES, or TAIL_BYTES for a watch at the tail). */
  freeReader(share: number): void {
    this.readers--
    this.free(share)
  }

  /** Calls `wake` once a reader's share may fit (it must try again: others may take it first). */
  wait(wake: () => void): void {
    this.waiting.add(wake)
  }

  unwait(wake: () => void): void {
    this.waiting.delete(wake)
  }

  /** A waiter woken for room does not take it: the next ones may. */
  handOn(): void {
    if (this.waiting.size > 0) this.wake()
  }

  /** Wakes the earliest waiters, as many as there is room for, in the order they came. */
  private wake(): void {
    let room = this.max - this.used
    for (const w of this.waiting) {
      if (room < READER_BYTES) break
      room -= READER_BYTES
      this.waiting.delete(w)
      w()
    }
  }

  /** NOA_BUSY, naming what was refused and the budget. */
  busy(what: string): NoaError {
    this.refusals++
    return Errors.BUSY(
      `${what}: the daemon holds ${this.used} bytes for its clients, against its budget of ${this.max} (noa serve --max-buffered-bytes); try again once clients have read what they were sent`,
      { bufferedBytes: this.used, limit: this.max },
    )
  }
}
