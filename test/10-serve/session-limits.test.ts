/**
 * The per-connection limits of a daemon in this process (fast enough for the mutation run of
 * src/serve/session.ts, scripts/mutation/modules.mjs): the hello timeout, and what resumes a
 * connection paused at --max-in-flight or --max-pending-bytes. Each waits for what the client
 * sees (an answer, a closed socket, the daemon's counters), never for time to pass.
 */
import { describe, expect, it, onTestFinished } from 'vitest'
import { AgentLog } from '../../dist/src/index.js'
import { Daemon } from '../../dist/src/serve/index.js'
import { tempDir } from '../helpers/index.js'
import { commitGate, LineClient, until, within } from '../helpers/serve.js'

/** A daemon drained when the test ends, its held commits let go first (a drain waits for them). */
async function daemon(
  options: Parameters<typeof Daemon.start>[0],
  gate?: ReturnType<typeof commitGate>,
): Promise<Daemon> {
  const d = await Daemon.start(options)
  onTestFinished(() => {
    gate?.release()
    return d.drain()
  })
  return d
}

/** The bookkeeping each request in flight is counted with against --max-pending-bytes (docs/serve.md, Limits). */
const REQUEST_OVERHEAD = 512

const append = (id: number, ws = 'w') => ({ id, op: 'append', ws, entry: { op: 'delete', path: `p${id}` } })

describe('noa serve, per connection', () => {
  it('closes a connection that says no hello within --hello-timeout-ms; one that said hello first is kept', async () => {
    const helloTimeoutMs = 50
    const d = await daemon({ root: tempDir(), limits: { helloTimeoutMs } })
    // Opened first: its timer, were it not stopped by the hello, would fire before the other's.
    const kept = await LineClient.open(d.socketPath)
    await kept.hello()
    const silent = await LineClient.open(d.socketPath)
    expect(await within(10_000, 'the refusal', silent.next())).toMatchObject({
      id: null,
      ok: false,
      error: { code: 'NOA_PROTOCOL', details: { limit: helloTimeoutMs } },
    })
    expect(await silent.next()).toBeNull() // closed
    expect(await kept.call(append(1))).toMatchObject({ id: 1, ok: true, result: { seq: 1 } })
    expect(d.stats().connections).toBe(1)
  })

  it('takes the request that brings --max-pending-bytes exactly to the limit, and pauses at the one past it', async () => {
    const gate = commitGate(true)
    const lines = Array.from({ length: 12 }, (_, id) => `${JSON.stringify(append(id))}\n`)
    // Lines of one length (ids 0-9): four of them, with their overhead, are the limit exactly.
    const each = (lines[0] as string).length - 1 + REQUEST_OVERHEAD
    expect(lines.slice(0, 10).every((l) => l.length - 1 + REQUEST_OVERHEAD === each)).toBe(true)
    const d = await daemon({ root: tempDir(), log: gate.log, limits: { maxPendingBytes: 4 * each } }, gate)
    const c = await LineClient.open(d.socketPath)
    await c.hello()
    c.send(lines.join(''))
    await until('the connection to be paused', () => d.stats().paused > 0)
    expect(d.stats()).toMatchObject({ paused: 1, requests: 5, pendingBytes: 5 * each })
    gate.release()
    for (let i = 0; i < lines.length; i++) expect(await c.next()).toMatchObject({ id: i, ok: true })
    expect(d.stats()).toMatchObject({ paused: 0, requests: 0, pendingBytes: 0 })
  })

  it('past --max-pending-bytes, reads a paused connection again once what is in flight is down to half the limit, not before', async () => {
    const gate = commitGate()
    // Watches (in flight until cancelled) on one connection, a held append on another: the
    // watches, cancelled one at a time, bring what is in flight down step by step.
    const watched = `watched-${'x'.repeat(100)}`
    const watch = (id: number) => `${JSON.stringify({ id, op: 'watch', ws: watched, fromSeq: 2 })}\n`
    const w = (watch(10) as string).length - 1 + REQUEST_OVERHEAD
    const a = `${JSON.stringify(append(1))}\n`.length - 1 + REQUEST_OVERHEAD
    expect(a).toBeLessThan(w) // five watches fit the limit, the append takes it past
    const limit = 2 * (a + 2 * w) // half of it: the append and two watches
    const d = await daemon({ root: tempDir(), log: gate.log, limits: { maxPendingBytes: limit } }, gate)
    const streams = await LineClient.open(d.socketPath)
    await streams.hello()
    expect(await streams.call(append(0, watched))).toMatchObject({ ok: true })
    streams.send([10, 11, 12, 13, 14].map(watch).join(''))
    await until('the watches to be open', () => d.stats().streams === 5)
    expect(d.stats()).toMatchObject({ paused: 0, pendingBytes: 5 * w })
    gate.hold()
    const writer = await LineClient.open(d.socketPath)
    await writer.hello()
    writer.send(`${JSON.stringify(append(1))}\n${JSON.stringify(append(2))}\n`)
    await until('the writer to be paused', () => d.stats().paused === 1)
    expect(d.stats()).toMatchObject({ requests: 6, pendingBytes: 5 * w + a })
    const cancel = async (ref: number) => {
      streams.send({ id: 100 + ref, op: 'cancel', ref })
      expect(await streams.next()).toMatchObject({ id: ref, ok: false, error: { code: 'NOA_ABORTED' } })
    }
    await cancel(10)
    await cancel(11)
    // Three watches and the append: more than half the limit, the writer is still not read.
    expect(d.stats()).toMatchObject({ paused: 1, requests: 4, pendingBytes: 3 * w + a })
    await cancel(12)
    // Half the limit exactly: the writer is read again (resumed before that answer went out),
    // its second append taken.
    expect(d.stats().paused).toBe(0)
    await until('the second append to be taken', () => d.stats().requests === 4)
    expect(d.stats()).toMatchObject({ paused: 0, pendingBytes: 2 * w + 2 * a })
    gate.release()
    expect(await writer.next()).toMatchObject({ id: 1, ok: true })
    expect(await writer.next()).toMatchObject({ id: 2, ok: true })
  })

  it('parks a stream whose client takes none of its chunks, and goes on once the client takes them', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 0 })
    const total = 4000 // about 600 KB of entries: many times what is sent ahead
    await log.appendMany(
      'w',
      Array.from({ length: total }, (_, i) => ({ op: 'delete' as const, path: `p/${'x'.repeat(120)}/${i}` })),
    )
    await log.close()
    const d = await daemon({ root })
    const c = await LineClient.open(d.socketPath)
    await c.hello()
    c.socket.pause() // takes nothing
    c.send({ id: 1, op: 'read', ws: 'w', window: 256 })
    // Parked: its reader closed, what it has not sent left in the log file.
    await until('the stream to be parked', () => d.stats().streams === 1 && d.stats().readers === 0)
    c.socket.resume()
    let seqs = 0
    for (;;) {
      const m = await c.next()
      if (m.chunk === undefined) {
        expect(m).toMatchObject({ id: 1, ok: true, result: { chunks: expect.any(Number) } })
        break
      }
      seqs += (m.chunk as unknown[]).length
    }
    expect(seqs).toBe(total)
    expect(d.stats()).toMatchObject({ streams: 0, readers: 0 })
  })

  it('answers a line that is not a request with NOA_PROTOCOL and closes the connection', async () => {
    const d = await daemon({ root: tempDir() })
    const c = await LineClient.open(d.socketPath)
    await c.hello()
    c.send('not json\n')
    expect(await c.next()).toMatchObject({ id: null, ok: false, error: { code: 'NOA_PROTOCOL' } })
    expect(await c.next()).toBeNull()
  })

  it('cancels an append sent as cancellable while it waits, and only such an append', async () => {
    const gate = commitGate(true)
    const d = await daemon({ root: tempDir(), log: gate.log }, gate)
    const c = await LineClient.open(d.socketPath)
    await c.hello()
    const held = gate.held()
    c.send(append(0)) // its commit is held: the two after it wait behind it
    await until('the first commit to be held', () => gate.held() > held)
    c.send({ ...append(1), cancellable: true })
    c.send(append(2))
    await until('all three to be in flight', () => d.stats().requests === 3)
    c.send({ id: 11, op: 'cancel', ref: 1 })
    c.send({ id: 12, op: 'cancel', ref: 2 })
    expect(await c.next()).toMatchObject({ id: 1, ok: false, error: { code: 'NOA_ABORTED' } })
    gate.release()
    const rest = [await c.next(), await c.next()].sort((x, y) => x.id - y.id)
    expect(rest).toMatchObject([
      { id: 0, ok: true, result: { seq: 1 } },
      { id: 2, ok: true, result: { seq: 2 } },
    ])
  })
})
