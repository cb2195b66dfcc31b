/**
 * The number of live workspaces is bounded by descriptors only through the LRU of open files:
 * the bound follows the process's RLIMIT_NOFILE (two descriptors per open workspace, a quarter of
 * the limit left to the host), and a process that runs out of descriptors anyway (something else
 * took them) gets a named error on the append that could not open its log, never a crash, and
 * goes on once descriptors are free again. Each case runs in a child with `ulimit -n` lowered.
 */
import { spawnSync } from 'node:child_process'
import { existsSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { openFileBudget } from '../../dist/src/engine/descriptors.js'
import { AgentLog } from '../../dist/src/index.js'
import { blobOf, tempDir } from '../helpers/index.js'

const INDEX = new URL('../../dist/src/index.js', import.meta.url).href

function underLimit(
  limit: number,
  script: string,
  root: string,
): { status: number; out: string; err: string } {
  const r = spawnSync(
    'bash',
    [
      '-c',
      `ulimit -n ${limit} && exec "$0" --input-type=module -e "$1" "$2"`,
      process.execPath,
      script,
      root,
    ],
    {
      encoding: 'utf8',
      timeout: 120_000,
    },
  )
  return { status: r.status ?? -1, out: r.stdout, err: r.stderr }
}

const MANY = `
import { readdirSync } from 'node:fs'
import { AgentLog } from ${JSON.stringify(INDEX)}
const log = await AgentLog.open({ root: process.argv[1], maxOpenFiles: 100000 })
const blob = 'ab'.repeat(32)
let acks = 0
let most = 0
for (let round = 0; round < 2; round++) {
  for (let i = 0; i < 600; i += 20) {
    const acked = await Promise.all(Array.from({ length: 20 }, (_, k) => log.append('w' + (i + k), { op: 'write', path: 'r' + round, blob })))
    acks += acked.length
    most = Math.max(most, readdirSync('/proc/self/fd').length)
  }
}
const status = await log.status()
await log.close()
process.stdout.write(JSON.stringify({ acks, most, bound: status.reduce((n, s) => n + s.maxOpenFiles, 0), open: status.reduce((n, s) => n + s.open, 0) }))
`

// More live workspaces than the budget lets stay open: each visit appends a burst (an agent's
// step), and the counters say how often a log was opened and closed to make room.
const CYCLE = `
import { readdirSync } from 'node:fs'
import { AgentLog } from ${JSON.stringify(INDEX)}
const log = await AgentLog.open({ root: process.argv[1], workers: 1, loneInThread: false })
const blob = 'ab'.repeat(32)
await log.append('w0', { op: 'write', path: 'first', blob }) // the owner starts
const [{ maxOpenFiles }] = await log.status()
const live = maxOpenFiles * 3
let acks = 0
let most = 0
for (let visit = 0; visit < 2; visit++) {
  for (let i = 0; i < live; i += 50) {
    const acked = await Promise.all(
      Array.from({ length: Math.min(50, live - i) }, (_, k) =>
        log.appendMany('w' + (i + k), Array.from({ length: 4 }, (_, e) => ({ op: 'write', path: visit + '/' + e, blob }))),
      ),
    )
    acks += acked.reduce((n, a) => n + a.length, 0)
    most = Math.max(most, readdirSync('/proc/self/fd').length)
  }
}
const [s] = await log.status()
await log.close()
process.stdout.write(JSON.stringify({ acks, most, live, maxOpenFiles, opens: s.opens, evictions: s.evictions, open: s.open }))
`

const STARVED = `
import { openSync, closeSync } from 'node:fs'
import { AgentLog } from ${JSON.stringify(INDEX)}
const log = await AgentLog.open({ root: process.argv[1], workers: 1 })
const blob = 'ab'.repeat(32)
await log.append('first', { op: 'write', path: 'a', blob })
// Something else in the process takes every descriptor that is left.
const hog = []
for (;;) {
  try { hog.push(openSync('/dev/null', 'r')) } catch { break }
}
const err = await log.append('second', { op: 'write', path: 'a', blob }).catch((e) => e)
for (const fd of hog) closeSync(fd)
// Once descriptors are free again, both workspaces go on.
const later = await log.append('second', { op: 'write', path: 'a', blob })
const again = await log.append('first', { op: 'write', path: 'b', blob })
await log.close()
process.stdout.write(JSON.stringify({ code: err.code, message: err.message, again: again.seq, later: later.seq }))
`

describe('descriptors', () => {
  it('an open workspace holds one descriptor: its checksum sidecar is written through short-lived ones', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 0 })
    const fds = () => readdirSync('/proc/self/fd').length
    try {
      await log.append('warm', { op: 'write', path: 'a', blob: blobOf(0) })
      const before = fds()
      for (let w = 0; w < 40; w++) {
        // Past one ~64 KiB block each: every sidecar gets a record.
        const entries = Array.from({ length: 600 }, (_, i) => ({
          op: 'write' as const,
          path: `dir/file-${i}.txt`,
          blob: blobOf(i),
        }))
        await log.appendMany(`w${w}`, entries)
      }
      expect(fds() - before).toBeLessThanOrEqual(40 + 2)
      for (let w = 0; w < 40; w++)
        expect(statSync(join(root, 'checksums', `w${w}.sum`)).size).toBeGreaterThan(32)
    } finally {
      await log.close()
    }
    expect(existsSync(join(root, 'journal'))).toBe(false)
  })

  it('keeps the open files within what ulimit -n leaves room for: 600 workspaces under a limit of 200, every append acknowledged', () => {
    const r = underLimit(200, MANY, tempDir())
    expect(r.status, r.err).toBe(0)
    const got = JSON.parse(r.out) as { acks: number; most: number; bound: number; open: number }
    expect(got.acks).toBe(1200)
    expect(got.bound).toBeLessThanOrEqual(openFileBudget(200))
    expect(got.open).toBeLessThanOrEqual(got.bound)
    expect(got.most).toBeLessThan(200)
  })

  it('three times as many live workspaces as the budget keeps open: every append acknowledged, descriptors within the limit, one open per visit of a workspace and none per append', () => {
    const r = underLimit(200, CYCLE, tempDir())
    expect(r.status, r.err).toBe(0)
    const got = JSON.parse(r.out) as {
      acks: number
      most: number
      live: number
      maxOpenFiles: number
      opens: number
      evictions: number
      open: number
    }
    expect(got.maxOpenFiles).toBeLessThanOrEqual(openFileBudget(200))
    expect(got.acks).toBe(got.live * 2 * 4)
    expect(got.most).toBeLessThan(200)
    expect(got.open).toBeLessThanOrEqual(got.maxOpenFiles)
    // Each of the 2 visits of each workspace opened its log once (4 appends each), not once per
    // append; w0, opened first to start the owner, stays open into the first visit.
    expect(got.opens).toBe(got.live * 2)
    expect(got.evictions).toBe(got.opens - got.open)
  })

  it('out of descriptors: the append that cannot open its log fails by name (NOA_BUSY), nothing crashes, and every workspace goes on once they are free', () => {
    const r = underLimit(256, STARVED, tempDir())
    expect(r.err).not.toContain('FATAL')
    expect(r.status, r.err).toBe(0)
    const got = JSON.parse(r.out) as { code: string; message: string; again: number; later: number }
    expect(got.code).toBe('NOA_BUSY')
    expect(got.message).toContain('out of file descriptors (EMFILE')
    expect(got.message).toContain('ulimit -n 256')
    expect(got.again).toBe(2)
    expect(got.later).toBe(1)
  })
})
