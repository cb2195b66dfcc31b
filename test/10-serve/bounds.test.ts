/**
 * The daemon's memory stays bounded whatever its clients do: a watcher that stops reading gets
 * no more than its window (the entries wait on disk, not in the daemon) and then resumes with
 * nothing missed; a client that pipelines far more than the in-flight and byte budgets allow is
 * read only as fast as its requests commit, and every one is answered, in order.
 */
import { connect, type Socket } from 'node:net'
import { describe, expect, it, onTestFinished } from 'vitest'
import type { Entry } from '../../dist/src/index.js'
import { connectDaemon, Daemon } from '../../dist/src/serve/index.js'
import { tempDir } from '../helpers/index.js'
import { LineClient, memoryOf, startDaemon } from '../helpers/serve.js'

/**
 * What clients can make a daemon with the default limits hold, as docs/serve.md states it (under
 * "Bounded memory"): 256 MiB of buffered data, 64 MiB of requests in flight, and per connection
 * about 9 KiB plus 4 KiB for each of its 64 streams.
 */
const DOCUMENTED_BOUND = 650e6

/** A client that sends its requests and then reads nothing; once resumed, it keeps the end of what it gets. */
class LazyClient {
  private tail = ''
  readonly closed: Promise<void>

  private constructor(readonly socket: Socket) {
    this.closed = new Promise((resolve) => socket.on('close', () => resolve()))
    socket.on('error', () => {})
    onTestFinished(() => {
      socket.destroy()
    })
  }

  static async open(path: string, requests: object[]): Promise<LazyClient> {
    const c = new LazyClient(connect(path))
    c.socket.setEncoding('utf8')
    const hello = new Promise<void>((resolve) =>
      c.socket.on('data', (d: string) => {
        c.tail = (c.tail + d).slice(-8192)
        resolve()
      }),
    )
    c.socket.write(`${JSON.stringify({ id: 0, op: 'hello', v: 1 })}\n`)
    await hello
    c.socket.pause()
    c.socket.write(requests.map((r) => `${JSON.stringify(r)}\n`).join(''))
    return c
  }

  /** The last message the daemon sent. */
  // biome-ignore lint/suspicious/noExplicitAny: checked by the test
  last(): any {
    return JSON.parse(this.tail.trimEnd().split('\n').at(-1) as string)
  }
}

const del = (path: string) => ({ op: 'delete' as const, path })

async function daemon(limits = {}): Promise<Daemon> {
  const d = await Daemon.start({ root: tempDir(), log: { workers: 1 }, limits })
  onTestFinished(() => d.drain())
  return d
}

describe('noa serve bounds', () => {
  it('holds no more than a window for a watcher that stopped reading, then delivers everything', async () => {
    const d = await daemon()
    const writer = await connectDaemon({ root: d.root })
    await writer.append('w', del('first'))
    const slow = await LineClient.open(d.socketPath)
    await slow.hello()
    slow.send({ id: 1, op: 'watch', ws: 'w', window: 2 })
    expect((await slow.next()).chunk).toHaveLength(1)
    slow.socket.pause() // reads nothing more
    const total = 20_000
    for (let i = 0; i < total; i += 2000) {
      await writer.appendMany(
        'w',
        Array.from({ length: 2000 }, (_, k) => del(`p/${'x'.repeat(100)}/${i + k}`)),
      )
    }
    // ~3 MB were appended; the daemon holds at most the one chunk left in the window for this watcher.
    const stats = (await writer.serverStatus()) as { bufferedBytes: number; streams: number }
    expect(stats.streams).toBe(1)
    expect(stats.bufferedBytes).toBeLessThan(512 << 10)
    slow.socket.resume()
    const seqs: number[] = [1]
    while (seqs.length < total + 1) {
      const m = await slow.next()
      expect(m.chunk).toBeDefined()
      for (const e of m.chunk as Entry[]) seqs.push(e.seq)
      slow.send({ op: 'more', ref: 1, n: 1 })
    }
    expect(seqs).toEqual(Array.from({ length: total + 1 }, (_, i) => i + 1))
    await writer.close()
  })

  it('closes a client that takes none of its answers with NOA_SLOW_CONSUMER, serving the others meanwhile', async () => {
    const d = await daemon({ slowConsumerMs: 1000 })
    const writer = await connectDaemon({ root: d.root })
    for (let i = 0; i < 8000; i += 2000) {
      await writer.appendMany(
        'w',
        Array.from({ length: 2000 }, (_, k) => del(`p/${'x'.repeat(100)}/${i + k}`)),
      )
    }
    const lazy = await LineClient.open(d.socketPath)
    await lazy.hello()
    lazy.socket.pause() // reads nothing from here on
    lazy.send({ id: 1, op: 'read', ws: 'w', window: 256 })
    lazy.send({ id: 2, op: 'readBytes', ws: 'w', window: 256 })
    // A reader that reads gets everything while the lazy one is stuck.
    let n = 0
    for await (const e of writer.read('w')) n = e.seq
    expect(n).toBe(8000)
    expect((await writer.append('w', del('meanwhile'))).seq).toBe(8001)
    for (let i = 0; ((await writer.serverStatus()) as { slowConsumers: number }).slowConsumers < 1; i++) {
      expect(i).toBeLessThan(1000)
      await new Promise((r) => setTimeout(r, 10))
    }
    type Stats = { streams: number; readers: number; bufferedBytes: number; connections: number }
    const stats = (await writer.serverStatus()) as Stats
    expect(stats).toMatchObject({ streams: 0, readers: 0 })
    // Its queue is dropped: what is left is the batch the socket held, and the refusal.
    expect(stats.bufferedBytes).toBeLessThan((64 << 10) + 2048)
    // Once it reads, the client gets what the socket held, then the refusal, then the end.
    lazy.socket.resume()
    let last: { id: unknown; error?: { code: string; message: string } } | null = null
    for (let m = await lazy.next(); m !== null; m = await lazy.next()) last = m
    expect(last).toMatchObject({ id: null, ok: false, error: { code: 'NOA_SLOW_CONSUMER' } })
    expect(last?.error?.message).toMatch(/took none of its answers for 1000 ms/)
    for (let i = 0; ((await writer.serverStatus()) as Stats).connections > 1; i++) {
      expect(i).toBeLessThan(1000)
      await new Promise((r) => setTimeout(r, 10))
    }
    expect(((await writer.serverStatus()) as Stats).bufferedBytes).toBe(0)
    await writer.close()
  })

  it('1,000 connections that open streams and never read: the daemon stays under its bound, appends are answered, every one is told NOA_SLOW_CONSUMER', async () => {
    const root = tempDir()
    // Default limits, but a client that reads nothing is dropped after 3 s rather than 30.
    const d = await startDaemon(root, ['--slow-consumer-ms', '3000'])
    const writer = await connectDaemon({ root })
    for (let i = 0; i < 2000; i += 1000) {
      await writer.appendMany(
        'w',
        Array.from({ length: 1000 }, (_, k) => del(`p/${'x'.repeat(100)}/${i + k}`)),
      )
    }
    const before = memoryOf(d.pid).rss
    // Each asks for more than its socket holds (the log is 300 KB), every tenth for all three kinds.
    const streams = (n: number) =>
      (n % 10 === 0 ? ['read', 'readBytes', 'watch'] : ['readBytes']).map((op, i) => ({
        id: i + 1,
        op,
        ws: 'w',
        window: 256,
      }))
    const lazy: LazyClient[] = []
    let seq = 2000
    while (lazy.length < 1000) {
      const opened = await Promise.all(
        Array.from({ length: 100 }, (_, i) => LazyClient.open(d.info.socket, streams(lazy.length + i))),
      )
      lazy.push(...opened)
      // With hundreds of clients stuck, appends are still acknowledged, and reads still served.
      for (let i = 0; i < 10; i++) expect((await writer.append('w', del(`meanwhile/${seq}`))).seq).toBe(++seq)
      let read = 0
      for await (const e of writer.read('w', { fromSeq: seq - 9 })) read = e.seq
      expect(read).toBe(seq)
    }
    type Stats = {
      connections: number
      streams: number
      readers: number
      bufferedBytes: number
      slowConsumers: number
    }
    const status = async () => (await writer.serverStatus()) as unknown as Stats
    for (let i = 0; (await status()).slowConsumers < 1000; i++) {
      expect(i).toBeLessThan(3000)
      await new Promise((r) => setTimeout(r, 10))
    }
    expect(memoryOf(d.pid).peak - before).toBeLessThan(DOCUMENTED_BOUND)
    expect(await status()).toMatchObject({ streams: 0, readers: 0 })
    // Each, once it reads, gets what its socket held, then its refusal, then the end.
    for (const c of lazy) c.socket.resume()
    await Promise.all(lazy.map((c) => c.closed))
    for (const c of lazy) {
      expect(c.last()).toMatchObject({ id: null, ok: false, error: { code: 'NOA_SLOW_CONSUMER' } })
    }
    for (let i = 0; (await status()).connections > 1; i++) {
      expect(i).toBeLessThan(1000)
      await new Promise((r) => setTimeout(r, 10))
    }
    expect((await status()).bufferedBytes).toBe(0)
    await writer.close()
  })

  it('answers every pipelined request, in order, past tiny in-flight and byte budgets', async () => {
    const d = await daemon({ maxInFlight: 8, maxPendingBytes: 4096 })
    const c = await LineClient.open(d.socketPath)
    await c.hello()
    const n = 3000
    c.send(
      Array.from(
        { length: n },
        (_, i) => `${JSON.stringify({ id: i, op: 'append', ws: 'w', entry: del(`f${i}`) })}\n`,
      ).join(''),
    )
    const seqById = new Map<number, number>()
    for (let i = 0; i < n; i++) {
      const m = await c.next()
      expect(m.ok).toBe(true)
      seqById.set(m.id, m.result.seq)
    }
    for (let i = 0; i < n; i++) expect(seqById.get(i)).toBe(i + 1)
    const log = await connectDaemon({ root: d.root })
    expect(await log.lastSeq('w')).toBe(n)
    // Nothing held but the serverStatus request itself (its line and 512 bytes of bookkeeping).
    expect(((await log.serverStatus()) as { pendingBytes: number }).pendingBytes).toBeLessThan(64 + 512)
    await log.close()
  })
})
