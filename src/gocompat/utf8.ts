/**
 * Bytes that are not UTF-8, the way Go sees them. A Go string is bytes; `utf8.DecodeRune` takes
 * one invalid byte at a time (`a\xe2\x82b` is four runes: a, RuneError, RuneError, b), where the
 * WHATWG decoder behind Buffer#toString folds `\xe2\x82` into one U+FFFD. Go's JSON decoder turns
 * each such byte of a string into U+FFFD, but keeps a `json.RawMessage` byte for byte.
 *
 * So that both can be done on JavaScript strings, bytes are decoded with each invalid byte
 * carried as a lone low surrogate U+DC80..U+DCFF (Python's "surrogateescape"): UTF-8 text can
 * never produce a lone surrogate, so the byte is known again when the text is written.
 */
import { isUtf8 } from 'node:buffer'

/** Where each byte sequence starting with `b0` may go on (Go's `utf8` accept ranges). */
function sequenceLength(buf: Uint8Array, i: number, end: number): number {
  const b0 = buf[i] as number
  if (b0 < 0x80) return 1
  let n: number
  let lo = 0x80
  let hi = 0xbf
  if (b0 >= 0xc2 && b0 <= 0xdf) n = 2
  else if (b0 >= 0xe0 && b0 <= 0xef) {
    n = 3
    if (b0 === 0xe0) lo = 0xa0
    else if (b0 === 0xed) hi = 0x9f // no surrogates
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    n = 4
    if (b0 === 0xf0) lo = 0x90
    else if (b0 === 0xf4) hi = 0x8f // nothing above U+10FFFF
  } else return 0
  if (i + n > end) return 0
  const b1 = buf[i + 1] as number
  if (b1 < lo || b1 > hi) return 0
  for (let k = 2; k < n; k++) {
    const b = buf[i + k] as number
    if (b < 0x80 || b > 0xbf) return 0
  }
  return n
}

/** Offset of the first byte that does not start a valid UTF-8 sequence, or -1. */
export function invalidUtf8Offset(buf: Uint8Array, start = 0, end = buf.length): number {
  if (isUtf8(buf.subarray(start, end))) return -1
  for (let i = start; i < end; ) {
    const n = sequenceLength(buf, i, end)
    if (n === 0) return i
    i += n
  }
  return -1
}

/** The text of `buf[start, end)`, each byte that is not UTF-8 carried as U+DC80 + (byte - 0x80). */
export function decodeBytes(buf: Uint8Array, start = 0, end = buf.length): string {
  const view = buf.subarray(start, end)
  if (isUtf8(view)) return Buffer.from(view.buffer, view.byteOffset, view.byteLength).toString('utf8')
  let out = ''
  let run = start
  for (let i = start; i < end; ) {
    const n = sequenceLength(buf, i, end)
    if (n > 0) {
      i += n
      continue
    }
    if (run < i) out += Buffer.from(buf.buffer, buf.byteOffset + run, i - run).toString('utf8')
    out += String.fromCharCode(0xdc00 + (buf[i] as number))
    i++
    run = i
  }
  if (run < end) out += Buffer.from(buf.buffer, buf.byteOffset + run, end - run).toString('utf8')
  return out
}

/** Whether code unit `i` of `s` is an escaped byte (a low surrogate U+DC80..U+DCFF with no high one before it). */
export function isEscapedByte(s: string, i: number): boolean {
  const c = s.charCodeAt(i)
  if (c < 0xdc80 || c > 0xdcff) return false
  const p = i > 0 ? s.charCodeAt(i - 1) : 0
  return !(p >= 0xd800 && p <= 0xdbff)
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

/** Whether the text holds a lone surrogate (not well-formed Unicode; never from UTF-8 input). */
export function hasLoneSurrogate(s: string): boolean {
  return LONE_SURROGATE.test(s)
}

/**
 * The bytes of text decoded by `decodeBytes`: UTF-8, with each escaped byte written back as
 * itself. Any other lone surrogate becomes U+FFFD, as Buffer.from does.
 */
export function encodeBytes(s: string): Buffer {
  if (!hasLoneSurrogate(s)) return Buffer.from(s, 'utf8')
  const parts: Buffer[] = []
  let run = 0
  for (let i = 0; i < s.length; i++) {
    if (!isEscapedByte(s, i)) continue
    if (run < i) parts.push(Buffer.from(s.slice(run, i), 'utf8'))
    parts.push(Buffer.of(s.charCodeAt(i) - 0xdc00))
    run = i + 1
  }
  if (run < s.length) parts.push(Buffer.from(s.slice(run), 'utf8'))
  return Buffer.concat(parts)
}

/** The first UTF-8 byte of the character at `i` (an escaped byte gives that byte). */
export function firstByteAt(s: string, i: number): number {
  const c = s.codePointAt(i) as number
  if (isEscapedByte(s, i)) return c - 0xdc00
  if (c < 0x80) return c
  if (c < 0x800) return 0xc0 | (c >> 6)
  if (c < 0x10000) return 0xe0 | (c >> 12)
  return 0xf0 | (c >> 18)
}

/** Byte length of `s[0, i)` as `encodeBytes` writes it. */
export function byteOffsetOf(s: string, i: number): number {
  let n = 0
  for (let k = 0; k < i; k++) {
    const c = s.charCodeAt(k)
    if (c < 0x80) n += 1
    else if (c < 0x800) n += 2
    else if (c >= 0xd800 && c <= 0xdbff && k + 1 < i) {
      const d = s.charCodeAt(k + 1)
      if (d >= 0xdc00 && d <= 0xdfff) {
        n += 4
        k++
      } else n += 3
    } else if (isEscapedByte(s, k)) n += 1
    else n += 3
  }
  return n
}

/** Where input stops being UTF-8: 1-based line, 1-based byte within it, offset in the input, the byte. */
export interface Utf8Problem {
  line: number
  column: number
  offset: number
  byte: number
}

export function findInvalidUtf8(buf: Uint8Array): Utf8Problem | undefined {
  const at = invalidUtf8Offset(buf)
  if (at < 0) return undefined
  let line = 1
  let lineStart = 0
  for (let i = buf.indexOf(0x0a); i >= 0 && i < at; i = buf.indexOf(0x0a, i + 1)) {
    line++
    lineStart = i + 1
  }
  return { line, column: at - lineStart + 1, offset: at, byte: buf[at] as number }
}

/** `byte 7 of the line (offset 40 of the input, 0xe2) is not UTF-8` */
export function describeInvalidUtf8(p: Utf8Problem, what = 'the input'): string {
  return `byte ${p.column} of the line (offset ${p.offset} of ${what}, 0x${p.byte.toString(16).padStart(2, '0')}) is not UTF-8`
}
