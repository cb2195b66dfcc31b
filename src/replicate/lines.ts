/**
 * Small readers over stored lines, for replication: the seq and ts of a line without a full
 * parse, and a cursor that reads the line holding a given seq (sequentially when the seqs asked
 * for follow one another, by binary search otherwise).
 */
import type { FileHandle } from 'node:fs/promises'
import { parseCounters } from '../engine/entry.js'
import { openFile, READ } from '../engine/files.js'
import { seekSeq } from '../engine/reader.js'

const NL = 0x0a
const PREFIX = Buffer.from('{"seq":', 'latin1')
const TS_KEY = Buffer.from(',"ts":', 'latin1')

function digitsAt(buf: Uint8Array, start: number, end: number): number {
  let n = 0
  for (let i = start; i < end; i++) {
    const d = (buf[i] as number) - 0x30
    if (d < 0 || d > 9) return -1
    n = n * 10 + d
  }
  return end > start && n <= Number.MAX_SAFE_INTEGER ? n : -1
}

/**
 * seq and ts of a stored line (without its `\n`). Lines noa writes begin `{"seq":N,` and end
 * `,"ts":T}`; those are read in place, anything else goes through the full parser (which
 * throws a NoaError naming the problem).
 */
export function countersOf(line: Uint8Array): { seq: number; ts: number } {
  const buf = Buffer.from(line.buffer, line.byteOffset, line.byteLength)
  if (buf.length > PREFIX.length + TS_KEY.length + 2 && buf.subarray(0, PREFIX.length).equals(PREFIX)) {
    const comma = buf.indexOf(0x2c, PREFIX.length)
    const tsAt = buf.lastIndexOf(TS_KEY)
    if (comma > 0 && tsAt > comma && buf[buf.length - 1] === 0x7d) {
      const seq = digitsAt(buf, PREFIX.length, comma)
      const ts = digitsAt(buf, tsAt + TS_KEY.length, buf.length - 1)
      if (seq >= 1 && ts >= 0) return { seq, ts }
    }
  }
  return parseCounters(buf.toString('utf8'))
}

/** Reads lines of one log by seq; cheap when asked for seq, seq+1, seq+2, … */
export class SeqCursor {
  private handle: FileHandle | null = null
  private buf = Buffer.allocUnsafe(64 * 1024)
  /** File offset of buf[0] and how many bytes of buf are filled. */
  private bufPos = 0
  private bufLen = 0
  /** Offset of the next line and the seq it should hold (0: unknown). */
  private pos = 0
  private nextSeq = 0

  constructor(readonly file: string) {}

  /** The stored bytes (without `\n`) of the line with this seq, or null if the log has none. */
  async lineAt(seq: number): Promise<Buffer | null> {
    this.handle ??= await openFile(this.file, READ, { what: 'workspace log' })
    if (seq !== this.nextSeq) {
      this.pos = seekSeq(this.file, seq)
      this.bufLen = 0
    }
    const line = await this.readLine()
    if (line === null) {
      this.nextSeq = 0
      return null
    }
    const at = countersOf(line).seq
    if (at !== seq) {
      this.nextSeq = 0
      return null
    }
    this.nextSeq = seq + 1
    return line
  }

  private async readLine(): Promise<Buffer | null> {
    const handle = this.handle as FileHandle
    for (;;) {
      const from = this.pos - this.bufPos
      if (from >= 0 && from < this.bufLen) {
        const nl = this.buf.indexOf(NL, from)
        if (nl >= 0 && nl < this.bufLen) {
          const line = Buffer.from(this.buf.subarray(from, nl))
          this.pos = this.bufPos + nl + 1
          return line
        }
      }
      // Refill from pos; grow when one line does not fit.
      const have = from >= 0 && from < this.bufLen ? this.bufLen - from : 0
      if (have === this.buf.length) this.buf = Buffer.concat([this.buf, Buffer.allocUnsafe(this.buf.length)])
      if (have > 0) this.buf.copy(this.buf, 0, from, this.bufLen)
      this.bufPos = this.pos
      this.bufLen = have
      const { bytesRead } = await handle.read(this.buf, have, this.buf.length - have, this.pos + have)
      if (bytesRead === 0) return null // no complete line there (yet)
      this.bufLen += bytesRead
    }
  }

  async close(): Promise<void> {
    const h = this.handle
    this.handle = null
    this.nextSeq = 0
    if (h) await h.close()
  }
}

/** The line holding `seq` in `file`, or null. */
export async function lineAtSeq(file: string, seq: number): Promise<Buffer | null> {
  const cursor = new SeqCursor(file)
  try {
    return await cursor.lineAt(seq)
  } finally {
    await cursor.close()
  }
}

export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(b)
}
