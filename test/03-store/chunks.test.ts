/**
 * Chunked blobs (store/chunks.ts, store/fastcdc.ts, docs/chunked-objects.md): FastCDC gives the
 * published cut points, a blob over the threshold is stored as chunks and a list under its own
 * id, reads back byte for byte by every path (getBlob, streamBlob, the CLI), equal bytes give
 * equal lists whichever way they were put, an append changes about one chunk, a damaged or
 * missing chunk is named with its blob, and gc keeps chunks exactly as long as a blob lists them.
 */
import { createHash } from 'node:crypto'
import { chmodSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { AgentLog, ObjectStore, SnapshotEngine } from '../../dist/src/index.js'
import {
  blobObjects,
  CHUNK_MAX,
  CHUNK_MIN,
  CHUNK_THRESHOLD,
  encodeChunkList,
  parseChunkList,
} from '../../dist/src/store/chunks.js'
import { chunkLengths, fastcdc } from '../../dist/src/store/fastcdc.js'
import { ObjectLogIndex } from '../../dist/src/store/object-logs.js'
import { verifyStore } from '../../dist/src/store/verify.js'
import { runCli, tempDir } from '../helpers/index.js'
import { refusal } from '../helpers/snapshot.js'

const hashOf = (data: Uint8Array | string) => createHash('sha256').update(data).digest('hex')

/** xorshift32 bytes: the same every run, on every machine. */
function pseudoRandom(n: number, seed: number): Buffer {
  const b = Buffer.alloc(n)
  let x = seed >>> 0 || 1
  for (let i = 0; i < n; i++) {
    x ^= x << 13
    x >>>= 0
    x ^= x >>> 17
    x ^= x << 5
    x >>>= 0
    b[i] = x & 0xff
  }
  return b
}

function damage(file: string, edit: (b: Buffer) => Buffer): void {
  chmodSync(file, 0o644)
  writeFileSync(file, edit(readFileSync(file)))
}

function objectIds(root: string): string[] {
  const dir = join(root, 'objects')
  return readdirSync(dir)
    .filter((s) => /^[0-9a-f]{2}$/.test(s))
    .flatMap((s) => readdirSync(join(dir, s)).map((n) => s + n))
    .sort()
}

async function streamed(store: ObjectStore, id: string): Promise<Buffer> {
  const parts: Buffer[] = []
  for await (const p of store.streamBlob(id)) parts.push(p)
  return Buffer.concat(parts)
}

describe('FastCDC (2016, normalized chunking)', () => {
  it("gives the reference crate's published cut for all-zero input: max-size chunks, the same Gear hash", () => {
    // fastcdc-rs v2016 test_cut_all_zeros: min 64, avg 256, max 1024 over 10240 zero bytes.
    const cutter = fastcdc({ min: 64, avg: 256, max: 1024 })
    const zeros = new Uint8Array(10240)
    for (let at = 0; at < 10240; at += 1024) {
      const cut = cutter.cut(zeros, at, zeros.length)
      expect(cut.at).toBe(at + 1024)
      expect(((BigInt(cut.hashHi) << 32n) | BigInt(cut.hashLo)).toString()).toBe('14169102344523991076')
    }
    expect(chunkLengths(cutter, zeros)).toEqual(new Array(10).fill(1024))
  })

  it('cuts a fixed pseudo-random input at the same places every run (the sizes blobs use)', () => {
    const data = pseudoRandom(1 << 20, 1)
    const cutter = fastcdc({ min: CHUNK_MIN, avg: 8192, max: CHUNK_MAX })
    const lengths = chunkLengths(cutter, data)
    // Pinned when written: a change to the table, the masks or the cut rule moves these.
    expect(lengths.slice(0, 12)).toEqual([
      7050, 13591, 8671, 9608, 7444, 8885, 4510, 9253, 8945, 17384, 14186, 11367,
    ])
    expect(lengths.length).toBe(99)
    expect(lengths.reduce((a, b) => a + b, 0)).toBe(1 << 20)
    expect(Math.min(...lengths.slice(0, -1))).toBeGreaterThanOrEqual(CHUNK_MIN)
    expect(Math.max(...lengths)).toBeLessThanOrEqual(CHUNK_MAX)
    // A cut depends only on the bytes before it: the same data in a longer buffer cuts alike.
    const longer = Buffer.concat([data, pseudoRandom(50_000, 9)])
    expect(chunkLengths(cutter, longer).slice(0, 98)).toEqual(lengths.slice(0, 98))
  })

  it('refuses sizes out of range or out of order, naming the rule', () => {
    expect(() => fastcdc({ min: 32, avg: 256, max: 1024 })).toThrow(/min chunk size 32/)
    expect(() => fastcdc({ min: 4096, avg: 2048, max: 8192 })).toThrow(/min <= avg <= max/)
    expect(() => fastcdc({ min: 64, avg: 256, max: 1024, level: 4 })).toThrow(/normalization level 4/)
  })
})

describe('chunk lists', () => {
  it('keeps small blobs and one-chunk blobs whole; lists the chunks of a larger one, each once', () => {
    const small = pseudoRandom(CHUNK_THRESHOLD, 2)
    expect(blobObjects(small)).toEqual([{ id: hashOf(small), data: small, exact: true }])
    const zeros = Buffer.alloc(CHUNK_THRESHOLD + 1000) // no cut before CHUNK_MAX: one chunk
    expect(blobObjects(zeros)).toEqual([{ id: hashOf(zeros), data: zeros, exact: true }])
    const repeated = Buffer.concat([pseudoRandom(40_000, 3), Buffer.alloc(200_000), pseudoRandom(40_000, 3)])
    const objects = blobObjects(repeated)
    const list = objects[objects.length - 1]
    expect(list?.id).toBe(hashOf(repeated))
    expect(list?.exact).toBe(false)
    const parsed = parseChunkList(list?.id as string, Buffer.from(list?.data as Uint8Array), 'f')
    expect(parsed.size).toBe(repeated.length)
    // Two max-size runs of zeros are one object; every chunk object is named by its bytes.
    const ids = objects.slice(0, -1).map((o) => o.id)
    expect(new Set(ids).size).toBe(ids.length)
    expect(new Set(parsed.chunks.map((c) => c.id)).size).toBe(ids.length)
    expect(parsed.chunks.length).toBeGreaterThan(ids.length)
    for (const o of objects.slice(0, -1)) expect(hashOf(o.data)).toBe(o.id)
    expect(encodeChunkList(parsed).equals(Buffer.from(list?.data as Uint8Array))).toBe(true)
    expect(Buffer.from(list?.data as Uint8Array).toString('latin1')).toMatch(
      /^noa-chunks 1\n\d+ \d+\n([0-9a-f]{64} \d+\n)+$/,
    )
  })

  it('refuses a malformed list, naming the blob and why', () => {
    const id = 'ab'.repeat(32)
    const bad = (text: string) => () => parseChunkList(id, Buffer.from(text, 'latin1'), 'F')
    expect(bad('noa-chunks 1\n10 1\n')).toThrow(/blob abab.* says 1 chunks but lists 0/)
    expect(bad(`noa-chunks 1\n10 1\n${'cd'.repeat(32)} 9\n`)).toThrow(/chunks of 9 bytes in all, not 10/)
    expect(bad(`noa-chunks 1\n10 1\n${'cd'.repeat(32)} 10`)).toThrow(/newline/)
    expect(bad(`noa-chunks 1\n10 1\nzz 10\n`)).toThrow(/malformed line 3/)
  })

  it('property: every blob reads back byte for byte by every path; equal bytes give equal lists however put', async () => {
    const root = tempDir()
    const store = new ObjectStore(root)
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(fc.integer({ min: 0, max: 70_000 }), fc.integer({ min: 70_000, max: 300_000 })),
        fc.integer({ min: 1, max: 1 << 30 }),
        fc.array(fc.integer({ min: 1, max: 100_000 }), { maxLength: 6 }),
        async (size, seed, splits) => {
          const data = pseudoRandom(size, seed)
          const id = await store.putBlob(data)
          expect(id).toBe(hashOf(data))
          const list = store.chunksOf(id)
          expect(list === null).toBe(blobObjects(data).length === 1)
          // The same bytes as a stream cut in arbitrary places: the same id and chunk list.
          const parts: Buffer[] = []
          let at = 0
          for (const s of splits) {
            parts.push(data.subarray(at, Math.min(size, at + s)))
            at = Math.min(size, at + s)
          }
          parts.push(data.subarray(at))
          const root2 = tempDir()
          const other = new ObjectStore(root2)
          expect(await other.putBlob(Readable.from(parts))).toBe(id)
          expect(other.chunksOf(id)).toEqual(list)
          expect(objectIds(root2)).toEqual(
            blobObjects(data)
              .map((o) => o.id)
              .sort(),
          )
          for (const s of [store, other]) {
            expect((await s.getBlob(id)).equals(data)).toBe(true)
            expect((await streamed(s, id)).equals(data)).toBe(true)
          }
        },
      ),
      { numRuns: 25 },
    )
  })

  it('property: an append at the end keeps every chunk but the last and adds about one', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: CHUNK_THRESHOLD + 1, max: 400_000 }),
        fc.integer({ min: 1, max: 1 << 30 }),
        fc.integer({ min: 1, max: 3000 }),
        (size, seed, added) => {
          const data = pseudoRandom(size, seed)
          const grown = Buffer.concat([data, pseudoRandom(added, seed + 1)])
          const before = chunkIdsOf(data)
          const after = chunkIdsOf(grown)
          // Every cut but the end of the data stays where it was (a cut looks only behind it).
          expect(after.slice(0, before.length - 1)).toEqual(before.slice(0, -1))
          const fresh = after.slice(before.length - 1)
          expect(fresh.length).toBeLessThanOrEqual(1 + Math.ceil(added / CHUNK_MIN))
        },
      ),
      { numRuns: 60 },
    )
  })

  it('property: an insert in the middle keeps the chunks before it, and the chunks after it come back', () => {
    let changedBytes = 0
    let totalBytes = 0
    fc.assert(
      fc.property(
        fc.integer({ min: 100_000, max: 400_000 }),
        fc.integer({ min: 1, max: 1 << 30 }),
        fc.double({ min: 0.1, max: 0.9, noNaN: true }),
        fc.integer({ min: 1, max: 2000 }),
        (size, seed, where, added) => {
          const data = pseudoRandom(size, seed)
          const at = Math.floor(size * where)
          const changed = Buffer.concat([
            data.subarray(0, at),
            pseudoRandom(added, seed + 7),
            data.subarray(at),
          ])
          const before = chunksWithOffsets(data)
          const after = chunkIdsOf(changed)
          const kept = before.filter((c) => c.end <= at).map((c) => c.id)
          expect(after.slice(0, kept.length)).toEqual(kept)
          const old = new Set(before.map((c) => c.id))
          const objects = blobObjects(changed)
          for (const o of objects) if (!old.has(o.id) && o.exact) changedBytes += o.data.length
          totalBytes += changed.length
        },
      ),
      { numRuns: 40, seed: 33 },
    )
    // Over the runs (a fixed seed): new chunk bytes are a few chunks per insert, not the blob.
    expect(changedBytes / totalBytes).toBeLessThan(0.15)
  })
})

function chunkIdsOf(data: Buffer): string[] {
  return chunksWithOffsets(data).map((c) => c.id)
}

function chunksWithOffsets(data: Buffer): Array<{ id: string; end: number }> {
  const objects = blobObjects(data)
  const list = objects[objects.length - 1]
  if (list?.exact) return [{ id: list.id, end: data.length }]
  let end = 0
  return parseChunkList(list?.id as string, Buffer.from(list?.data as Uint8Array), '').chunks.map((c) => {
    end += c.length
    return { id: c.id, end }
  })
}

describe('a chunked blob in the store', () => {
  it('is chunks plus a list under its id: blob get, checkout and verify read it as one blob', async () => {
    const root = tempDir()
    const data = pseudoRandom(200_000, 5)
    const log = await AgentLog.open({ root })
    const engine = new SnapshotEngine({ log })
    const store = engine.store
    const id = await store.putBlob(data)
    const list = store.chunksOf(id)
    expect(list?.size).toBe(200_000)
    expect(readFileSync(store.pathOf(id), 'latin1').startsWith('noa-chunks 1\n')).toBe(true)
    expect(objectIds(root)).toEqual([id, ...new Set(list?.chunks.map((c) => c.id))].sort())
    await log.append('ws', { op: 'write', path: 'data.bin', blob: id })
    await engine.snapshot('ws', { message: 'one' })
    await log.close()
    expect(await verifyStore(new SnapshotEngine({ root }), 'ws', { objects: true })).toEqual([])
    const get = runCli(['blob', 'get', id, '--root', root])
    expect(get.stderr).toBe('')
    expect(get.stdoutBytes.equals(data)).toBe(true)
    const dir = join(tempDir(), 'co')
    const co = runCli(['checkout', 'ws', dir, '--root', root])
    expect(co.stderr).toBe('')
    expect(readFileSync(join(dir, 'data.bin')).equals(data)).toBe(true)
  })

  it('reads a blob that only starts like a list as the blob it is (its bytes hash to its id)', async () => {
    const store = new ObjectStore(tempDir())
    const data = Buffer.concat([Buffer.from('noa-chunks 1\n3 1\n'), pseudoRandom(CHUNK_THRESHOLD - 100, 4)])
    const id = await store.putBlob(data)
    expect(readFileSync(store.pathOf(id)).equals(data)).toBe(true)
    expect(store.chunksOf(id)).toBe(null)
    expect((await store.getBlob(id)).equals(data)).toBe(true)
    expect((await streamed(store, id)).equals(data)).toBe(true)
  })

  it('streams a large chunked blob (beyond one read) and checks it before the first byte', async () => {
    const root = tempDir()
    const store = new ObjectStore(root)
    const data = pseudoRandom(6 << 20, 11)
    const id = await store.putBlob(Readable.from([data.subarray(0, 3 << 20), data.subarray(3 << 20)]))
    expect((await streamed(store, id)).equals(data)).toBe(true)
    const chunk = store.chunksOf(id)?.chunks[300]?.id as string
    damage(store.pathOf(chunk), (b) => {
      b[0] = (b[0] as number) ^ 1
      return b
    })
    let yielded = 0
    const err = await refusal(
      (async () => {
        for await (const _ of store.streamBlob(id)) yielded++
      })(),
    )
    expect(yielded).toBe(0)
    expect(err.code).toBe('NOA_CORRUPT_OBJECT')
    expect(err.message).toContain(`chunk ${chunk} of blob ${id} is corrupt`)
  })

  it('names a damaged or missing chunk and its blob: getBlob, blob get and verify --objects', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root })
    const engine = new SnapshotEngine({ log })
    const data = pseudoRandom(120_000, 6)
    const id = await engine.store.putBlob(data)
    await log.append('ws', { op: 'write', path: 'a/big.bin', blob: id })
    await engine.snapshot('ws', { message: 'one' })
    await log.close()
    const store = new ObjectStore(root)
    const chunks = store.chunksOf(id)?.chunks ?? []
    const victim = chunks[2]?.id as string
    damage(store.pathOf(victim), (b) => {
      b[10] = (b[10] as number) ^ 0x40
      return b
    })
    const err = await refusal(store.getBlob(id))
    expect(err.code).toBe('NOA_CORRUPT_OBJECT')
    expect(err.message).toContain(`chunk ${victim} of blob ${id} is corrupt`)
    const get = runCli(['blob', 'get', id, '--root', root])
    expect(get.status).not.toBe(0)
    expect(get.stderr).toContain(`chunk ${victim} of blob ${id}`)
    const problems = await verifyStore(new SnapshotEngine({ root }), 'ws', { objects: true })
    expect(problems.map((p) => ({ kind: p.kind, chunk: p.chunk, blob: p.blob, path: p.path }))).toEqual([
      { kind: 'damaged-chunk', chunk: victim, blob: id, path: 'a/big.bin' },
    ])
    const cli = runCli(['verify', '--objects', '--root', root])
    expect(cli.status).toBe(1)
    expect(cli.stderr).toContain(`chunk ${victim} of blob ${id} is corrupt`)
    expect(cli.stderr).toContain('"a/big.bin"')
    // Gone altogether: named as missing, with the blob and the path.
    rmSync(store.pathOf(victim))
    const again = await verifyStore(new SnapshotEngine({ root }), 'ws', { objects: true })
    expect(again.map((p) => ({ kind: p.kind, chunk: p.chunk, blob: p.blob }))).toEqual([
      { kind: 'missing-chunk', chunk: victim, blob: id },
    ])
    expect(again[0]?.reason).toContain(`chunk ${victim} of blob ${id} not found`)
  })

  it('gc frees the chunks no blob reaches and keeps the ones a kept blob shares', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root })
    const engine = new SnapshotEngine({ log })
    const base = pseudoRandom(150_000, 8)
    const v1 = Buffer.concat([base, pseudoRandom(30_000, 80)])
    const v2 = Buffer.concat([base, pseudoRandom(30_000, 81)])
    const id1 = await engine.store.putBlob(v1)
    const id2 = await engine.store.putBlob(v2)
    const c1 = new Set(engine.store.chunksOf(id1)?.chunks.map((c) => c.id))
    const c2 = new Set(engine.store.chunksOf(id2)?.chunks.map((c) => c.id))
    const shared = [...c1].filter((c) => c2.has(c))
    const only1 = [...c1].filter((c) => !c2.has(c))
    expect(shared.length).toBeGreaterThan(5)
    expect(only1.length).toBeGreaterThan(0)
    await log.append('ws', { op: 'write', path: 'f', blob: id1 })
    await engine.snapshot('ws', { message: 'v1' })
    await log.append('ws', { op: 'write', path: 'f', blob: id2 })
    await engine.snapshot('ws', { message: 'v2' })
    // While a snapshot holds v1, nothing of it goes.
    expect((await engine.gc({ dryRun: false, graceMs: 0 })).removed).toBe(0)
    expect((await engine.prune('ws', { keepLast: 1 })).dropped.length).toBe(1)
    await engine.gc({ dryRun: false, graceMs: 0 })
    await log.close()
    const after = new Set(objectIds(root))
    expect(after.has(id1)).toBe(false)
    for (const c of only1) expect(after.has(c)).toBe(false)
    for (const c of shared) expect(after.has(c)).toBe(true)
    expect(after.has(id2)).toBe(true)
    const store = new ObjectStore(root)
    expect((await store.getBlob(id2)).equals(v2)).toBe(true)
    expect(await verifyStore(new SnapshotEngine({ root }), 'ws', { objects: true })).toEqual([])
    expect(statSync(store.pathOf(id2)).size).toBeLessThan(10_000)
  })
})

describe('gc of object logs holding a chunk list', () => {
  it('drops a logged list whose chunks the mark did not reach (it read a whole copy), never leaving it without them', async () => {
    const root = tempDir()
    const data = pseudoRandom(100_000, 40)
    const id = hashOf(data)
    // A whole copy as a file of its own (as stored before chunking): readers take it first.
    mkdirSync(join(root, 'objects', id.slice(0, 2)), { recursive: true })
    writeFileSync(join(root, 'objects', id.slice(0, 2), id.slice(2)), data, { mode: 0o444 })
    // The chunked copy (chunks and list) in an object log, as NoaSaver appends a value.
    const log = await AgentLog.open({ root, workers: 0 })
    const files = blobObjects(data).map((o) => ({
      path: `objects/${o.id.slice(0, 2)}/${o.id.slice(2)}`,
      data: o.data,
      readOnly: true,
      packed: true,
    }))
    expect(files.length).toBeGreaterThan(2)
    await log.append('ws', { op: 'write', path: 'f', blob: id }, { files })
    await log.close()
    const engine = new SnapshotEngine({ root })
    const r = await engine.gc({ dryRun: false, graceMs: 0 })
    expect(r.missing).toBe(0)
    // The mark read the whole file, so the logged list (which would name swept chunks) went
    // with its chunks: no reader can come upon a list without its chunks.
    const index = new ObjectLogIndex(root)
    const left = new Set(index.ids())
    expect(left.has(id)).toBe(false)
    for (const f of files) expect(left.has(f.path.slice(8).replace('/', ''))).toBe(false)
    expect((await new ObjectStore(root).getBlob(id)).equals(data)).toBe(true)
    expect(await verifyStore(new SnapshotEngine({ root }), 'ws', { objects: true })).toEqual([])
  })
})
