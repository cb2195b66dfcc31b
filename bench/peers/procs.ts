/**
 * The many-process workloads: 8 OS processes append at once, each to its own workspace or all
 * to one shared workspace, each process one loop awaiting every ack (an agent process appending
 * as it goes). noa runs as `noa serve` with 8 client processes (AgentLog.open forwards to it);
 * better-sqlite3 (WAL, synchronous=FULL, busy timeout) and lmdb-js are opened by each of the 8
 * processes on the same database, as their users share a store between processes.
 *
 * A trial is one coordinator process (this module's runProcs, called from cases.ts) that sets the
 * store up, starts the 8 workers (`cases.js proc …`), waits until every one is ready (store open,
 * first entry written), tells them all to go, and sums their entries/s.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { AgentLog } from '../../src/engine/agent-log.js'
import { listWorkspaces } from '../../src/engine/logs.js'
import '../../src/serve/forward.js'
import { RemoteAgentLog } from '../../src/serve/client.js'
import type { CaseResult } from '../cases.js'
import { entryFor } from '../cases.js'
import { type Kind, lazy, recordFor, requirePeer, Seqs, wsName } from './common.js'
import { SCHEMA } from './sqlite.js'

export const PROCESSES = 8
export const SHARED_WS = 'shared'

const CASES_JS = fileURLToPath(new URL('./cases.js', import.meta.url))
const NOA_CLI = fileURLToPath(new URL('../../src/cli/bin.cjs', import.meta.url))

export interface ProcWriter {
  append(i: number): Promise<unknown>
  close(): Promise<void>
}

export interface ProcPeer {
  id: string
  label: string
  kind: Kind
  how: string
  /** In the coordinator, before the workers start: returns what ends it after they stopped. */
  setup(dir: string): Promise<() => Promise<void>>
  /** In worker `proc`: appends to its own workspace, or to the shared one; writes one entry first. */
  writer(dir: string, proc: number, shared: boolean): Promise<ProcWriter>
  /** Entries stored, all workspaces together (checked against the acks after the trial). */
  count(dir: string): Promise<number>
}

// --- noa: one daemon, 8 clients -------------------------------------------------------------

function startServe(dir: string): Promise<ChildProcess> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [NOA_CLI, 'serve', '--root', dir, '--json'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stderr = ''
    child.stderr?.on('data', (d) => {
      stderr += d
    })
    child.stdout?.once('data', () => resolve(child))
    child.once('exit', (code) => reject(new Error(`noa serve exited ${code}: ${stderr}`)))
  })
}

export const noaServe: ProcPeer = {
  id: 'noa',
  label: 'noa serve, 8 client processes',
  kind: 'noa',
  how: '`noa serve` owns the root; each process `AgentLog.open`s it (forwarded over the unix socket) and awaits each append; the daemon group-commits what all processes sent (one journal write + fdatasync per round), acked after it',
  async setup(dir) {
    const daemon = await startServe(dir)
    return async () => {
      const exited = new Promise((resolve) => daemon.once('exit', resolve))
      daemon.kill('SIGTERM')
      await exited
    }
  },
  async writer(dir, proc, shared) {
    const log = await AgentLog.open({ root: dir })
    if (!(log instanceof RemoteAgentLog)) throw new Error('AgentLog.open did not reach noa serve')
    const ws = shared ? SHARED_WS : wsName(proc)
    await log.append(ws, entryFor(0))
    return {
      append: (i) => log.append(ws, entryFor(i)),
      close: async () => {
        await log.close()
      },
    }
  },
  async count(dir) {
    return (await listWorkspaces(dir)).reduce((n, w) => n + w.entries, 0)
  },
}

// --- better-sqlite3 from 8 processes --------------------------------------------------------

type Sqlite = typeof import('better-sqlite3')
const sqliteLib = lazy(() => requirePeer('better-sqlite3') as Sqlite)

function openSqlite(dir: string) {
  const Database = sqliteLib()
  const db = new Database(`${dir}/log.db`, { timeout: 60_000 }) // busy timeout: wait for the writer lock
  db.pragma('journal_mode = WAL')
  db.pragma('synchronous = FULL')
  return db
}

export const sqliteProcs: ProcPeer = {
  id: 'sqlite',
  label: 'better-sqlite3, 8 processes',
  kind: 'peer',
  how: 'each process opens the database: WAL, `synchronous=FULL`, busy timeout 60 s; one transaction per entry (own workspace: an INSERT with the seq the process keeps; shared: `BEGIN IMMEDIATE`, `max(seq)+1`, INSERT, COMMIT), the WAL synced before it returns; rowid table + UNIQUE index on (ws, seq)',
  async setup(dir) {
    const db = openSqlite(dir)
    db.exec(SCHEMA.rowid)
    db.close()
    return async () => {}
  },
  async writer(dir, proc, shared) {
    const db = openSqlite(dir)
    const insert = db.prepare('INSERT INTO log (ws, seq, body) VALUES (?, ?, ?)')
    let append: (i: number) => void
    if (!shared) {
      const ws = wsName(proc)
      const seqs = new Seqs(1)
      append = (i) => {
        const seq = seqs.take(0)
        insert.run(ws, seq, JSON.stringify(recordFor(seq, i)))
      }
    } else {
      const last = db.prepare('SELECT coalesce(max(seq), 0) FROM log WHERE ws = ?').pluck()
      const next = db.transaction((i: number) => {
        const seq = (last.get(SHARED_WS) as number) + 1
        insert.run(SHARED_WS, seq, JSON.stringify(recordFor(seq, i)))
      })
      append = (i) => next.immediate(i)
    }
    append(proc * 1_000_000)
    return {
      async append(i) {
        append(i)
      },
      async close() {
        db.close()
      },
    }
  },
  async count(dir) {
    const db = openSqlite(dir)
    try {
      return db.prepare('SELECT count(*) FROM log').pluck().get() as number
    } finally {
      db.close()
    }
  },
}

// --- lmdb-js from 8 processes ---------------------------------------------------------------

type LmdbLib = typeof import('lmdb')
const lmdbLib = lazy(() => requirePeer('lmdb') as LmdbLib)
type Key = [string, number]

export const lmdbProcs: ProcPeer = {
  id: 'lmdb',
  label: 'lmdb-js, 8 processes',
  kind: 'peer',
  how: "each process opens the environment; own workspace: `put` with the seq the process keeps, acked on its `flushed` promise; shared: an async `transaction` that reads the last key and puts the next, acked once `db.flushed` (that commit synced) resolves; LMDB's write lock is shared between processes",
  async setup(dir) {
    const db = lmdbLib().open<object, Key>(`${dir}/lmdb`, { separateFlushed: true })
    await db.close()
    return async () => {}
  },
  async writer(dir, proc, shared) {
    const db = lmdbLib().open<object, Key>(`${dir}/lmdb`, { separateFlushed: true })
    let append: (i: number) => Promise<unknown>
    if (!shared) {
      const ws = wsName(proc)
      const seqs = new Seqs(1)
      append = (i) => {
        const seq = seqs.take(0)
        const put = db.put([ws, seq], recordFor(seq, i)) as Promise<boolean> & { flushed?: Promise<boolean> }
        if (!put.flushed) throw new Error('lmdb-js put() has no flushed promise')
        return put.flushed
      }
    } else {
      append = async (i) => {
        await db.transaction(() => {
          let seq = 1
          for (const key of db.getKeys({
            start: [SHARED_WS, Number.MAX_SAFE_INTEGER],
            end: [SHARED_WS],
            reverse: true,
            limit: 1,
          })) {
            seq = (key as Key)[1] + 1
          }
          db.put([SHARED_WS, seq], recordFor(seq, i))
        })
        await db.flushed
      }
    }
    await append(proc * 1_000_000)
    return {
      append,
      async close() {
        await db.close()
      },
    }
  },
  async count(dir) {
    const db = lmdbLib().open<object, Key>(`${dir}/lmdb`, {})
    try {
      let n = 0
      for (const _ of db.getKeys()) n++
      return n
    } finally {
      await db.close()
    }
  },
}

export const PROC_PEERS: readonly ProcPeer[] = [noaServe, sqliteProcs, lmdbProcs]

export function procPeerById(id: string): ProcPeer {
  const p = PROC_PEERS.find((x) => x.id === id)
  if (!p)
    throw new Error(`unknown many-process peer ${id} (known: ${PROC_PEERS.map((x) => x.id).join(', ')})`)
  return p
}

// --- the trial ------------------------------------------------------------------------------

interface Worker {
  child: ChildProcess
  ready: Promise<void>
  result: Promise<{ entries: number; seconds: number }>
}

function startWorker(peer: string, dir: string, proc: number, shared: boolean): Worker {
  const child = spawn(
    process.execPath,
    [CASES_JS, 'proc', peer, dir, String(proc), shared ? 'shared' : 'own'],
    {
      stdio: ['pipe', 'pipe', 'pipe'],
    },
  )
  let out = ''
  let stderr = ''
  child.stderr?.on('data', (d) => {
    stderr += d
  })
  let markReady: () => void
  const ready = new Promise<void>((resolve) => {
    markReady = resolve
  })
  const result = new Promise<{ entries: number; seconds: number }>((resolve, reject) => {
    child.stdout?.on('data', (d) => {
      out += d
      if (out.includes('ready\n')) markReady()
    })
    child.once('exit', (code) => {
      const last = out.trim().split('\n').pop() ?? ''
      if (code === 0 && last.startsWith('{')) resolve(JSON.parse(last))
      else reject(new Error(`worker ${proc} (${peer}) exited ${code}: ${stderr}`))
    })
  })
  result.catch(() => markReady()) // a worker that died before ready must not hang the barrier
  return { child, ready, result }
}

/** One trial of a many-process workload: every worker starts together, entries/s summed. */
export async function runProcs(
  peerId: string,
  dir: string,
  seconds: number,
  shared: boolean,
): Promise<CaseResult> {
  const peer = procPeerById(peerId)
  const stop = await peer.setup(dir)
  let stopped = false
  const teardown = async () => {
    if (!stopped) await stop()
    stopped = true
  }
  try {
    const workers = Array.from({ length: PROCESSES }, (_, k) => startWorker(peerId, dir, k, shared))
    await Promise.all(workers.map((w) => w.ready))
    for (const w of workers) w.child.stdin?.end(`go ${seconds}\n`)
    const results = await Promise.all(workers.map((w) => w.result))
    const entries = results.reduce((n, r) => n + r.entries, 0)
    const rate = results.reduce((n, r) => n + r.entries / r.seconds, 0)
    await teardown()
    // Every acknowledged entry (and each worker's first) is stored, none twice over another.
    const stored = await peer.count(dir)
    if (stored !== entries + PROCESSES) {
      throw new Error(`${peerId}: ${stored} entries stored for ${entries + PROCESSES} acknowledged`)
    }
    return { rate, entries }
  } finally {
    await teardown()
  }
}

/** A worker: opens its writer, says ready, waits for go, appends for the given seconds. */
export async function procWorker(
  peerId: string,
  dir: string,
  proc: number,
  shared: boolean,
): Promise<CaseResult & { seconds: number }> {
  const peer = procPeerById(peerId)
  const w = await peer.writer(dir, proc, shared)
  process.stdout.write('ready\n')
  let input = ''
  for await (const chunk of process.stdin) input += chunk
  const seconds = Number(/^go (\S+)/.exec(input)?.[1])
  let n = 0
  const start = performance.now()
  const end = start + seconds * 1000
  for (let i = 1; performance.now() < end; i++) {
    await w.append(proc * 1_000_000 + i)
    n++
  }
  const elapsed = (performance.now() - start) / 1000
  await w.close()
  return { entries: n, seconds: elapsed }
}
