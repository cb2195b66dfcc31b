/**
 * The daemon stops reading a connection, seen from both ends: at --max-in-flight requests in
 * flight, once all connections together have more than --max-pending-bytes of requests in
 * flight, and while its answers pile up unread (1 MiB). Each time the daemon has taken exactly
 * the requests the bound allows and no more, reports the connection paused, and the client's
 * own socket is left holding what the kernel would not take; once the cause is gone, every
 * request is read and answered, in order.
 */
import { readFileSync } from 'node:fs'
import { describe, expect, it, onTestFinished } from 'vitest'
import { Daemon, type DaemonStats } from '../../dist/src/serve/index.js'
import { tempDir } from '../helpers/index.js'
import { commitGate, LineClient, until } from '../helpers/serve.js'

/**
 * What a client sends at once: many times what the kernel holds of a unix socket's data
 * (net.core.wmem_default, about 200 KB), so a daemon that stops reading leaves most of it with
 * the client.
 */
const BURST = 16 * Number(readFileSync('/proc/sys/net/core/wmem_default', 'utf8'))
/** The bookkeeping each request in flight is counted with against --max-pending-bytes (docs/serve.md, Limits). */
const REQUEST_OVERHEAD = 512
/** The answers held for one connection past which it is read no further (docs/serve.md, Limits). */
const OUTPUT_HIGH = 1 << 20

/** Appends to `ws` of about 1 KB each, ids from 0: BURST bytes of them, or `count`. */
function appendLines(ws: string, count = Math.ceil(BURST / 1024)): string[] {
  const pad = 'x'.repeat(1000)
  return Array.from(
    { length: count },
    (_, id) => `${JSON.stringify({ id, op: 'append', ws, entry: { op: 'delete', path: `${pad}/${id}` } })}\n`,
  )
}

/** Writes `data` on the client's socket; `taken()` is true once the kernel has taken all of it. */
function send(c: LineClient, data: string): { taken: () => boolean } {
  let done = false
  c.socket.write(data, () => {
    done = true
  })
  return { taken: () => done }
}

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

/** Answers until `n` have come, checking each is a success; their ids in the order they came. */
async function answers(c: LineClient, n: number): Promise<Array<{ id: number; seq: number }>> {
  const out: Array<{ id: number; seq: number }> = []
  while (out.length < n) {
    const m = await c.next()
    expect(m).toMatchObject({ ok: true })
    out.push({ id: m.id, seq: m.result.seq })
  }
  return out
}

describe('noa serve stops reading a connection', () => {
  it('at --max-in-flight requests in flight, and reads on as they are answered', async () => {
    const gate = commitGate(true)
    const maxInFlight = 8
    const d = await daemon({ root: tempDir(), log: gate.log, limits: { maxInFlight } }, gate)
    const c = await LineClient.open(d.socketPath)
    await c.hello()
    const lines = appendLines('w')
    const sent = send(c, lines.join(''))
    // Either the daemon stops reading, or it reads everything (then the checks below fail).
    await until('the connection to be paused', () => d.stats().paused > 0 || sent.taken())
    const s: DaemonStats = d.stats()
    expect(s).toMatchObject({ paused: 1, requests: maxInFlight })
    expect(sent.taken()).toBe(false)
    expect(c.socket.writableLength).toBeGreaterThan(BURST / 2) // most of it still with the client
    // Commits let go: every request is read and answered, those of the connection in order.
    gate.release()
    const got = await answers(c, lines.length)
    expect(got.map((a) => a.seq)).toEqual(got.map((a) => a.id + 1))
    expect(got.map((a) => a.id).sort((a, b) => a - b)).toEqual(lines.map((_, i) => i))
    expect(d.stats()).toMatchObject({ paused: 0, requests: 0, pendingBytes: 0 })
  })

  it('once all connections together have more than --max-pending-bytes in flight, and reads on once half is answered', async () => {
    const gate = commitGate(true)
    const maxPendingBytes = 16 << 10
    const d = await daemon({ root: tempDir(), log: gate.log, limits: { maxPendingBytes } }, gate)
    const a = await LineClient.open(d.socketPath)
    await a.hello()
    const lines = appendLines('w')
    // The daemon takes requests until their bytes go past the limit, that one included.
    let taken = 0
    let bytes = 0
    while (bytes <= maxPendingBytes) bytes += (lines[taken++] as string).length - 1 + REQUEST_OVERHEAD
    const sent = send(a, lines.join(''))
    await until('the connection to be paused', () => d.stats().paused > 0 || sent.taken())
    expect(d.stats()).toMatchObject({ paused: 1, requests: taken, pendingBytes: bytes })
    expect(sent.taken()).toBe(false)
    expect(a.socket.writableLength).toBeGreaterThan(BURST / 2)
    // Past the limit, another connection has its request taken, and then it is read no further.
    const b = await LineClient.open(d.socketPath)
    await b.hello()
    const other = appendLines('v', 2)
    b.send(other.join(''))
    await until('the other connection to be paused', () => d.stats().paused === 2)
    expect(d.stats()).toMatchObject({ requests: taken + 1 })
    gate.release()
    const got = await answers(a, lines.length)
    expect(got.map((x) => x.seq)).toEqual(got.map((x) => x.id + 1))
    expect((await answers(b, 2)).map((x) => x.seq)).toEqual([1, 2])
    expect(d.stats()).toMatchObject({ paused: 0, requests: 0, pendingBytes: 0 })
  })

  it('while its answers pile up unread (1 MiB), and reads on once the client takes them', async () => {
    const d = await daemon({ root: tempDir(), log: { workers: 1 } })
    const c = await LineClient.open(d.socketPath)
    await c.hello()
    c.socket.pause() // takes none of its answers
    // Each refused at once by name (an unknown field, named in the answer twice): the answers,
    // about twice the requests, come as fast as the daemon reads.
    const field = 'f'.repeat(1000)
    const lines: string[] = []
    for (let n = 0; n < BURST; n += (lines.at(-1) as string).length) {
      lines.push(`${JSON.stringify({ id: lines.length, op: 'verify', ws: 'w', [field]: 0 })}\n`)
    }
    const sent = send(c, lines.join(''))
    await until('the connection to be paused', () => d.stats().paused > 0 || sent.taken())
    const s = d.stats()
    expect(s.paused).toBe(1)
    // It stopped at the bound: past it by no more than the answer that crossed it.
    expect(s.bufferedBytes).toBeGreaterThan(OUTPUT_HIGH)
    expect(s.bufferedBytes).toBeLessThan(OUTPUT_HIGH + 4096)
    expect(s.requests).toBe(0)
    expect(sent.taken()).toBe(false)
    expect(c.socket.writableLength).toBeGreaterThan(BURST / 2)
    c.socket.resume()
    for (let i = 0; i < lines.length; i++) {
      const m = await c.next()
      expect(m).toMatchObject({ id: i, ok: false, error: { code: 'NOA_BAD_ARGUMENT', details: { field } } })
    }
    // The last batch is counted until its write calls back.
    await until('the answers to be all taken', () => d.stats().bufferedBytes === 0)
    expect(d.stats().paused).toBe(0)
  })
})
