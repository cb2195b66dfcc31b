/**
 * lmdb-js 3 with `separateFlushed`: a put's promise resolves at commit (visible), and its
 * `flushed` promise once the commit is synced to disk; an append is acknowledged on `flushed`.
 * One environment (one file) for every workspace, the entry stored as an object (lmdb-js's
 * default msgpack encoding), as lmdb-js is normally used.
 *
 * The key layout is lmdb-js's best for this access pattern (many workspaces appending, each
 * read back in seq order), chosen by measuring the layouts below against each other
 * (`LAYOUTS`, ids `lmdb-<layout>`, runnable as peers, e.g. `node dist/bench/peers/cases.js
 * write 10kws lmdb-array <dir> 3`; see `lmdb.how` for the figures). `append` won (BEST):
 * - `array`: `[ws, seq]` array keys in lmdb-js's default ordered-binary encoding;
 * - `binary`: `keyEncoding: 'binary'`, the key a Buffer of ws's UTF-8 bytes, a 0 byte and seq as
 *   8 big-endian bytes (the same order, no encoder);
 * - `append`: what a rowid table is in SQLite: the entries keyed by one global counter
 *   (`uint32` keys, `put` with MDB_APPEND, so every insert goes at the end of the tree), plus
 *   an index database `[ws, seq]` → that counter for the per-workspace reads.
 */
import { join } from 'node:path'
import type * as Lmdb from 'lmdb'
import {
  lazy,
  type Peer,
  REPLAY_WS,
  recordFor,
  requirePeer,
  Seqs,
  type Store,
  wsIndex,
  wsName,
} from './common.js'

const lib = lazy(() => requirePeer('lmdb') as typeof Lmdb)

type Flushing = Promise<boolean> & { flushed?: Promise<boolean> }

function flushedOf(put: Promise<boolean>): Promise<boolean> {
  const p = put as Flushing
  if (!p.flushed) throw new Error('lmdb-js put() has no flushed promise: is separateFlushed honoured?')
  return p.flushed
}

/** One key layout: how an entry is put, read back in order, and the last seq found. */
interface Layout {
  /** Puts entry `seq` of `ws` asynchronously; the returned promise is the last put's. */
  put(ws: string, seq: number, value: object): Promise<boolean>
  /** The same, synchronously (prepare, inside `transactionSync`). */
  putSync(ws: string, seq: number, value: object): void
  transactionSync(fn: () => void): void
  /** Every entry of `ws` in seq order (decoded). */
  range(ws: string): Iterable<unknown>
  lastSeq(ws: string): number
  /** The last seq of every `wsName(k)` workspace, by k (a scan of the keys). */
  lastSeqs(): Map<number, number>
  close(): Promise<void>
}

/** Keeps the largest seq seen per workspace. */
function keep(out: Map<number, number>, ws: string, seq: number): void {
  const k = wsIndex(ws)
  if (k >= 0 && seq > (out.get(k) ?? 0)) out.set(k, seq)
}

type LayoutId = 'array' | 'binary' | 'append'

const END = Number.MAX_SAFE_INTEGER

function arrayLayout(dir: string): Layout {
  const db = lib().open<object, [string, number]>(join(dir, 'lmdb'), { separateFlushed: true })
  return {
    put: (ws, seq, value) => db.put([ws, seq], value),
    putSync: (ws, seq, value) => db.putSync([ws, seq], value),
    transactionSync: (fn) => db.transactionSync(fn),
    *range(ws) {
      for (const { value } of db.getRange({ start: [ws], end: [ws, END] })) yield value
    },
    lastSeq(ws) {
      for (const key of db.getKeys({ start: [ws, END], end: [ws], reverse: true, limit: 1 })) return key[1]
      return 0
    },
    lastSeqs() {
      const out = new Map<number, number>()
      for (const [ws, seq] of db.getKeys()) keep(out, ws, seq)
      return out
    },
    close: () => db.close(),
  }
}

/** ws's UTF-8 bytes, a 0 byte, then seq as 8 big-endian bytes: sorted by ws, then seq. */
function binaryKey(prefix: Buffer, seq: number): Buffer {
  const key = Buffer.allocUnsafe(prefix.length + 8)
  prefix.copy(key, 0)
  key.writeUInt32BE(Math.floor(seq / 2 ** 32), prefix.length)
  key.writeUInt32BE(seq >>> 0, prefix.length + 4)
  return key
}

function binaryLayout(dir: string): Layout {
  const db = lib().open<object, Buffer>(join(dir, 'lmdb'), { separateFlushed: true, keyEncoding: 'binary' })
  const prefixes = new Map<string, Buffer>()
  const prefix = (ws: string) => {
    let p = prefixes.get(ws)
    if (!p) {
      p = Buffer.from(`${ws}\0`)
      prefixes.set(ws, p)
    }
    return p
  }
  return {
    put: (ws, seq, value) => db.put(binaryKey(prefix(ws), seq), value),
    putSync: (ws, seq, value) => db.putSync(binaryKey(prefix(ws), seq), value),
    transactionSync: (fn) => db.transactionSync(fn),
    *range(ws) {
      const p = prefix(ws)
      for (const { value } of db.getRange({ start: binaryKey(p, 0), end: binaryKey(p, END) })) yield value
    },
    lastSeq(ws) {
      const p = prefix(ws)
      for (const key of db.getKeys({
        start: binaryKey(p, END),
        end: binaryKey(p, 0),
        reverse: true,
        limit: 1,
      })) {
        return key.readUInt32BE(p.length) * 2 ** 32 + key.readUInt32BE(p.length + 4)
      }
      return 0
    },
    lastSeqs() {
      const out = new Map<number, number>()
      for (const key of db.getKeys()) {
        const n = key.length - 9
        keep(out, key.toString('utf8', 0, n), key.readUInt32BE(n + 1) * 2 ** 32 + key.readUInt32BE(n + 5))
      }
      return out
    },
    close: () => db.close(),
  }
}

function appendLayout(dir: string): Layout {
  const env = lib().open<object, number>(join(dir, 'lmdb'), { separateFlushed: true, maxDbs: 4 })
  const entries = env.openDB<object, number>('entries', { keyEncoding: 'uint32' })
  const index = env.openDB<number, [string, number]>('index', {})
  let next = 1
  for (const key of entries.getKeys({ reverse: true, limit: 1 })) next = key + 1
  const APPEND = { append: true } as unknown as number
  return {
    put(ws, seq, value) {
      const id = next++
      void entries.put(id, value, APPEND)
      // Both puts land in the same batched transaction; the later one's flush covers both.
      return index.put([ws, seq], id)
    },
    putSync(ws, seq, value) {
      const id = next++
      entries.putSync(id, value, APPEND)
      index.putSync([ws, seq], id)
    },
    transactionSync: (fn) => env.transactionSync(fn),
    *range(ws) {
      for (const { value: id } of index.getRange({ start: [ws], end: [ws, END] })) yield entries.get(id)
    },
    lastSeq(ws) {
      for (const key of index.getKeys({ start: [ws, END], end: [ws], reverse: true, limit: 1 })) return key[1]
      return 0
    },
    lastSeqs() {
      const out = new Map<number, number>()
      for (const [ws, seq] of index.getKeys()) keep(out, ws, seq)
      return out
    },
    close: () => env.close(),
  }
}

const LAYOUTS: Record<LayoutId, (dir: string) => Layout> = {
  array: arrayLayout,
  binary: binaryLayout,
  append: appendLayout,
}

/** The layout the `lmdb` peer writes with: the best for appends to many workspaces. */
const BEST: LayoutId = 'append'

/**
 * The layout of the replay/open store: `[ws, seq]` arrays, the best for reading one workspace
 * back (its entries adjacent in one tree). With BEST a replay gets every entry by its counter
 * after the index range: 20,000 entries read in 242 ms against 80 ms (2026-12-07, one run each).
 */
const STORE_LAYOUT: LayoutId = 'array'

function lmdbPeer(layout: LayoutId, id: string, how: string): Peer {
  return {
    id,
    label: id === 'lmdb' ? 'lmdb-js, awaiting flushed' : `lmdb-js, ${layout} keys`,
    kind: 'peer',
    how,
    load: lib,
    resumes: true,
    async writer(dir, workspaces, { resume = false } = {}) {
      const db = LAYOUTS[layout](dir)
      const seqs = new Seqs(workspaces)
      if (resume)
        for (const [ws, last] of db.lastSeqs()) if (ws >= 0 && ws < workspaces) seqs.resume(ws, last)
      const names = Array.from({ length: workspaces }, (_, k) => wsName(k))
      return {
        append(k, i) {
          const seq = seqs.take(k)
          return flushedOf(db.put(names[k] as string, seq, recordFor(seq, i)))
        },
        async close() {
          await db.close()
        },
      }
    },
  }
}

const HOW =
  "`separateFlushed`; `put` batched by lmdb-js per event turn into one transaction on its write thread; acked on the put's `flushed` promise (after the sync of that commit)"

export const lmdb: Peer = lmdbPeer(
  BEST,
  'lmdb',
  `${HOW}; its best key layout here: the entries keyed by one global counter (\`uint32\` keys, put with MDB_APPEND: always the end of the tree) + an index database \`[ws, seq]\` → counter, as SQLite's rowid table + index. Against \`[ws, seq]\` array keys in one database (ordered-binary, the layout before) it measured 1.07× at 1,000 workspaces, 1.08× at 10,000 (peak RSS 300 against 428 MB) and 1.86× at 100,000 (medians of per-round ratios, 3 interleaved rounds of 3 s, 2026-12-07); \`ws\\0seq\` binary keys measured 0.98–0.99× of the array keys`,
)

/** The other layouts, as peers of their own (not in the default workloads). */
export const lmdbLayouts: readonly Peer[] = (Object.keys(LAYOUTS) as LayoutId[]).map((l) =>
  lmdbPeer(l, `lmdb-${l}`, `${HOW}; ${l} keys`),
)

export const lmdbStore: Store = {
  id: 'lmdb',
  label: 'lmdb-js',
  kind: 'peer',
  replayHow:
    "open + `getRange` over [ws] … [ws, ∞] (values decoded from msgpack); keys `[ws, seq]` (ordered-binary arrays), lmdb-js's best layout for reading a workspace back (the writer's global-counter layout reads each entry by its counter after an index range, about 3× slower here)",
  openHow: 'open + reverse `getKeys` with limit 1 for the last seq (keys `[ws, seq]`)',
  load: lib,
  async prepare(dir, entries) {
    const db = LAYOUTS[STORE_LAYOUT](dir)
    for (let done = 0; done < entries; done += 10_000) {
      const n = Math.min(10_000, entries - done)
      db.transactionSync(() => {
        for (let j = 0; j < n; j++) db.putSync(REPLAY_WS, done + j + 1, recordFor(done + j + 1, done + j))
      })
    }
    await db.close()
  },
  async replay(dir) {
    const db = LAYOUTS[STORE_LAYOUT](dir)
    let n = 0
    try {
      for (const value of db.range(REPLAY_WS)) {
        if (value !== undefined) n++
      }
    } finally {
      await db.close()
    }
    return n
  },
  async open(dir) {
    const db = LAYOUTS[STORE_LAYOUT](dir)
    const lastSeq = db.lastSeq(REPLAY_WS)
    return {
      lastSeq,
      close: async () => {
        await db.close()
      },
    }
  },
}
