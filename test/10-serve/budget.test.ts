/**
 * The daemon's one budget for what it holds for its clients (maxBufferedBytes): a stream whose
 * reader does not fit is refused with NOA_BUSY while the streams that fit go on; a large
 * read-only answer that does not fit is answered NOA_BUSY instead; a request line that grows
 * past it gets its connection refused. Each refusal names the budget and its flag.
 */
import { describe, expect, it, onTestFinished } from 'vitest'
import { connectDaemon, Daemon, type RemoteAgentLog } from '../../dist/src/serve/index.js'
import { tempDir } from '../helpers/index.js'
import { LineClient } from '../helpers/serve.js'

const del = (path: string) => ({ op: 'delete' as const, path })

async function daemon(limits = {}): Promise<Daemon> {
  const d = await Daemon.start({ root: tempDir(), log: { workers: 1 }, limits })
  onTestFinished(() => d.drain())
  return d
}

interface Stats {
  requests: number
  streams: number
  readers: number
  bufferedBytes: number
  busy: number
}

async function stats(log: RemoteAgentLog): Promise<Stats> {
  return (await log.serverStatus()) as unknown as Stats
}

async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; !(await check()); i++) {
    if (i > 1000) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 10))
  }
}

describe('noa serve buffer budget', () => {
  it('refuses a budget that cannot hold a request line or a stream reader', async () => {
    await expect(
      Daemon.start({ root: tempDir(), limits: { maxBufferedBytes: 1 << 20 } }),
    ).rejects.toMatchObject({
      code: 'NOA_BAD_OPTION',
      message: expect.stringMatching(
        /maxBufferedBytes \(1048576\) must hold a request line \(maxLineBytes, 8388608\)/,
      ),
      details: { field: 'maxBufferedBytes' },
    })
  })

  it('refuses a stream whose reader does not fit with NOA_BUSY; the others go on, and room comes back', async () => {
    const budget = 1 << 20
    const d = await daemon({ maxBufferedBytes: budget, maxLineBytes: 64 << 10, maxEntryBytes: 32 << 10 })
    const writer = await connectDaemon({ root: d.root })
    await writer.appendMany(
      'w',
      Array.from({ length: 10 }, (_, i) => del(`f${i}`)),
    )
    const c = await LineClient.open(d.socketPath)
    await c.hello()
    const n = 20
    for (let id = 1; id <= n; id++) c.send({ id, op: 'watch', ws: 'w' })
    const accepted: number[] = []
    const refused: Array<{ code: string; message: string; details: { limit: number } }> = []
    while (accepted.length + refused.length < n) {
      const m = await c.next()
      if (m.chunk) {
        expect(m.chunk.map((e: { seq: number }) => e.seq)).toEqual(
          Array.from({ length: 10 }, (_, i) => i + 1),
        )
        accepted.push(m.id)
      } else refused.push(m.error)
    }
    expect(accepted.length).toBeGreaterThan(0)
    expect(refused.length).toBeGreaterThan(0)
    for (const e of refused) {
      expect(e.code).toBe('NOA_BUSY')
      expect(e.details.limit).toBe(budget)
      expect(e.message).toMatch(/^the watch stream is refused: .*--max-buffered-bytes/)
    }
    const s = await stats(writer)
    expect(s).toMatchObject({ streams: accepted.length, readers: accepted.length, busy: refused.length })
    expect(s.bufferedBytes).toBeLessThanOrEqual(budget)

    // The watches that fit see every new commit; so does a new one, once two have ended.
    await writer.append('w', del('late'))
    const got = new Set<number>()
    while (got.size < accepted.length) {
      const m = await c.next()
      expect(m.chunk.map((e: { seq: number }) => e.seq)).toEqual([11])
      got.add(m.id)
    }
    for (const id of accepted.slice(0, 2)) {
      c.send({ op: 'cancel', ref: id })
      expect(await c.next()).toMatchObject({ id, ok: false, error: { code: 'NOA_ABORTED' } })
    }
    c.send({ id: 100, op: 'watch', ws: 'w', fromSeq: 11 })
    expect(await c.next()).toMatchObject({ id: 100, chunk: [{ seq: 11 }] })
    await writer.close()
  })

  it('lets a stream under way wait for room rather than refuse it, and go on once there is', async () => {
    const budget = 1 << 20
    const d = await daemon({ maxBufferedBytes: budget, maxLineBytes: 64 << 10, maxEntryBytes: 32 << 10 })
    const writer = await connectDaemon({ root: d.root })
    for (let i = 0; i < 3000; i += 300) {
      await writer.appendMany(
        'big',
        Array.from({ length: 300 }, (_, k) => del(`p/${'x'.repeat(100)}/${i + k}`)),
      )
    }
    await writer.append('w', del('a'))
    const reader = await LineClient.open(d.socketPath)
    await reader.hello()
    reader.send({ id: 1, op: 'read', ws: 'big', window: 1 })
    const first = await reader.next()
    expect(first.chunk[0].seq).toBe(1)
    // Parked for want of credit: it holds no reader, and the watches take all the room.
    const watches = await LineClient.open(d.socketPath)
    await watches.hello()
    let id = 0
    for (;;) {
      watches.send({ id: ++id, op: 'watch', ws: 'w' })
      const m = await watches.next()
      if (!m.chunk) {
        expect(m.error.code).toBe('NOA_BUSY')
        break
      }
    }
    expect((await stats(writer)).readers).toBe(id - 1)
    // Granted a chunk, the read finds no room: it waits (no refusal) until two watches end.
    reader.send({ op: 'more', ref: 1, n: 256 })
    for (const ref of [1, 2]) {
      watches.send({ op: 'cancel', ref })
      expect(await watches.next()).toMatchObject({ id: ref, error: { code: 'NOA_ABORTED' } })
    }
    const seqs: number[] = first.chunk.map((e: { seq: number }) => e.seq)
    for (let m = await reader.next(); m.chunk; m = await reader.next()) {
      for (const e of m.chunk) seqs.push(e.seq)
    }
    expect(seqs).toEqual(Array.from({ length: 3000 }, (_, i) => i + 1))
    await writer.close()
  })

  it('answers a large read-only request NOA_BUSY rather than hold it past the budget for a client that reads none', async () => {
    const budget = 256 << 10
    const d = await daemon({ maxBufferedBytes: budget, maxLineBytes: 64 << 10, maxEntryBytes: 32 << 10 })
    const writer = await connectDaemon({ root: d.root })
    await Promise.all(Array.from({ length: 60 }, (_, i) => writer.append(`ws-${i}`, del('a'))))
    const lazy = await LineClient.open(d.socketPath)
    await lazy.hello()
    lazy.socket.pause()
    const n = 80 // 80 listings of 9 KB: more than the socket (about 200 KB) and the budget hold
    lazy.send(
      Array.from({ length: n }, (_, i) => `${JSON.stringify({ id: i + 1, op: 'workspaces' })}\n`).join(''),
    )
    await until('every workspaces request to be answered', async () => (await stats(writer)).requests <= 1)
    // Held: what fitted, and the small refusals (each under 1 KB), not every listing.
    expect((await stats(writer)).bufferedBytes).toBeLessThan(budget + n * 1024)
    lazy.socket.resume()
    let listings = 0
    let busy = 0
    for (let i = 0; i < n; i++) {
      const m = await lazy.next()
      if (m.ok) {
        expect(m.result).toHaveLength(60)
        listings++
      } else {
        expect(m.error.code).toBe('NOA_BUSY')
        expect(m.error.message).toMatch(/^the workspaces answer of \d+ bytes is refused: /)
        busy++
      }
    }
    expect(listings).toBeGreaterThan(0)
    expect(busy).toBeGreaterThan(0)
    // Once read, there is room again.
    lazy.send({ id: 1000, op: 'workspaces' })
    expect(await lazy.next()).toMatchObject({ id: 1000, ok: true })
    await writer.close()
  })

  it('refuses the connection whose unfinished request line would take the daemon past its budget', async () => {
    const budget = 512 << 10
    const d = await daemon({ maxBufferedBytes: budget, maxLineBytes: budget, maxEntryBytes: 32 << 10 })
    const writer = await connectDaemon({ root: d.root })
    const line = JSON.stringify({
      id: 1,
      op: 'appendMany',
      ws: 'big',
      entries: Array.from({ length: 2000 }, (_, i) => del(`p/${'x'.repeat(130)}/${i}`)),
    })
    expect(line.length).toBeGreaterThan(300_000)
    const a = await LineClient.open(d.socketPath)
    await a.hello()
    a.send(line.slice(0, -10)) // no newline yet: held by the daemon, counted
    await until('the first line to be counted', async () => (await stats(writer)).bufferedBytes > 290_000)
    const b = await LineClient.open(d.socketPath)
    await b.hello()
    b.send(line.slice(0, -10))
    const refusal = await b.next()
    expect(refusal).toMatchObject({
      id: null,
      ok: false,
      error: { code: 'NOA_BUSY', details: { limit: budget } },
    })
    expect(refusal.error.message).toMatch(/^a request line of \d+ bytes so far is refused: /)
    expect(await b.next()).toBeNull() // closed
    // The one that fitted is served, and nothing of the refused one was.
    a.send(`${line.slice(-10)}\n`)
    const answer = await a.next()
    expect(answer).toMatchObject({ id: 1, ok: true })
    expect(answer.result).toHaveLength(2000)
    expect(await writer.lastSeq('big')).toBe(2000)
    await until('the budget to be free again', async () => (await stats(writer)).bufferedBytes < 1024)
    await writer.close()
  })
})
