/**
 * A crash-state explorer for the commit journal, in the spirit of ALICE (application-level
 * crash states from a recorded syscall trace and a model of what a file system may persist) and
 * CrashMonkey (every persistence point, plus subsets of what was written since).
 *
 * 1. A seeded random workload runs against a real AgentLog (two workers, a small journal so that
 *    checkpoints and wraps happen) whose io layer is test/fixtures/recording-io.mjs: every file
 *    operation of every worker is executed and recorded in one global order, and every
 *    acknowledgement is stamped with the operation counter it was observed at.
 * 2. From the trace, for each crash point k (the first k operations happened, no others), states
 *    a power cut may leave are built (see `stateAt` for the persistence model), written into a
 *    fresh root, and recovered exactly as the next process would: the real `recoverJournals`,
 *    then each workspace's torn-tail rule (inspectTail, countersOf, cut). A sample of states is
 *    also opened by a real AgentLog, recovered, verified and appended to.
 * 3. Every recovered state is checked: each entry acknowledged at or before k is there with its
 *    seq; each `.log` is a byte-prefix (whole lines) of the uncrashed run's final log, whose seqs
 *    run 1, 2, 3 … without a gap; each appendAtomic batch is there whole or not at all.
 */
import { createHash } from 'node:crypto'
import {
  closeSync,
  existsSync,
  fstatSync,
  ftruncateSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, relative } from 'node:path'
import { pathToFileURL } from 'node:url'
import { crc32c } from '@node-rs/crc32'
import type * as Recovery from '../../dist/src/engine/journal-recovery.js'
import type * as Logs from '../../dist/src/engine/logs.js'
import type * as TailRecovery from '../../dist/src/engine/recovery.js'
import type * as Engine from '../../dist/src/index.js'

export const RECORDING_IO = new URL('../fixtures/recording-io.mjs', import.meta.url).href
export const DIST = new URL('../../dist', import.meta.url).pathname

export function mulberry32(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

// ---------------------------------------------------------------------------------------------
// The workload

export interface AckRecord {
  ws: string
  seq: number
  path: string
  /** The operation counter when the ack was observed: crash states at k >= c must hold it. */
  c: number
}

export interface WorkloadOptions {
  seed: number
  /** An empty folder: the known on-disk state the explorer starts from. */
  root: string
  traceDir: string
  /** AgentLog sessions, each opened on the same root and closed cleanly. */
  sessions: number
  /** Random steps per session. */
  steps: number
  /** Pool jobs run at a random moment up to this many ms later (0: at once). */
  deferMs: number
  /** Bare fdatasyncs (checkpoints', other workers' atomic parts') run this many ms late. */
  slowSyncMs?: number
  /**
   * Logs a checkpoint, a close or an eviction makes durable with one syncfs rather than an
   * fdatasync each, from this many on (the owner's NOA_LOG_SYNCFS_MIN; its default, 16, is more
   * than this workload's six workspaces, so without it the syncfs paths would go unexplored).
   */
  syncfsMin?: number
  journalSize?: number
  /**
   * The lone lane's quiet spell (AgentLogOptions.laneQuietMs): short, workspaces move between
   * the caller's thread and the workers whenever the workload pauses; absent, the default.
   */
  laneQuietMs?: number
  dist?: string
}

/** A file written beside an acknowledged entry (AppendOptions.files). */
export interface FileAck {
  /** Relative to the root. */
  path: string
  /** Its bytes, base64 (the workload is kept as JSON). */
  data: string
  /** The operation counter when its append's ack was observed. */
  c: number
}

export interface WorkloadResult {
  seed: number
  root: string
  traceDir: string
  acks: AckRecord[]
  fileAcks: FileAck[]
  /** Unexpected rejections of the uncrashed run (there should be none). */
  errors: string[]
  stats: {
    checkpoints: number
    wraps: number
    rounds: number
    directCommits: number
    atomics: number
    /** Rounds that found the journal full and waited for a checkpoint. */
    spaceWaits: number
    /** syncfs calls that made many logs durable at once (syncfsMin). */
    logSyncfs: number
  }
  workspaces: string[]
}

export const BLOB = 'ab'.repeat(32)

/**
 * The io options of a recorded run and a way to stamp acknowledgements: the counter read when
 * an ack is observed is the number of operations that had completed by then.
 */
/** The operation counter of a recording (see `recording`). */
function counterOf(rec: { ioOptions: { sab: SharedArrayBuffer } }): Int32Array {
  return new Int32Array(rec.ioOptions.sab)
}

export function recording(traceDir: string, extra: Record<string, unknown> = {}) {
  const sab = new SharedArrayBuffer(16)
  const counter = new Int32Array(sab)
  const acks: AckRecord[] = []
  return {
    ioModule: RECORDING_IO,
    ioOptions: { sab, traceDir, ...extra },
    acks,
    stamp(ws: string, seq: number, path: string): void {
      acks.push({ ws, seq, path, c: Atomics.load(counter, 0) })
    },
  }
}

/** Runs a seeded random workload through the recording io layer. */
export async function runWorkload(o: WorkloadOptions): Promise<WorkloadResult> {
  const dist = o.dist ?? DIST
  const { AgentLog } = (await import(pathToFileURL(join(dist, 'src/index.js')).href)) as typeof Engine
  const rand = mulberry32(o.seed)
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)] as T
  const rec = recording(o.traceDir)
  const acks = rec.acks
  const fileAcks: FileAck[] = []
  const errors: string[] = []
  const stats = {
    checkpoints: 0,
    wraps: 0,
    rounds: 0,
    directCommits: 0,
    atomics: 0,
    spaceWaits: 0,
    logSyncfs: 0,
  }
  // Paths make every entry recognizable; the padding makes lines long enough that a 256 KiB
  // journal is checkpointed and wrapped many times per session.
  const pad = (n: number) => 'x'.repeat(n)
  let tag = 0
  let batchNo = 0
  let workspaces: string[] = []
  const used = new Set<string>()
  // Read by each owner when its module loads: the worker threads copy the environment when
  // they start, at the session's first append.
  const syncfsBefore = process.env.NOA_LOG_SYNCFS_MIN
  if (o.syncfsMin !== undefined) process.env.NOA_LOG_SYNCFS_MIN = String(o.syncfsMin)
  else delete process.env.NOA_LOG_SYNCFS_MIN
  try {
    for (let session = 0; session < o.sessions; session++) {
      const log = await AgentLog.open({
        root: o.root,
        workers: 2,
        journalSize: o.journalSize ?? 256 << 10,
        ...(o.laneQuietMs === undefined ? {} : { laneQuietMs: o.laneQuietMs }),
        ioModule: rec.ioModule,
        ioOptions: {
          ...rec.ioOptions,
          deferMs: o.deferMs,
          slowSyncMs: o.slowSyncMs ?? 0,
          seed: o.seed * 31 + session,
        },
      })
      const internals = log as unknown as { ownerOf(ws: string): unknown; owners: unknown[] }
      const ownerOf = (ws: string) => internals.owners.indexOf(internals.ownerOf(ws))
      if (workspaces.length === 0) {
        // Three workspaces per worker.
        const by: string[][] = [[], []]
        for (let i = 0; (by[0]?.length ?? 0) < 3 || (by[1]?.length ?? 0) < 3; i++) {
          const ws = `w${i}`
          const list = by[ownerOf(ws)] as string[]
          if (list.length < 3) list.push(ws)
        }
        workspaces = [...(by[0] as string[]), ...(by[1] as string[])]
      }
      const inFlight = new Set<Promise<unknown>>()
      const track = (p: Promise<unknown>, what: string) => {
        const q = p.catch((err: Error & { code?: string }) => {
          errors.push(`${what}: ${err.code ?? ''} ${err.message}`)
        })
        inFlight.add(q)
        q.finally(() => inFlight.delete(q))
      }
      const entry = (ws: string, name: string) => ({
        op: 'write' as const,
        path: `${ws}/${name}/${pad(300 + Math.floor(rand() * 2000))}`,
        blob: BLOB,
      })
      const stamp = (ws: string, seq: number, path: string) => {
        rec.stamp(ws, seq, path)
        used.add(ws)
      }
      for (let step = 0; step < o.steps; step++) {
        const r = rand()
        if (r < 0.3) {
          const n = 1 + Math.floor(rand() * 8)
          for (let i = 0; i < n; i++) {
            const ws = pick(workspaces)
            const t = tag++
            const e = entry(ws, `p${t}`)
            if (rand() < 0.3) {
              // With a file beside it, in a folder of its own now and then (made for it); half of
              // them appended to the owner's object log instead (packed).
              const data = Buffer.from(`file ${t} ${pad(Math.floor(rand() * 1500))}`)
              const sha = createHash('sha256').update(data).digest('hex')
              const file = {
                path: `objects/${sha.slice(0, 2)}/${sha.slice(2)}`,
                data,
                readOnly: true,
                packed: rand() < 0.5,
              }
              track(
                log.append(ws, e, { files: [file] }).then((a) => {
                  stamp(ws, a.seq, e.path)
                  fileAcks.push({
                    path: file.path,
                    data: file.data.toString('base64'),
                    c: Atomics.load(counterOf(rec), 0),
                  })
                }),
                'append with a file',
              )
              continue
            }
            track(
              log.append(ws, e).then((a) => stamp(ws, a.seq, e.path)),
              'append',
            )
          }
        } else if (r < 0.55) {
          const ws = pick(workspaces)
          // Now and then a batch too large for a frame: it goes straight to its file.
          const n = rand() < 0.04 ? 40 + Math.floor(rand() * 30) : 1 + Math.floor(rand() * 16)
          const t = tag++
          const es = Array.from({ length: n }, (_, k) => entry(ws, `m${t}-${k}`))
          track(
            log.appendMany(ws, es).then((as) => {
              as.forEach((a, k) => {
                stamp(ws, a.seq, es[k]?.path ?? '')
              })
            }),
            'appendMany',
          )
        } else if (r < 0.72) {
          // Two or three workspaces, on both workers.
          const a = pick(workspaces.slice(0, 3))
          const b = pick(workspaces.slice(3))
          const names = rand() < 0.5 ? [a, b] : [a, b, pick(workspaces.filter((w) => w !== a && w !== b))]
          const b0 = batchNo++
          const batch: Record<string, Array<ReturnType<typeof entry>>> = {}
          for (const ws of names) {
            batch[ws] = Array.from({ length: 1 + Math.floor(rand() * 5) }, (_, k) => ({
              op: 'write' as const,
              path: `atomic/b${b0}/${ws}/${k}/${pad(1 + Math.floor(rand() * 100))}`,
              blob: BLOB,
            }))
          }
          stats.atomics++
          track(
            log.appendAtomic(batch).then((res) => {
              for (const [ws, list] of Object.entries(res)) {
                list.forEach((a, k) => {
                  stamp(ws, a.seq, batch[ws]?.[k]?.path ?? '')
                })
              }
            }),
            'appendAtomic',
          )
        } else if (r < 0.81) {
          await Promise.all(inFlight)
        } else if (r < 0.85) {
          // A burst of large batches on one workspace of each worker: few operations, much
          // journal, so that every session checkpoints and wraps its journals. With slow
          // checkpoint syncs (seedMode) a journal fills and a round waits for space, so the next
          // frame overwrites space freed by the header just written: the states in which that
          // header's fdatasync is what keeps replay from starting at an overwritten frame.
          const pair = [pick(workspaces.slice(0, 3)), pick(workspaces.slice(3))]
          for (let round = 0; round < 8; round++) {
            for (const ws of pair) {
              const t = tag++
              const es = Array.from({ length: 8 }, (_, k) => ({
                op: 'write' as const,
                path: `${ws}/b${t}-${k}/${pad(2500 + Math.floor(rand() * 1000))}`,
                blob: BLOB,
              }))
              track(
                log.appendMany(ws, es).then((as) => {
                  as.forEach((a, k) => {
                    stamp(ws, a.seq, es[k]?.path ?? '')
                  })
                }),
                'appendMany',
              )
            }
            await Promise.all(inFlight)
          }
        } else if (r < 0.89) {
          track(log.release(pick(workspaces)), 'release')
        } else if (r < 0.94) {
          const ws = pick([...used])
          if (ws !== undefined) track(log.recover(ws), 'recover')
        } else {
          await new Promise((res) => setTimeout(res, Math.floor(rand() * 20)))
        }
      }
      await Promise.all(inFlight)
      for (const s of await log.status()) {
        stats.checkpoints += s.checkpoints
        stats.wraps += s.wraps
        stats.rounds += s.rounds
        stats.directCommits += s.directCommits
        stats.spaceWaits += s.spaceWaits
        stats.logSyncfs += s.logSyncfs
      }
      await log.close()
    }
  } finally {
    if (syncfsBefore === undefined) delete process.env.NOA_LOG_SYNCFS_MIN
    else process.env.NOA_LOG_SYNCFS_MIN = syncfsBefore
  }
  const result: WorkloadResult = {
    seed: o.seed,
    root: o.root,
    traceDir: o.traceDir,
    acks,
    fileAcks,
    errors,
    stats,
    workspaces,
  }
  writeFileSync(join(o.traceDir, 'workload.json'), JSON.stringify(result))
  return result
}

// ---------------------------------------------------------------------------------------------
// The trace and the model built from it

export interface TraceOp {
  i: number
  op: string
  fd?: number
  path?: string
  from?: string
  to?: string
  off?: number
  len?: number
  data?: string
  ino?: string | null
  created?: boolean
  removed?: boolean
  err?: string
}

interface DataOp {
  i: number
  kind: 'write' | 'trunc'
  off: number
  len: number
  /** null: zeros (the journal's allocation). */
  data: Buffer | null
}

interface FileModel {
  id: number
  ops: DataOp[]
  /** Indices of the fdatasyncs (through any descriptor of it) that completed. */
  syncs: number[]
}

interface DirOp {
  i: number
  kind: 'link' | 'unlink' | 'rename'
  name: string
  to?: string
  file: number
}

export interface Model {
  root: string
  count: number
  files: FileModel[]
  dirs: Map<string, { ops: DirOp[]; syncs: number[] }>
  syncfs: number[]
  /** Recorded inode → file id (a journal record names its file's inode). */
  inoToFile: Map<string, number>
  /** Operations that failed in the uncrashed run (no effect assumed), by errno. */
  failures: Map<string, number>
  /** fdatasyncs on a descriptor the io layer had closed (they cover nothing of ours). */
  strays: number
}

export function readTrace(traceDir: string): TraceOp[] {
  const ops: TraceOp[] = []
  for (const name of readdirSync(traceDir)) {
    if (!name.startsWith('trace-')) continue
    for (const line of readFileSync(join(traceDir, name), 'utf8').split('\n')) {
      if (line) ops.push(JSON.parse(line) as TraceOp)
    }
  }
  ops.sort((a, b) => a.i - b.i)
  ops.forEach((op, i) => {
    if (op.i !== i) throw new Error(`trace: operation ${i} missing (found ${op.i})`)
  })
  return ops
}

export function buildModel(root: string, ops: readonly TraceOp[]): Model {
  const files: FileModel[] = []
  const dirs = new Map<string, { ops: DirOp[]; syncs: number[] }>()
  const dir = (d: string) => {
    let x = dirs.get(d)
    if (!x) {
      x = { ops: [], syncs: [] }
      dirs.set(d, x)
    }
    return x
  }
  const ns = new Map<string, number>()
  const fds = new Map<number, number>()
  const sizes: number[] = []
  const model: Model = {
    root,
    count: ops.length,
    files,
    dirs,
    syncfs: [],
    inoToFile: new Map(),
    failures: new Map(),
    strays: 0,
  }
  const fileOf = (op: TraceOp): FileModel => {
    const id = fds.get(op.fd as number)
    if (id === undefined) throw new Error(`trace: op ${op.i} ${op.op} on fd ${op.fd}, not opened through io`)
    return files[id] as FileModel
  }
  for (const op of ops) {
    if (op.err !== undefined) {
      model.failures.set(`${op.op} ${op.err}`, (model.failures.get(`${op.op} ${op.err}`) ?? 0) + 1)
      continue
    }
    switch (op.op) {
      case 'open': {
        const path = op.path as string
        let id = ns.get(path)
        if (op.created || id === undefined) {
          if (!op.created) throw new Error(`trace: op ${op.i} opens ${path}, which the trace never created`)
          id = files.length
          files.push({ id, ops: [], syncs: [] })
          sizes.push(0)
          ns.set(path, id)
          dir(dirname(path)).ops.push({ i: op.i, kind: 'link', name: path, file: id })
        }
        fds.set(op.fd as number, id)
        if (op.ino) model.inoToFile.set(op.ino, id)
        break
      }
      case 'close':
        fds.delete(op.fd as number)
        break
      case 'opendir':
        // A folder's descriptor: its syncs are recorded as fsyncDir (or syncfs) of the folder.
        break
      case 'write':
      case 'pwrite': {
        const f = fileOf(op)
        const data = Buffer.from(op.data as string, 'base64')
        if (op.op === 'write' && op.off !== sizes[f.id]) {
          throw new Error(`trace: op ${op.i} appends at ${op.off}, the model's size is ${sizes[f.id]}`)
        }
        f.ops.push({ i: op.i, kind: 'write', off: op.off as number, len: data.length, data })
        sizes[f.id] = Math.max(sizes[f.id] as number, (op.off as number) + data.length)
        break
      }
      case 'zero': {
        const f = fileOf(op)
        f.ops.push({ i: op.i, kind: 'write', off: op.off as number, len: op.len as number, data: null })
        sizes[f.id] = Math.max(sizes[f.id] as number, (op.off as number) + (op.len as number))
        break
      }
      case 'ftruncate': {
        const f = fileOf(op)
        f.ops.push({ i: op.i, kind: 'trunc', off: 0, len: op.len as number, data: null })
        sizes[f.id] = op.len as number
        break
      }
      case 'fdatasync': {
        const id = fds.get(op.fd as number)
        if (id === undefined) model.strays++
        else (files[id] as FileModel).syncs.push(op.i)
        break
      }
      case 'syncfs':
        model.syncfs.push(op.i)
        break
      case 'fsyncDir':
        dir(op.path as string).syncs.push(op.i)
        break
      case 'rename': {
        const from = op.from as string
        const to = op.to as string
        const id = ns.get(from)
        if (id === undefined) throw new Error(`trace: op ${op.i} renames ${from}, unknown`)
        if (dirname(from) !== dirname(to)) throw new Error(`trace: op ${op.i} renames across folders`)
        ns.delete(from)
        ns.set(to, id)
        dir(dirname(from)).ops.push({ i: op.i, kind: 'rename', name: from, to, file: id })
        break
      }
      case 'unlink': {
        const path = op.path as string
        const id = ns.get(path)
        if (id === undefined) throw new Error(`trace: op ${op.i} unlinks ${path}, unknown`)
        ns.delete(path)
        dir(dirname(path)).ops.push({ i: op.i, kind: 'unlink', name: path, file: id })
        break
      }
      case 'rmdir':
        // Folders are not modelled (see stateAt).
        break
      default:
        throw new Error(`trace: unknown operation ${op.op}`)
    }
  }
  return model
}

// ---------------------------------------------------------------------------------------------
// Crash states

export type StateChoice = 'none' | 'all' | 'reordered' | 'random'

export interface CrashState {
  k: number
  /** Same key, same bytes (the files, their names and contents): recovered once. */
  key: string
  /** path (absolute, in the recorded root) → contents. */
  files: Map<string, { id: number; data: Buffer }>
  /** How many unsynced data operations and folder entries it kept, and how many writes it tore. */
  kept: number
  torn: number
}

function lastBefore(xs: readonly number[], k: number): number {
  // xs ascending: the last element < k, or -1.
  let lo = 0
  let hi = xs.length
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if ((xs[mid] as number) < k) lo = mid + 1
    else hi = mid
  }
  return lo === 0 ? -1 : (xs[lo - 1] as number)
}

function apply(buf: Buffer, op: DataOp, upTo = op.len): Buffer {
  if (op.kind === 'trunc') {
    if (op.len <= buf.length) return buf.subarray(0, op.len)
    return Buffer.concat([buf, Buffer.alloc(op.len - buf.length)])
  }
  const end = op.off + upTo
  let out = buf
  if (end > buf.length) {
    out = Buffer.alloc(end)
    buf.copy(out)
  }
  if (op.data) op.data.copy(out, op.off, 0, upTo)
  else out.fill(0, op.off, end)
  return out
}

/**
 * The durable contents of every file as of crash point k, kept up to date as k grows (crash
 * points are visited in increasing order): each file's operations before its last fdatasync.
 */
export class DurableBase {
  private readonly next: number[]
  private readonly data: Buffer[]
  private readonly upTo: number[]

  constructor(private readonly model: Model) {
    this.next = model.files.map(() => 0)
    this.data = model.files.map(() => Buffer.alloc(0))
    this.upTo = model.files.map(() => -1)
  }

  /** The last sync of file `id` before k (an fdatasync of it, or a syncfs). */
  syncPoint(id: number, k: number): number {
    const f = this.model.files[id] as FileModel
    return Math.max(lastBefore(f.syncs, k), lastBefore(this.model.syncfs, k))
  }

  /** Contents durable at sync point `s` (ascending calls per file). */
  at(id: number, s: number): Buffer {
    if (s < (this.upTo[id] as number)) throw new Error('DurableBase: crash points must ascend')
    const f = this.model.files[id] as FileModel
    let n = this.next[id] as number
    let buf = this.data[id] as Buffer
    while (n < f.ops.length && (f.ops[n] as DataOp).i < s) {
      buf = apply(buf === this.data[id] ? Buffer.from(buf) : buf, f.ops[n] as DataOp)
      n++
    }
    this.next[id] = n
    this.data[id] = buf
    this.upTo[id] = s
    return buf
  }
}

/**
 * One state a power cut at crash point k may leave (the first k operations happened).
 *
 * The persistence model:
 * - File data: everything written before the file's last completed fdatasync (or a syncfs) is
 *   durable. Of the writes and truncations since, any subset may have reached the disk (the page
 *   cache writes back in any order, and a file's size may be persisted with a later write), each
 *   kept write possibly torn: only its bytes up to one of the 512-byte sector boundaries inside
 *   it (a device persists whole sectors, in order, of a multi-sector write). A write within one
 *   sector is all or nothing. A file grown by a kept write reads zeros wherever a dropped write
 *   would have been.
 * - Names: creating a file, renaming and unlinking are entries of their folder, durable once the
 *   folder was fsynced (or a syncfs) after them; of the entries since, a prefix is durable (the
 *   file system journals its metadata in order, as ext4 and xfs do), any prefix, the empty one
 *   and the whole one included. An fdatasync of a file does not make its name durable.
 * - Folders themselves are not modelled: mkdir is plain node:fs in the engine (files.ts), not the
 *   io seam, so the explorer takes every folder as present. The engine fsyncs each new folder's
 *   parent right after the mkdir, and a missing folder only hides the files in it.
 *
 * `choice`: 'none' keeps nothing unsynced, 'all' keeps everything untorn, 'reordered' keeps
 * everything untorn but each file's first write since its last sync (the page cache wrote the
 * later ones back first: a header rewritten without its sync, then the space it freed reused),
 * 'random' picks a random subset, tears and prefixes.
 */
export function stateAt(
  model: Model,
  base: DurableBase,
  k: number,
  choice: StateChoice,
  rand: () => number,
): CrashState {
  // Names: per folder, the durable entries and a prefix of those since its last fsync.
  const ns = new Map<string, number>()
  let kept = 0
  let torn = 0
  const keyParts: string[] = []
  const dirSync = lastBefore(model.syncfs, k)
  for (const d of model.dirs.values()) {
    const synced = Math.max(lastBefore(d.syncs, k), dirSync)
    let end = 0
    while (end < d.ops.length && (d.ops[end] as DirOp).i < k) end++
    let durable = 0
    while (durable < end && (d.ops[durable] as DirOp).i < synced) durable++
    const pending = end - durable
    const prefix = choice === 'none' ? 0 : choice === 'random' ? Math.floor(rand() * (pending + 1)) : pending
    kept += prefix
    for (let n = 0; n < durable + prefix; n++) {
      const op = d.ops[n] as DirOp
      if (op.kind === 'link') ns.set(op.name, op.file)
      else if (op.kind === 'unlink') ns.delete(op.name)
      else {
        ns.delete(op.name)
        ns.set(op.to as string, op.file)
      }
    }
  }
  const files = new Map<string, { id: number; data: Buffer }>()
  for (const [path, id] of [...ns].sort((a, b) => (a[0] < b[0] ? -1 : 1))) {
    const f = model.files[id] as FileModel
    const s = base.syncPoint(id, k)
    let data = base.at(id, s)
    const kept1: string[] = []
    // The unsynced operations: after the last sync, before k.
    let n = 0
    while (n < f.ops.length && (f.ops[n] as DataOp).i < s) n++
    const p = choice === 'random' ? [0.2, 0.5, 0.8, 1][Math.floor(rand() * 4)] : 0
    let copied = false
    const first = n
    for (; n < f.ops.length && (f.ops[n] as DataOp).i < k; n++) {
      const op = f.ops[n] as DataOp
      const keep =
        choice === 'all' ||
        (choice === 'reordered' && n > first) ||
        (choice === 'random' && rand() < (p as number))
      if (!keep) continue
      let upTo = op.len
      if (op.kind === 'write' && choice === 'random' && rand() < 0.3) {
        // Torn: cut at one of the sector boundaries strictly inside the write.
        const first = Math.floor(op.off / 512) + 1
        const last = Math.ceil((op.off + op.len) / 512) - 1
        if (last >= first) {
          const b = (first + Math.floor(rand() * (last - first + 1))) * 512
          upTo = b - op.off
          torn++
        }
      }
      if (!copied) {
        data = Buffer.from(data)
        copied = true
      }
      data = apply(data, op, upTo)
      kept++
      kept1.push(upTo === op.len ? `${op.i}` : `${op.i}/${upTo}`)
    }
    files.set(path, { id, data })
    keyParts.push(`${path}=${id}@${s}[${kept1.join(',')}]`)
  }
  return { k, key: keyParts.join(' '), files, kept, torn }
}

// ---------------------------------------------------------------------------------------------
// Recovering a state as the next process would

export interface RecoveryModules {
  recoverJournals: typeof Recovery.recoverJournals
  inspectTail: typeof TailRecovery.inspectTail
  countersOf: typeof TailRecovery.countersOf
  checkSidecar: typeof Logs.checkSidecar
}

export async function recoveryModules(dist = DIST, recoveryFile?: string): Promise<RecoveryModules> {
  const rec = (await import(
    pathToFileURL(recoveryFile ?? join(dist, 'src/engine/journal-recovery.js')).href
  )) as typeof Recovery
  const tail = (await import(pathToFileURL(join(dist, 'src/engine/recovery.js')).href)) as typeof TailRecovery
  const logs = (await import(pathToFileURL(join(dist, 'src/engine/logs.js')).href)) as typeof Logs
  return {
    recoverJournals: rec.recoverJournals,
    inspectTail: tail.inspectTail,
    countersOf: tail.countersOf,
    checkSidecar: logs.checkSidecar,
  }
}

const FRAME_MAGIC = 0x31464a4e

/**
 * Journal records name their file's inode, and replay refuses a record whose file has another
 * one (it was replaced). A state written into a fresh folder has fresh inodes, so every valid
 * frame's inodes are mapped to those of the same files there (0 for a file the state does not
 * hold: never a match), and its checksum recomputed. Invalid frames are left as they are, so
 * nothing becomes valid that was not.
 */
function patchInodes(journal: Buffer, inodes: (recorded: bigint) => bigint): void {
  for (let at = 4096; at + 32 <= journal.length; at += 512) {
    if (journal.readUInt32LE(at) !== FRAME_MAGIC) continue
    const length = journal.readUInt32LE(at + 8)
    if (length < 512 || length % 512 !== 0 || at + length > journal.length) continue
    if (journal.readUInt32LE(at + 4) !== crc32c(journal.subarray(at + 8, at + length)) >>> 0) continue
    const count = journal.readUInt32LE(at + 28)
    let r = at + 32
    for (let n = 0; n < count && r + 32 <= at + length; n++) {
      const nameLen = journal.readUInt16LE(r + 2)
      const dataLen = journal.readUInt32LE(r + 4)
      journal.writeBigUInt64LE(inodes(journal.readBigUInt64LE(r + 8)), r + 8)
      r += 32 + nameLen + dataLen
    }
    journal.writeUInt32LE(crc32c(journal.subarray(at + 8, at + length)) >>> 0, at + 4)
  }
}

/**
 * A checksum sidecar names its log's inode in its header (another inode: the sidecar is not
 * used); mapped like the journal records', only in a header whose checksum held.
 */
function patchSidecar(sum: Buffer, inodes: (recorded: bigint) => bigint): void {
  if (sum.length < 32 || sum.toString('latin1', 0, 8) !== 'NOASUMS1') return
  if (sum.readUInt32LE(28) !== crc32c(sum.subarray(0, 28)) >>> 0) return
  sum.writeBigUInt64LE(inodes(sum.readBigUInt64LE(16)), 16)
  sum.writeUInt32LE(crc32c(sum.subarray(0, 28)) >>> 0, 28)
}

/** Writes a state into `dir` (a fresh root), the inodes that journals and sidecars name mapped. */
export function materialize(model: Model, state: CrashState, dir: string): void {
  mkdirSync(join(dir, 'agent-logs'), { recursive: true })
  const newIno = new Map<number, bigint>()
  const naming: Array<{ path: string; data: Buffer; patch: typeof patchInodes }> = []
  for (const [path, { id, data }] of state.files) {
    const rel = relative(model.root, path)
    const target = join(dir, rel)
    mkdirSync(dirname(target), { recursive: true })
    if (rel.startsWith('journal/') || rel.startsWith('checksums/')) {
      naming.push({ path: target, data, patch: rel.startsWith('journal/') ? patchInodes : patchSidecar })
      continue
    }
    writeFileSync(target, data)
    newIno.set(id, fstatIno(target))
  }
  for (const f of naming) {
    const copy = Buffer.from(f.data)
    f.patch(copy, (ino) => {
      const id = model.inoToFile.get(ino.toString())
      return id === undefined ? 0n : (newIno.get(id) ?? 0n)
    })
    writeFileSync(f.path, copy)
  }
}

function fstatIno(path: string): bigint {
  const fd = openSync(path, 'r')
  try {
    return fstatSync(fd, { bigint: true }).ino
  } finally {
    closeSync(fd)
  }
}

export interface Recovered {
  /** Per workspace: the log after recovery (missing log: empty). */
  logs: Map<string, Buffer>
  /** Files written beside acknowledged entries (relative path) → bytes after recovery, or null. */
  files: Map<string, Buffer | null>
  /** Bytes the replay wrote, and torn tails cut. */
  replayed: number
  cut: number
  /** Log bytes checked against their checksum sidecar, and the blocks that did not match. */
  checksummed: number
  damaged: string[]
  error: string | null
}

/**
 * The next process's recovery: dead journals replayed, then each workspace's torn tail cut.
 * Then each log is checked against its checksum sidecar, as verify does: a sidecar record lost
 * or torn by the crash leaves its block unchecked, but no recorded block may mismatch.
 */
export function recoverState(
  dir: string,
  workspaces: readonly string[],
  m: RecoveryModules,
  files: readonly string[] = [],
): Recovered {
  const out: Recovered = {
    logs: new Map(),
    files: new Map(),
    replayed: 0,
    cut: 0,
    checksummed: 0,
    damaged: [],
    error: null,
  }
  try {
    for (const r of m.recoverJournals(dir)) out.replayed += r.bytes
    const logged = files.length > 0 ? objectLogFiles(dir) : new Map<string, Buffer>()
    for (const f of files) {
      const path = join(dir, f)
      out.files.set(f, existsSync(path) ? readFileSync(path) : (logged.get(f) ?? null))
    }
    const jdir = join(dir, 'journal')
    const left = existsSync(jdir)
      ? readdirSync(jdir).filter((n) => n.endsWith('.jnl') || n.endsWith('.jnl.tmp'))
      : []
    if (left.length > 0) throw new Error(`journals left after recovery: ${left.join(', ')}`)
    for (const ws of workspaces) {
      const file = join(dir, 'agent-logs', `${ws}.log`)
      if (!existsSync(file)) {
        out.logs.set(ws, Buffer.alloc(0))
        continue
      }
      const fd = openSync(file, 'r+')
      try {
        const tail = m.inspectTail(fd)
        m.countersOf(file, tail) // a bad last complete line is corruption: it throws
        if (tail.validLength < tail.size) {
          ftruncateSync(fd, tail.validLength)
          out.cut++
        }
      } finally {
        closeSync(fd)
      }
      out.logs.set(ws, readFileSync(file))
      const report = m.checkSidecar(dir, ws, file, {
        file,
        ok: true,
        entries: 0,
        firstSeq: 0,
        lastSeq: 0,
        lastTs: 0,
        bytes: 0,
        tornTailBytes: 0,
      })
      out.checksummed += report.checksummedBytes ?? 0
      if (report.damaged) out.damaged.push(`${ws}: ${report.problem?.reason}`)
    }
  } catch (err) {
    out.error = `${(err as { code?: string }).code ?? ''} ${(err as Error).message}`
  }
  return out
}

// ---------------------------------------------------------------------------------------------
// The checks

interface Expected {
  /** The uncrashed run's final logs. */
  final: Map<string, Buffer>
  /** Per workspace, acked seqs sorted by the counter they were observed at. */
  acked: Map<string, Array<{ c: number; seq: number; path: string }>>
  /** appendAtomic batches: per workspace part, its first and last seq. */
  batches: Map<string, Array<{ ws: string; first: number; last: number }>>
  /** Files written beside acknowledged entries, with the counter of their ack. */
  files: Array<{ path: string; data: Buffer; c: number }>
}

function lineCount(buf: Buffer): number {
  let n = 0
  for (let i = buf.indexOf(10); i >= 0; i = buf.indexOf(10, i + 1)) n++
  return n
}

/** Reads the final logs and checks the uncrashed run itself. */
export function expectations(w: WorkloadResult): { expected: Expected; problems: string[] } {
  const problems: string[] = []
  const final = new Map<string, Buffer>()
  const batches = new Map<string, Array<{ ws: string; first: number; last: number }>>()
  for (const ws of w.workspaces) {
    const file = join(w.root, 'agent-logs', `${ws}.log`)
    const data = existsSync(file) ? readFileSync(file) : Buffer.alloc(0)
    final.set(ws, data)
    const lines = data.toString('utf8').split('\n')
    if (lines.pop() !== '') problems.push(`final ${ws}.log does not end with a newline`)
    lines.forEach((line, n) => {
      const e = JSON.parse(line) as { seq: number; path: string }
      if (e.seq !== n + 1) problems.push(`final ${ws}.log line ${n + 1} has seq ${e.seq}`)
      const m = /^atomic\/(b\d+)\//.exec(e.path)
      if (m) {
        const parts = batches.get(m[1] as string) ?? []
        const part = parts.find((p) => p.ws === ws)
        if (part) part.last = e.seq
        else parts.push({ ws, first: e.seq, last: e.seq })
        batches.set(m[1] as string, parts)
      }
    })
  }
  const acked = new Map<string, Array<{ c: number; seq: number; path: string }>>()
  for (const a of w.acks) {
    const list = acked.get(a.ws) ?? []
    list.push({ c: a.c, seq: a.seq, path: a.path })
    acked.set(a.ws, list)
    const line = (final.get(a.ws) ?? Buffer.alloc(0)).toString('utf8').split('\n')[a.seq - 1]
    if (!line || (JSON.parse(line) as { path: string }).path !== a.path) {
      problems.push(`acked ${a.ws} seq ${a.seq} (${a.path.slice(0, 30)}) is not in the final log`)
    }
  }
  for (const list of acked.values()) list.sort((x, y) => x.c - y.c)
  if (existsSync(join(w.root, 'journal'))) problems.push('the journal folder is left after the final close')
  const files = (w.fileAcks ?? []).map((f) => ({ path: f.path, data: Buffer.from(f.data, 'base64'), c: f.c }))
  const logged = objectLogFiles(w.root)
  for (const f of files) {
    const path = join(w.root, f.path)
    const got = existsSync(path) ? readFileSync(path) : logged.get(f.path)
    if (!got?.equals(f.data)) problems.push(`final ${f.path} is not what was written`)
  }
  return { expected: { final, acked, batches, files }, problems }
}

/** What a recovered state is checked on: its logs reduced to entry counts. */
export interface Outcome {
  error: string | null
  /** Sidecar blocks that did not match the recovered log. */
  damaged: string[]
  /** Workspace → whole lines of its recovered log, which is a prefix of the final log. */
  entries: Map<string, number>
  /** Logs that are not a prefix of the final log, described. */
  notPrefix: string[]
  /** Acknowledged files (relative path) → their recovered bytes, or null when missing. */
  files: Map<string, Buffer | null>
}

export function outcomeOf(ex: Expected, rec: Recovered): Outcome {
  const out: Outcome = {
    error: rec.error,
    damaged: rec.damaged,
    entries: new Map(),
    notPrefix: [],
    files: rec.files,
  }
  for (const [ws, log] of rec.logs) {
    const final = ex.final.get(ws) ?? Buffer.alloc(0)
    if (log.length > final.length || !final.subarray(0, log.length).equals(log)) {
      const at = commonPrefix(log, final)
      out.notPrefix.push(
        `${ws}.log (${log.length} bytes) is not a prefix of the final log (${final.length}): differs at byte ${at}`,
      )
      continue
    }
    // A prefix of the gapless final log that ends at a line end: seqs 1..n.
    out.entries.set(ws, lineCount(log))
  }
  return out
}

/** Problems of one recovered state at crash point k (empty: it passes). */
export function checkState(ex: Expected, k: number, o: Outcome): string[] {
  if (o.error) return [`recovery failed: ${o.error}`]
  const problems = [...o.notPrefix, ...o.damaged]
  const entries = o.entries
  for (const [ws, list] of ex.acked) {
    const have = entries.get(ws)
    if (have === undefined) continue
    let need = 0
    for (const a of list) {
      if (a.c > k) break
      if (a.seq > need) need = a.seq
    }
    if (need > have)
      problems.push(`${ws}: seq ${need} was acknowledged at or before op ${k}, the log has ${have}`)
  }
  for (const f of ex.files) {
    if (f.c > k) continue
    const got = o.files.get(f.path)
    if (!got)
      problems.push(`${f.path} was written beside an entry acknowledged at or before op ${k}, and is missing`)
    else if (!got.equals(f.data)) problems.push(`${f.path} holds other bytes than were acknowledged`)
  }
  for (const [b, parts] of ex.batches) {
    const whole = parts.filter((p) => (entries.get(p.ws) ?? 0) >= p.last).length
    const none = parts.filter((p) => (entries.get(p.ws) ?? 0) < p.first).length
    if (whole !== parts.length && none !== parts.length) {
      const desc = parts.map((p) => `${p.ws} ${p.first}-${p.last} (log has ${entries.get(p.ws)})`).join(', ')
      problems.push(`atomic batch ${b} is partly there: ${desc}`)
    }
  }
  return problems
}

// ---------------------------------------------------------------------------------------------
// Exploration

export interface ExploreOptions {
  /** Random states per crash point besides 'none', 'all' and 'reordered'. */
  randomPerPoint: number
  /** Visit every n-th crash point only (1: all). */
  stride?: number
  seed: number
  /** Where states are written (a tmpfs is fastest). */
  scratch?: string
  /** Stop after this many failing states. */
  maxFailures?: number
  modules: RecoveryModules
  /** States (of those whose recovery replayed journal bytes) also opened by a real AgentLog. */
  agentLogChecks?: number
  dist?: string
}

export interface ExploreReport {
  ops: number
  crashPoints: number
  states: number
  distinct: number
  /** Distinct states whose recovery replayed journal bytes, or cut a torn tail. */
  replayed: number
  cut: number
  /** Distinct states in which some log was checked against its checksum sidecar. */
  checksummed: number
  /** Checked states in which an acknowledged entry was missing from its .log before recovery. */
  rescued: number
  /** States also recovered, verified and appended to by a real AgentLog. */
  agentLogChecked: number
  failures: Array<{ k: number; state: string; problems: string[] }>
  failedOps: Record<string, number>
  strays: number
}

export function scratchRoot(): string {
  const base = existsSync('/dev/shm') ? '/dev/shm' : tmpdir()
  return mkdtempSync(join(base, 'noa-crash-'))
}

/** Length of the common prefix of two buffers (compared a page at a time, then byte by byte). */
function commonPrefix(a: Buffer, b: Buffer): number {
  const n = Math.min(a.length, b.length)
  let at = 0
  while (at + 4096 <= n && a.subarray(at, at + 4096).equals(b.subarray(at, at + 4096))) at += 4096
  while (at < n && a[at] === b[at]) at++
  return at
}

/** Whole lines of `log` that agree with the final log from its start. */
function agreeingLines(log: Buffer, final: Buffer): number {
  return lineCount(log.subarray(0, commonPrefix(log, final)))
}

export async function explore(w: WorkloadResult, o: ExploreOptions): Promise<ExploreReport> {
  const ops = readTrace(w.traceDir)
  const model = buildModel(w.root, ops)
  const { expected, problems } = expectations(w)
  const report: ExploreReport = {
    ops: ops.length,
    crashPoints: 0,
    states: 0,
    distinct: 0,
    replayed: 0,
    cut: 0,
    checksummed: 0,
    rescued: 0,
    agentLogChecked: 0,
    failures: [],
    failedOps: Object.fromEntries(model.failures),
    strays: model.strays,
  }
  problems.push(...unrecorded(model, ops.length))
  if (problems.length > 0) {
    report.failures.push({ k: ops.length, state: 'the uncrashed run', problems })
    return report
  }
  const rand = mulberry32(o.seed ^ 0x5eed)
  const base = new DurableBase(model)
  const scratch = o.scratch ?? scratchRoot()
  const seen = new Map<string, { outcome: Outcome; before: Map<string, number> }>()
  // A reservoir of states that needed the journal, for the real AgentLog.
  const sample: Array<{ state: CrashState; rec: Recovered }> = []
  let replayedSeen = 0
  let n = 0
  const fail = (k: number, state: string, bad: string[]) => {
    report.failures.push({ k, state: state.length > 600 ? `${state.slice(0, 600)}…` : state, problems: bad })
    return report.failures.length >= (o.maxFailures ?? 5)
  }
  try {
    const points: number[] = []
    for (let k = 0; k < ops.length; k += o.stride ?? 1) points.push(k)
    points.push(ops.length)
    for (const k of points) {
      report.crashPoints++
      if (process.env.NOA_CRASH_DEBUG && k % 100 === 0) {
        console.error(`crash point ${k}/${ops.length}: ${report.distinct} distinct states`)
      }
      const choices: StateChoice[] = ['none', 'all', 'reordered']
      for (let r = 0; r < o.randomPerPoint; r++) choices.push('random')
      for (const choice of choices) {
        const state = stateAt(model, base, k, choice, rand)
        report.states++
        let done = seen.get(state.key)
        if (!done) {
          const dir = join(scratch, `s${n++}`)
          materialize(model, state, dir)
          const before = new Map<string, number>()
          for (const ws of w.workspaces) {
            const f = state.files.get(join(w.root, 'agent-logs', `${ws}.log`))
            before.set(ws, f ? agreeingLines(f.data, expected.final.get(ws) as Buffer) : 0)
          }
          const rec = recoverState(
            dir,
            w.workspaces,
            o.modules,
            expected.files.map((f) => f.path),
          )
          rmSync(dir, { recursive: true, force: true })
          done = { outcome: outcomeOf(expected, rec), before }
          seen.set(state.key, done)
          report.distinct++
          if (rec.replayed > 0) {
            report.replayed++
            replayedSeen++
            const room = o.agentLogChecks ?? 0
            if (sample.length < room) sample.push({ state, rec })
            else if (room > 0 && rand() < room / replayedSeen)
              sample[Math.floor(rand() * room)] = { state, rec }
          }
          if (rec.cut > 0) report.cut++
          if (rec.checksummed > 0) report.checksummed++
        }
        const bad = checkState(expected, k, done.outcome)
        if (bad.length > 0) {
          if (fail(k, `${choice}: ${state.key}`, bad)) return report
        } else if (rescuedAck(expected, k, done.before)) {
          report.rescued++
        }
      }
    }
    for (const { state, rec } of sample) {
      const bad = await checkWithAgentLog(model, state, rec, w.workspaces, join(scratch, `a${n++}`), o.dist)
      report.agentLogChecked++
      if (bad.length > 0 && fail(state.k, `AgentLog: ${state.key}`, bad)) return report
    }
  } finally {
    if (!o.scratch) rmSync(scratch, { recursive: true, force: true })
  }
  return report
}

/**
 * The files the root's object logs hold, by path: read here with a parser of this test's own
 * (the format of engine/object-log.ts: a header line, then records of magic 'NOL1', data length,
 * name length, flags, CRC32C of name and data), so the engine's reader is not checked by itself.
 * Each log's valid prefix only: the first record that is not whole ends it.
 */
function objectLogFiles(root: string): Map<string, Buffer> {
  const out = new Map<string, Buffer>()
  const dir = join(root, 'object-logs')
  if (!existsSync(dir)) return out
  const HEADER = 'noa-object-log 1\n'
  for (const name of readdirSync(dir)) {
    if (!/^[0-9a-f]{16}\.olog$/.test(name)) continue
    const b = readFileSync(join(dir, name))
    if (b.subarray(0, HEADER.length).toString('latin1') !== HEADER) continue
    let at = HEADER.length
    while (at + 16 <= b.length) {
      if (b.readUInt32LE(at) !== 0x314c4f4e || b.readUInt16LE(at + 10) !== 0) break
      const len = b.readUInt32LE(at + 4)
      const nameLen = b.readUInt16LE(at + 8)
      const end = at + 16 + nameLen + len
      if (end > b.length) break
      if (crc32c(b.subarray(at + 16, end)) >>> 0 !== b.readUInt32LE(at + 12)) break
      const path = b.toString('utf8', at + 16, at + 16 + nameLen)
      if (!out.has(path)) out.set(path, Buffer.from(b.subarray(at + 16 + nameLen, end)))
      at = end
    }
  }
  return out
}

/** Every file below `dir`, recursively (folders left out). */
function filesBelow(dir: string): string[] {
  if (!existsSync(dir)) return []
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? filesBelow(join(dir, e.name)) : [join(dir, e.name)],
  )
}

/**
 * The trace must account for the whole root: all of its operations applied give exactly the
 * files on disk at the end of the run, byte for byte. A write that went around the io seam
 * (and so around the explorer) shows here.
 */
function unrecorded(model: Model, n: number): string[] {
  const end = stateAt(model, new DurableBase(model), n, 'all', () => 0)
  const problems: string[] = []
  const onDisk = filesBelow(model.root)
  for (const path of onDisk) {
    const f = end.files.get(path)
    if (!f) problems.push(`${path} is on disk but the trace never created it`)
    else if (!f.data.equals(readFileSync(path))) problems.push(`${path} differs from its recorded writes`)
  }
  for (const path of end.files.keys()) {
    if (!onDisk.includes(path)) problems.push(`${path} is in the trace but not on disk`)
  }
  return problems
}

/** Whether the .log, before recovery, lacked an entry acknowledged by k (so replay was needed). */
function rescuedAck(ex: Expected, k: number, before: Map<string, number>): boolean {
  for (const [ws, list] of ex.acked) {
    let need = 0
    for (const a of list) {
      if (a.c > k) break
      if (a.seq > need) need = a.seq
    }
    if (need > (before.get(ws) ?? 0)) return true
  }
  return false
}

/**
 * The same state opened by a real AgentLog (one worker, the default io): it replays the dead
 * journal at open, recovers each workspace, verifies it, appends one entry after it and closes.
 * Its logs must be the ones the direct recovery gave, plus that entry, and nothing else is left.
 */
async function checkWithAgentLog(
  model: Model,
  state: CrashState,
  direct: Recovered,
  workspaces: readonly string[],
  dir: string,
  dist = DIST,
): Promise<string[]> {
  const { AgentLog } = (await import(pathToFileURL(join(dist, 'src/index.js')).href)) as typeof Engine
  const problems: string[] = []
  materialize(model, state, dir)
  try {
    const log = await AgentLog.open({ root: dir, workers: 1 })
    try {
      for (const ws of workspaces) {
        const expected = direct.logs.get(ws) as Buffer
        const opened = await log.openWorkspace(ws)
        if (opened.lastSeq !== lineCount(expected)) {
          problems.push(
            `AgentLog opened ${ws} at seq ${opened.lastSeq}, the direct recovery has ${lineCount(expected)}`,
          )
        }
        const v = await log.verify(ws)
        if (!v.ok) problems.push(`AgentLog: verify ${ws}: ${v.problem?.reason}`)
        const ack = await log.append(ws, { op: 'write', path: 'after/crash', blob: BLOB })
        if (ack.seq !== lineCount(expected) + 1) problems.push(`AgentLog: ${ws} continued at seq ${ack.seq}`)
      }
    } finally {
      await log.close()
    }
    for (const ws of workspaces) {
      const got = readFileSync(join(dir, 'agent-logs', `${ws}.log`))
      const expected = direct.logs.get(ws) as Buffer
      if (!got.subarray(0, expected.length).equals(expected) || lineCount(got) !== lineCount(expected) + 1) {
        problems.push(`AgentLog: ${ws}.log differs from the direct recovery's`)
      }
    }
    const jdir = join(dir, 'journal')
    const left = existsSync(jdir) ? readdirSync(jdir) : []
    if (left.length > 0) problems.push(`AgentLog: ${left.join(', ')} left in journal/ after a clean close`)
  } catch (err) {
    problems.push(`AgentLog: ${(err as { code?: string }).code ?? ''} ${(err as Error).message}`)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
  return problems
}

/**
 * How a seed's workload runs the pool's jobs, in turn: at once; late and out of order; with
 * checkpoint and atomic-part fdatasyncs slow (journals fill before checkpoints free them, and
 * rounds wait for space); both.
 */
export function seedMode(seed: number): {
  deferMs: number
  slowSyncMs: number
  syncfsMin?: number
  laneQuietMs?: number
} {
  const m = seed % 4
  return {
    // The odd seeds from 7 on move workspaces between the caller's thread (the lone lane) and
    // the workers whenever the workload pauses for 2 ms; seeds 1-6 (the mutants' seeds) do not.
    ...(seed > 6 && seed % 2 === 1 ? { laneQuietMs: 2 } : {}),
    deferMs: m === 1 || m === 3 ? 3 : 0,
    slowSyncMs: m === 2 || m === 3 ? 25 : 0,
    // Seeds 4-7 of every 8 make their logs durable with a syncfs wherever one would be used: a
    // bit of its own, so that each of the four modes above runs both with and without (a syncfs
    // makes every file durable, the other owners' included, which would hide what the slow
    // syncs of seeds 2 and 3 are there to find).
    ...(seed % 8 >= 4 ? { syncfsMin: 1 } : {}),
  }
}

/** A fresh pair of folders for one workload: its root and its trace. */
export function workloadDirs(base: string, seed: number): { root: string; traceDir: string } {
  const root = join(base, `root-${seed}`)
  const traceDir = join(base, `trace-${seed}`)
  mkdirSync(root, { recursive: true })
  mkdirSync(traceDir, { recursive: true })
  return { root, traceDir }
}

type Log = Engine.AgentLog

/** Workspace names owned by different workers of `log`, the committing worker's first. */
function acrossWorkers(log: Log): [string, string] {
  const internals = log as unknown as { ownerOf(ws: string): unknown; owners: unknown[] }
  const by = new Map<number, string>()
  for (let i = 0; by.size < 2; i++)
    by.set(internals.owners.indexOf(internals.ownerOf(`atom${i}`)), `atom${i}`)
  return [by.get(0) as string, by.get(1) as string]
}

/**
 * One appendAtomic batch across two workers (`a` commits it in its journal, `b` writes its part
 * to its own log), every ack stamped.
 */
export async function atomicAcrossWorkers(
  log: Log,
  a: string,
  b: string,
  rec: ReturnType<typeof recording>,
): Promise<void> {
  const batch = {
    [a]: [{ op: 'write' as const, path: `atomic/b0/${a}/0`, blob: BLOB }],
    [b]: [0, 1].map((k) => ({ op: 'write' as const, path: `atomic/b0/${b}/${k}`, blob: BLOB })),
  }
  const acks = await log.appendAtomic(batch)
  for (const [ws, list] of Object.entries(acks)) {
    list.forEach((ack, k) => {
      rec.stamp(ws, ack.seq, batch[ws]?.[k]?.path as string)
    })
  }
}

/**
 * Races the random workloads found, made to happen every time: a recorded AgentLog (of `dist`,
 * a mutant's copy or the build) with two workers whose journals are both ready runs `during`
 * on two workspaces owned by different workers, is closed, and its trace explored.
 */
export async function atomicScenario(
  extra: Record<string, unknown>,
  during: (log: Log, a: string, b: string, rec: ReturnType<typeof recording>) => Promise<void>,
  dist = DIST,
): Promise<{ ops: TraceOp[]; report: ExploreReport; a: string; b: string }> {
  const { AgentLog } = (await import(pathToFileURL(join(dist, 'src/index.js')).href)) as typeof Engine
  const base = scratchRoot()
  const { root, traceDir } = workloadDirs(base, 0)
  const rec = recording(traceDir, extra)
  try {
    const log = await AgentLog.open({
      root,
      workers: 2,
      journalSize: 256 << 10,
      ioModule: rec.ioModule,
      ioOptions: rec.ioOptions,
    })
    const [a, b] = acrossWorkers(log)
    try {
      // Two commits per worker straight to the files, then each allocates its journal.
      for (const k of [0, 1]) {
        await Promise.all(
          [a, b].map(async (ws) => {
            const path = `${ws}/warm${k}`
            rec.stamp(ws, (await log.append(ws, { op: 'write', path, blob: BLOB })).seq, path)
          }),
        )
      }
      for (let i = 0; i < 500; i++) {
        if ((await log.status()).every((s) => s.journal?.state === 'ready')) break
        await new Promise((r) => setTimeout(r, 10))
      }
      await during(log, a, b, rec)
    } finally {
      await log.close()
    }
    const w: WorkloadResult = {
      seed: 0,
      root,
      traceDir,
      acks: rec.acks,
      fileAcks: [],
      errors: [],
      stats: {
        checkpoints: 0,
        wraps: 0,
        rounds: 0,
        directCommits: 0,
        atomics: 1,
        spaceWaits: 0,
        logSyncfs: 0,
      },
      workspaces: [a, b],
    }
    const ops = readTrace(traceDir)
    const report = await explore(w, {
      seed: 0,
      randomPerPoint: 4,
      modules: await recoveryModules(dist),
      dist,
    })
    return { ops, report, a, b }
  } finally {
    rmSync(base, { recursive: true, force: true })
  }
}
