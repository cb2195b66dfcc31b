/**
 * lmdb-js 3 with `separateFlushed`: a put's promise resolves at commit (visible), and its
 * `flushed` promise once the commit is synced to disk; an append is acknowledged on `flushed`.
 * One database (one environment file) for every workspace, keyed by [workspace, seq], the
 * entry stored as an object (lmdb-js's default msgpack encoding), as lmdb-js is normally used.
 */
import { join } from 'node:path'
import type * as Lmdb from 'lmdb'
import { lazy, type Peer, REPLAY_WS, recordFor, requirePeer, Seqs, type Store, wsName } from './common.js'

const lib = lazy(() => requirePeer('lmdb') as typeof Lmdb)

type Key = [string, number]

function openDb(dir: string) {
  return lib().open<object, Key>(join(dir, 'lmdb'), { separateFlushed: true })
}

export const lmdb: Peer = {
  id: 'lmdb',
  label: 'lmdb-js, awaiting flushed',
  kind: 'peer',
  how: "`separateFlushed`; `put` batched by lmdb-js per event turn into one transaction on its write thread; acked on the put's `flushed` promise (after the sync of that commit)",
  load: lib,
  async writer(dir, workspaces) {
    const db = openDb(dir)
    const seqs = new Seqs(workspaces)
    const names = Array.from({ length: workspaces }, (_, k) => wsName(k))
    return {
      append(k, i) {
        const seq = seqs.take(k)
        const put = db.put([names[k] as string, seq], recordFor(seq, i)) as Promise<boolean> & {
          flushed?: Promise<boolean>
        }
        if (!put.flushed)
          throw new Error('lmdb-js put() has no flushed promise: is separateFlushed honoured?')
        return put.flushed
      },
      async close() {
        await db.close()
      },
    }
  },
}

export const lmdbStore: Store = {
  id: 'lmdb',
  label: 'lmdb-js',
  kind: 'peer',
  replayHow: 'open + `getRange` over [ws] … [ws, ∞] (values decoded from msgpack)',
  openHow: 'open + reverse `getKeys` with limit 1 for the last seq',
  load: lib,
  async prepare(dir, entries) {
    const db = openDb(dir)
    for (let done = 0; done < entries; done += 10_000) {
      const n = Math.min(10_000, entries - done)
      db.transactionSync(() => {
        for (let j = 0; j < n; j++) db.putSync([REPLAY_WS, done + j + 1], recordFor(done + j + 1, done + j))
      })
    }
    await db.close()
  },
  async replay(dir) {
    const db = openDb(dir)
    let n = 0
    try {
      for (const { value } of db.getRange({
        start: [REPLAY_WS],
        end: [REPLAY_WS, Number.MAX_SAFE_INTEGER],
      })) {
        if (value !== undefined) n++
      }
    } finally {
      await db.close()
    }
    return n
  },
  async open(dir) {
    const db = openDb(dir)
    let lastSeq = 0
    for (const key of db.getKeys({
      start: [REPLAY_WS, Number.MAX_SAFE_INTEGER],
      end: [REPLAY_WS],
      reverse: true,
      limit: 1,
    })) {
      lastSeq = key[1]
    }
    return {
      lastSeq,
      close: async () => {
        await db.close()
      },
    }
  },
}
