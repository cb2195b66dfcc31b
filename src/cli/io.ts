/** Where a command reads and writes, so tests and embedders can run `main` in process. */
export interface CliIo {
  stdin: NodeJS.ReadableStream
  stdout: NodeJS.WritableStream
  stderr: NodeJS.WritableStream
  env: NodeJS.ProcessEnv
  /** Whether stderr is a terminal (progress lines are drawn only there). */
  isTTY: boolean
}

export function processIo(): CliIo {
  return {
    stdin: process.stdin,
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
    isTTY: Boolean(process.stderr.isTTY),
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
