/**
 * A stream the client does not take from is parked: its reader (the log's file, its buffers) is
 * closed and only its position kept, and it is opened again there once the client grants more.
 * Read this way, one chunk per grant, every stream delivers exactly what an unparked one does:
 * a read and a readBytes what the log held when they began, a watch every entry, no gap, no
 * duplicate.
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import type { Entry } from '../../dist/src/index.js'
import { connectDaemon, Daemon } from '../../dist/src/serve/index.js'
import { tempDir } from '../helpers/index.js'
import { LineClient } from '../helpers/serve.js'

const del = (path: string) => ({ op: 'delete' as const, path })

/** Descriptors this process has open on `file` (the daemon runs in this process). */
function openOn(file: string): number {
  let n = 0
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      if (readlinkSync(`/proc/self/fd/${fd}`) === file) n++
    } catch {
      // closed meanwhile
    }
  }
  return n
}

async function until(what: string, check: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; !(await check()); i++) {
    if (i > 500) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 10))
  }
}

describe('noa serve parked streams', () => {
  it('closes the reader of a stream its client does not take from, and goes on from where it stopped', async () => {
    const root = tempDir()
    const d = await Daemon.start({ root, log: { workers: 1 } })
    onTestFinished(() => d.drain())
    const writer = await connectDaemon({ root })
    const total = 6000
    for (let i = 0; i < total; i += 3000) {
      await writer.appendMany(
        'w',
        Array.from({ length: 3000 }, (_, k) => del(`p/${'x'.repeat(100)}/${i + k}`)),
      )
    }
    const file = join(root, 'agent-logs', 'w.log')
    const before = readFileSync(file)
    const held = openOn(file) // the owner's own descriptor

    const c = await LineClient.open(d.socketPath)
    await c.hello()
    const ops = ['read', 'readBytes', 'watch'] as const
    const n = 12
    const opOf = (id: number) => ops[id % 3] as (typeof ops)[number]
    for (let id = 0; id < n; id++) c.send({ id: id + 1, op: opOf(id + 1), ws: 'w', window: 1 })
    const entries = new Map<number, Entry[]>()
    const bytes = new Map<number, Buffer[]>()
    const results = new Map<number, { chunks: number; entries?: number; bytes?: number }>()
    const take = (m: { id: number; chunk: unknown }) => {
      if (opOf(m.id) === 'readBytes') {
        const list = bytes.get(m.id) ?? []
        list.push(Buffer.from(m.chunk as string, 'base64'))
        bytes.set(m.id, list)
      } else {
        const list = entries.get(m.id) ?? []
        list.push(...(m.chunk as Entry[]))
        entries.set(m.id, list)
      }
    }
    // One chunk each, then nothing granted: every stream is parked, and none holds the log open.
    for (let i = 0; i < n; i++) {
      const m = await c.next()
      expect(m.chunk).toBeDefined()
      take(m)
    }
    await until('the parked readers to close', () => openOn(file) <= held)
    expect(((await writer.serverStatus()) as { streams: number }).streams).toBe(n)

    // Appended after the streams began: the watches get them, the reads do not.
    await writer.appendMany(
      'w',
      Array.from({ length: 100 }, (_, k) => del(`late/${k}`)),
    )
    for (let id = 1; id <= n; id++) c.send({ op: 'more', ref: id, n: 1 })
    const watchesDone = () =>
      [...entries].filter(([id, list]) => opOf(id) === 'watch' && list.length === total + 100).length
    while (results.size < (n * 2) / 3 || watchesDone() < n / 3) {
      const m = await c.next()
      expect(m).not.toBeNull()
      if (m.chunk !== undefined) {
        take(m)
        c.send({ op: 'more', ref: m.id, n: 1 }) // one at a time: parked again after each chunk
      } else {
        expect(m.ok, JSON.stringify(m)).toBe(true)
        results.set(m.id, m.result)
      }
    }

    const stored = before
      .toString('utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Entry)
    for (let id = 1; id <= n; id++) {
      const op = opOf(id)
      if (op === 'readBytes') {
        expect(Buffer.concat(bytes.get(id) ?? []).equals(before)).toBe(true)
        expect(results.get(id)).toMatchObject({ bytes: before.length })
      } else if (op === 'read') {
        expect(entries.get(id)).toEqual(stored)
        expect(results.get(id)).toMatchObject({ entries: total })
      } else {
        const seqs = (entries.get(id) ?? []).map((e) => e.seq)
        expect(seqs).toEqual(Array.from({ length: total + 100 }, (_, i) => i + 1))
      }
    }
    await writer.close()
  })
})
