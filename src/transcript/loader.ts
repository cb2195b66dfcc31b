/**
 * Reading a transcript. Lines are split the way Norma's `bufio.Scanner` splits them (one `\r`
 * before the `\n` dropped, empty lines skipped, the last line read even without a `\n`), and each
 * is decoded as `json.Unmarshal` into a Record would (a `null` line is a record of zero values).
 *
 * Beyond Norma, which fails the whole load on any bad line and names neither file nor line:
 * - a line that does not decode is an error `<file>:<line>: <reason>` (NOA_BAD_TRANSCRIPT);
 * - a torn final line, i.e. bytes after the last `\n` that are not JSON, is what a crash in the
 *   middle of an append leaves: it is dropped and reported (`tornTail`), and the rest loads.
 *   A final line that is complete JSON but lacks its `\n` is a record (Go reads it too), and
 *   one that is JSON but not a valid record is corruption, not a tear: an error, like any line.
 * `strict: true` gives Norma's behavior back: any bad line, the torn one included, and any line
 * of 64 MiB or more (`bufio.ErrTooLong`) fails the load (still with file and line).
 */
import { NoaError } from '../engine/errors.js'
import { openFile, READ } from '../engine/files.js'
import { decodeBytes, GoSyntaxError, type JsonNode, parseGoJson } from '../gocompat/index.js'
import { DecodeError, decodeRecordNode } from './decode.js'
import type { TranscriptRecord } from './types.js'

/** Norma's scanner buffer: a line and its `\n` must fit in 64 MiB. */
export const MAX_LINE_BYTES = 64 * 1024 * 1024

export interface LoadOptions {
  /**
   * Norma mode: fail on anything Norma's Load fails on (a torn last line, a line of 64 MiB or
   * more), and keep only what Norma's structs keep (keys they have no field for are dropped, so
   * a record written back is what Norma's load-and-save writes).
   */
  strict?: boolean
}

/** The partial last line a crash during an append leaves behind. */
export interface TornTail {
  /** 1-based line number. */
  line: number
  /** Byte offset where it starts (the file's length without it). */
  offset: number
  bytes: number
  /** Why it is not a record (the JSON error). */
  reason: string
}

export interface Transcript {
  /** The path as given. */
  file: string
  /** False for a missing file (which has no records, as in Norma). */
  exists: boolean
  records: TranscriptRecord[]
  /** The 1-based line number of each record, for messages that point into the file. */
  lines: number[]
  tornTail: TornTail | null
  /** Bytes read (the file's size when the load started). */
  bytes: number
}

const NL = 0x0a
const CR = 0x0d
const CHUNK = 1 << 20

/** `go` is Go's error for the line (Norma's Load says `transcript: corrupt line: <go>`). */
export function transcriptError(file: string, line: number, reason: string, go?: string): NoaError {
  return new NoaError('NOA_BAD_TRANSCRIPT', `${file}:${line}: ${reason}`, {
    file,
    line,
    ...(go !== undefined ? { go } : {}),
  })
}

function isBlank(text: string): boolean {
  return /^[ \t\r\n]*$/.test(text)
}

class LineParser {
  readonly records: TranscriptRecord[] = []
  readonly lines: number[] = []
  tornTail: TornTail | null = null

  constructor(
    readonly file: string,
    readonly strict: boolean,
  ) {}

  tooLong(line: number): NoaError {
    return transcriptError(
      this.file,
      line,
      `line of 64 MiB or more: Norma's loader stops here (bufio.Scanner: token too long)`,
    )
  }

  /** One line: bytes [start, end) of buf, without its `\n`; `terminated` when a `\n` followed. */
  line(buf: Buffer, start: number, end: number, line: number, offset: number, terminated: boolean): void {
    if (this.strict && end - start >= MAX_LINE_BYTES) throw this.tooLong(line)
    let e = end
    if (e > start && buf[e - 1] === CR) e--
    if (e === start) return
    // Each byte that is not UTF-8 stays itself (a string's becomes one U+FFFD, as Go decodes it).
    const text = decodeBytes(buf, start, e)
    let node: JsonNode
    try {
      node = parseGoJson(text)
    } catch (err) {
      if (!(err instanceof GoSyntaxError)) throw err
      const reason = isBlank(text) ? 'a line of only whitespace' : `not JSON: ${err.message}`
      if (!terminated && !this.strict) {
        this.tornTail = { line, offset, bytes: end - start, reason }
        return
      }
      throw transcriptError(
        this.file,
        line,
        terminated ? reason : `${reason} (the last line, without a newline: a torn write)`,
        err.message,
      )
    }
    try {
      this.records.push(decodeRecordNode(node, text, { keepUnknown: !this.strict }))
    } catch (err) {
      if (err instanceof DecodeError) throw transcriptError(this.file, line, err.message, err.go)
      throw err
    }
    this.lines.push(line)
  }
}

/** Splits one buffer holding the whole text into lines. */
function parseBuffer(p: LineParser, buf: Buffer): void {
  let pos = 0
  let line = 1
  for (;;) {
    const nl = buf.indexOf(NL, pos)
    if (nl < 0) break
    p.line(buf, pos, nl, line, pos, true)
    pos = nl + 1
    line++
  }
  if (pos < buf.length) p.line(buf, pos, buf.length, line, pos, false)
}

export interface ParseOptions extends LoadOptions {
  /** Name used in error messages. Default `<transcript>`. */
  file?: string
}

/** A transcript held in memory (a file's bytes or text). */
export function parseTranscript(data: string | Uint8Array, options: ParseOptions = {}): Transcript {
  const file = options.file ?? '<transcript>'
  const buf =
    typeof data === 'string'
      ? Buffer.from(data, 'utf8')
      : Buffer.from(data.buffer, data.byteOffset, data.byteLength)
  const p = new LineParser(file, options.strict ?? false)
  parseBuffer(p, buf)
  return { file, exists: true, records: p.records, lines: p.lines, tornTail: p.tornTail, bytes: buf.length }
}

/**
 * Loads a transcript file. A missing file gives no records (`exists: false`). Reads up to the
 * size the file has when the load starts: a line being appended meanwhile shows as a torn tail.
 */
export async function loadTranscript(file: string, options: LoadOptions = {}): Promise<Transcript> {
  let handle: Awaited<ReturnType<typeof openFile>>
  try {
    // A symlink, FIFO or folder under a transcript's name is refused (NOA_NOT_REGULAR_FILE):
    // never read through to another file, never wait on a pipe.
    handle = await openFile(file, READ, { what: 'transcript' })
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
      return { file, exists: false, records: [], lines: [], tornTail: null, bytes: 0 }
    }
    throw err
  }
  const p = new LineParser(file, options.strict ?? false)
  let size = 0
  try {
    size = (await handle.stat()).size
    if (size <= CHUNK) {
      const buf = Buffer.allocUnsafe(size)
      let got = 0
      while (got < size) {
        const { bytesRead } = await handle.read(buf, got, size - got, got)
        if (bytesRead === 0) break
        got += bytesRead
      }
      parseBuffer(p, buf.subarray(0, got))
      size = got
    } else {
      size = await parseChunks(p, handle, size)
    }
  } finally {
    await handle.close()
  }
  return { file, exists: true, records: p.records, lines: p.lines, tornTail: p.tornTail, bytes: size }
}

/** Large files: a chunk at a time, a line spanning chunks joined once its `\n` is found. */
async function parseChunks(
  p: LineParser,
  handle: Awaited<ReturnType<typeof openFile>>,
  size: number,
): Promise<number> {
  let pos = 0
  let line = 1
  let lineStart = 0
  let pieces: Buffer[] = []
  let pieceBytes = 0
  while (pos < size) {
    // A fresh buffer per read: the pieces of a long line keep pointing into earlier ones.
    const buf = Buffer.allocUnsafe(Math.min(CHUNK, size - pos))
    const { bytesRead } = await handle.read(buf, 0, buf.length, pos)
    if (bytesRead === 0) break
    let at = 0
    for (;;) {
      const nl = buf.indexOf(NL, at)
      if (nl < 0 || nl >= bytesRead) {
        if (at < bytesRead) {
          pieces.push(buf.subarray(at, bytesRead))
          pieceBytes += bytesRead - at
          if (p.strict && pieceBytes >= MAX_LINE_BYTES) throw p.tooLong(line)
        }
        break
      }
      if (pieces.length === 0) {
        p.line(buf, at, nl, line, lineStart, true)
      } else {
        pieces.push(buf.subarray(at, nl))
        const joined = Buffer.concat(pieces)
        pieces = []
        pieceBytes = 0
        p.line(joined, 0, joined.length, line, lineStart, true)
      }
      line++
      at = nl + 1
      lineStart = pos + at
    }
    pos += bytesRead
  }
  if (pieces.length > 0) {
    const joined = Buffer.concat(pieces)
    p.line(joined, 0, joined.length, line, lineStart, false)
  }
  return pos
}
