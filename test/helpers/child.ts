/**
 * A script in a process of its own that the test steps through: it prints one JSON object a
 * line (`{ "event": … }`) and, where it waits, reads one line of stdin before it goes on.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { onTestFinished } from 'vitest'

export interface ChildEvent {
  event: string
  [key: string]: unknown
}

export class SteppedChild {
  readonly child: ChildProcess
  readonly pid: number
  private readonly events: ChildEvent[] = []
  private wake: (() => void) | null = null
  private stderr = ''
  private code: number | null | undefined = undefined
  readonly exited: Promise<number | null>

  constructor(script: string, args: string[], env: NodeJS.ProcessEnv = {}) {
    const child = spawn(process.execPath, [script, ...args], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    })
    this.child = child
    this.pid = child.pid as number
    let out = ''
    child.stdout?.on('data', (d) => {
      out += d
      for (let nl = out.indexOf('\n'); nl >= 0; nl = out.indexOf('\n')) {
        const line = out.slice(0, nl)
        out = out.slice(nl + 1)
        if (line.trim() !== '') this.events.push(JSON.parse(line) as ChildEvent)
      }
      this.wake?.()
    })
    child.stderr?.on('data', (d) => {
      this.stderr += d
    })
    this.exited = new Promise((resolve) => {
      child.on('exit', (code) => {
        this.code = code
        this.wake?.()
        resolve(code)
      })
    })
    onTestFinished(async () => {
      if (this.code === undefined) {
        child.kill('SIGKILL')
        await this.exited
      }
    })
  }

  /** The next event named `name` (events before it are passed over), or an error naming what went wrong. */
  async next(name: string, timeoutMs = 30_000): Promise<ChildEvent> {
    const deadline = performance.now() + timeoutMs
    for (;;) {
      const i = this.events.findIndex((e) => e.event === name)
      if (i >= 0) return this.events.splice(0, i + 1)[i] as ChildEvent
      if (this.code !== undefined) {
        throw new Error(`the child exited (${this.code}) before "${name}": ${this.stderr}`)
      }
      const left = deadline - performance.now()
      if (left <= 0) throw new Error(`no "${name}" from the child within ${timeoutMs} ms: ${this.stderr}`)
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left) // a bound on the wait, not a synchronisation
        this.wake = () => {
          clearTimeout(timer)
          resolve()
        }
      })
      this.wake = null
    }
  }

  /** Lets a waiting child go on. */
  go(): void {
    this.child.stdin?.write('go\n')
  }

  /** Resolves with the exit code once the child ends; rejects with its stderr if it is not 0. */
  async done(): Promise<void> {
    const code = await this.exited
    if (code !== 0) throw new Error(`the child exited with ${code}: ${this.stderr}`)
  }
}

/** Lines of /proc/locks that name `pid` (Linux; null where there is no /proc/locks). */
export function locksOf(pid: number, text: string | null): string[] | null {
  if (text === null) return null
  return text.split('\n').filter((l) => {
    // `1: FLOCK  ADVISORY  WRITE 24595 fe:00:2214723 0 EOF` (a waiter has `->` before its kind)
    const t = l.trim().split(/\s+/)
    const kind = t.findIndex((x) => x === 'FLOCK' || x === 'POSIX' || x === 'OFDLCK' || x === 'LEASE')
    return kind >= 0 && t[kind + 3] === String(pid)
  })
}
