/**
 * better-sqlite3 12 in WAL mode with synchronous=FULL, so every commit syncs the WAL before it
 * returns. One database file holds every workspace: a table keyed by (workspace, seq), the entry
 * kept as its JSON text, which is what an event log in SQLite usually looks like.
 */

import { join } from 'node:path'
import type DatabaseType from 'better-sqlite3'
import { lazy, type Peer, REPLAY_WS, recordFor, requirePeer, Seqs, type Store, wsName } from './common.js'

type Database = DatabaseType.Database

const lib = lazy(() => requirePeer('better-sqlite3') as typeof DatabaseType)

function openDb(dir: string): Database {
  const Database = lib()
  const db = new Database(join(dir, 'log.db'))
  db.pragma('journal_mode = WAL')
  db.pragma('synchronous = FULL')
  db.exec(
    'CREATE TABLE IF NOT EXISTS log (ws TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (ws, seq)) WITHOUT ROWID',
  )
  return db
}

const INSERT = 'INSERT INTO log (ws, seq, body) VALUES (?, ?, ?)'

export const sqlite: Peer = {
  id: 'sqlite',
  label: 'better-sqlite3, 1 insert/txn',
  kind: 'peer',
  how: 'WAL, `synchronous=FULL`, one autocommit INSERT per entry: the WAL is synced before `run()` returns',
  load: lib,
  async writer(dir, workspaces) {
    const db = openDb(dir)
    const insert = db.prepare(INSERT)
    const seqs = new Seqs(workspaces)
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

export const sqliteBatched: Peer = {
  id: 'sqlite-batched',
  label: 'better-sqlite3, 1 txn per event turn',
  kind: 'peer',
  how: 'WAL, `synchronous=FULL`; the INSERTs queued in one event-loop turn go in one transaction (`setImmediate`), each resolved after its COMMIT returned',
  load: lib,
  async writer(dir, workspaces) {
    const db = openDb(dir)
    const insert = db.prepare(INSERT)
    const commit = db.transaction((rows: Queued[]) => {
      for (const r of rows) insert.run(r.ws, r.seq, r.body)
    })
    const seqs = new Seqs(workspaces)
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

export const sqliteStore: Store = {
  id: 'sqlite',
  label: 'better-sqlite3',
  kind: 'peer',
  replayHow:
    'open + `SELECT body … WHERE ws = ? ORDER BY seq` through `iterate()` (streamed), `JSON.parse` of each row',
  openHow: 'open + `journal_mode=WAL`, `synchronous=FULL` + `SELECT max(seq) … WHERE ws = ?`',
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
