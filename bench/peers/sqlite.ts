/**
 * better-sqlite3 12 in WAL mode with synchronous=FULL, so every commit syncs the WAL before it
 * returns. One database file holds every workspace, the entry kept as its JSON text, which is
 * what an event log in SQLite usually looks like. The table is what a user who knows SQLite
 * writes for an append-heavy log: an ordinary rowid table, so new rows always go at the end of
 * its B-tree, with a UNIQUE index on (ws, seq) for the per-workspace reads. The variant keyed
 * `PRIMARY KEY (ws, seq) WITHOUT ROWID` (every row inserted in (ws, seq) order, so a batch for
 * many workspaces touches many pages of the table itself) is a contender of its own.
 */

import { join } from 'node:path'
import type DatabaseType from 'better-sqlite3'
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

type Database = DatabaseType.Database

const lib = lazy(() => requirePeer('better-sqlite3') as typeof DatabaseType)

/** The two table layouts: `rowid` (the default) and `without-rowid`. */
export type Layout = 'rowid' | 'without-rowid'

export const SCHEMA: Record<Layout, string> = {
  rowid:
    'CREATE TABLE IF NOT EXISTS log (id INTEGER PRIMARY KEY, ws TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL); CREATE UNIQUE INDEX IF NOT EXISTS log_ws_seq ON log (ws, seq)',
  'without-rowid':
    'CREATE TABLE IF NOT EXISTS log (ws TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (ws, seq)) WITHOUT ROWID',
}

function openDb(dir: string, layout: Layout = 'rowid'): Database {
  const Database = lib()
  const db = new Database(join(dir, 'log.db'))
  db.pragma('journal_mode = WAL')
  db.pragma('synchronous = FULL')
  db.exec(SCHEMA[layout])
  return db
}

const INSERT = 'INSERT INTO log (ws, seq, body) VALUES (?, ?, ?)'

/** The callers' seq counters, going on after each workspace's last row when resuming. */
function seqsOf(db: Database, workspaces: number, resume: boolean): Seqs {
  const seqs = new Seqs(workspaces)
  if (resume) {
    for (const row of db.prepare('SELECT ws, max(seq) AS last FROM log GROUP BY ws').iterate()) {
      const { ws, last } = row as { ws: string; last: number }
      const k = wsIndex(ws)
      if (k >= 0 && k < workspaces) seqs.resume(k, last)
    }
  }
  return seqs
}

export const sqlite: Peer = {
  id: 'sqlite',
  label: 'better-sqlite3, 1 insert/txn',
  kind: 'peer',
  how: 'WAL, `synchronous=FULL`, one autocommit INSERT per entry: the WAL is synced before `run()` returns; rowid table + UNIQUE index on (ws, seq)',
  load: lib,
  resumes: true,
  async writer(dir, workspaces, { resume = false } = {}) {
    const db = openDb(dir)
    const insert = db.prepare(INSERT)
    const seqs = seqsOf(db, workspaces, resume)
    const names = Array.from({ length: workspaces }, (_, k) => wsName(k))
    return {
      async append(k, i) {
        const seq = seqs.take(k)
        insert.run(names[k], seq, JSON.stringify(recordFor(seq, i)))
      },
      async close() {
        db.close()
      },
    }
  },
}

interface Queued {
  ws: string
  seq: number
  body: string
  resolve(): void
  reject(err: unknown): void
}

function batchedPeer(layout: Layout): Peer {
  const rowid = layout === 'rowid'
  return {
    id: rowid ? 'sqlite-batched' : 'sqlite-batched-worowid',
    label: rowid ? 'better-sqlite3, 1 txn per event turn' : 'better-sqlite3, 1 txn/turn, WITHOUT ROWID',
    kind: 'peer',
    how: `WAL, \`synchronous=FULL\`; the INSERTs queued in one event-loop turn go in one transaction (\`setImmediate\`), each resolved after its COMMIT returned; ${rowid ? 'rowid table + UNIQUE index on (ws, seq)' : 'the table keyed `PRIMARY KEY (ws, seq) WITHOUT ROWID`, no rowid'}`,
    load: lib,
    resumes: true,
    async writer(dir, workspaces, { resume = false } = {}) {
      const db = openDb(dir, layout)
      const insert = db.prepare(INSERT)
      const commit = db.transaction((rows: Queued[]) => {
        for (const r of rows) insert.run(r.ws, r.seq, r.body)
      })
      const seqs = seqsOf(db, workspaces, resume)
      const names = Array.from({ length: workspaces }, (_, k) => wsName(k))
      let queue: Queued[] = []
      const flush = () => {
        const rows = queue
        queue = []
        try {
          commit(rows)
        } catch (err) {
          for (const r of rows) r.reject(err)
          return
        }
        for (const r of rows) r.resolve()
      }
      return {
        append(k, i) {
          const seq = seqs.take(k)
          const body = JSON.stringify(recordFor(seq, i))
          return new Promise<void>((resolve, reject) => {
            if (queue.push({ ws: names[k] as string, seq, body, resolve, reject }) === 1) setImmediate(flush)
          })
        },
        async close() {
          db.close()
        },
      }
    },
  }
}

export const sqliteBatched: Peer = batchedPeer('rowid')
export const sqliteBatchedWithoutRowid: Peer = batchedPeer('without-rowid')

export const sqliteStore: Store = {
  id: 'sqlite',
  label: 'better-sqlite3',
  kind: 'peer',
  replayHow:
    'open + `SELECT body … WHERE ws = ? ORDER BY seq` through `iterate()` (streamed, in (ws, seq) order through the UNIQUE index, each row fetched by rowid), `JSON.parse` of each row',
  openHow:
    'open + `journal_mode=WAL`, `synchronous=FULL` + `SELECT max(seq) … WHERE ws = ?` (from the index)',
  load: lib,
  async prepare(dir, entries) {
    const db = openDb(dir)
    const insert = db.prepare(INSERT)
    const many = db.transaction((from: number, n: number) => {
      for (let j = 0; j < n; j++)
        insert.run(REPLAY_WS, from + j + 1, JSON.stringify(recordFor(from + j + 1, from + j)))
    })
    for (let done = 0; done < entries; done += 10_000) many(done, Math.min(10_000, entries - done))
    db.close()
  },
  async replay(dir) {
    const Database = lib()
    const db = new Database(join(dir, 'log.db'))
    let n = 0
    try {
      const rows = db.prepare('SELECT body FROM log WHERE ws = ? ORDER BY seq').pluck()
      for (const body of rows.iterate(REPLAY_WS)) {
        JSON.parse(body as string)
        n++
      }
    } finally {
      db.close()
    }
    return n
  },
  async open(dir) {
    const db = openDb(dir)
    const last = db.prepare('SELECT max(seq) FROM log WHERE ws = ?').pluck().get(REPLAY_WS) as number
    return {
      lastSeq: last,
      close: async () => {
        db.close()
      },
    }
  },
}
