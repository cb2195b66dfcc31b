/**
 * Large reads on two cores. A scanning thread (scan-worker.ts) reads the file into shared slots
 * and runs the line scanner over them; this thread only builds the entries from its records and
 * runs `parseEntry` on the lines the scanner left, so the order, the entries and every error are
 * those of the single-thread reader. `verify` splits the file at a line boundary instead and
 * checks both halves at once.
 *
 * The thread is only an accelerator: if it cannot start, fails, or meets a line longer than a
 * slot, the caller's single-thread reader goes on from the first byte not yet delivered.
 */
import { availableParallelism, loadavg } from 'node:os'
import { Worker } from 'node:worker_threads'
import type { Entry } from './entry.js'
import { parseEntry } from './entry.js'
import { buildEntry, fieldString, type ParseOptions, ScanOp } from './scan.js'
import {
  KIND_EMPTY,
  KIND_OTHER,
  type LinesJob,
  MAX_LINES,
  REC_INTS,
  SLOT_BYTES,
  SLOTS,
  type ToMain,
  type VerifyJob,
  type VerifyRangeReport,
} from './scan-protocol.js'

// Through the parent folder: the same file from the CLI's bundle, one folder beside this one.
const WORKER = new URL('../engine/scan-worker.js', import.meta.url)

export interface ThreadPolicy {
  /**
   * Below this many bytes a read stays on one thread: starting a thread and loading the scanner
   * in it costs some tens of milliseconds, about what 20 MB of scanning saves.
   */
  minBytes: number
  /**
   * Use a thread even when no core is idle. Off by default: a second thread only helps when a
   * core has nothing else to run (as `make -l` holds back jobs on a loaded machine); on a busy
   * one both threads wait for each other's time slices and the read gets slower, not faster.
   */
  whenBusy: boolean
}

let policy: ThreadPolicy = { minBytes: 32 << 20, whenBusy: false }

/** Changes when reads use a scanning thread (tests force it); returns the policy before. */
export function setThreadPolicy(change: Partial<ThreadPolicy>): ThreadPolicy {
  const before = policy
  policy = { ...policy, ...change }
  return before
}

/** What the scanning threads did in this process (tests check that the threaded path ran). */
export const threadStats = { slots: 0, bails: 0, verifiedRanges: 0 }

export function useThreads(bytes: number): boolean {
  if (bytes < policy.minBytes) return false
  const cores = availableParallelism()
  // The 1-minute load average counts runnable threads: below cores - 1, a core is idle (on one
  // core none ever is).
  return policy.whenBusy || (cores > 1 && (loadavg()[0] ?? 0) <= cores - 1)
}

/** Messages from a worker, awaited one at a time; an error or exit ends the stream. */
class Inbox {
  private readonly queue: ToMain[] = []
  private wake: (() => void) | null = null
  private ended = false

  constructor(readonly worker: Worker) {
    worker.on('message', (m: ToMain) => this.push(m))
    worker.on('error', (err: Error) => this.push({ kind: 'error', message: err.message }))
    worker.on('exit', () => {
      this.ended = true
      this.wake?.()
    })
  }

  private push(m: ToMain): void {
    this.queue.push(m)
    this.wake?.()
  }

  async next(): Promise<ToMain | null> {
    for (;;) {
      const m = this.queue.shift()
      if (m !== undefined) return m
      if (this.ended) return null
      await new Promise<void>((resolve) => {
        this.wake = resolve
      })
      this.wake = null
    }
  }
}

export interface ParallelRead {
  /** Lines delivered so far (for the caller's line numbers if it goes on). */
  lines: number
  /** File offset of the first byte not delivered: where the caller goes on, if it must. */
  resumeAt: number
  /** True when every line of the range was delivered. */
  complete: boolean
}

/**
 * Entries of the complete lines in [start, end), in batches, built from the scanning thread's
 * records. `lineNo` numbers lines for errors (`onBad` turns a bad line into the caller's error).
 * When it returns with `state.complete` false, the caller reads on from `state.resumeAt`.
 */
export async function* parallelEntryBatches(
  file: string,
  start: number,
  end: number,
  parse: ParseOptions,
  state: ParallelRead,
  onBad: (lineNo: number, err: Error) => Error,
): AsyncGenerator<Entry[]> {
  const job: LinesJob = {
    kind: 'lines',
    file,
    start,
    end,
    data: new SharedArrayBuffer(SLOTS * SLOT_BYTES),
    ints: new SharedArrayBuffer(SLOTS * MAX_LINES * REC_INTS * 4),
    nums: new SharedArrayBuffer(SLOTS * MAX_LINES * 2 * 8),
    state: new SharedArrayBuffer(SLOTS * 4),
  }
  const data = Buffer.from(job.data)
  const ints = new Int32Array(job.ints)
  const nums = new Float64Array(job.nums)
  const slots = new Int32Array(job.state)
  const { validate, fromSeq } = parse
  state.resumeAt = start
  state.complete = false
  let worker: Worker
  try {
    worker = new Worker(WORKER, { workerData: job })
  } catch {
    return // no thread: the caller reads it all
  }
  const inbox = new Inbox(worker)
  try {
    for (;;) {
      const m = await inbox.next()
      if (m === null || m.kind !== 'slot') {
        if (m?.kind === 'done') state.complete = true
        if (m?.kind === 'bail') threadStats.bails++
        return // done, or the caller goes on from resumeAt
      }
      const base = m.slot * SLOT_BYTES
      const out: Entry[] = []
      let r = m.slot * MAX_LINES * REC_INTS
      let f = m.slot * MAX_LINES * 2
      for (let k = 0; k < m.lines; k++, r += REC_INTS, f += 2) {
        const lineNo = state.lines + k + 1
        const kind = ints[r] as number
        if (kind === KIND_EMPTY) continue
        let entry: Entry
        if (kind === KIND_OTHER) {
          const line = data.toString('utf8', base + (ints[r + 1] as number), base + (ints[r + 2] as number))
          try {
            entry = validate ? parseEntry(line) : (JSON.parse(line) as Entry)
          } catch (err) {
            throw onBad(lineNo, err as Error)
          }
          if (!(entry.seq >= fromSeq)) continue
        } else {
          const seq = nums[f] as number
          if (seq < fromSeq) continue
          const op = (kind & 3) as ScanOp
          const a = fieldString(
            data,
            base + (ints[r + 1] as number),
            base + (ints[r + 2] as number),
            (kind & 4) !== 0,
          )
          const b =
            op === ScanOp.Delete
              ? ''
              : fieldString(
                  data,
                  base + (ints[r + 3] as number),
                  base + (ints[r + 4] as number),
                  (kind & 8) !== 0,
                )
          entry = buildEntry(op, seq, nums[f + 1] as number, a, b)
        }
        out.push(entry)
      }
      // Every string above is a copy: the slot can take the next bytes before the batch is used.
      Atomics.store(slots, m.slot, 0)
      Atomics.notify(slots, m.slot)
      threadStats.slots++
      state.lines += m.lines
      state.resumeAt = m.offset + m.bytes
      if (out.length > 0) yield out
    }
  } finally {
    await worker.terminate()
  }
}

/** `verify`'s scan of [start, end) in a thread of its own; null if the thread could not do it. */
export async function verifyInThread(
  file: string,
  start: number,
  end: number,
): Promise<VerifyRangeReport | null> {
  const job: VerifyJob = { kind: 'verify', file, start, end }
  let worker: Worker
  try {
    worker = new Worker(WORKER, { workerData: job })
  } catch {
    return null
  }
  const inbox = new Inbox(worker)
  try {
    const m = await inbox.next()
    if (m?.kind !== 'verified') return null
    threadStats.verifiedRanges++
    return m.report
  } finally {
    await worker.terminate()
  }
}
