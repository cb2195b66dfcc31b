/**
 * The daemon's life: a drain (SIGTERM, SIGINT) commits and answers every append it had taken and
 * refuses new ones with NOA_SHUTTING_DOWN, then exits 0; a second signal of either kind ends a
 * drain that waits at once, losing nothing acknowledged; a SIGKILL loses no acknowledged entry,
 * its clients get NOA_DAEMON_LOST, and a restarted daemon recovers the root (the dead one's
 * journal replayed) and the same clients go on through it.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { AgentLog, type EntryInput, isNoaError } from '../../dist/src/index.js'
import { connectDaemon, Daemon } from '../../dist/src/serve/index.js'
import { ROOT_DIR, tempDir } from '../helpers/index.js'
import { commitGate, LineClient, startDaemon, until, within } from '../helpers/serve.js'

const SERVE_HELD = join(ROOT_DIR, 'test', 'fixtures', 'serve-held.mjs')
const CRASH_IO = new URL('test/fixtures/crash-io.mjs', `file://${ROOT_DIR}/`).href
const del = (path: string): EntryInput => ({ op: 'delete', path })

function logLines(root: string, ws: string): Array<{ seq: number; path: string }> {
  return readFileSync(join(root, 'agent-logs', `${ws}.log`), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
}

describe('noa serve lifecycle', () => {
  it('drains: appends taken are committed and answered, new ones refused with NOA_SHUTTING_DOWN', async () => {
    const root = tempDir()
    const gate = commitGate()
    const d = await Daemon.start({ root, log: gate.log })
    onTestFinished(gate.release)
    const c = await LineClient.open(d.socketPath)
    await c.hello()
    expect((await c.call({ id: 99, op: 'append', ws: 'w', entry: del('first') })).ok).toBe(true)
    c.send({ id: 100, op: 'watch', ws: 'w' })
    expect((await c.next()).chunk).toHaveLength(1)
    // Held: the appends are still in flight when the drain starts, however slow the machine.
    gate.hold()
    c.send(
      Array.from(
        { length: 50 },
        (_, i) => `${JSON.stringify({ id: i, op: 'append', ws: 'w', entry: del(`f${i}`) })}\n`,
      ).join(''),
    )
    await until('the 50 appends to be taken', () => d.stats().requests === 51) // and the watch
    const drained = d.drain()
    c.send({ id: 50, op: 'append', ws: 'w', entry: del('late') })
    const late = await LineClient.open(d.socketPath)
    expect(await late.next()).toMatchObject({ id: null, error: { code: 'NOA_SHUTTING_DOWN' } })
    const answers = new Map<number, { ok: boolean; result?: { seq: number }; error?: { code: string } }>()
    const collect = async (n: number) => {
      while (answers.size < n) {
        const m = await c.next()
        expect(m).not.toBeNull()
        if (m.chunk) continue
        answers.set(m.id, m)
      }
    }
    await within(10_000, 'the refusals', collect(2)) // while the 50 wait for their commit
    expect(answers.get(50)?.error?.code).toBe('NOA_SHUTTING_DOWN')
    expect(answers.get(100)?.error?.code).toBe('NOA_SHUTTING_DOWN') // the watch ended
    expect(d.stats().requests).toBe(50)
    gate.release()
    await collect(52)
    for (let i = 0; i < 50; i++) expect(answers.get(i)).toMatchObject({ ok: true, result: { seq: i + 2 } })
    await drained
    expect(await c.next()).toBeNull() // the daemon closed the connection once done
    expect(logLines(root, 'w').map((e) => e.path)).toEqual([
      'first',
      ...Array.from({ length: 50 }, (_, i) => `f${i}`),
    ])
    // The root is free again: opened in process, no daemon.
    const log = await AgentLog.open({ root, workers: 1 })
    expect((await log.append('w', del('after'))).seq).toBe(52)
    await log.close()
  })

  // With owner workers (--workers N): the default, an owner on the daemon's thread (workers: 0),
  // would end this process, as would the lone lane (off here).
  for (const workers of [1, 2]) {
    it(`keeps serving when an owner worker dies (workers: ${workers}): its appends in flight fail by name, the next ones go on`, async () => {
      const root = tempDir()
      const marker = join(root, 'died')
      const d = await Daemon.start({
        root,
        log: {
          workers,
          loneInThread: false,
          ioModule: CRASH_IO,
          ioOptions: { marker, atCommit: 4 },
        },
      })
      const log = await connectDaemon({ root })
      const failed: string[] = []
      const acked = new Map<string, number>()
      for (let i = 0; i < 24; i++) {
        const ws = `w${i % 6}` // spread over both owners when there are two
        await log.append(ws, del(`f${i}`)).then(
          (a) => acked.set(ws, a.seq),
          (err) => {
            expect(err).toMatchObject({ code: 'NOA_WORKER_FAILED' })
            failed.push(ws)
          },
        )
      }
      expect(failed).toHaveLength(1)
      expect(acked.size).toBe(6) // every workspace, the dead owner's included, is served again
      for (const [ws, seq] of acked) expect(logLines(root, ws).at(-1)?.seq).toBe(seq)
      await log.close()
      await d.drain()
    })
  }

  it('cancels an append not yet taken into a commit (NOA_ABORTED, nothing written); a taken one commits', async () => {
    const root = tempDir()
    const gate = commitGate()
    const d = await Daemon.start({ root, log: { ...gate.log, workers: 0 } })
    onTestFinished(gate.release)
    const log = await connectDaemon({ root })
    await log.append('w', del('first'))
    gate.hold()
    const taken = log.append('w', del('taken'))
    await until('its commit to be under way', () => gate.held() === 1)
    const stop = new AbortController()
    const cancelled = log.append('w', del('cancelled'), { signal: stop.signal })
    await until('the second append to reach the daemon', () => d.stats().requests === 2)
    stop.abort()
    await expect(within(10_000, 'the cancelled append to fail', cancelled)).rejects.toMatchObject({
      code: 'NOA_ABORTED',
    })
    expect(gate.held()).toBe(1) // no commit took it meanwhile
    gate.release()
    expect((await taken).seq).toBe(2)
    expect((await log.append('w', del('after'))).seq).toBe(3)
    expect(logLines(root, 'w').map((e) => e.path)).toEqual(['first', 'taken', 'after'])
    await log.close()
    await d.drain()
  })

  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    it(`exits 0 on ${signal} after answering every append it took`, async () => {
      const root = tempDir()
      const d = await startDaemon(root)
      const log = await connectDaemon({ root })
      const results: Array<Promise<unknown>> = []
      for (let i = 0; i < 2000; i++) results.push(log.append(`w${i % 4}`, del(`f${i}`)))
      await results[0]
      const exit = d.stop(signal)
      for (let i = 2000; i < 2100; i++) results.push(log.append(`w${i % 4}`, del(`f${i}`)))
      const settled = await Promise.allSettled(results)
      expect(await exit).toEqual({ code: 0, signal: null })
      const acked = new Set<string>()
      settled.forEach((r, i) => {
        if (r.status === 'fulfilled') acked.add(`w${i % 4}:${(r.value as { seq: number }).seq}:f${i}`)
        else {
          // Refused once the drain began, or sent as the daemon was closing the connection.
          expect(['NOA_SHUTTING_DOWN', 'NOA_DAEMON_LOST']).toContain((r.reason as { code: string }).code)
        }
      })
      expect(acked.size).toBeGreaterThan(0)
      const stored = new Set<string>()
      for (let k = 0; k < 4; k++) {
        for (const e of logLines(root, `w${k}`)) stored.add(`w${k}:${e.seq}:${e.path}`)
      }
      for (const a of acked) expect(stored.has(a)).toBe(true)
      expect(stored.size).toBe(acked.size) // nothing refused was written
      await log.close()
    })
  }

  // A drain that cannot end (an append's commit is held): the second signal ends the process.
  for (const [first, second] of [
    ['SIGTERM', 'SIGTERM'],
    ['SIGTERM', 'SIGINT'],
    ['SIGINT', 'SIGTERM'],
  ] as const) {
    it(`ends at once on a second signal (${first}, then ${second}), losing nothing acknowledged`, async () => {
      const root = tempDir()
      const gate = commitGate()
      const d = await startDaemon(root, [], { script: SERVE_HELD, env: { NOA_TEST_HOLD: gate.file } })
      const c = await LineClient.open(d.info.socket)
      await c.hello()
      expect((await c.call({ id: 1, op: 'append', ws: 'w', entry: del('acked') })).result.seq).toBe(1)
      gate.hold()
      c.send({ id: 2, op: 'append', ws: 'w', entry: del('held') })
      await until('its commit to be held', () => gate.held() === 1)
      process.kill(d.pid, first)
      for (let id = 3; ; id++) {
        const m = await c.call({ id, op: 'lastSeq', ws: 'w' })
        if (m.ok) continue // the signal has not come yet
        expect(m.error.code).toBe('NOA_SHUTTING_DOWN') // draining, and waiting for the held append
        break
      }
      expect(await within(10_000, 'the daemon to end', d.stop(second))).toEqual({
        code: null,
        signal: second,
      })
      expect(await c.next()).toBeNull() // the held append was never answered
      expect(logLines(root, 'w').map((e) => e.path)).toEqual(['acked'])
      // The stale socket is removed and the root opened in process: it goes on after seq 1.
      const log = await AgentLog.open({ root, workers: 1 })
      expect((await log.append('w', del('after'))).seq).toBe(2)
      await log.close()
    })
  }

  it('SIGKILL: no acknowledged entry lost, clients get NOA_DAEMON_LOST, a restarted daemon takes over', async () => {
    const root = tempDir()
    let d = await startDaemon(root)
    const log = await AgentLog.open({ root })
    const acked: Array<{ ws: string; seq: number; path: string }> = []
    const lost: string[] = []
    let i = 0
    const loops = Array.from({ length: 16 }, async (_, k) => {
      const ws = `w${k % 4}`
      for (;;) {
        const path = `f${i++}`
        try {
          const a = await log.append(ws, del(path))
          acked.push({ ws, seq: a.seq, path })
        } catch (err) {
          expect(isNoaError(err, 'NOA_DAEMON_LOST')).toBe(true)
          lost.push(path)
          return
        }
      }
    })
    while (acked.length < 500) await new Promise((r) => setTimeout(r, 10))
    await d.stop('SIGKILL')
    await within(10_000, 'every loop to see the daemon lost', Promise.all(loops))
    expect(lost.length).toBe(16)
    // No daemon: the client's next request fails with the same named error, never hangs.
    await expect(log.append('w0', del('x'))).rejects.toMatchObject({ code: 'NOA_DAEMON_LOST' })
    d = await startDaemon(root)
    const byWs = new Map<string, Array<{ seq: number; path: string }>>()
    for (let k = 0; k < 4; k++) byWs.set(`w${k}`, logLines(root, `w${k}`))
    for (const a of acked) expect(byWs.get(a.ws)?.[a.seq - 1]?.path).toBe(a.path)
    // Entries whose answer was lost may be there (committed before the kill) or not; nothing else is.
    const known = new Set([...acked.map((a) => a.path), ...lost])
    for (const [, entries] of byWs) {
      entries.forEach((e, n) => {
        expect(e.seq).toBe(n + 1)
        expect(known.has(e.path)).toBe(true)
      })
    }
    // The same AgentLog goes on through the new daemon.
    const next = await log.append('w0', del('after'))
    expect(next.seq).toBe((byWs.get('w0')?.length ?? 0) + 1)
    await log.close()
    expect((await d.stop()).code).toBe(0)
  })
})
