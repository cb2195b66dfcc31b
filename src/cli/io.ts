import { isUtf8 } from 'node:buffer'
import { readSync } from 'node:fs'
import { isatty } from 'node:tty'

/** Where a command reads and writes, so tests and embedders can run `main` in process. */
export interface CliIo {
  stdin: NodeJS.ReadableStream
  stdout: NodeJS.WritableStream
  stderr: NodeJS.WritableStream
  env: NodeJS.ProcessEnv
  /** Whether stderr is a terminal (progress lines are drawn only there). */
  isTTY: boolean
  /** Whether stdin is a terminal (a command reading it says so first); false when omitted. */
  stdinIsTTY?: boolean
  /** The descriptor `stdin` reads, when it is the process's own: readInput reads it directly. */
  stdinFd?: number
}

export function processIo(): CliIo {
  swallowClosedPipe(process.stdout)
  swallowClosedPipe(process.stderr)
  return {
    // Made only for a command that reads it as a stream: making process.stdin (a socket or file
    // stream and its machinery) is 1.5-2.5 ms of a fresh process.
    get stdin() {
      return process.stdin
    },
    stdinFd: 0,
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
    isTTY: Boolean(process.stderr.isTTY),
    stdinIsTTY: isatty(0),
  }
}

const guarded = new WeakSet<NodeJS.WritableStream>()

/**
 * A write to a pipe whose reader is gone (`noa log w | head -1`) fails with EPIPE, and Node
 * also emits the error as an 'error' event, which unhandled kills the process with a stack
 * trace. The failed write's own callback still gets the error, so `write()` rejects and the
 * command unwinds; main's watchPipes decides what the error means. Installed once per stream
 * and never removed, since an unawaited write (help text) can fail after main has returned.
 */
function swallowClosedPipe(stream: NodeJS.WritableStream): void {
  if (guarded.has(stream)) return
  guarded.add(stream)
  stream.on('error', () => {})
}

/** Whether `err` is what a write gives once the reader of its pipe has gone. */
export function isClosedPipeError(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | null)?.code
  // After the EPIPE the stream is destroyed, and later writes fail with this instead.
  return code === 'EPIPE' || code === 'ERR_STREAM_DESTROYED'
}

export interface PipeWatch {
  /** The reader of stdout or stderr went away. */
  closed(): boolean
  /** The first other write error of stdout or stderr (a full disk), if any. */
  failed(): Error | null
  dispose(): void
}

/**
 * Watches the command's stdout and stderr while it runs, so that main can tell "the reader went
 * away" (exit 0, as git does) from an EPIPE of anything else, and so that an output that could
 * not be written (ENOSPC) fails the command even where its write was not awaited.
 */
export function watchPipes(io: CliIo): PipeWatch {
  let closed = false
  let failed: Error | null = null
  const onError = (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') closed = true
    else failed ??= err
  }
  const streams = [io.stdout, io.stderr]
  for (const s of streams) s.on('error', onError)
  return {
    closed: () => closed,
    failed: () => failed,
    dispose: () => {
      for (const s of streams) s.removeListener('error', onError)
    },
  }
}

export async function readAll(stream: NodeJS.ReadableStream, chunks: Buffer[] = []): Promise<Buffer> {
  for await (const chunk of stream)
    chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer))
  return Buffer.concat(chunks)
}

/**
 * All of stdin. The process's own (not a terminal) is read from its descriptor with blocking
 * reads, which a one-shot command can afford, instead of through a stream; a descriptor left
 * non-blocking by whoever passed it (EAGAIN) goes on through the stream after what was read.
 */
export async function readInput(io: CliIo): Promise<Buffer> {
  const fd = io.stdinFd
  if (fd === undefined || io.stdinIsTTY) return readAll(io.stdin)
  const chunks: Buffer[] = []
  for (;;) {
    const buf = Buffer.allocUnsafe(1 << 16)
    let n: number
    try {
      n = readSync(fd, buf, 0, buf.length, null)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EAGAIN') return readAll(io.stdin, chunks)
      throw err
    }
    if (n === 0) return Buffer.concat(chunks)
    chunks.push(buf.subarray(0, n))
  }
}

/** Writes and waits for the stream to take it (backpressure on large outputs). */
export function write(stream: NodeJS.WritableStream, data: string | Uint8Array): Promise<void> {
  return new Promise((resolve, reject) => {
    stream.write(data, (err) => (err ? reject(err) : resolve()))
  })
}

/**
 * The non-blank lines of JSONL read from stdin (a trailing `\r` dropped), each parsed, with its
 * 1-based line number. `fail(line, reason)` makes the error thrown for a line that is not JSON.
 */
export function* jsonLines(
  text: string,
  fail: (line: number, reason: string) => Error,
): Generator<{ line: number; text: string; value: unknown }> {
  const lines = text.split('\n')
  for (let i = 0; i < lines.length; i++) {
    const line = (lines[i] as string).replace(/\r$/, '')
    if (line.trim() === '') continue
    let value: unknown
    try {
      value = JSON.parse(line)
    } catch (err) {
      throw fail(i + 1, `not JSON: ${(err as Error).message}`)
    }
    yield { line: i + 1, text: line, value }
  }
}

/** Where the first invalid UTF-8 sequence of `buf` starts (byte offset, 1-based line), or null. */
export function invalidUtf8(buf: Uint8Array): { offset: number; line: number; column: number } | null {
  if (isUtf8(buf)) return null
  let i = 0
  while (i < buf.length) {
    const n = utf8Length(buf, i)
    if (n === 0) break
    i += n
  }
  let line = 1
  let lineStart = 0
  for (let j = buf.indexOf(0x0a); j >= 0 && j < i; j = buf.indexOf(0x0a, j + 1)) {
    line++
    lineStart = j + 1
  }
  return { offset: i, line, column: i - lineStart + 1 }
}

/** Length of the valid UTF-8 sequence at `i` (Go's utf8.Valid rules: no overlongs, no surrogates), 0 if none. */
function utf8Length(buf: Uint8Array, i: number): number {
  const b = buf[i] as number
  if (b < 0x80) return 1
  const cont = (k: number, lo = 0x80, hi = 0xbf) => {
    const c = buf[i + k]
    return c !== undefined && c >= lo && c <= hi
  }
  if (b >= 0xc2 && b <= 0xdf) return cont(1) ? 2 : 0
  if (b >= 0xe0 && b <= 0xef) {
    const lo = b === 0xe0 ? 0xa0 : 0x80
    const hi = b === 0xed ? 0x9f : 0xbf
    return cont(1, lo, hi) && cont(2) ? 3 : 0
  }
  if (b >= 0xf0 && b <= 0xf4) {
    const lo = b === 0xf0 ? 0x90 : 0x80
    const hi = b === 0xf4 ? 0x8f : 0xbf
    return cont(1, lo, hi) && cont(2) && cont(3) ? 4 : 0
  }
  return 0
}

export function json(value: unknown): string {
  return `${JSON.stringify(value)}\n`
}
