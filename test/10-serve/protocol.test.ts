/**
 * The wire protocol against a daemon in this process: hello, pipelining, per-request errors with
 * the engine's codes, and the limits (line, entry, connections, streams), each refusal named and
 * changing nothing.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { connectDaemon, Daemon, type ServeOptions } from '../../dist/src/serve/index.js'
import { BLOB, tempDir } from '../helpers/index.js'
import { LineClient } from '../helpers/serve.js'

async function daemon(options: Omit<ServeOptions, 'root'> = {}): Promise<Daemon> {
  const root = tempDir()
  const d = await Daemon.start({ root, log: { workers: 1 }, ...options })
  onTestFinished(() => d.drain())
  return d
}

async function client(d: Daemon): Promise<LineClient> {
  const c = await LineClient.open(d.socketPath)
  await c.hello()
  return c
}

const del = (path: string) => ({ op: 'delete' as const, path })

describe('noa serve wire protocol', () => {
  it('answers hello with the version, limits and ops, and refuses anything before it', async () => {
    const d = await daemon()
    const c = await LineClient.open(d.socketPath)
    const hello = await c.call({ id: 7, op: 'hello', v: 1 })
    expect(hello).toMatchObject({
      id: 7,
      ok: true,
      result: { v: 1, server: 'noa', root: d.root, transport: 'unix' },
    })
    expect(hello.result.limits.maxLineBytes).toBe(8 << 20)
    expect(hello.result.ops).toContain('watch')

    const early = await LineClient.open(d.socketPath)
    expect(await early.call({ id: 1, op: 'append', ws: 'w', entry: del('a') })).toMatchObject({
      id: null,
      ok: false,
      error: { code: 'NOA_PROTOCOL', message: 'the first request must be hello, got append' },
    })
    expect(await early.next()).toBeNull() // closed
    const v2 = await LineClient.open(d.socketPath)
    const r = await v2.call({ id: 0, op: 'hello', v: 2 })
    expect(r.error).toMatchObject({ code: 'NOA_PROTOCOL', details: { supported: [1] } })
    expect(await v2.next()).toBeNull()
    expect(existsSync(join(d.root, 'agent-logs'))).toBe(false)
  })

  it('pipelines: many requests in one write, answered by id, appends committed in the order sent', async () => {
    const d = await daemon()
    const c = await client(d)
    const n = 200
    c.send(
      Array.from(
        { length: n },
        (_, i) => `${JSON.stringify({ id: 1000 + i, op: 'append', ws: 'w', entry: del(`f${i}`) })}\n`,
      ).join(''),
    )
    const answers = []
    for (let i = 0; i < n; i++) answers.push(await c.next())
    const byId = new Map(answers.map((a) => [a.id, a]))
    for (let i = 0; i < n; i++) {
      const a = byId.get(1000 + i)
      expect(a).toMatchObject({ ok: true, result: { seq: i + 1 } })
    }
    const lines = readFileSync(join(d.root, 'agent-logs', 'w.log'), 'utf8')
      .trim()
      .split('\n')
    expect(lines.map((l) => JSON.parse(l).path)).toEqual(Array.from({ length: n }, (_, i) => `f${i}`))
    // A read stream and a unary request on the same connection.
    c.send({ id: 1, op: 'read', ws: 'w', fromSeq: 199 })
    c.send({ id: 2, op: 'verify', ws: 'w' })
    const got = [await c.next(), await c.next(), await c.next()]
    expect(got.find((m) => m.id === 1 && m.chunk)?.chunk.map((e: { seq: number }) => e.seq)).toEqual([
      199, 200,
    ])
    expect(got.find((m) => m.id === 1 && m.ok)?.result).toMatchObject({ entries: 2 })
    expect(got.find((m) => m.id === 2)?.result).toMatchObject({ ok: true, entries: 200, lastSeq: 200 })
  })

  it("answers a bad request with the engine's named error and goes on", async () => {
    const d = await daemon()
    const c = await client(d)
    const bad = await c.call({
      id: 1,
      op: 'append',
      ws: 'w',
      entry: { op: 'write', path: '../x', blob: BLOB },
    })
    expect(bad).toMatchObject({ id: 1, ok: false, error: { code: 'NOA_BAD_ENTRY', name: 'NoaError' } })
    expect(bad.error.message).toMatch(/path: has a '\.\.' segment/)
    for (const ws of ['../x', 'a/b', '.', '..', 'x'.repeat(200), 7]) {
      const r = await c.call({ id: 2, op: 'append', ws, entry: del('a') })
      expect(r.error.code).toBe('NOA_BAD_WORKSPACE')
      const read = await c.call({ id: 3, op: 'read', ws })
      expect(read.error.code).toBe('NOA_BAD_WORKSPACE')
    }
    expect((await c.call({ id: 4, op: 'verify', ws: 'none' })).error.code).toBe('NOA_NOT_FOUND')
    const typo = await c.call({ id: 5, op: 'append', ws: 'w', entry: del('a'), if_last_seq: 0 })
    expect(typo.error).toMatchObject({ code: 'NOA_BAD_ARGUMENT', details: { field: 'if_last_seq' } })
    expect((await c.call({ id: 6, op: 'appendMany', ws: 'w', entries: 'x' })).error.code).toBe(
      'NOA_BAD_ARGUMENT',
    )
    // Nothing of that was written; the connection still works.
    expect(existsSync(join(d.root, 'agent-logs'))).toBe(false)
    expect((await c.call({ id: 8, op: 'append', ws: 'w', entry: del('a') })).result.seq).toBe(1)
  })

  it('closes the connection on a malformed line, invalid UTF-8 or a reused id, changing nothing', async () => {
    const d = await daemon()
    const untouched = () => expect(existsSync(join(d.root, 'agent-logs'))).toBe(false)
    for (const [line, code] of [
      ['{"id":1,"op":"append"', 'NOA_PROTOCOL'],
      ['[1,2]', 'NOA_PROTOCOL'],
      ['{"id":-1,"op":"verify","ws":"w"}', 'NOA_PROTOCOL'],
      ['{"id":1,"op":"drop","ws":"w"}', 'NOA_PROTOCOL'],
    ] as const) {
      const c = await client(d)
      const r = await c.call(`${line}\n` as unknown as object)
      expect(r).toMatchObject({ id: null, ok: false, error: { code } })
      expect(await c.next()).toBeNull()
    }
    untouched()
    const reuse = await client(d)
    await reuse.call({ id: 1, op: 'append', ws: 'w', entry: del('a') })
    reuse.send({ id: 5, op: 'watch', ws: 'w' }) // stays in flight: a watch never ends by itself
    expect((await reuse.next()).chunk).toHaveLength(1)
    reuse.send({ id: 5, op: 'verify', ws: 'w' })
    expect((await reuse.next()).error).toMatchObject({
      code: 'NOA_PROTOCOL',
      message: 'id 5 is already in flight on this connection',
    })
    expect(await reuse.next()).toBeNull()
    const c = await client(d)
    c.socket.write(
      Buffer.concat([
        Buffer.from('{"id":1,"op":"append","ws":"w","entry":{"op":"delete","path":"'),
        Buffer.from([0xff, 0xfe]),
        Buffer.from('"}}\n'),
      ]),
    )
    expect((await c.next()).error.code).toBe('NOA_PROTOCOL')
    expect(await c.next()).toBeNull()
    expect(
      readFileSync(join(d.root, 'agent-logs', 'w.log'), 'utf8')
        .trim()
        .split('\n'),
    ).toHaveLength(1)
  })

  it('enforces the line, entry, connection and stream limits with NOA_TOO_LARGE / NOA_TOO_MANY_CONNECTIONS', async () => {
    const d = await daemon({
      limits: { maxLineBytes: 4096, maxEntryBytes: 1024, maxConnections: 3, maxStreams: 1 },
    })
    // An entry over the entry limit: refused, the connection goes on.
    const c = await client(d)
    const big = await c.call({
      id: 1,
      op: 'append',
      ws: 'w',
      entry: { op: 'delete', path: 'p'.repeat(2000) },
    })
    expect(big.error).toMatchObject({ code: 'NOA_TOO_LARGE', details: { limit: 1024 } })
    expect(big.error.message).toMatch(/--max-entry-bytes/)
    // A line over the line limit (even without its newline yet): refused and closed.
    c.socket.write(`{"id":2,"op":"append","ws":"w","entry":{"op":"delete","path":"${'q'.repeat(5000)}`)
    expect((await c.next()).error).toMatchObject({ code: 'NOA_TOO_LARGE', details: { limit: 4096 } })
    expect(await c.next()).toBeNull()
    // Before hello, 64 KiB at most whatever the limit (an unauthenticated peer buffers little).
    const d2 = await daemon()
    const pre = await LineClient.open(d2.socketPath)
    pre.socket.write('x'.repeat(70 << 10))
    expect((await pre.next()).error.code).toBe('NOA_TOO_LARGE')
    // Connections: the fourth is refused.
    const held = [await client(d), await client(d), await client(d)]
    const extra = await LineClient.open(d.socketPath)
    expect((await extra.next()).error).toMatchObject({
      code: 'NOA_TOO_MANY_CONNECTIONS',
      details: { limit: 3 },
    })
    expect(await extra.next()).toBeNull()
    // Streams per connection: a second is refused while the first is open.
    const s = held[0] as LineClient
    await s.call({ id: 1, op: 'append', ws: 'w', entry: del('a') })
    s.send({ id: 2, op: 'read', ws: 'w', window: 1 })
    s.send({ id: 3, op: 'read', ws: 'w' })
    const msgs = [await s.next(), await s.next()]
    expect(msgs.find((m) => m.id === 3)?.error.code).toBe('NOA_TOO_MANY_CONNECTIONS')
    expect(readdirSync(join(d.root, 'agent-logs'))).toEqual(['w.log'])
    expect(
      readFileSync(join(d.root, 'agent-logs', 'w.log'), 'utf8')
        .trim()
        .split('\n'),
    ).toHaveLength(1)
  })

  it('sends a stream no further than its window until the client asks for more', async () => {
    const d = await daemon()
    const log = await connectDaemon({ root: d.root })
    for (let i = 0; i < 10; i++)
      await log.appendMany(
        'w',
        Array.from({ length: 1000 }, (_, k) => del(`f${i}-${k}`)),
      )
    await log.close()
    const c = await client(d)
    c.send({ id: 1, op: 'read', ws: 'w', window: 2 })
    const first = [await c.next(), await c.next()]
    expect(first.every((m) => m.id === 1 && Array.isArray(m.chunk))).toBe(true)
    // Nothing more arrives until credit is given: a later request is answered meanwhile.
    expect((await c.call({ id: 2, op: 'verify', ws: 'w' })).result.entries).toBe(10_000)
    let seqs = first.flatMap((m) => m.chunk.map((e: { seq: number }) => e.seq))
    for (;;) {
      c.send({ op: 'more', ref: 1, n: 1 })
      const m = await c.next()
      if (m.ok) {
        expect(m.result.entries).toBe(10_000)
        break
      }
      seqs = seqs.concat(m.chunk.map((e: { seq: number }) => e.seq))
    }
    expect(seqs).toEqual(Array.from({ length: 10_000 }, (_, i) => i + 1))
    // A cancelled stream ends with NOA_ABORTED.
    c.send({ id: 3, op: 'read', ws: 'w', window: 1 })
    expect((await c.next()).chunk).toBeDefined()
    c.send({ op: 'cancel', ref: 3 })
    expect((await c.next()).error.code).toBe('NOA_ABORTED')
  })

  it('refuses a daemon on a root another daemon serves', async () => {
    const d = await daemon()
    await expect(Daemon.start({ root: d.root })).rejects.toMatchObject({ code: 'NOA_DAEMON_RUNNING' })
  })
})
