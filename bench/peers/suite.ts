/**
 * The contenders, the workloads and the figures the peers suite reports. Each workload is one
 * loop, written once here, that every contender runs unchanged.
 */
import { type CaseResult, latency, throughput } from '../cases.js'
import { median } from '../run.js'
import type { Peer, Store, Writer, WriterOptions } from './common.js'
import { disk, diskBatched, diskParallel, jsonlStore, nodeFs } from './files.js'
import { hypercore, hypercoreStore } from './hypercore.js'
import { lmdb, lmdbLayouts, lmdbStore } from './lmdb.js'
import { noa, noaFdatasync, noaInThread, noaStore } from './noa.js'
import { PROC_PEERS, PROCESSES, runProcs } from './procs.js'
import { sonicBoom } from './sonic-boom.js'
import { sqlite, sqliteBatched, sqliteBatchedWithoutRowid, sqliteStore } from './sqlite.js'

export const PEERS: readonly Peer[] = [
  noa,
  noaInThread,
  noaFdatasync,
  sqlite,
  sqliteBatched,
  sqliteBatchedWithoutRowid,
  lmdb,
  ...lmdbLayouts,
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

export type WorkloadId =
  | 'serial'
  | '1ws'
  | '10ws'
  | '100ws'
  | '1000ws'
  | '10kws'
  | '100kws'
  | 'create'
  | '8proc'
  | '8proc-shared'
  | 'replay'
  | 'open'

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
/** With many workspaces, the SQLite table keyed (ws, seq) WITHOUT ROWID as a row of its own. */
const DURABLE_MANY = ['sqlite', 'sqlite-batched', 'sqlite-batched-worowid', 'lmdb', 'sonic-boom']
/** The durable peers that keep every workspace in one file (sonic-boom needs a descriptor each). */
const ONE_FILE = ['sqlite', 'sqlite-batched', 'sqlite-batched-worowid', 'lmdb']
const FLOORS = ['node-fs', 'disk']

/** The create workload: workspaces created at once per batch, and timed batches at most. */
export const CREATE_BATCH = 1000
export const CREATE_BATCHES = 20

/**
 * The 100kws workload: submitters in flight, each cycling through its share of the workspaces
 * and appending BURST entries to each before it moves on; the store is prefilled (PREFILL).
 */
export const CYCLING_SUBMITTERS = 1000
export const BURST = 4

/**
 * Workloads whose store is filled once per run, outside the trials, and which every trial then
 * goes on in: each workspace holds `entries` entries first, written through the contender's own
 * writer (copying a store of 100,000 files for each trial took this disk about a minute).
 */
export const PREFILL: Partial<Record<WorkloadId, { workspaces: number; entries: number }>> = {
  '100kws': { workspaces: 100_000, entries: 2 },
}

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
    id: '10ws',
    title: '10 workspaces × 10 submitters',
    what: '10 workspaces, 10 concurrent loops each (100 in all, as in the 1- and 100-workspace workloads), every loop awaiting its own ack; aggregate entries/s',
    contenders: ['noa', ...DURABLE_MANY],
  },
  {
    id: '100ws',
    title: '100 workspaces × 1 submitter',
    what: '100 workspaces, one loop each appending and awaiting its own ack; aggregate entries/s',
    contenders: [
      'noa',
      'noa-inthread',
      'noa-fdatasync',
      ...DURABLE_MANY,
      ...FLOORS,
      'disk-parallel',
      'hypercore',
    ],
  },
  {
    id: '1000ws',
    title: '1,000 workspaces × 1 submitter',
    what: '1,000 workspaces, one loop each, so 1,000 files open at once for the file-per-workspace contenders (noa keeps up to 16,384 logs open by default, within a descriptor budget derived from `RLIMIT_NOFILE`); aggregate entries/s',
    contenders: [
      'noa',
      'noa-inthread',
      'noa-fdatasync',
      ...DURABLE_MANY,
      ...FLOORS,
      'disk-parallel',
      'hypercore',
    ],
  },
  {
    id: '10kws',
    title: '10,000 workspaces × 1 submitter',
    what: '10,000 workspaces, one loop each appending and awaiting its own ack (10,000 appends in flight); noa keeps every log open (16,384 by default, within its descriptor budget), sonic-boom one file per workspace; aggregate entries/s',
    contenders: ['noa', ...DURABLE_MANY],
  },
  {
    id: '100kws',
    title: '100,000 workspaces, 1,000 submitters',
    what: `100,000 live workspaces, each appending a few entries: the store is filled once per run with 2 entries in each (through the contender's own writer, outside the trials; SQLite's one-commit-per-entry row through its batched writer, the same table), and every trial of that contender goes on in it (each round adds its entries; a trial opens the store as a restarted host would, the seqs going on after each workspace's last); then ${CYCLING_SUBMITTERS.toLocaleString('en-US')} loops, each awaiting its own ack, loop k taking workspaces k, k + ${CYCLING_SUBMITTERS.toLocaleString('en-US')}, k + ${(2 * CYCLING_SUBMITTERS).toLocaleString('en-US')}, … in turn and appending ${BURST} entries to each before it moves to the next (so ${CYCLING_SUBMITTERS.toLocaleString('en-US')} workspaces are busy at a time and the others idle, as on a host where a task appends a few events and ends); sonic-boom (a descriptor per workspace) is left out; aggregate entries/s`,
    contenders: ['noa', ...ONE_FILE],
  },
  {
    id: 'create',
    title: 'Creating 1,000 workspaces at once, per workspace',
    what: `workspace creation: the first append to each of ${CREATE_BATCH.toLocaleString('en-US')} new workspaces issued at once, awaited together, in batches of new names (one untimed batch first, then up to ${CREATE_BATCHES} timed batches within the trial's seconds), the median batch's wall time divided by ${CREATE_BATCH.toLocaleString('en-US')}; for SQLite and lmdb-js that is a first row for a new ws. noa's log is opened and its workers warmed (journals allocated) before, through ${64} workspaces of their own; ms per new workspace`,
    contenders: ['noa', ...ONE_FILE],
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
    id: '10ws',
    workload: '10ws',
    metric: 'rate',
    title: '10 workspaces × 10 submitters',
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
    id: '10kws',
    workload: '10kws',
    metric: 'rate',
    title: '10,000 workspaces × 1 submitter',
    unit: 'entries/s',
    scale: 1,
    higherIsBetter: true,
  },
  {
    id: '10kws-rss',
    workload: '10kws',
    metric: 'maxRssMB',
    title: '10,000 workspaces × 1 submitter, peak RSS of the process',
    unit: 'MB',
    scale: 1,
    higherIsBetter: false,
  },
  {
    id: '100kws',
    workload: '100kws',
    metric: 'rate',
    title: '100,000 workspaces, 1,000 submitters',
    unit: 'entries/s',
    scale: 1,
    higherIsBetter: true,
  },
  {
    id: '100kws-rss',
    workload: '100kws',
    metric: 'maxRssMB',
    title: '100,000 workspaces, 1,000 submitters, peak RSS of the process',
    unit: 'MB',
    scale: 1,
    higherIsBetter: false,
  },
  {
    id: 'create',
    workload: 'create',
    metric: 'ms',
    title: 'Creating 1,000 workspaces at once, per workspace',
    unit: 'ms',
    scale: 1,
    higherIsBetter: false,
  },
  {
    id: 'create-rss',
    workload: 'create',
    metric: 'maxRssMB',
    title: 'Creating 1,000 workspaces at once, peak RSS of the process',
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

/** The workloads the scaling chart puts side by side, by their number of workspaces. */
export const SCALING: readonly { workload: WorkloadId; workspaces: number }[] = [
  { workload: '1ws', workspaces: 1 },
  { workload: '10ws', workspaces: 10 },
  { workload: '100ws', workspaces: 100 },
  { workload: '1000ws', workspaces: 1000 },
  { workload: '10kws', workspaces: 10_000 },
  { workload: '100kws', workspaces: 100_000 },
]

/** Workspaces and submitters per throughput workload. */
const SHAPES: Record<
  '1ws' | '10ws' | '100ws' | '1000ws' | '10kws' | '100kws',
  { workspaces: number; submitters: number }
> = {
  '1ws': { workspaces: 1, submitters: 100 },
  '10ws': { workspaces: 10, submitters: 100 },
  '100ws': { workspaces: 100, submitters: 100 },
  '1000ws': { workspaces: 1000, submitters: 1000 },
  '10kws': { workspaces: 10_000, submitters: 10_000 },
  '100kws': { workspaces: 100_000, submitters: CYCLING_SUBMITTERS },
}

/**
 * Which workspace submitter `k` appends its `i`-th entry to, and that entry's index (the path
 * in it): with more submitters than workspaces they share them (k mod workspaces, indices kept
 * apart); with fewer (100kws) each cycles through its own share, BURST entries to each in turn;
 * one each, its own.
 */
export function target(
  workspaces: number,
  submitters: number,
  k: number,
  i: number,
): { ws: number; index: number } {
  if (submitters > workspaces) return { ws: k % workspaces, index: k * 1_000_000 + i }
  if (submitters < workspaces) return { ws: (k + Math.floor(i / BURST) * submitters) % workspaces, index: i }
  return { ws: k, index: i }
}

async function withWriter<T>(
  peer: Peer,
  dir: string,
  workspaces: number,
  fn: (w: Writer) => Promise<T>,
  options?: WriterOptions,
) {
  peer.load()
  const w = await peer.writer(dir, workspaces, options)
  try {
    return await fn(w)
  } finally {
    await w.close()
  }
}

const maxRssMB = () => process.resourceUsage().maxRSS / 1024

/**
 * The create workload: batches of CREATE_BATCH first appends to new workspaces, issued at once
 * and awaited together; one untimed batch, then timed ones until `seconds` have passed (at
 * least one, at most CREATE_BATCHES). `ms` is the median batch's time per workspace.
 */
export async function runCreate(peer: Peer, dir: string, seconds: number): Promise<CaseResult> {
  const result = await withWriter(
    peer,
    dir,
    CREATE_BATCH * (CREATE_BATCHES + 1),
    async (w) => {
      const batch = async (b: number) => {
        const start = performance.now()
        await Promise.all(Array.from({ length: CREATE_BATCH }, (_, j) => w.append(b * CREATE_BATCH + j, j)))
        return performance.now() - start
      }
      await batch(0)
      const times: number[] = []
      const end = performance.now() + seconds * 1000
      for (let b = 1; b <= CREATE_BATCHES && (b === 1 || performance.now() < end); b++)
        times.push(await batch(b))
      const total = times.reduce((a, t) => a + t, 0)
      const perWs = times.map((t) => t / CREATE_BATCH)
      return {
        ms: median(perWs),
        entries: times.length * CREATE_BATCH,
        rate: (times.length * CREATE_BATCH) / (total / 1000),
      }
    },
    { fresh: true },
  )
  return { ...result, maxRssMB: maxRssMB() }
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
  if (workload === 'create') return runCreate(peer, dir, seconds)
  const { workspaces, submitters } = SHAPES[workload]
  const prefilled = PREFILL[workload]
  if (prefilled && !peer.resumes)
    throw new Error(`${peer.id} cannot go on in a prefilled store (${workload})`)
  const result = await withWriter(
    peer,
    dir,
    workspaces,
    (w) =>
      throughput(submitters, seconds, (k, i) => {
        const { ws, index } = target(workspaces, submitters, k, i)
        return w.append(ws, index)
      }),
    prefilled ? { fresh: true, resume: true } : {},
  )
  return { ...result, maxRssMB: maxRssMB() }
}

/**
 * Fills a store for a PREFILL workload: `entries` appends to each of its workspaces, through
 * the peer's writer, at most FILL_AT_ONCE workspaces at a time.
 */
export async function runFill(workload: WorkloadId, peer: Peer, dir: string): Promise<CaseResult> {
  const fill = PREFILL[workload]
  if (!fill) throw new Error(`${workload} is not prefilled`)
  const start = performance.now()
  await withWriter(
    // The same table through its batched writer: one commit per entry only makes the filling slow.
    peer.id === 'sqlite' ? peerById('sqlite-batched') : peer,
    dir,
    fill.workspaces,
    async (w) => {
      for (let from = 0; from < fill.workspaces; from += FILL_AT_ONCE) {
        const n = Math.min(FILL_AT_ONCE, fill.workspaces - from)
        for (let e = 0; e < fill.entries; e++)
          await Promise.all(Array.from({ length: n }, (_, j) => w.append(from + j, e)))
      }
    },
    { fresh: true },
  )
  return { ms: performance.now() - start, entries: fill.workspaces * fill.entries }
}

const FILL_AT_ONCE = 10_000

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
