/**
 * A real nats-server for the replication tests. `.ci/run` starts one and exports its URL as
 * NOA_TEST_NATS_URL; without it (plain `npm test`), each test file starts its own on a free
 * loopback port with a temporary store, and stops it when the file is done. Tests that restart
 * the server mid-stream always start their own. If nats-server is not installed, the tests
 * fail and say how to get it: they are never skipped in silence.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { delimiter, join } from 'node:path'
import { DeliverPolicy, jetstream, jetstreamManager, type StreamConfig } from '@nats-io/jetstream'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, onTestFinished } from 'vitest'
import { CLI } from './index.js'

const INSTALL =
  'install it (Debian/Ubuntu: apt-get install nats-server; macOS: brew install nats-server; ' +
  'else go install github.com/nats-io/nats-server/v2@latest or a release from ' +
  'https://github.com/nats-io/nats-server/releases), set NOA_NATS_SERVER to its path, ' +
  'or set NOA_TEST_NATS_URL to a running server with JetStream'

/**
 * The nats-server to start. When there is none, the error is one line that says what is missing
 * and how to get it, without a stack trace: it is what a new user sees for each replication
 * suite (`env` and `dirs` are for the test of that message).
 */
export function natsServerBinary(
  env: NodeJS.ProcessEnv = process.env,
  dirs: readonly string[] = ['/usr/sbin', '/usr/local/bin', '/usr/bin'],
): string {
  const fromEnv = env.NOA_NATS_SERVER
  if (fromEnv) {
    if (!existsSync(fromEnv))
      throw oneLine(`NOA_NATS_SERVER names ${fromEnv}, which does not exist: ${INSTALL}`)
    return fromEnv
  }
  const path = (env.PATH ?? '').split(delimiter)
  for (const dir of [...path, ...dirs]) {
    const candidate = join(dir, 'nats-server')
    if (dir && existsSync(candidate)) return candidate
  }
  throw oneLine(
    `nats-server not found (looked in PATH${dirs.length > 0 ? `, ${dirs.join(', ')}` : ''}): the replication tests need a real server; ${INSTALL}`,
  )
}

/** An error that a test runner prints as its message alone. */
function oneLine(message: string): Error {
  const err = new Error(message)
  err.stack = `Error: ${message}`
  return err
}

export interface NatsServer {
  url: string
  port: number
  /** Stops the server (SIGTERM, then SIGKILL if it lingers). */
  stop(): Promise<void>
  /** Stops it and starts it again on the same port with the same store. */
  restart(): Promise<void>
}

function waitExit(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve()
  return new Promise((resolve) => child.once('exit', () => resolve()))
}

async function waitFor<T>(
  what: string,
  fn: () => T | null | Promise<T | null>,
  timeoutMs = 20_000,
): Promise<T> {
  const until = Date.now() + timeoutMs
  for (;;) {
    const v = await fn()
    if (v !== null) return v
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

/** Starts nats-server with JetStream on 127.0.0.1 (a free port unless one is given). */
export async function startNatsServer(): Promise<NatsServer> {
  const bin = natsServerBinary()
  const dir = mkdtempSync(join(tmpdir(), 'noa-nats-'))
  let child: ChildProcess | null = null
  let port = -1
  const launch = async () => {
    const portsDir = mkdtempSync(join(dir, 'ports-'))
    const log = openSync(join(dir, 'server.log'), 'a')
    const proc = spawn(
      bin,
      ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', join(dir, 'store'), '--ports_file_dir', portsDir],
      { stdio: ['ignore', log, log] },
    )
    child = proc
    let spawnError: Error | null = null
    proc.once('error', (err) => {
      spawnError = err
    })
    // If this test process ends first (a timed-out test never reaches its finally), take the
    // server along instead of leaving it running.
    const reap = () => proc.kill('SIGKILL')
    process.once('exit', reap)
    proc.once('exit', () => process.removeListener('exit', reap))
    const url = await waitFor('nats-server to listen', () => {
      if (spawnError) throw new Error(`cannot start ${bin}: ${(spawnError as Error).message}`)
      if (proc.exitCode !== null) {
        throw new Error(
          `nats-server exited (${proc.exitCode}): ${readFileSync(join(dir, 'server.log'), 'utf8')}`,
        )
      }
      const file = readdirSync(portsDir).find((f) => f.endsWith('.ports'))
      if (!file) return null
      try {
        const ports = JSON.parse(readFileSync(join(portsDir, file), 'utf8')) as { nats: string[] }
        return ports.nats[0] ?? null
      } catch {
        return null // written but not complete yet
      }
    })
    port = Number(new URL(url).port)
    await waitJetStream(url)
    return url
  }
  const stopChild = async () => {
    const c = child
    if (!c) return
    child = null
    c.kill('SIGTERM')
    const timer = setTimeout(() => c.kill('SIGKILL'), 5_000)
    await waitExit(c)
    clearTimeout(timer)
  }
  const url = await launch()
  return {
    url,
    port,
    async stop() {
      await stopChild()
      rmSync(dir, { recursive: true, force: true })
    },
    async restart() {
      await stopChild()
      await launch()
    },
  }
}

async function waitJetStream(url: string): Promise<void> {
  await waitFor('JetStream to answer', async () => {
    let nc: NatsConnection | null = null
    try {
      nc = await connect({ servers: url, timeout: 1000 })
      const jsm = await jetstreamManager(nc)
      await jsm.getAccountInfo()
      return true
    } catch {
      return null
    } finally {
      await nc?.close()
    }
  })
}

/**
 * The server for this test file: NOA_TEST_NATS_URL when set, else one started for the file.
 * Call at the top level of a test file; `url()` is valid inside tests.
 */
export function useNats(): { url(): string } {
  let url = process.env.NOA_TEST_NATS_URL ?? ''
  let own: NatsServer | null = null
  beforeAll(async () => {
    if (url) return
    own = await startNatsServer()
    url = own.url
  })
  afterAll(async () => {
    await own?.stop()
  })
  return {
    url: () => {
      if (!url) throw new Error('no nats-server: useNats() must run at the top level of the test file')
      return url
    },
  }
}

let counter = 0

/** A prefix and stream name no other test (or test run on a shared server) uses. */
export function uniqueNames(): { prefix: string; stream: string } {
  const tag = `${process.pid}_${Date.now().toString(36)}_${counter++}`
  return { prefix: `t${tag}`, stream: `T${tag}` }
}

export async function withConnection<T>(url: string, fn: (nc: NatsConnection) => Promise<T>): Promise<T> {
  const nc = await connect({ servers: url })
  try {
    return await fn(nc)
  } finally {
    await nc.close()
  }
}

/** Creates a stream (deleted when the test ends). `config` overrides noa's settings. */
export async function createStream(url: string, name: string, config: Partial<StreamConfig>): Promise<void> {
  await withConnection(url, async (nc) => {
    const jsm = await jetstreamManager(nc)
    await jsm.streams.add({ name, ...config })
  })
  onTestFinished(async () => {
    await withConnection(url, async (nc) => {
      const jsm = await jetstreamManager(nc)
      await jsm.streams.delete(name).catch(() => {})
    })
  })
}

export interface StoredEntry {
  streamSeq: number
  msgId: string
  line: string
}

/** Every message of the stream under `<prefix>.`, grouped by subject, in stream order. */
export async function streamContents(url: string, stream: string, prefix: string) {
  return withConnection(url, async (nc) => {
    const jsm = await jetstreamManager(nc)
    const info = await jsm.streams.info(stream)
    const out = new Map<string, StoredEntry[]>()
    if (info.state.messages === 0) return out
    const js = jetstream(nc)
    const consumer = await js.consumers.get(stream, {
      filter_subjects: `${prefix}.>`,
      deliver_policy: DeliverPolicy.All,
    })
    let seen = 0
    while (seen < info.state.messages) {
      const batch = await consumer.fetch({ max_messages: 1000, expires: 2000 })
      let got = 0
      for await (const m of batch) {
        got++
        seen++
        const list = out.get(m.subject) ?? []
        list.push({ streamSeq: m.seq, msgId: m.headers?.get('Nats-Msg-Id') ?? '', line: m.string() })
        out.set(m.subject, list)
        if (m.info.pending === 0) {
          batch.stop()
          seen = info.state.messages
        }
      }
      if (got === 0) break
    }
    return out
  })
}

/** A `noa` process running in the background. */
export interface Running {
  child: ChildProcess
  stdout(): string
  stderr(): string
  /** Resolves with the exit code (or the signal name). */
  exited: Promise<number | string>
}

export function startCli(args: string[], env: NodeJS.ProcessEnv = {}): Running {
  const child = spawn(process.execPath, [CLI, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
  })
  let out = ''
  let err = ''
  child.stdout?.on('data', (d) => {
    out += d
  })
  child.stderr?.on('data', (d) => {
    err += d
  })
  const exited = new Promise<number | string>((resolve) => {
    child.on('exit', (code, signal) => resolve(code ?? signal ?? -1))
  })
  onTestFinished(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  })
  return { child, stdout: () => out, stderr: () => err, exited }
}

export { waitFor }
