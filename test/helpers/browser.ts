/**
 * The web UI's tests: `noa ui` in its own process, and a headless Chromium (Debian's `chromium`
 * package, or NOA_CHROMIUM) driven by playwright-core through its executable path. Without a
 * Chromium the browser tests say so in one line, with the command that installs it, and skip.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { delimiter, join } from 'node:path'
import { CLI } from './index.js'

export const CHROMIUM_INSTALL = 'sudo apt-get install chromium (or set NOA_CHROMIUM to a Chromium binary)'

/** The Chromium to drive, or null. */
export function chromiumBinary(env: NodeJS.ProcessEnv = process.env): string | null {
  if (env.NOA_CHROMIUM) return existsSync(env.NOA_CHROMIUM) ? env.NOA_CHROMIUM : null
  for (const dir of [...(env.PATH ?? '').split(delimiter), '/usr/bin']) {
    for (const name of ['chromium', 'chromium-browser']) {
      const candidate = join(dir, name)
      if (dir && existsSync(candidate)) return candidate
    }
  }
  return null
}

export interface UiProcess {
  child: ChildProcess
  /** The URL printed, with its token. */
  url: string
  /** http://127.0.0.1:PORT */
  base: string
  token: string
  stop(): Promise<void>
}

/** Starts `noa <args> --json` and waits for the line that names the web view's URL. */
export function startUi(args: string[], key = 'url'): Promise<UiProcess> {
  const child = spawn(process.execPath, [CLI, ...args, '--json'], { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  let err = ''
  child.stderr?.on('data', (d) => {
    err += d
  })
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`noa ${args[0]} did not start: ${err}`)), 30_000)
    child.on('exit', (code) => {
      clearTimeout(timer)
      reject(new Error(`noa ${args[0]} exited ${code}: ${err}`))
    })
    child.stdout?.on('data', (d) => {
      out += d
      const nl = out.indexOf('\n')
      if (nl < 0) return
      clearTimeout(timer)
      child.removeAllListeners('exit')
      const url = String((JSON.parse(out.slice(0, nl)) as Record<string, unknown>)[key])
      const u = new URL(url)
      resolve({
        child,
        url,
        base: `${u.protocol}//${u.host}`,
        token: u.searchParams.get('token') ?? '',
        stop: () =>
          new Promise<void>((done) => {
            if (child.exitCode !== null) return done()
            child.once('exit', () => done())
            child.kill('SIGTERM')
          }),
      })
    })
  })
}
