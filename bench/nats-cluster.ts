/**
 * A real three-server JetStream cluster on loopback: routed nats-servers on free ports with
 * temporary stores, ready once an R3 stream can be made on it. The benchmarks of replicated
 * acks, shared workspaces and failover start one, and so do the tests (test/helpers/
 * nats-cluster.ts wraps this for vitest and finds the binary its way). No vitest here: bench/
 * is compiled into dist/bench and run by plain node.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { jetstreamManager } from '@nats-io/jetstream'
import { connect, type NatsConnection } from '@nats-io/transport-node'

export interface ClusterNode {
  name: string
  url: string
  /** The node's process id while it runs (null when stopped). */
  pid(): number | null
  /** SIGKILL: no chance to flush or to hand leadership over. */
  kill(): Promise<void>
  /** SIGTERM, then SIGKILL if it lingers. */
  stop(): Promise<void>
  /** Starts it again with the same name, ports and store. */
  start(): Promise<void>
  /** SIGSTOP: the process is alive but answers nobody, as if its network were cut. */
  pause(): void
  /** SIGCONT after pause(). */
  resume(): void
}

export interface NatsCluster {
  /** All three client URLs, comma-separated (what `--nats` and `servers` take). */
  urls: string
  nodes: ClusterNode[]
  /** The name of the server that leads the stream now (its Raft leader). */
  streamLeader(stream: string): Promise<string>
  /** Stops the three servers and removes their stores. */
  stop(): Promise<void>
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer()
    srv.once('error', reject)
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address()
      const port = typeof addr === 'object' && addr ? addr.port : 0
      srv.close(() => resolve(port))
    })
  })
}

function waitExit(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve()
  return new Promise((resolve) => child.once('exit', () => resolve()))
}

/** A failure that waiting will not cure (a server that exited or could not start). */
class Fatal extends Error {
  constructor(readonly reason: Error) {
    super(reason.message)
  }
}

async function waitFor<T>(what: string, fn: () => Promise<T | null>, timeoutMs = 30_000): Promise<T> {
  const until = Date.now() + timeoutMs
  let last: unknown = null
  for (;;) {
    try {
      const v = await fn()
      if (v !== null) return v
    } catch (err) {
      if (err instanceof Fatal) throw err.reason
      last = err
    }
    if (Date.now() > until)
      throw new Error(`timed out waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`)
    await new Promise((r) => setTimeout(r, 100))
  }
}

/** Waits until the cluster's JetStream has a meta leader and all three peers (account info answers). */
export async function waitClusterReady(urls: string): Promise<void> {
  await waitFor('the JetStream cluster to elect a meta leader', async () => {
    let nc: NatsConnection | null = null
    try {
      nc = await connect({ servers: urls.split(','), timeout: 1000 })
      const jsm = await jetstreamManager(nc)
      await jsm.getAccountInfo()
      // A throwaway R3 stream proves that all three peers take part.
      const name = `READY_${process.pid}_${Date.now().toString(36)}`
      await jsm.streams.add({ name, subjects: [`_ready.${name}`], num_replicas: 3 })
      await jsm.streams.delete(name)
      return true
    } finally {
      await nc?.close().catch(() => {})
    }
  })
}

/**
 * Starts three nats-servers with JetStream, routed to each other, on free loopback ports, each
 * with a store and a log in a temporary folder that stop() removes. `bin` is the nats-server to
 * run (default: NOA_NATS_SERVER, else `nats-server` on the PATH).
 */
export async function startNatsCluster(options: { bin?: string } = {}): Promise<NatsCluster> {
  const bin = options.bin ?? process.env.NOA_NATS_SERVER ?? 'nats-server'
  const dir = mkdtempSync(join(tmpdir(), 'noa-nats-cluster-'))
  const tag = `c${process.pid}${Date.now().toString(36)}`
  const specs = [] as { name: string; client: number; route: number }[]
  for (const i of [1, 2, 3])
    specs.push({ name: `${tag}n${i}`, client: await freePort(), route: await freePort() })
  const routes = specs.map((s) => `nats://127.0.0.1:${s.route}`).join(',')
  const children = new Map<string, ChildProcess>()
  const spawnErrors = new Map<string, Error>()

  const launch = (s: (typeof specs)[number]) => {
    const store = join(dir, s.name)
    mkdirSync(store, { recursive: true })
    const log = openSync(join(dir, `${s.name}.log`), 'a')
    const proc = spawn(
      bin,
      [
        '-js',
        '-n',
        s.name,
        '-a',
        '127.0.0.1',
        '-p',
        String(s.client),
        '-sd',
        store,
        '--cluster_name',
        tag,
        '-cluster',
        `nats://127.0.0.1:${s.route}`,
        '-routes',
        routes,
      ],
      { stdio: ['ignore', log, log] },
    )
    spawnErrors.delete(s.name)
    proc.once('error', (err) => spawnErrors.set(s.name, err))
    // If this process ends first (a timed-out test never reaches its finally, a bench throws),
    // take the server along instead of leaving it running.
    const reap = () => proc.kill('SIGKILL')
    process.once('exit', reap)
    proc.once('exit', () => process.removeListener('exit', reap))
    children.set(s.name, proc)
    return proc
  }
  const listening = async (s: (typeof specs)[number]) => {
    await waitFor(`${s.name} to listen`, async () => {
      const failed = spawnErrors.get(s.name)
      if (failed) {
        throw new Fatal(
          new Error(
            `cannot start ${bin} (${failed.message}): install nats-server, set NOA_NATS_SERVER to its path, or pass --nats URLs`,
          ),
        )
      }
      const proc = children.get(s.name)
      if (proc && proc.exitCode !== null) {
        const log = readFileSync(join(dir, `${s.name}.log`), 'utf8').slice(-2000)
        throw new Fatal(new Error(`${s.name} exited: ${log}`))
      }
      const nc = await connect({ servers: `nats://127.0.0.1:${s.client}`, timeout: 500 })
      await nc.close()
      return true
    })
  }
  const stopChild = async (name: string, signal: NodeJS.Signals) => {
    const c = children.get(name)
    if (!c) return
    children.delete(name)
    if (c.pid === undefined) return // never started (spawnErrors says why)
    if (c.signalCode === 'SIGSTOP' || signal === 'SIGKILL') c.kill('SIGCONT')
    c.kill(signal)
    const timer = setTimeout(() => c.kill('SIGKILL'), 5_000)
    await waitExit(c)
    clearTimeout(timer)
  }
  const stop = async () => {
    for (const s of specs) children.get(s.name)?.kill('SIGCONT')
    await Promise.all(specs.map((s) => stopChild(s.name, 'SIGTERM')))
    rmSync(dir, { recursive: true, force: true })
  }

  const urls = specs.map((s) => `nats://127.0.0.1:${s.client}`).join(',')
  try {
    for (const s of specs) launch(s)
    for (const s of specs) await listening(s)
    await waitClusterReady(urls)
  } catch (err) {
    await stop()
    throw err
  }

  const nodes: ClusterNode[] = specs.map((s) => ({
    name: s.name,
    url: `nats://127.0.0.1:${s.client}`,
    pid: () => children.get(s.name)?.pid ?? null,
    kill: () => stopChild(s.name, 'SIGKILL'),
    stop: () => stopChild(s.name, 'SIGTERM'),
    async start() {
      if (children.has(s.name)) return
      launch(s)
      await listening(s)
    },
    pause() {
      children.get(s.name)?.kill('SIGSTOP')
    },
    resume() {
      children.get(s.name)?.kill('SIGCONT')
    },
  }))

  return {
    urls,
    nodes,
    async streamLeader(stream: string) {
      return waitFor(`a leader for stream ${stream}`, async () => {
        const nc = await connect({ servers: urls.split(','), timeout: 1000 })
        try {
          const jsm = await jetstreamManager(nc)
          const info = await jsm.streams.info(stream)
          return info.cluster?.leader ?? null
        } finally {
          await nc.close().catch(() => {})
        }
      })
    },
    stop,
  }
}
