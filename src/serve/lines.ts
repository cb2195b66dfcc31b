/**
 * Splitting a byte stream into lines with a bound: a peer that never sends a newline cannot
 * make the other side buffer without limit. Lines are cut on bytes (a newline byte never occurs
 * inside a UTF-8 sequence) and must be valid UTF-8: decoding would turn a bad sequence into
 * U+FFFD, and two different byte paths would become one.
 */
import { isUtf8 } from 'node:buffer'
import { Errors, type NoaError } from '../engine/errors.js'

const NL = 0x0a

export class LineReader {
  private parts: Buffer[] = []
  private size = 0

  /** `max`: longest line in bytes, its newline not counted. May be changed between pushes. */
  constructor(public max: number) {}

  /** Bytes held of a line not yet complete. */
  get pending(): number {
    return this.size
  }

  /**
   * Calls `onLine` with each complete line (without its newline, a trailing `\r` kept), in order,
   * while `more()` says so: it stops after the line at which `more()` turned false and returns
   * how many bytes of `chunk` it used (all of them unless it stopped); the caller keeps the rest
   * for a later push. Throws NOA_TOO_LARGE once a line is longer than `max`, NOA_PROTOCOL for
   * invalid UTF-8; the reader must not be used after it threw.
   */
  push(chunk: Buffer, onLine: (line: string) => void, more: () => boolean = always): number {
    let start = 0
    for (let nl = chunk.indexOf(NL, start); nl >= 0; nl = chunk.indexOf(NL, start)) {
      const piece = chunk.subarray(start, nl)
      start = nl + 1
      let line: Buffer
      if (this.size === 0) line = piece
      else {
        this.parts.push(piece)
        line = Buffer.concat(this.parts, this.size + piece.length)
        this.parts = []
        this.size = 0
      }
      if (line.length > this.max) throw lineTooLong(line.length, this.max)
      if (!isUtf8(line)) {
        throw Errors.PROTOCOL('a line is not valid UTF-8 (noa keeps bytes as given or refuses them)')
      }
      onLine(line.toString('utf8'))
      if (!more()) return start
    }
    if (start < chunk.length) {
      const rest = chunk.subarray(start)
      this.size += rest.length
      if (this.size > this.max) throw lineTooLong(this.size, this.max)
      // Copied: the caller's buffer may be reused after this returns.
      this.parts.push(Buffer.from(rest))
    }
    return chunk.length
  }
}

const always = () => true

function lineTooLong(bytes: number, max: number): NoaError {
  return Errors.TOO_LARGE(
    `a line of more than ${max} bytes (${bytes} so far) is over the limit (noa serve --max-line-bytes)`,
    { bytes, limit: max },
  )
}
