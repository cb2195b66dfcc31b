/**
 * The contenders, the workloads and the figures the peers suite reports. Each workload is one
 * loop, written once here, that every contender runs unchanged.
 */
import { type CaseResult, latency, throughput } from '../cases.js'
import type { Peer, Store, Writer } from './common.js'
import { disk, diskBatched, diskParallel, jsonlStore, nodeFs } from './files.js'
import { hypercore, hypercoreStore } from './hypercore.js'
import { lmdb, lmdbStore } from './lmdb.js'
import { noa, noaFdatasync, noaInThread, noaStore } from './noa.js'
import { PROC_PEERS, PROCESSES, runProcs } from './procs.js'
import { sonicBoom } from './sonic-boom.js'
import { sqlite, sqliteBatched, sqliteStore } from './sqlite.js'

export const PEERS: readonly Peer[] = [
  noa,
  noaInThread,
  noaFdatasync,
  sqlite,
  sqliteBatched,
  lmdb,
  sonicBoom,
  nodeFs,
  disk,
  diskBatched,
  diskParallel,
  hypercore,
]
export const STORES: readonly Store[] = [noaStore, sqliteStore, lmdbStore, jsonlStore, hypercoreStore]

export function peerById(id: string): Peer {
  const p = PEERS.find((x) => x.id === id)
  if (!p) throw new Error(`unknown peer ${id} (known: ${PEERS.map((x) => x.id).join(', ')})`)
  return p
}

export function storeById(id: string): Store {
  const s = STORES.find((x) => x.id === id)
  if (!s) throw new Error(`unknown store ${id} (known: ${STORES.map((x) => x.id).join(', ')})`)
  return s
}

export type WorkloadId = 'serial' | '1ws' | '100ws' | '1000ws' | '8proc' | '8proc-shared' | 'replay' | 'open'

/** The many-process workloads (procs.ts): their contenders are ProcPeers. */
export const PROC_WORKLOADS: ReadonlySet<WorkloadId> = new Set(['8proc', '8proc-shared'])

export interface Workload {
  id: WorkloadId
  title: string
  /** What the loop does, for the results. */
  what: string
  /** Peer ids for the write workloads, store ids for replay and open. */
  contenders: readonly string[]
}

const READERS = STORES.map((s) => s.id)
const DURABLE = ['sqlite', 'sqlite-batched', 'lmdb', 'sonic-boom']
const FLOORS = ['node-fs', 'disk']

export const WORKLOADS: readonly Workload[] = [
  {
    id: 'serial',
    title: 'serial append latency',
    what: 'one submitter appends and awaits each ack before the next (tinybench: p50/p99 per append)',
    contenders: ['noa', 'noa-inthread', 'noa-fdatasync', ...DURABLE, ...FLOORS, 'hypercore'],
  },
  {
    id: '1ws',
    title: '1 workspace × 100 submitters',
    what: '100 concurrent loops append to the same workspace, each awaiting its own ack; entries/s',
    contenders: ['noa', 'noa-inthread', 'noa-fdatasync', ...DURABLE, ...FLOORS, 'disk-batched', 'hypercore'],
  },
  {
    id: '100ws',
    title: '100 workspaces × 1 submitter',
    what: '100 workspaces, one loop each appending and awaiting its own ack; aggregate entries/s',
    contenders: ['noa', 'noa-inthread', 'noa-fdatasync', ...DURABLE, ...FLOORS, 'disk-parallel', 'hypercore'],
  },
  {
    id: '1000ws',
    title: '1,000 workspaces × 1 submitter',
    what: "1,000 workspaces, one loop each, so 1,000 files open at once (within noa's default fd bound, `maxOpenFiles` 4,096); aggregate entries/s",
    contenders: ['noa', 'noa-inthread', 'noa-fdatasync', ...DURABLE, ...FLOORS, 'disk-parallel', 'hypercore'],
  },
  {
    id: '8proc',
    title: '8 processes × own workspace',
    what: `${PROCESSES} OS processes at once, each appending to its own workspace of one store and awaiting each ack (noa: through \`noa serve\`); aggregate entries/s`,
    contenders: PROC_PEERS.map((p) => p.id),
  },
  {
    id: '8proc-shared',
    title: '8 processes × 1 shared workspace',
    what: `${PROCESSES} OS processes at once, all appending to one shared workspace (seqs assigned by the store, gapless) and awaiting each ack; aggregate entries/s`,
    contenders: PROC_PEERS.map((p) => p.id),
  },
  {
    id: 'replay',
    title: 'replay of a 1M-entry log',
    what: 'read every entry of one workspace in order into objects, in a fresh process (warm page cache)',
    contenders: READERS,
  },
  {
    id: 'open',
    title: 'open/recover of a 1M-entry log',
    what: 'open the log until it can take the next append, in a fresh process (warm page cache)',
    contenders: READERS,
  },
]

/** One reported figure: one table column and one chart. */
export interface Figure {
  /** Also the chart's file name. */
  id: string
  workload: WorkloadId
  metric: keyof CaseResult
  title: string
  unit: string
  /** Multiplies the measured value (ms → s). */
  scale: number
  higherIsBetter: boolean
}

export const FIGURES: readonly Figure[] = [
  {
    id: 'serial-p50',
    workload: 'serial',
    metric: 'p50',
    title: 'Serial durable append, p50 latency',
    unit: 'ms',
    scale: 1,
    higherIsBetter: false,
  },
  {
    id: 'serial-p99',
    workload: 'serial',
    metric: 'p99',
    title: 'Serial durable append, p99 latency',
    unit: 'ms',
    scale: 1,
    higherIsBetter: false,
  },
  {
    id: '1ws',
    workload: '1ws',
    metric: 'rate',
    title: '1 workspace × 100 submitters',
    unit: 'entries/s',
    scale: 1,
    higherIsBetter: true,
  },
  {
    id: '100ws',
    workload: '100ws',
    metric: 'rate',
    title: '100 workspaces × 1 submitter',
    unit: 'entries/s',
    scale: 1,
    higherIsBetter: true,
  },
  {
    id: '1000ws',
    workload: '1000ws',
    metric: 'rate',
    title: '1,000 workspaces × 1 submitter',
    unit: 'entries/s',
    scale: 1,
    higherIsBetter: true,
  },
  {
    id: '100ws-p99',
    workload: '100ws',
    metric: 'p99',
    title: '100 workspaces × 1 submitter, p99 latency (checkpoints included)',
    unit: 'ms',
    scale: 1,
    higherIsBetter: false,
  },
  {
    id: '1000ws-rss',
    workload: '1000ws',
    metric: 'maxRssMB',
    title: '1,000 workspaces × 1 submitter, peak RSS of the process',
    unit: 'MB',
    scale: 1,
    higherIsBetter: false,
  },
  {
    id: '8proc',
    workload: '8proc',
    metric: 'rate',
    title: '8 processes × own workspace',
    unit: 'entries/s',
    scale: 1,
    higherIsBetter: true,
  },
  {
    id: '8proc-shared',
    workload: '8proc-shared',
    metric: 'rate',
    title: '8 processes × 1 shared workspace',
    unit: 'entries/s',
    scale: 1,
    higherIsBetter: true,
  },
  {
    id: 'replay',
    workload: 'replay',
    metric: 'ms',
    title: 'Replay of a 1M-entry log',
    unit: 's',
    scale: 1e-3,
    higherIsBetter: false,
  },
  {
    id: 'open',
    workload: 'open',
    metric: 'ms',
    title: 'Open/recover of a 1M-entry log',
    unit: 'ms',
    scale: 1,
    higherIsBetter: false,
  },
]

/** Submitters and the workspace each one writes, per write workload. */
const SHAPES: Record<'1ws' | '100ws' | '1000ws', { workspaces: number; submitters: number }> = {
  '1ws': { workspaces: 1, submitters: 100 },
  '100ws': { workspaces: 100, submitters: 100 },
  '1000ws': { workspaces: 1000, submitters: 1000 },
}

async function withWriter<T>(peer: Peer, dir: string, workspaces: number, fn: (w: Writer) => Promise<T>) {
  peer.load()
  const w = await peer.writer(dir, workspaces)
  try {
    return await fn(w)
  } finally {
    await w.close()
  }
}

/** A timed write workload for one peer. */
export async function runWrite(
  workload: WorkloadId,
  peer: Peer,
  dir: string,
  seconds: number,
): Promise<CaseResult> {
  if (workload === 'serial') {
    return withWriter(peer, dir, 1, (w) => {
      let i = 0
      // Short (smoke) runs warm up and sample less, so that --quick stays under a minute.
      const short = seconds < 1
      return latency(() => w.append(0, i++), seconds, {
        warmupMs: short ? 100 : 200,
        iterations: short ? 50 : 200,
      })
    })
  }
  if (workload === 'replay' || workload === 'open') throw new Error(`${workload} is not a write workload`)
  if (workload === '8proc' || workload === '8proc-shared') {
    return runProcs(peer.id, dir, seconds, workload === '8proc-shared')
  }
  const { workspaces, submitters } = SHAPES[workload]
  const result = await withWriter(peer, dir, workspaces, (w) =>
    throughput(submitters, seconds, (k, i) =>
      workspaces === 1 ? w.append(0, k * 1_000_000 + i) : w.append(k, i),
    ),
  )
  return { ...result, maxRssMB: process.resourceUsage().maxRSS / 1024 }
}

/** Exactly `entries` appends from `submitters` loops into one workspace (for strace counts). */
export function runCount(peer: Peer, dir: string, submitters: number, entries: number): Promise<CaseResult> {
  return withWriter(peer, dir, 1, async (w) => {
    let next = 0
    await Promise.all(
      Array.from({ length: submitters }, async () => {
        while (next < entries) await w.append(0, next++)
      }),
    )
    return { entries }
  })
}

export async function runReplay(store: Store, dir: string): Promise<CaseResult> {
  store.load()
  const start = performance.now()
  const entries = await store.replay(dir)
  const ms = performance.now() - start
  return { ms, entries, rate: entries / (ms / 1000) }
}

export async function runOpen(store: Store, dir: string): Promise<CaseResult> {
  store.load()
  const start = performance.now()
  const opened = await store.open(dir)
  const ms = performance.now() - start
  await opened.close()
  return { ms, entries: opened.lastSeq }
}
