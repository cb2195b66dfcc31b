/**
 * Three hosts (three roots, each in a process of its own) append at once to one shared workspace
 * on an R3 stream while, in turn, the stream's leader is SIGKILLed and restarted, a host is
 * SIGKILLed and restarted, and a server is paused (SIGSTOP, as if its network were cut) and
 * resumed. At the end every acknowledged entry is in the stream's order exactly once, at the seq
 * its ack named; no entry is there twice; seqs are gapless and ts strictly increasing; and every
 * host's log is the same bytes as the stream's order.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { jetstreamManager } from '@nats-io/jetstream'
import { connect } from '@nats-io/transport-node'
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest'
import { initStream } from '../../dist/src/replicate/index.js'
import { tempDir } from '../helpers/index.js'
import { type NatsCluster, startNatsCluster } from '../helpers/nats-cluster.js'

const HOST = new URL('../fixtures/shared-host.mjs', import.meta.url).pathname
const WS = 'team.shared'
const COUNT = 400

interface HostEvent {
  event: string
  path?: string
  seq?: number
  code?: string
  message?: string
}

class Host {
  child!: ChildProcess
  events: HostEvent[] = []
  stderr = ''
  exited!: Promise<void>
  runs = 0

  constructor(
    readonly root: string,
    readonly name: string,
    private readonly args: () => string[],
  ) {}

  start(): void {
    const tag = `${this.name}r${++this.runs}`
    const child = spawn(process.execPath, [HOST, this.root, ...this.args(), tag, String(COUNT)], {
      stdio: ['pipe', 'pipe', 'pipe'],
    })
    this.child = child
    let out = ''
    child.stdout?.on('data', (d) => {
      out += d
      for (let nl = out.indexOf('\n'); nl >= 0; nl = out.indexOf('\n')) {
        const line = out.slice(0, nl)
        out = out.slice(nl + 1)
        if (line.trim() !== '') this.events.push(JSON.parse(line) as HostEvent)
      }
    })
    child.stderr?.on('data', (d) => {
      this.stderr += d
    })
    this.exited = new Promise((resolve) => child.on('exit', () => resolve()))
    onTestFinished(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    })
  }

  acks(): number {
    return this.events.filter((e) => e.event === 'ack').length
  }

  async kill(): Promise<void> {
    this.child.kill('SIGKILL')
    await this.exited
  }

  done(): boolean {
    // Only the events of the latest run count for "done".
    const i = this.events.map((e) => e.event).lastIndexOf('open')
    return i >= 0 && this.events.slice(i).some((e) => e.event === 'done')
  }
}

async function until(what: string, fn: () => boolean | Promise<boolean>, ms = 120_000, hosts: Host[] = []) {
  const deadline = Date.now() + ms
  while (!(await fn())) {
    if (Date.now() > deadline)
      throw new Error(
        `timed out waiting for ${what}; ${hosts.map((h) => `${h.name}: ${h.stderr.slice(-1500)}`).join('\n')}`,
      )
    await new Promise((r) => setTimeout(r, 50))
  }
}

/** Every message of a subject, in stream order, read one by one by stream sequence. */
async function subjectMessages(urls: string, stream: string, subject: string): Promise<string[]> {
  const nc = await connect({ servers: urls.split(',') })
  try {
    const jsm = await jetstreamManager(nc)
    const out: string[] = []
    for (let seq = 1; ; ) {
      const m = await jsm.streams.getMessage(stream, { seq, next_by_subj: subject } as unknown as {
        seq: number
      })
      if (m === null) break
      out.push(new TextDecoder().decode(m.data))
      seq = m.seq + 1
    }
    return out
  } finally {
    await nc.close()
  }
}

describe('a shared workspace through server and host crashes', () => {
  let cluster: NatsCluster
  beforeAll(async () => {
    cluster = await startNatsCluster()
  }, 60_000)
  afterAll(async () => {
    await cluster?.stop()
  })

  it("three hosts converge on the stream's order, every acknowledged entry in it exactly once", async () => {
    const prefix = 'chaos'
    const stream = 'CHAOS'
    await initStream({ nats: cluster.urls, prefix, stream, replicas: 3 })
    const hosts = ['a', 'b', 'c'].map((n) => new Host(tempDir(), n, () => [cluster.urls, prefix, WS]))
    for (const h of hosts) h.start()
    const total = () => hosts.reduce((n, h) => n + h.acks(), 0)
    const progress = async (more: number) => {
      const from = total()
      await until(`${more} more acknowledgements`, () => total() >= from + more, 120_000, hosts)
    }
    await progress(60)

    // 1. The stream's leader is SIGKILLed, then started again.
    const leader = await cluster.streamLeader(stream)
    const node = cluster.nodes.find((n) => n.name === leader)
    expect(node).toBeDefined()
    await node?.kill()
    await progress(60)
    await node?.start()

    // 2. A host is SIGKILLed mid-append, then started again on the same root.
    const victim = hosts[1] as Host
    await progress(30)
    await victim.kill()
    await progress(30)
    victim.start()

    // 3. A server stops answering (SIGSTOP), then comes back.
    await progress(30)
    const paused = cluster.nodes[2]
    paused?.pause()
    await progress(30)
    paused?.resume()

    await until('every host to finish its appends', () => hosts.every((h) => h.done()), 240_000, hosts)

    // The stream's order: its messages in stream order, racers skipped (see shared-replica.ts).
    const messages = await subjectMessages(cluster.urls, stream, `${prefix}.${WS}`)
    let last = 0
    let lastTs = 0
    let order = ''
    const seqOf = new Map<string, number>()
    for (const m of messages) {
      const lines = m.split('\n')
      const parsed = lines.map((l) => JSON.parse(l) as { seq: number; ts: number; path: string })
      if ((parsed[0]?.seq as number) <= last) continue
      for (const e of parsed) {
        expect(e.seq).toBe(last + 1)
        expect(e.ts).toBeGreaterThan(lastTs)
        last = e.seq
        lastTs = e.ts
        expect(seqOf.has(e.path), `${e.path} twice in the order`).toBe(false)
        seqOf.set(e.path, e.seq)
      }
      order += lines.map((l) => `${l}\n`).join('')
    }
    const acked = hosts.flatMap((h) => h.events.filter((e) => e.event === 'ack'))
    const failed = hosts.flatMap((h) => h.events.filter((e) => e.event === 'failed'))
    expect(failed, JSON.stringify(failed.slice(0, 5))).toEqual([])
    expect(acked.length).toBeGreaterThanOrEqual(COUNT * 3)
    for (const a of acked) expect(seqOf.get(a.path as string), a.path).toBe(a.seq)

    // Every host's log converges to the same bytes.
    const logOf = (h: Host) => {
      try {
        return readFileSync(join(h.root, 'agent-logs', `${WS}.log`), 'utf8')
      } catch {
        return ''
      }
    }
    await until(
      'every host to hold the whole order',
      () => hosts.every((h) => logOf(h) === order),
      60_000,
      hosts,
    )
    for (const h of hosts) h.child.stdin?.write('stop\n')
    await Promise.all(hosts.map((h) => h.exited))
    for (const h of hosts) expect(h.child.exitCode, h.stderr).toBe(0)
    for (const h of hosts) expect(logOf(h)).toBe(order)
  }, 400_000)
})
