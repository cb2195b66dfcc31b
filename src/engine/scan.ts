/**
 * Reading stored lines fast without accepting anything `parseEntry` would refuse.
 *
 * Almost every line of a log is one of the shapes noa itself writes: `{"seq":N,"op":"write",
 * "path":"…","blob":"<64 hex>","ts":T}`, `delete` and `rename` likewise, keys in the seed's
 * order, no whitespace, no escapes. `LineScanner` recognises exactly those shapes on the raw
 * bytes and checks every rule of `parseEntry` while it walks them, so a line is read once and no
 * object is walked a second time. Anything else (an escape, another key order, whitespace, a
 * snapshot or merge entry, a line that breaks a rule) is handed back untaken, and the caller runs
 * `parseEntry` on it: the accepted set, the entries returned and every error message stay exactly
 * those of `JSON.parse` + the field checks.
 */
import { type Entry, MAX_PATH_BYTES, parseEntry } from './entry.js'
import { Errors, type NoaError } from './errors.js'

/** Node's own slicers (what `toString` calls after its argument checks); not in @types/node. */
type SliceBuffer = Buffer & {
  latin1Slice(start: number, end: number): string
  utf8Slice(start: number, end: number): string
}

const NL = 0x0a
const QUOTE = 0x22
const SLASH = 0x2f
const DOT = 0x2e
const BACKSLASH = 0x5c

const HEX = new Uint8Array(256)
for (const c of '0123456789abcdef') HEX[c.charCodeAt(0)] = 1

const bytes = (s: string): Uint8Array => Uint8Array.from(Buffer.from(s, 'latin1'))
const K_SEQ = bytes('{"seq":')
const K_OP = bytes(',"op":"')
const K_WRITE = bytes('write","path":"')
const K_DELETE = bytes('delete","path":"')
const K_RENAME = bytes('rename","from":"')
const K_TO = bytes('","to":"')
const K_BLOB = bytes('","blob":"')
const K_TS = bytes(',"ts":')

/** A safe integer has at most 16 digits; up to 15 it cannot exceed 2^53 - 1. */
const SAFE_DIGITS = 15

/** What `take` found. Numbers, not strings: they travel through a worker's shared records too. */
export const ScanOp = { None: 0, Write: 1, Delete: 2, Rename: 3 } as const
export type ScanOp = (typeof ScanOp)[keyof typeof ScanOp]

/**
 * One scanner per reading loop. `take` checks the line starting at `start` (the buffer's last
 * byte must be `\n`, which every loop that calls it guarantees: readChunks yields whole lines);
 * when it returns true, `seq`, `ts` and `next` hold the line's values and `entry()` builds it.
 * When it returns false nothing is decided: the line goes to `parseEntry`.
 */
export class LineScanner {
  seq = 0
  ts = 0
  /** Offset just after the line's `\n`. */
  next = 0
  /** The op taken, and the byte ranges of its string fields (path or from; blob or to). */
  op: ScanOp = ScanOp.None
  aStart = 0
  aEnd = 0
  /** The field is ASCII, so latin1 reads it as UTF-8 would. */
  aAscii = true
  bStart = 0
  bEnd = 0
  bAscii = true
  private value = 0
  private buf: SliceBuffer = Buffer.alloc(0) as SliceBuffer
  /** Set by `path` for the field it just scanned. */
  private ascii = true

  take(buf: Buffer, start: number): boolean {
    const b = buf as SliceBuffer
    this.buf = b
    let i = start
    if (!match(b, i, K_SEQ)) return false
    i += K_SEQ.length
    if (b[i] === 0x30) return false // seq ≥ 1
    i = this.counter(b, i)
    if (i < 0) return false
    const seq = this.value
    if (!match(b, i, K_OP)) return false
    i += K_OP.length
    const c = b[i] as number
    if (c === 0x77) {
      if (!match(b, i, K_WRITE)) return false
      i += K_WRITE.length
      this.aStart = i
      i = this.path(b, i)
      if (i < 0) return false
      this.aEnd = i
      this.aAscii = this.ascii
      if (!match(b, i, K_BLOB)) return false
      i += K_BLOB.length
      this.bStart = i
      for (const stop = i + 64; i < stop; i++) if (HEX[b[i] as number] === 0) return false
      if (b[i] !== QUOTE) return false
      this.bEnd = i++
      this.op = ScanOp.Write
    } else if (c === 0x64) {
      if (!match(b, i, K_DELETE)) return false
      i += K_DELETE.length
      this.aStart = i
      i = this.path(b, i)
      if (i < 0) return false
      this.aEnd = i++
      this.aAscii = this.ascii
      this.op = ScanOp.Delete
    } else if (c === 0x72) {
      if (!match(b, i, K_RENAME)) return false
      i += K_RENAME.length
      this.aStart = i
      i = this.path(b, i)
      if (i < 0) return false
      this.aEnd = i
      this.aAscii = this.ascii
      if (!match(b, i, K_TO)) return false
      i += K_TO.length
      this.bStart = i
      i = this.path(b, i)
      if (i < 0) return false
      this.bEnd = i++
      this.bAscii = this.ascii
      if (!this.renameDiffers()) return false
      this.op = ScanOp.Rename
    } else {
      return false
    }
    if (!match(b, i, K_TS)) return false
    i += K_TS.length
    i = this.counter(b, i)
    if (i < 0) return false
    const ts = this.value
    if (b[i] !== 0x7d || b[i + 1] !== NL) return false
    this.seq = seq
    this.ts = ts
    this.next = i + 2
    return true
  }

  /**
   * A JSON integer that is a safe integer ≥ 0: `0` or digits without a leading zero (no sign,
   * fraction or exponent: those go to JSON.parse). Returns the offset after it, or -1.
   */
  private counter(b: Buffer, start: number): number {
    let i = start
    let c = b[i] as number
    if (c < 0x30 || c > 0x39) return -1
    let value = c - 0x30
    i++
    if (value === 0) {
      c = b[i] as number
      if (c >= 0x30 && c <= 0x39) return -1 // a leading zero is not JSON
    } else {
      for (;;) {
        c = b[i] as number
        if (c < 0x30 || c > 0x39) break
        value = value * 10 + (c - 0x30)
        i++
      }
    }
    // Up to SAFE_DIGITS digits the value is exact; one more digit may still be safe.
    if (i - start > SAFE_DIGITS && (i - start > SAFE_DIGITS + 1 || value > Number.MAX_SAFE_INTEGER)) return -1
    this.value = value
    return i
  }

  /** The entry `take` accepted, with the keys in the order JSON.parse gives them. */
  entry(): Entry {
    const { buf } = this
    return buildEntry(this.op, this.seq, this.ts, this.a(buf), this.op === ScanOp.Delete ? '' : this.b(buf))
  }

  private a(buf: SliceBuffer): string {
    return this.aAscii ? buf.latin1Slice(this.aStart, this.aEnd) : buf.utf8Slice(this.aStart, this.aEnd)
  }

  private b(buf: SliceBuffer): string {
    return this.bAscii || this.op === ScanOp.Write
      ? buf.latin1Slice(this.bStart, this.bEnd)
      : buf.utf8Slice(this.bStart, this.bEnd)
  }

  /**
   * Scans a path's characters up to its closing quote and checks `checkPath`'s rules on them:
   * no empty, `.` or `..` segment (so no leading `/`), at most MAX_PATH_BYTES. A control
   * character (NUL included) or a backslash is not taken: JSON refuses the one, and the other is
   * an escape, which JSON.parse decodes. Returns the quote's offset, or -1.
   */
  private path(b: Buffer, start: number): number {
    let i = start
    let seg = start
    let ascii = true
    for (;;) {
      const c = b[i] as number
      if (c === QUOTE) break
      if (c === SLASH) {
        const len = i - seg
        if (len === 0 || (len <= 2 && b[seg] === DOT && (len === 1 || b[seg + 1] === DOT))) return -1
        seg = i + 1
      } else if (c < 0x20 || c === BACKSLASH) {
        return -1 // the line's `\n` ends the scan here too
      } else if (c >= 0x80) {
        ascii = false
      }
      i++
    }
    const len = i - seg
    if (len === 0 || (len <= 2 && b[seg] === DOT && (len === 1 || b[seg + 1] === DOT))) return -1
    this.ascii = ascii
    if (ascii) return i - start > MAX_PATH_BYTES ? -1 : i
    // Not ASCII: the rules apply to the decoded string (an invalid byte decodes to U+FFFD, three
    // bytes), exactly as they do after JSON.parse of the decoded line.
    const value = (b as SliceBuffer).utf8Slice(start, i)
    if (!value.isWellFormed()) return -1
    if (value.length * 3 > MAX_PATH_BYTES && Buffer.byteLength(value) > MAX_PATH_BYTES) return -1
    return i
  }

  private renameDiffers(): boolean {
    const { buf, aStart, aEnd, bStart, bEnd } = this
    if (this.aAscii && this.bAscii)
      return aEnd - aStart !== bEnd - bStart || buf.compare(buf, aStart, aEnd, bStart, bEnd) !== 0
    // Two different invalid byte sequences can decode to the same string.
    return buf.utf8Slice(aStart, aEnd) !== buf.utf8Slice(bStart, bEnd)
  }
}

/** An entry from the fields of a line the scanner took (`b` is unused for delete). */
export function buildEntry(op: ScanOp, seq: number, ts: number, a: string, b: string): Entry {
  switch (op) {
    case ScanOp.Write:
      return { seq, op: 'write', path: a, blob: b, ts }
    case ScanOp.Delete:
      return { seq, op: 'delete', path: a, ts }
    default:
      return { seq, op: 'rename', from: a, to: b, ts }
  }
}

/** Reads a field's bytes as a string: latin1 when they are ASCII (the same string, cheaper). */
export function fieldString(buf: Buffer, start: number, end: number, ascii: boolean): string {
  const b = buf as SliceBuffer
  return ascii ? b.latin1Slice(start, end) : b.utf8Slice(start, end)
}

function match(b: Buffer, at: number, key: Uint8Array): boolean {
  for (let k = 0; k < key.length; k++) if (b[at + k] !== key[k]) return false
  return true
}

/** A line that is not a valid entry, with its 1-based number within the lines scanned. */
export class BadLine extends Error {
  constructor(
    readonly lineIndex: number,
    /** Byte offset of the line in the buffer. */
    readonly offset: number,
    readonly error: Error,
  ) {
    super(error.message)
  }
}

export interface ParseOptions {
  /** Check every field of every entry (default true); false: JSON.parse only, as before. */
  validate: boolean
  /** Keep only entries with seq ≥ this. */
  fromSeq: number
  /**
   * Called for a line that is not a valid entry (offset and length in `buf`, the newline
   * included), which is then passed over instead of ending the parse with a BadLine.
   */
  onBad?: (offset: number, length: number, line: string, error: Error) => void
}

/**
 * Parses every line of `buf` (which ends with `\n`) into `out`, skipping empty lines. Returns
 * the number of lines (empty ones included). A bad line throws `BadLine`.
 */
export function parseLines(scanner: LineScanner, buf: Buffer, out: Entry[], options: ParseOptions): number {
  const { validate, fromSeq } = options
  const end = buf.length
  if (end > 0 && buf[end - 1] !== NL) throw new Error('parseLines: the buffer must end with a newline')
  let s = 0
  let lines = 0
  while (s < end) {
    lines++
    let entry: Entry
    if (scanner.take(buf, s)) {
      s = scanner.next
      if (scanner.seq < fromSeq) continue
      entry = scanner.entry()
    } else {
      const nl = buf.indexOf(NL, s)
      if (nl === s) {
        s++
        continue
      }
      const line = buf.toString('utf8', s, nl)
      try {
        entry = validate ? parseEntry(line) : (JSON.parse(line) as Entry)
      } catch (err) {
        if (!options.onBad) throw new BadLine(lines, s, err as Error)
        options.onBad(s, nl + 1 - s, line, err as Error)
        s = nl + 1
        continue
      }
      s = nl + 1
      // Negated so that a line without a numeric seq (validate: false) is skipped, as it always was.
      if (!(entry.seq >= fromSeq)) continue
    }
    out.push(entry)
  }
  return lines
}

/** NOA_CORRUPT_LOG for a bad line of `file`, in the reader's words. */
export function corruptLine(file: string, lineNo: number, startByte: number, err: Error): NoaError {
  const where = startByte === 0 ? `${file}:${lineNo}` : `${file} (line ${lineNo} after byte ${startByte})`
  return Errors.CORRUPT_LOG(`${where}: corrupt entry: ${err.message}`, {
    file,
    line: startByte === 0 ? lineNo : undefined,
  })
}
