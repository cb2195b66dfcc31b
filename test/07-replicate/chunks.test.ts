/**
 * Replication of chunked blobs (store/chunks.ts): each chunk is an object of its own and the
 * chunk list travels under the blob's id as a not-exact object, checked on the origin by
 * reading the blob through it. The mirror reads the blob byte for byte, by its id, after pulling.
 * A list whose chunk is damaged on the origin is not sent, and is reported with that chunk.
 */
import { chmodSync, readFileSync, writeFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { AgentLog, ObjectStore, SnapshotEngine } from '../../dist/src/index.js'
import { replicatePull, replicatePush } from '../../dist/src/replicate/index.js'
import { verifyStore } from '../../dist/src/store/verify.js'
import { tempDir } from '../helpers/index.js'
import { uniqueNames, useNats } from '../helpers/nats.js'
import { dropStream, fill, initStreamCli } from '../helpers/replicate.js'

const nats = useNats()

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

describe('replicating chunked blobs', () => {
  it('sends the chunks and the list; the mirror reads the blob, checks out and verifies', async () => {
    const { prefix, stream } = uniqueNames()
    const a = tempDir()
    const b = tempDir()
    await initStreamCli(nats.url(), prefix, stream)
    try {
      const data = pseudoRandom(300_000, 21)
      const grown = Buffer.concat([data, pseudoRandom(5_000, 22)])
      const log = await AgentLog.open({ root: a })
      const engine = new SnapshotEngine({ log })
      const id1 = await engine.store.putBlob(data)
      const id2 = await engine.store.putBlob(grown)
      await log.append('ws', { op: 'write', path: 'big', blob: id1 })
      await engine.snapshot('ws', { message: 'one' })
      await log.append('ws', { op: 'write', path: 'big', blob: id2 })
      await engine.snapshot('ws', { message: 'two' })
      await log.close()
      const origin = new ObjectStore(a)
      const chunks = new Set([
        ...(origin.chunksOf(id1)?.chunks ?? []).map((c) => c.id),
        ...(origin.chunksOf(id2)?.chunks ?? []).map((c) => c.id),
      ])
      // Two lists, their chunks (shared ones once), two trees, two records.
      const pushed = await replicatePush({ nats: nats.url(), root: a, prefix })
      expect(pushed.objects).toBe(2 + chunks.size + 4)
      const pulled = await replicatePull({ nats: nats.url(), root: b, prefix })
      expect(pulled.objects).toBe(pushed.objects)
      const mirror = new ObjectStore(b)
      expect(mirror.chunksOf(id2)).toEqual(origin.chunksOf(id2))
      expect((await mirror.getBlob(id1)).equals(data)).toBe(true)
      expect((await mirror.getBlob(id2)).equals(grown)).toBe(true)
      expect(await verifyStore(new SnapshotEngine({ root: b }), 'ws', { objects: true })).toEqual([])
    } finally {
      await dropStream(nats.url(), stream)
    }
  })

  it('leaves out and reports a chunk list whose blob does not read back whole (a damaged chunk)', async () => {
    const { prefix, stream } = uniqueNames()
    const a = tempDir()
    await initStreamCli(nats.url(), prefix, stream)
    try {
      const store = new ObjectStore(a)
      const id = await store.putBlob(pseudoRandom(100_000, 23))
      const victim = store.chunksOf(id)?.chunks[1]?.id as string
      const file = store.pathOf(victim)
      chmodSync(file, 0o644)
      const bytes = readFileSync(file)
      bytes[0] = (bytes[0] as number) ^ 1
      writeFileSync(file, bytes)
      // Left out and reported (the logs and other objects go on): the damaged chunk, and the
      // list, which does not read back through it.
      await fill(a, { ws: [1, 2] })
      const report = await replicatePush({ nats: nats.url(), root: a, prefix })
      const failed = report.failed.map((f) => f.file).sort()
      expect(failed).toEqual([store.pathOf(id), store.pathOf(victim)].sort())
      const list = report.failed.find((f) => f.file === store.pathOf(id))
      expect(list?.code).toBe('NOA_CORRUPT_OBJECT')
      expect(list?.message).toContain(`chunk ${victim} of blob ${id} is corrupt`)
      expect(report.objects).toBe((store.chunksOf(id)?.chunks.length ?? 0) - 1)
    } finally {
      await dropStream(nats.url(), stream)
    }
  })
})
