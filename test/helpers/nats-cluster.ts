/**
 * A real three-server JetStream cluster on loopback for the tests of replicated acks, shared
 * workspaces and failover (issue 34). `.ci/run` starts one and exports its client URLs,
 * comma-separated, as NOA_TEST_NATS_CLUSTER; without it each test file that asks starts its own,
 * and a test that kills, stops or restarts servers always starts its own (`startNatsCluster`).
 * Streams on it are R3: a publish is acknowledged once two of the three servers stored it.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { jetstreamManager } from '@nats-io/jetstream'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll } from 'vitest'
import { natsServerBinary } from './nats.js'

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

async function waitFor<T>(what: string, fn: () => Promise<T | null>, timeoutMs = 30_000): Promise<T> {
  const until = Date.now() + timeoutMs
  let last: unknown = null
  for (;;) {
    try {
      const v = await fn()
      if (v !== null) return v
    } catch (err) {
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

/** Starts three nats-servers with JetStream, routed to each other, on free loopback ports. */
export async function startNatsCluster(): Promise<NatsCluster> {
  const bin = natsServerBinary()
  const dir = mkdtempSync(join(tmpdir(), 'noa-nats-cluster-'))
  const tag = `c${process.pid}${Date.now().toString(36)}`
  const specs = [] as { name: string; client: number; route: number }[]
  for (const i of [1, 2, 3])
    specs.push({ name: `${tag}n${i}`, client: await freePort(), route: await freePort() })
  const routes = specs.map((s) => `nats://127.0.0.1:${s.route}`).join(',')
  const children = new Map<string, ChildProcess>()

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
    const reap = () => proc.kill('SIGKILL')
    process.once('exit', reap)
    proc.once('exit', () => process.removeListener('exit', reap))
    children.set(s.name, proc)
    return proc
  }
  const listening = async (s: (typeof specs)[number]) => {
    await waitFor(`${s.name} to listen`, async () => {
      const proc = children.get(s.name)
      if (proc && proc.exitCode !== null)
        throw new Error(`${s.name} exited: ${readFileSync(join(dir, `${s.name}.log`), 'utf8').slice(-2000)}`)
      const nc = await connect({ servers: `nats://127.0.0.1:${s.client}`, timeout: 500 })
      await nc.close()
      return true
    })
  }
  const stopChild = async (name: string, signal: NodeJS.Signals) => {
    const c = children.get(name)
    if (!c) return
    children.delete(name)
    if (c.signalCode === 'SIGSTOP' || signal === 'SIGKILL') c.kill('SIGCONT')
    c.kill(signal)
    const timer = setTimeout(() => c.kill('SIGKILL'), 5_000)
    await waitExit(c)
    clearTimeout(timer)
  }

  for (const s of specs) launch(s)
  for (const s of specs) await listening(s)
  const urls = specs.map((s) => `nats://127.0.0.1:${s.client}`).join(',')
  await waitClusterReady(urls)

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
    async stop() {
      for (const s of specs) children.get(s.name)?.kill('SIGCONT')
      await Promise.all(specs.map((s) => stopChild(s.name, 'SIGTERM')))
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

/**
 * The cluster for this test file: NOA_TEST_NATS_CLUSTER when set, else one started for the file.
 * Call at the top level of a test file; `urls()` is valid inside tests.
 */
export function useNatsCluster(): { urls(): string } {
  let urls = process.env.NOA_TEST_NATS_CLUSTER ?? ''
  let own: NatsCluster | null = null
  beforeAll(async () => {
    if (urls) return waitClusterReady(urls)
    own = await startNatsCluster()
    urls = own.urls
  }, 60_000)
  afterAll(async () => {
    await own?.stop()
  })
  return {
    urls: () => {
      if (!urls) throw new Error('no cluster: useNatsCluster() must run at the top level of the test file')
      return urls
    },
  }
}
