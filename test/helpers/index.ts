/**
 * Shared test helpers. Tests run against the built package (dist/), the same code the CLI and
 * the owner workers load; `npm test` builds first.
 */
import { spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PassThrough, Writable } from 'node:stream'
import { fileURLToPath } from 'node:url'
import { onTestFinished } from 'vitest'

export const ROOT_DIR = fileURLToPath(new URL('../..', import.meta.url))
export const DIST = join(ROOT_DIR, 'dist', 'src')
/** The command as installed (package.json "bin"): the CommonJS entry the build makes. */
export const CLI = join(DIST, 'cli', 'bin.cjs')

/** A fresh directory, removed when the current test ends. */
export function tempDir(prefix = 'noa-test-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

export interface CliResult {
  status: number
  stdout: string
  stderr: string
}

/** Runs the built `noa` command. */
export function runCli(
  args: string[],
  options: { input?: string | Buffer; env?: NodeJS.ProcessEnv; cwd?: string } = {},
) {
  const r = spawnSync(process.execPath, [CLI, ...args], {
    input: options.input ?? '',
    env: { ...process.env, ...options.env },
    cwd: options.cwd,
    maxBuffer: 1 << 30,
  })
  return {
    status: r.status ?? -1,
    stdout: r.stdout.toString('utf8'),
    stderr: r.stderr.toString('utf8'),
    stdoutBytes: r.stdout,
  }
}

/** Runs `noa` in this process (the built CLI's `main`), for tests that make many calls. */
export async function runMain(args: string[]): Promise<{ status: number; stdout: string; stderr: string }> {
  const { main } = await import('../../dist/src/cli/main.js')
  let stdout = ''
  let stderr = ''
  const sink = (add: (s: string) => void) =>
    new Writable({
      write(chunk, _encoding, done) {
        add(String(chunk))
        done()
      },
    })
  const stdin = new PassThrough()
  stdin.end()
  const status = await main(args, {
    stdin,
    stdout: sink((s) => {
      stdout += s
    }),
    stderr: sink((s) => {
      stderr += s
    }),
    env: process.env,
    isTTY: false,
  })
  return { status, stdout, stderr }
}

/** Runs the built `noa` command asynchronously (for tests that run several processes at once). */
export function runCliAsync(args: string[], input = ''): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ['pipe', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => {
      stdout += d
    })
    child.stderr.on('data', (d) => {
      stderr += d
    })
    child.on('error', reject)
    child.on('close', (code) => resolve({ status: code ?? -1, stdout, stderr }))
    child.stdin.end(input)
  })
}

/**
 * Runs `node <script> <args…>`, SIGKILLs it `delayMs` after its first output, and resolves once
 * it is dead; rejects if it ends any other way.
 */
export function killAfterFirstOutput(script: string, args: string[], delayMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
    let stderr = ''
    child.stderr.on('data', (d) => {
      stderr += d
    })
    child.stdout.once('data', () => setTimeout(() => child.kill('SIGKILL'), delayMs))
    child.on('error', reject)
    child.on('exit', (code, signal) => {
      if (signal === 'SIGKILL') resolve()
      else reject(new Error(`${script} exited with ${code}: ${stderr}`))
    })
  })
}

export const BLOB = 'ab'.repeat(32)

export function blobOf(n: number): string {
  return n.toString(16).padStart(64, '0')
}

export interface MainIoOptions {
  /** stderr is a terminal (progress is drawn). */
  isTTY?: boolean
  /** stdin is a terminal. */
  stdinIsTTY?: boolean
  env?: NodeJS.ProcessEnv
  input?: string
}

/** `runMain` with the terminal flags, environment and stdin a test chooses. */
export async function runMainIo(
  args: string[],
  options: MainIoOptions = {},
): Promise<{ status: number; stdout: string; stderr: string }> {
  const { main } = await import('../../dist/src/cli/main.js')
  let stdout = ''
  let stderr = ''
  const sink = (add: (s: string) => void) =>
    new Writable({
      write(chunk, _encoding, done) {
        add(String(chunk))
        done()
      },
    })
  const stdin = new PassThrough()
  stdin.end(options.input ?? '')
  const status = await main(args, {
    stdin,
    stdout: sink((s) => {
      stdout += s
    }),
    stderr: sink((s) => {
      stderr += s
    }),
    env: { ...process.env, ...options.env },
    isTTY: options.isTTY ?? false,
    stdinIsTTY: options.stdinIsTTY ?? false,
  })
  return { status, stdout, stderr }
}
