/** noa itself, through its public API, exactly as a user calls it. */
import { AgentLog, type AgentLogOptions } from '../../src/engine/agent-log.js'
import { readWorkspaceBatches } from '../../src/engine/logs.js'
import { entryFor } from '../cases.js'
import { type Peer, REPLAY_WS, type Store, wsName } from './common.js'

/** Workspaces made before the clock at once, at most (bounds the setup's queue at 100,000). */
const WARM_AT_ONCE = 10_000

/** Workspaces of their own that warm a fresh log's workers (create workload), spread over them. */
const WARM_FRESH = 64

function noaWriter(options: AgentLogOptions): Peer['writer'] {
  return async (dir, workspaces, { fresh = false } = {}) => {
    const log = await AgentLog.open({ root: dir, ...options })
    const names = Array.from({ length: workspaces }, (_, k) => wsName(k))
    // Before the clock, as a host is within its first second: every log opened, locked and
    // created (its folder fsynced), and each worker's commit journal allocated (at its second
    // commit, in the background; SQLite likewise creates its WAL before the first commit).
    // Fresh (the create workload): only the workers are warmed, through workspaces of their own.
    const warm = fresh ? Array.from({ length: WARM_FRESH }, (_, k) => `warm-${k}`) : names
    for (let from = 0; from < warm.length; from += WARM_AT_ONCE) {
      const some = warm.slice(from, from + WARM_AT_ONCE)
      await Promise.all(some.map((ws) => log.append(ws, entryFor(0))))
      await Promise.all(some.map((ws) => log.append(ws, entryFor(0))))
    }
    for (let i = 0; i < 1000; i++) {
      const status = await log.status()
      if (
        status.every((s) => s.journal === null || s.journal.state === 'ready' || s.journal.state === 'failed')
      )
        break
      await new Promise((r) => setTimeout(r, 10))
    }
    return {
      append: (k, i) => log.append(names[k] as string, entryFor(i)),
      close: async () => {
        await log.close()
      },
    }
  }
}

export const noa: Peer = {
  id: 'noa',
  label: 'noa',
  kind: 'noa',
  resumes: true,
  how: "owner worker threads, and while nothing else is in flight an owner on the caller's thread (the lone lane: a serial writer's append is committed there, no hop); commit journal (the default): each round of an owner's queued appends, all its workspaces, is one pwrite + one fdatasync of its preallocated journal, then appended to each log; acked after that fdatasync",
  load() {},
  writer: noaWriter({}),
}

export const noaInThread: Peer = {
  id: 'noa-inthread',
  label: 'noa, workers: 0',
  kind: 'noa',
  how: "noa's option: the owner runs on the caller's thread (no worker, no hop); a lone round is written and fdatasynced there, blocking its event loop as SQLite and sonic-boom do, larger rounds on the addon's threads",
  load() {},
  writer: noaWriter({ workers: 0 }),
}

export const noaFdatasync: Peer = {
  id: 'noa-fdatasync',
  label: "noa, durability: 'fdatasync'",
  kind: 'noa',
  how: "noa's option: no journal; group commit per workspace file, one write + one fdatasync per batch per file, many fdatasyncs in flight (the seed's literal behaviour)",
  load() {},
  writer: noaWriter({ durability: 'fdatasync' }),
}

export const noaStore: Store = {
  id: 'noa',
  label: 'noa',
  kind: 'noa',
  replayHow:
    "`readBatches` (what `log.readBatches(ws)` runs): every entry parsed and validated, by a line scanner for noa's own line shapes (JSON.parse + the field checks for any other line); from 32 MB, and only while a core is idle, a scanning thread beside the caller's",
  openHow:
    '`AgentLog.open` (starts no worker) + `recover(ws)`: root lock, dead journals replayed (none here), log lock, read the tail only, last seq',
  load() {},
  async prepare(dir, entries) {
    const log = await AgentLog.open({ root: dir })
    try {
      for (let done = 0; done < entries; ) {
        const n = Math.min(10_000, entries - done)
        await log.appendMany(
          REPLAY_WS,
          Array.from({ length: n }, (_, j) => entryFor(done + j)),
        )
        done += n
      }
    } finally {
      await log.close()
    }
  },
  async replay(dir) {
    let n = 0
    for await (const batch of readWorkspaceBatches(dir, REPLAY_WS)) n += batch.length
    return n
  },
  async open(dir) {
    const log = await AgentLog.open({ root: dir })
    const report = await log.recover(REPLAY_WS)
    return {
      lastSeq: report.lastSeq,
      close: async () => {
        await log.close()
      },
    }
  },
}
