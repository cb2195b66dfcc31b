/** What the main thread and a scanning thread (scan-worker.ts) share and say to each other. */
/** Slots of file bytes in flight: enough that the scanner runs ahead while this thread builds. */
export const SLOTS = 8
export const SLOT_BYTES = 1 << 20
/** Records per slot: a slot of very short lines is cut after this many. */
export const MAX_LINES = 1 << 14
/** Ints per line record: kind (op | 4 if a is ASCII | 8 if b is), a start, a end, b start, b end. */
export const REC_INTS = 5
/** Record kinds besides a ScanOp: an empty line, and a line for parseEntry ([start, end) in ints 1-2). */
export const KIND_EMPTY = 16
export const KIND_OTHER = 32

export interface LinesJob {
  kind: 'lines'
  file: string
  start: number
  end: number
  /** SLOTS × SLOT_BYTES of file bytes. */
  data: SharedArrayBuffer
  /** SLOTS × MAX_LINES × REC_INTS. */
  ints: SharedArrayBuffer
  /** SLOTS × MAX_LINES × 2 (seq, ts). */
  nums: SharedArrayBuffer
  /** SLOTS Int32: 0 the worker may fill the slot, 1 the main thread owns it. */
  state: SharedArrayBuffer
}

export interface VerifyJob {
  kind: 'verify'
  file: string
  start: number
  end: number
}

export type ToMain =
  /** A slot filled: `lines` records for the `bytes` of the log starting at `offset`. */
  | { kind: 'slot'; slot: number; lines: number; bytes: number; offset: number }
  /** Every line of the range has been sent. */
  | { kind: 'done' }
  /** A line longer than a slot starts at `offset`: read on from there in the main thread. */
  | { kind: 'bail'; offset: number }
  | { kind: 'verified'; report: VerifyRangeReport }
  | {
      kind: 'error'
      message: string
      code?: string | undefined
      syscall?: string | undefined
      path?: string | undefined
    }

/** `verify`'s scan of one range of a log, to be joined with the ranges before it. */
export interface VerifyRangeReport {
  /** Lines read, the one with the problem included. */
  lines: number
  /** Entries before the problem (all, without one). */
  entries: number
  firstSeq: number
  firstTs: number
  /** Bytes of the range's first line, with its newline. */
  firstLineBytes: number
  lastSeq: number
  lastTs: number
  /** Bytes of the lines read, the one with the problem included. */
  bytes: number
  /** Line numbers count from 1 at the range's start. */
  problem?: { line: number; reason: string }
}
