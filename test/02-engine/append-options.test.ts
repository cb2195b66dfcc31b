/**
 * Append options: compare-and-append (ifLastSeq), cancellation (an AbortSignal), and
 * backpressure (maxPendingBytes).
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { readEntries } from '../../dist/src/engine/index.js'
import { AgentLog, type EntryInput } from '../../dist/src/index.js'
import { blobOf, tempDir } from '../helpers/index.js'

const FAULTY = new URL('../fixtures/faulty-io.mjs', import.meta.url).href

function write(i: number): EntryInput {
  return { op: 'write', path: `f${i}`, blob: blobOf(i) }
}

async function paths(root: string, ws: string): Promise<string[]> {
  const out: string[] = []
  for await (const e of readEntries(join(root, 'agent-logs', `${ws}.log`)))
    out.push((e as { path: string }).path)
  return out
}

describe('compare-and-append', () => {
  it('commits only when the last seq is the one expected, and says what it is otherwise', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1 })
    try {
      expect((await log.append('w', write(1), { ifLastSeq: 0 })).seq).toBe(1)
      const stale = await log.append('w', write(2), { ifLastSeq: 0 }).catch((e) => e)
      expect(stale.code).toBe('NOA_SEQ_MISMATCH')
      expect(stale.details).toMatchObject({ workspace: 'w', lastSeq: 1, expected: 0 })
      // A client that lost the ack of seq 2 retries with the seq it saw: exactly once.
      const first = await log.appendMany('w', [write(2), write(3)], { ifLastSeq: 1 })
      expect(first.map((a) => a.seq)).toEqual([2, 3])
      expect((await log.appendMany('w', [write(2), write(3)], { ifLastSeq: 1 }).catch((e) => e)).code).toBe(
        'NOA_SEQ_MISMATCH',
      )
      // Within one commit, each expectation is checked against the entries before it.
      const [a, b, c] = await Promise.allSettled([
        log.append('w', write(4), { ifLastSeq: 3 }),
        log.append('w', write(5), { ifLastSeq: 3 }),
        log.append('w', write(6), { ifLastSeq: 4 }),
      ])
      expect(a.status).toBe('fulfilled')
      expect(b.status === 'rejected' && (b.reason as { code: string }).code).toBe('NOA_SEQ_MISMATCH')
      expect(c.status).toBe('fulfilled')
      const bad = await log.append('w', write(7), { ifLastSeq: -1 }).catch((e) => e)
      expect(bad.code).toBe('NOA_BAD_OPTION')
    } finally {
      await log.close()
    }
    expect(await paths(root, 'w')).toEqual(['f1', 'f2', 'f3', 'f4', 'f6'])
  })
})

describe('cancellation and backpressure', () => {
  it('an aborted signal cancels an append not yet committed, never one already written', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1 })
    try {
      const done = new AbortController()
      done.abort()
      expect((await log.append('w', write(0), { signal: done.signal }).catch((e) => e)).code).toBe(
        'NOA_ABORTED',
      )
      // Aborted in the same turn, before it left this thread: dropped.
      const c = new AbortController()
      const p = log.append('w', write(1), { signal: c.signal })
      c.abort()
      expect((await p.catch((e) => e)).code).toBe('NOA_ABORTED')
      // Aborted after it committed: nothing happens, it stays.
      const late = new AbortController()
      const ack = await log.append('w', write(2), { signal: late.signal })
      late.abort()
      expect(ack.seq).toBe(1)
    } finally {
      await log.close()
    }
    expect(await paths(root, 'w')).toEqual(['f2'])
  })

  it('past maxPendingBytes, an append is not handed to its owner: no commit holds more than the bound', async () => {
    const root = tempDir()
    const trace = join(root, 'trace')
    const bound = 2000
    const log = await AgentLog.open({
      root,
      workers: 1,
      maxPendingBytes: bound,
      ioModule: FAULTY,
      ioOptions: { trace },
    })
    let line = 0
    try {
      const acks = await Promise.all(Array.from({ length: 400 }, (_, i) => log.append(`w${i % 4}`, write(i))))
      expect(acks.length).toBe(400)
      line = readFileSync(join(root, 'agent-logs', 'w0.log'), 'utf8').indexOf('\n') + 1
    } finally {
      await log.close()
    }
    // 400 appends issued at once: without the bound, the owner would have them all and write
    // each workspace's hundred lines in one go. With it, what reaches one write is at most the
    // bound's worth of lines (an append alone may pass it).
    const writes = readFileSync(trace, 'utf8')
      .trim()
      .split('\n')
      .filter((l) => l.startsWith('write '))
      .map((l) => Number(l.split(' ')[2]))
    expect(writes.length).toBeGreaterThan(20)
    expect(Math.max(...writes)).toBeLessThanOrEqual(bound + line)
    expect((await Promise.all([0, 1, 2, 3].map((w) => paths(root, `w${w}`)))).flat().length).toBe(400)
  })

  it('past maxPendingBytes, appends wait their turn; a waiting one can be cancelled', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1, maxPendingBytes: 2000 })
    try {
      const controllers = Array.from({ length: 400 }, () => new AbortController())
      const all = controllers.map((c, i) => log.append(`w${i % 4}`, write(i), { signal: c.signal }))
      // The last ones wait behind ~2000 bytes of earlier appends: cancelling them drops them.
      for (const c of controllers.slice(390)) c.abort()
      const results = await Promise.allSettled(all)
      const cancelled = results.filter((r) => r.status === 'rejected')
      expect(cancelled.length).toBe(10)
      for (const r of cancelled) expect((r as PromiseRejectedResult).reason.code).toBe('NOA_ABORTED')
      expect(results.slice(0, 390).every((r) => r.status === 'fulfilled')).toBe(true)
    } finally {
      await log.close()
    }
    const total = (await Promise.all([0, 1, 2, 3].map((w) => paths(root, `w${w}`)))).flat()
    expect(total.length).toBe(390)
    expect(total).not.toContain('f395')
  })
})

describe('watch', () => {
  it('delivers what is there, then each entry as it commits, and resumes with no gap or duplicate', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 2 })
    try {
      await log.appendMany('w', [write(1), write(2), write(3)])
      const stop = new AbortController()
      const seen: number[] = []
      const watching = (async () => {
        for await (const e of log.watch('w', { signal: stop.signal })) {
          seen.push(e.seq)
          if (seen.length === 203) stop.abort()
        }
      })()
      for (let i = 0; i < 100; i++) await log.append('w', write(10 + i))
      await Promise.all(Array.from({ length: 100 }, (_, i) => log.append('w', write(200 + i))))
      await watching
      expect(seen).toEqual(Array.from({ length: 203 }, (_, i) => i + 1))
      // Resume after seq 150: exactly 151..203, then stop on a return().
      const resumed: number[] = []
      for await (const e of log.watch('w', { fromSeq: 151 })) {
        resumed.push(e.seq)
        if (e.seq === 203) break
      }
      expect(resumed).toEqual(Array.from({ length: 53 }, (_, i) => i + 151))
    } finally {
      await log.close()
    }
  })

  it('sees entries another process appends', async () => {
    const root = tempDir()
    const writer = await AgentLog.open({ root, workers: 1 })
    await writer.append('shared', write(1))
    const { spawn } = await import('node:child_process')
    const reader = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `import { AgentLog } from ${JSON.stringify(new URL('../../dist/src/index.js', import.meta.url).href)}
         const log = await AgentLog.open({ root: ${JSON.stringify(root)}, workers: 1 })
         for await (const e of log.watch('shared', { pollMs: 50 })) {
           process.stdout.write(e.seq + '\\n')
           if (e.seq === 20) break
         }
         await log.close()`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    )
    let out = ''
    reader.stdout.on('data', (d) => {
      out += d
    })
    // Listened for from the start: the reader may see the last entry and exit before the
    // writer's loop below has ended.
    const exited = new Promise((r) => reader.on('exit', r))
    try {
      for (let i = 2; i <= 20; i++) {
        await writer.append('shared', write(i))
        await new Promise((r) => setTimeout(r, 5))
      }
      const code = await exited
      expect(code).toBe(0)
      expect(out.trim().split('\n').map(Number)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1))
    } finally {
      reader.kill()
      await writer.close()
    }
  })
})
