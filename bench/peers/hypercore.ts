/**
 * hypercore 11: a signed append-only log (a Merkle tree over the blocks, each append signed),
 * stored in RocksDB through hypercore-storage. It does not fdatasync an append before resolving
 * it (see durability.json): it is here because users reach for it, and it is marked as not
 * durable wherever it appears. Many workspaces = many cores sharing one storage, as Corestore does.
 */
import { join } from 'node:path'
import { lazy, type Peer, recordFor, requirePeer, Seqs, type Store } from './common.js'

interface Core {
  readonly length: number
  ready(): Promise<void>
  append(block: unknown): Promise<{ length: number }>
  get(index: number): Promise<unknown>
  close(): Promise<void>
}

interface CoreStorage {
  close(): Promise<void>
}

interface HypercoreClass {
  new (storage: string | CoreStorage, key?: Uint8Array | object, options?: object): Core
  defaultStorage(path: string): CoreStorage
}

interface KeyPair {
  publicKey: Uint8Array
  secretKey: Uint8Array
}

const lib = lazy(() => ({
  Hypercore: requirePeer('hypercore') as HypercoreClass,
  keyPair: (requirePeer('hypercore-crypto') as { keyPair(): KeyPair }).keyPair,
}))

export const hypercore: Peer = {
  id: 'hypercore',
  label: 'hypercore 11 (NOT durable)',
  kind: 'not-durable',
  how: 'NOT durable per append: `await core.append(entry)` (JSON encoding) resolves once the block is signed and written to RocksDB, with no fsync/fdatasync; one core per workspace in one shared storage',
  load: lib,
  async writer(dir, workspaces) {
    const { Hypercore, keyPair } = lib()
    const storage = Hypercore.defaultStorage(join(dir, 'hypercore'))
    const cores: Core[] = []
    for (let k = 0; k < workspaces; k++) {
      const kp = keyPair()
      const core = new Hypercore(storage, kp.publicKey, { keyPair: kp, valueEncoding: 'json' })
      await core.ready()
      cores.push(core)
    }
    const seqs = new Seqs(workspaces)
    return {
      append: (k, i) => (cores[k] as Core).append(recordFor(seqs.take(k), i)),
      async close() {
        for (const core of cores) await core.close()
        await storage.close()
      },
    }
  },
}

function openCore(dir: string): Core {
  const { Hypercore } = lib()
  return new Hypercore(join(dir, 'hypercore'), { valueEncoding: 'json' })
}

export const hypercoreStore: Store = {
  id: 'hypercore',
  label: 'hypercore 11 (NOT durable)',
  kind: 'not-durable',
  replayHow:
    'open + `core.get(i)` for every block, 1,000 in flight at a time (about 3× faster here than `createReadStream()`, which gets one block at a time), decoded from JSON',
  openHow: "open + `ready()` (reads the core's header and tree roots); its length",
  load: lib,
  async prepare(dir, entries) {
    const core = openCore(dir)
    await core.ready()
    for (let done = 0; done < entries; done += 1000) {
      const batch = []
      for (let j = done; j < Math.min(done + 1000, entries); j++) batch.push(recordFor(j + 1, j))
      await core.append(batch)
    }
    await core.close()
  },
  async replay(dir) {
    const core = openCore(dir)
    let n = 0
    try {
      await core.ready()
      for (let from = 0; from < core.length; from += 1000) {
        const gets: Promise<unknown>[] = []
        for (let i = from; i < Math.min(from + 1000, core.length); i++) gets.push(core.get(i))
        for (const block of await Promise.all(gets)) if (block !== undefined) n++
      }
    } finally {
      await core.close()
    }
    return n
  },
  async open(dir) {
    const core = openCore(dir)
    await core.ready()
    return {
      lastSeq: core.length,
      close: () => core.close(),
    }
  },
}
