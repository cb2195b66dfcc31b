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
}

export function processIo(): CliIo {
  swallowClosedPipe(process.stdout)
  swallowClosedPipe(process.stderr)
  return {
    stdin: process.stdin,
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
    isTTY: Boolean(process.stderr.isTTY),
    stdinIsTTY: Boolean(process.stdin.isTTY),
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

export async function readAll(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of stream)
    chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer))
  return Buffer.concat(chunks)
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

export function json(value: unknown): string {
  return `${JSON.stringify(value)}\n`
}
