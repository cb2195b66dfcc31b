/**
 * The writers record (`<root>/replication/writers.<prefix>.json`, src/replicate/writers.ts):
 * one file for every workspace of a prefix, changed by promote and resync, possibly by several
 * processes at once. Every change is kept; a record that cannot be read is a named error and
 * is left as it is. No NATS: the record is local.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { isNoaError } from '../../dist/src/index.js'
import { fencedOn, loadWriters, ownedOn, recordWriter } from '../../dist/src/replicate/writers.js'
import { SteppedChild } from '../helpers/child.js'
import { tempDir } from '../helpers/index.js'

const UPDATER = new URL('../fixtures/writers-updater.mjs', import.meta.url).pathname
const stream = { name: 'S', created: '2026-01-01T00:00:00Z' }
const record = (k: number) => ({ writer: 'me', after: k, fenceStreamSeq: k + 1, promotedAt: 'now' })

describe('writers record', () => {
  it('processes changing it at once lose none of their changes', async () => {
    const root = tempDir()
    const [processes, count] = [4, 40]
    const kids = Array.from(
      { length: processes },
      (_, i) => new SteppedChild(UPDATER, [root, 'p', `c${i}`, String(count)]),
    )
    for (const kid of kids) await kid.next('ready')
    for (const kid of kids) kid.go()
    for (const kid of kids) await kid.next('done', 120_000)
    await Promise.all(kids.map((kid) => kid.done()))
    const owned = ownedOn(root, 'p', stream)
    const fenced = fencedOn(root, 'p', stream)
    const lost: string[] = []
    for (let i = 0; i < processes; i++) {
      const id = `c${i}`
      if (owned.get(id)?.after !== count - 1) lost.push(`${id} after=${owned.get(id)?.after}`)
      for (let k = 0; k < count; k++) {
        const ws = `${id}-${k}`
        // Odd k stay recorded as written here; even k were fenced right after (a resync).
        const right =
          k % 2 === 1 || k === count - 1
            ? owned.get(ws)?.after === k && !fenced.has(ws)
            : !owned.has(ws) && fenced.get(ws)?.after === k + 1
        if (!right) lost.push(ws)
      }
    }
    expect(lost).toEqual([])
    expect(owned.size + fenced.size).toBe(processes * (count + 1))
  }, 180_000)

  it('a record that cannot be read is a named error, and a change leaves it as it is', () => {
    const root = tempDir()
    recordWriter(root, 'p', stream, 'a', record(1))
    const file = join(root, 'replication', 'writers.p.json')
    for (const [bytes, reason] of [
      ['{"version":1,"kind":"wri', /cannot be read: not JSON/],
      ['', /cannot be read: not JSON/],
      ['{"version":2,"kind":"writers"}\n', /cannot be read: not a version 1 writers record for prefix p/],
      [JSON.stringify({ ...loadWriters(root, 'p'), prefix: 'q' }), /not a version 1 writers record/],
    ] as const) {
      writeFileSync(file, bytes)
      for (const call of [
        () => recordWriter(root, 'p', stream, 'b', record(2)),
        () => ownedOn(root, 'p', stream),
        () => fencedOn(root, 'p', stream),
      ]) {
        let err: unknown
        try {
          call()
        } catch (e) {
          err = e
        }
        expect(isNoaError(err, 'NOA_REPLICATION'), String(err)).toBe(true)
        expect((err as Error).message).toContain(`writers record ${file}`)
        expect((err as Error).message).toMatch(reason)
        expect((err as { details: { file: string } }).details.file).toBe(file)
      }
      expect(readFileSync(file, 'utf8')).toBe(bytes)
    }
    // A folder where the record goes: named for what it is.
    const other = join(root, 'replication', 'writers.f.json')
    mkdirSync(other)
    for (const call of [
      () => recordWriter(root, 'f', stream, 'a', record(1)),
      () => ownedOn(root, 'f', stream),
    ]) {
      expect(call).toThrow(/writers record/)
      try {
        call()
      } catch (err) {
        expect(isNoaError(err, 'NOA_NOT_REGULAR_FILE'), String(err)).toBe(true)
      }
    }
  })
})
