/**
 * Helpers for the daemon's tests: a real `noa serve` in its own process, and a bare line client
 * that speaks the wire protocol byte for byte (so tests can send what a well-behaved client
 * never would).
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { connect, type Socket } from 'node:net'
import { join } from 'node:path'
import { onTestFinished } from 'vitest'
import { CLI, ROOT_DIR, tempDir } from './index.js'

/** The io fixture that holds commits while a file exists (test/fixtures/hold-commit-io.mjs). */
export const HOLD_IO = new URL('test/fixtures/hold-commit-io.mjs', `file://${ROOT_DIR}/`).href

/**
 * Commits held until the test lets them go: `log` are the AgentLog options of a daemon whose
 * every commit waits while `hold()` is in force; `held()` counts the commits that waited.
 */
export function commitGate(held = false) {
  const file = join(tempDir(), 'hold')
  const hold = () => writeFileSync(file, '')
  const release = () => rmSync(file, { force: true })
  if (held) hold()
  return {
    file,
    // Held in a worker (the lone lane's owner would hold the caller's thread itself).
    log: {
      workers: 1,
      inlineCommit: false,
      loneInThread: false,
      ioModule: HOLD_IO,
      ioOptions: { hold: file },
    },
    hold,
    release,
    held: () =>
      existsSync(`${file}.held`) ? readFileSync(`${file}.held`, 'utf8').split('\n').length - 1 : 0,
  }
}

/**
 * Waits until `check` holds, looking again every few milliseconds; `timeoutMs` only bounds a
 * failure (a condition that never comes), it decides nothing.
 */
export async function until(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 5))
  }
}

export interface DaemonProcess {
  child: ChildProcess
  pid: number
  info: { root: string; socket: string; tcp: string | null; pid: number }
  /** Everything the daemon wrote to stderr so far. */
  stderr(): string
  /** Sends the signal and resolves with how the process ended. */
  stop(signal?: NodeJS.Signals): Promise<{ code: number | null; signal: NodeJS.Signals | null }>
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
}

/**
 * Starts `noa serve --root ROOT --json …` and resolves once it listens (its first stdout line).
 * `script`: another entry point than the command's, given the same arguments (a fixture that
 * runs the command's own code with a test seam).
 */
export function startDaemon(
  root: string,
  args: string[] = [],
  options: { env?: NodeJS.ProcessEnv; umask?: number; script?: string } = {},
): Promise<DaemonProcess> {
  const argv = [options.script ?? CLI, 'serve', '--root', root, '--json', ...args]
  // A umask for the daemon alone: through a shell, since Node sets none for a child.
  const child =
    options.umask === undefined
      ? spawn(process.execPath, argv, {
          stdio: ['ignore', 'pipe', 'pipe'],
          env: { ...process.env, ...options.env },
        })
      : spawn(
          'sh',
          ['-c', `umask ${options.umask.toString(8)} && exec "$0" "$@"`, process.execPath, ...argv],
          {
            stdio: ['ignore', 'pipe', 'pipe'],
            env: { ...process.env, ...options.env },
          },
        )
  let stderr = ''
  let stdout = ''
  child.stderr?.on('data', (d) => {
    stderr += d
  })
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  )
  onTestFinished(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL')
      await exited
    }
  })
  return new Promise((resolve, reject) => {
    child.stdout?.on('data', (d) => {
      stdout += d
      const nl = stdout.indexOf('\n')
      if (nl < 0) return
      const info = JSON.parse(stdout.slice(0, nl))
      resolve({
        child,
        pid: child.pid as number,
        info,
        stderr: () => stderr,
        stop: (signal = 'SIGTERM') => {
          child.kill(signal)
          return exited
        },
        exited,
      })
    })
    exited.then(({ code, signal }) =>
      reject(new Error(`noa serve exited (${code ?? signal}) before listening: ${stderr}`)),
    )
  })
}

/** `promise`, or a failure after `ms` (a failure bound: it decides nothing when the promise comes). */
export function within<T>(ms: number, what: string, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms)
  })
  return Promise.race([promise, late]).finally(() => clearTimeout(timer))
}

/** A process's resident memory now and at its peak (VmRSS, VmHWM), in bytes (Linux). */
export function memoryOf(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB$`, 'm').exec(status)?.[1]) * 1024
  return { rss: kb('VmRSS'), peak: kb('VmHWM') }
}

/** A bare protocol client: sends raw lines, reads answers one at a time. */
export class LineClient {
  readonly socket: Socket
  private buf = ''
  private readonly queue: unknown[] = []
  private waiter: ((v: unknown) => void) | null = null
  readonly closed: Promise<void>

  constructor(target: string | { host: string; port: number }) {
    this.socket = typeof target === 'string' ? connect(target) : connect(target.port, target.host)
    this.socket.setEncoding('utf8')
    this.socket.on('data', (d: string) => {
      this.buf += d
      for (let nl = this.buf.indexOf('\n'); nl >= 0; nl = this.buf.indexOf('\n')) {
        const line = this.buf.slice(0, nl)
        this.buf = this.buf.slice(nl + 1)
        this.push(JSON.parse(line))
      }
    })
    this.closed = new Promise((resolve) => {
      this.socket.on('close', () => {
        this.push(null)
        resolve()
      })
    })
    this.socket.on('error', () => {})
    onTestFinished(() => {
      this.socket.destroy()
    })
  }

  static async open(target: string | { host: string; port: number }): Promise<LineClient> {
    const c = new LineClient(target)
    await new Promise<void>((resolve, reject) => {
      c.socket.once('connect', resolve)
      c.socket.once('error', reject)
    })
    return c
  }

  private push(msg: unknown): void {
    if (this.waiter) {
      const w = this.waiter
      this.waiter = null
      w(msg)
    } else this.queue.push(msg)
  }

  send(msg: object | string): void {
    this.socket.write(typeof msg === 'string' ? msg : `${JSON.stringify(msg)}\n`)
  }

  /** The next answer, or null once the daemon closed the connection. */
  // biome-ignore lint/suspicious/noExplicitAny: answers are checked by the tests
  next(): Promise<any> {
    if (this.queue.length > 0) return Promise.resolve(this.queue.shift())
    return new Promise((resolve) => {
      this.waiter = resolve
    })
  }

  // biome-ignore lint/suspicious/noExplicitAny: answers are checked by the tests
  async call(msg: object): Promise<any> {
    this.send(msg)
    return this.next()
  }

  async hello(token?: string): Promise<void> {
    const r = await this.call(
      token === undefined ? { id: 0, op: 'hello', v: 1 } : { id: 0, op: 'hello', v: 1, token },
    )
    if (!r?.ok) throw new Error(`hello refused: ${JSON.stringify(r)}`)
  }
}
