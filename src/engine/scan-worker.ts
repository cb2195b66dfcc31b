/**
 * A scanning thread for large reads (see parallel.ts). Two jobs:
 *
 * - `lines`: reads [start, end) of a log into shared slots and runs the line scanner over each,
 *   writing one record per line (what was taken and where its fields are); the main thread
 *   only builds the entries from the records, so scanning and building run on two cores.
 * - `verify`: the full check of `verify` over one range of the log, reported back whole.
 *
 * Nothing here decides an error: a line the scanner does not take is recorded as such, and the
 * main thread runs `parseEntry` on it, so messages are exactly the single-thread ones.
 */
import { closeSync, readSync } from 'node:fs'
import { parentPort, workerData } from 'node:worker_threads'
import { openFileSync, READ } from './files.js'
import { verifyRange } from './recovery.js'
import { LineScanner, ScanOp } from './scan.js'
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
} from './scan-protocol.js'

const port = parentPort
if (port === null) throw new Error('scan-worker runs as a worker thread')
const post = (m: ToMain): void => port.postMessage(m)

const job = workerData as LinesJob | VerifyJob
try {
  if (job.kind === 'lines') scanLines(job)
  else
    void verifyRange(job.file, job.start, job.end).then((report) => post({ kind: 'verified', report }), fail)
} catch (err) {
  fail(err)
}

function fail(err: unknown): void {
  const e = err as NodeJS.ErrnoException
  post({ kind: 'error', message: e.message, code: e.code, syscall: e.syscall, path: e.path })
}

function scanLines(j: LinesJob): void {
  const state = new Int32Array(j.state)
  const ints = new Int32Array(j.ints)
  const nums = new Float64Array(j.nums)
  const data = Buffer.from(j.data)
  const carryBuf = Buffer.allocUnsafe(SLOT_BYTES)
  const scanner = new LineScanner()
  const fd = openFileSync(j.file, READ, { what: 'log' })
  try {
    let pos = j.start // file offset of the first byte not yet read
    let carry = 0 // bytes of a partial line held in carryBuf
    let carryAt = j.start // file offset of carryBuf[0]
    for (let n = 0; pos < j.end || carry > 0; n++) {
      if (pos >= j.end && carryBuf.subarray(0, carry).indexOf(0x0a) < 0) break // a partial tail
      const slot = n % SLOTS
      // Wait until the main thread has built the entries of what this slot held last.
      while (Atomics.load(state, slot) !== 0) Atomics.wait(state, slot, 1)
      const base = slot * SLOT_BYTES
      const buf = data.subarray(base, base + SLOT_BYTES)
      carryBuf.copy(buf, 0, 0, carry)
      let filled = carry
      while (filled < SLOT_BYTES && pos < j.end) {
        const got = readSync(fd, buf, filled, Math.min(SLOT_BYTES - filled, j.end - pos), pos)
        if (got === 0) break
        filled += got
        pos += got
      }
      const sliceAt = carryAt
      const lastNl = buf.lastIndexOf(0x0a, filled - 1)
      if (lastNl < 0) {
        if (filled === SLOT_BYTES) {
          // One line longer than a slot: the main thread reads on by itself from its start.
          post({ kind: 'bail', offset: sliceAt })
          return
        }
        break // a trailing partial line: not part of the log yet
      }
      const lines = scanSlot(scanner, buf.subarray(0, lastNl + 1), ints, nums, slot)
      const used = lines.end
      carry = filled - used
      buf.copy(carryBuf, 0, used, filled)
      carryAt = sliceAt + used
      Atomics.store(state, slot, 1)
      post({ kind: 'slot', slot, lines: lines.count, bytes: used, offset: sliceAt })
    }
    post({ kind: 'done' })
  } finally {
    closeSync(fd)
  }
}

/**
 * Records every line of `buf` (which ends with `\n`) into the slot's records, up to MAX_LINES.
 * Returns how many lines and the offset just after the last one recorded.
 */
function scanSlot(
  scanner: LineScanner,
  buf: Buffer,
  ints: Int32Array,
  nums: Float64Array,
  slot: number,
): { count: number; end: number } {
  let s = 0
  let k = 0
  let r = slot * MAX_LINES * REC_INTS
  let f = slot * MAX_LINES * 2
  const end = buf.length
  while (s < end && k < MAX_LINES) {
    if (scanner.take(buf, s)) {
      const op = scanner.op
      ints[r] = op | (scanner.aAscii ? 4 : 0) | (scanner.bAscii || op === ScanOp.Write ? 8 : 0)
      ints[r + 1] = scanner.aStart
      ints[r + 2] = scanner.aEnd
      ints[r + 3] = scanner.bStart
      ints[r + 4] = scanner.bEnd
      nums[f] = scanner.seq
      nums[f + 1] = scanner.ts
      s = scanner.next
    } else {
      const nl = buf.indexOf(0x0a, s)
      ints[r] = nl === s ? KIND_EMPTY : KIND_OTHER
      ints[r + 1] = s
      ints[r + 2] = nl
      s = nl + 1
    }
    k++
    r += REC_INTS
    f += 2
  }
  return { count: k, end: s }
}
