/**
 * Garbage collection of the object store: mark what the logs reach (reach.ts), sweep the rest.
 *
 * Safe beside live writers in other processes, as git's gc is: an object younger than the grace
 * period (default one hour) is never removed, so objects a snapshot, a blob upload or a mirror
 * has just written survive until the entry naming them is in a log; a writer that finds an
 * object already stored freshens its mtime (objects.ts), which restarts its grace. Logs that grew
 * while gc ran are read again before each directory of the store is swept, so an entry appended
 * meanwhile keeps what it names. Removing an object is one unlink and only unreachable objects
 * are removed, so gc killed at any point leaves a store in which every reachable object is
 * whole. Temp files left by interrupted writers (`.obj-*.tmp`, `.blob-*.tmp`) go too, once they
 * are older than the grace period. A dry run (the default) removes nothing and reports the same.
 *
 * Object logs (engine/object-log.ts) are collected a log at a time, only once its writer is gone
 * (its flock is free) and it was last written longer ago than the grace period: a log none of
 * whose objects is reachable is removed; one that holds some unreachable objects is written again
 * with only the reachable ones (a temp file, fdatasynced, renamed under a new name, the folder
 * fsynced) before the old one is removed; one whose objects are all reachable is kept as it is.
 * A gc killed between the two leaves both logs (the same objects twice); a temp file it left
 * goes once it is older than the grace period.
 */
import { randomBytes } from 'node:crypto'
import {
  closeSync,
  constants,
  fdatasyncSync,
  lstatSync,
  openSync,
  readdirSync,
  renameSync,
  statSync,
  unlinkSync,
  writeSync,
} from 'node:fs'
import { join } from 'node:path'
import { fsyncDir } from '../engine/atomic.js'
import { Errors, type NoaError } from '../engine/errors.js'
import { openFileSync, READ } from '../engine/files.js'
import { logPath, workspaceNames } from '../engine/logs.js'
import { loadNative } from '../engine/native.js'
import {
  encodeObjectRecords,
  fdReader,
  OBJECT_LOG_DIR,
  OBJECT_LOG_HEADER,
  OBJECT_LOG_NAME_RE,
  OBJECT_LOG_SUFFIX,
  type ObjectRecord,
  scanObjectLog,
} from '../engine/object-log.js'
import { checkOptionKeys } from '../engine/options.js'
import { readEntryBatches } from '../engine/reader.js'
import { objectLogIndex } from './object-logs.js'
import { MarkSet, type ReachSink, snapshotObjects, walkWorkspace } from './reach.js'
import { lastSeqOf } from './records.js'
import type { SnapshotView } from './view.js'

export const DEFAULT_GRACE_MS = 60 * 60 * 1000

export interface GcOptions {
  /** Report what would be removed and remove nothing (default true). */
  dryRun?: boolean
  /** Never remove an object or temp file modified less than this long ago (default one hour). */
  graceMs?: number
  /** Each object or temp file removed (or, in a dry run, that would be). */
  onRemove?: (item: GcItem) => void
  onProgress?: (p: GcProgress) => void
}

const GC_KEYS = new Set(['dryRun', 'graceMs', 'onRemove', 'onProgress'])

export interface GcItem {
  kind: 'object' | 'temp'
  /** Object id (64 hex) or temp file name. */
  name: string
  path: string
  bytes: number
}

export interface GcProgress {
  phase: 'mark' | 'sweep'
  workspaces: number
  /** Objects found reachable so far. */
  marked: number
  /** Store directories swept so far, of 256. */
  dirs: number
  removed: number
}

export interface GcResult {
  dryRun: boolean
  graceMs: number
  /** Object files looked at. */
  objects: number
  /** Of those, reachable from some log. */
  reachable: number
  /** Unreachable but younger than the grace period: kept. */
  young: number
  /** Unreachable objects removed (dry run: that would be). */
  removed: number
  removedBytes: number
  /** Temp files removed (dry run: that would be). */
  temps: number
  tempBytes: number
  /** Reachable objects that are missing (noa verify --objects names them). */
  missing: number
  /** Object logs looked at. */
  logs: number
  /** Removed: none of their objects was reachable (dry run: would be). */
  logsRemoved: number
  /** Written again with only their reachable objects (dry run: would be). */
  logsRewritten: number
  /** Unreachable objects those logs held, and the bytes removing and rewriting freed. */
  logObjectsRemoved: number
  logBytes: number
  /** Kept as they are: a live writer's, written within the grace period, or all reachable. */
  logsKept: number
}

const SHARD_RE = /^[0-9a-f]{2}$/
const REST_RE = /^[0-9a-f]{62}$/
const TEMP_RE = /^\.(?:obj|blob|tmp)-[0-9a-f]+\.tmp$|^\..*\.tmp$/

export async function collectGarbage(engine: SnapshotView, options: GcOptions = {}): Promise<GcResult> {
  checkOptionKeys(options, GC_KEYS, 'gc')
  const dryRun = options.dryRun ?? true
  const graceMs = options.graceMs ?? DEFAULT_GRACE_MS
  if (typeof dryRun !== 'boolean') throw optionError('dryRun', 'must be a boolean', dryRun)
  if (typeof graceMs !== 'number' || !Number.isFinite(graceMs) || graceMs < 0) {
    throw optionError('graceMs', 'must be a number of milliseconds >= 0', graceMs)
  }
  const root = engine.root
  const marks = new MarkSet()
  let missing = 0
  const progress: GcProgress = { phase: 'mark', workspaces: 0, marked: 0, dirs: 0, removed: 0 }
  let lastReport = 0
  const report = (force = false) => {
    if (!options.onProgress) return
    const now = performance.now()
    if (!force && now - lastReport < 100) return
    lastReport = now
    progress.marked = marks.size
    options.onProgress({ ...progress })
  }
  const sink: ReachSink = {
    object: (_kind, id) => {
      const fresh = marks.add(id)
      if (fresh && (marks.size & 0xfff) === 0) report()
      return fresh
    },
    missing: () => {
      missing++
    },
  }

  // Mark. What each log held when read; read again before each sweep step (see refresh).
  const seen = new Map<string, { size: number; lastSeq: number }>()
  const logSize = (ws: string) => statSync(logPath(root, ws), { throwIfNoEntry: false })?.size ?? -1
  for (const ws of workspaceNames(root)) {
    seen.set(ws, { size: logSize(ws), lastSeq: lastSeqOf(root, ws) })
    await walkWorkspace(engine, ws, sink)
    progress.workspaces++
    report()
  }
  const refresh = async () => {
    for (const ws of workspaceNames(root)) {
      const was = seen.get(ws)
      const size = logSize(ws)
      if (was && was.size === size) continue
      const lastSeq = lastSeqOf(root, ws)
      if (!was) {
        await walkWorkspace(engine, ws, sink)
      } else {
        for await (const batch of readEntryBatches(logPath(root, ws), {
          fromSeq: was.lastSeq + 1,
          validate: false,
        })) {
          for (const e of batch) {
            if (e.op === 'write') sink.object('blob', e.blob, { workspace: ws, seq: e.seq })
            else if (e.op === 'snapshot') {
              const record = await engine.getSnapshot(e.snapshot_id).catch(() => null)
              if (record) await snapshotObjects(engine, record, sink, { workspace: ws, seq: e.seq }, true)
            }
          }
        }
      }
      seen.set(ws, { size, lastSeq })
    }
  }

  // Sweep, one store directory at a time.
  progress.phase = 'sweep'
  const result: GcResult = {
    dryRun,
    graceMs,
    objects: 0,
    reachable: 0,
    young: 0,
    removed: 0,
    removedBytes: 0,
    temps: 0,
    tempBytes: 0,
    missing,
    logs: 0,
    logsRemoved: 0,
    logsRewritten: 0,
    logObjectsRemoved: 0,
    logBytes: 0,
    logsKept: 0,
  }
  const now = Date.now()
  const dir = engine.store.dir
  let top: string[]
  try {
    top = readdirSync(dir).sort()
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') top = []
    else throw err
  }
  const sweepTemp = (folder: string, name: string) => {
    const path = join(folder, name)
    const st = lstatSync(path, { throwIfNoEntry: false })
    if (!st?.isFile() || now - st.mtimeMs < graceMs) return
    remove({ kind: 'temp', name, path, bytes: st.size })
  }
  const remove = (item: GcItem) => {
    if (!dryRun) {
      if (item.kind === 'object') engine.store.forget(item.name)
      try {
        unlinkSync(item.path)
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return // another gc took it
        throw err
      }
    }
    if (item.kind === 'temp') {
      result.temps++
      result.tempBytes += item.bytes
    } else {
      result.removed++
      result.removedBytes += item.bytes
    }
    progress.removed++
    options.onRemove?.(item)
  }
  for (const name of top) {
    if (TEMP_RE.test(name)) sweepTemp(dir, name)
  }
  for (const shard of top) {
    if (!SHARD_RE.test(shard)) continue
    const folder = join(dir, shard)
    let names: string[]
    try {
      names = readdirSync(folder)
    } catch (err) {
      if (
        (err as NodeJS.ErrnoException).code === 'ENOTDIR' ||
        (err as NodeJS.ErrnoException).code === 'ENOENT'
      )
        continue
      throw err
    }
    await refresh()
    for (const name of names) {
      if (!REST_RE.test(name)) {
        if (TEMP_RE.test(name)) sweepTemp(folder, name)
        continue
      }
      result.objects++
      const id = shard + name
      if (marks.has(id)) {
        result.reachable++
        continue
      }
      const path = join(folder, name)
      const st = lstatSync(path, { throwIfNoEntry: false })
      if (!st?.isFile()) continue
      if (now - st.mtimeMs < graceMs) {
        result.young++
        continue
      }
      remove({ kind: 'object', name: id, path, bytes: st.size })
    }
    progress.dirs++
    report()
  }
  await refresh()
  await collectObjectLogs(engine, marks, result, now, graceMs, dryRun)
  result.missing = missing
  report(true)
  return result
}

/** The object-log part of a sweep (see the top of this file). */
async function collectObjectLogs(
  engine: SnapshotView,
  marks: MarkSet,
  result: GcResult,
  now: number,
  graceMs: number,
  dryRun: boolean,
): Promise<void> {
  const dir = join(engine.root, OBJECT_LOG_DIR)
  // lstat: a symlink where the folder should be is not followed (no log is read through it).
  if (!lstatSync(dir, { throwIfNoEntry: false })?.isDirectory()) return
  const native = loadNative()
  for (const name of readdirSync(dir).sort()) {
    if (LOG_TEMP_RE.test(name)) {
      // Left by a gc killed while it rewrote a log.
      const temp = join(dir, name)
      const t = lstatSync(temp, { throwIfNoEntry: false })
      if (t?.isFile() && now - t.mtimeMs >= graceMs && !dryRun) unlinkSync(temp)
      continue
    }
    if (!OBJECT_LOG_NAME_RE.test(name)) continue
    const path = join(dir, name)
    const st = lstatSync(path, { throwIfNoEntry: false })
    if (!st?.isFile()) continue
    result.logs++
    if (now - st.mtimeMs < graceMs) {
      result.logsKept++
      continue
    }
    let fd: number
    try {
      fd = openFileSync(path, READ, { what: 'object log' })
    } catch {
      continue // gone since (another gc)
    }
    try {
      try {
        native.flock(fd, true, true)
      } catch {
        result.logsKept++ // its writer is alive
        continue
      }
      const records: ObjectRecord[] = []
      const readAt = fdReader(fd)
      const head = Buffer.alloc(OBJECT_LOG_HEADER.length)
      if (readAt(head, head.length, 0) === head.length && head.equals(OBJECT_LOG_HEADER)) {
        scanObjectLog(readAt, head.length, st.size, (r) => records.push(r))
      }
      const keep: ObjectRecord[] = []
      const kept = new Set<string>()
      for (const r of records) {
        const m = OBJECT_NAME_RE.exec(r.name)
        const id = m === null ? '' : `${m[1]}${m[2]}`
        if (m === null || !marks.has(id) || kept.has(id)) continue
        kept.add(id)
        keep.push(r)
      }
      if (keep.length === records.length) {
        result.logsKept++ // nothing in it to free
        continue
      }
      let rewritten = 0
      if (keep.length > 0) {
        const files = keep.map((r) => {
          const data = Buffer.allocUnsafe(r.length)
          if (readAt(data, r.length, r.offset) < r.length) throw new Error(`${path} shrank while gc read it`)
          return { path: r.name, data }
        })
        const bytes = Buffer.concat([OBJECT_LOG_HEADER, encodeObjectRecords(files)])
        rewritten = bytes.length
        if (!dryRun) writeLogDurably(dir, bytes)
        result.logsRewritten++
      } else {
        result.logsRemoved++
      }
      if (!dryRun) {
        unlinkSync(path)
        objectLogIndex(engine.root).forget(path)
        fsyncDir(dir)
      }
      result.logObjectsRemoved += records.length - keep.length
      result.logBytes += st.size - rewritten
    } finally {
      closeSync(fd)
    }
  }
}

const OBJECT_NAME_RE = /^objects\/([0-9a-f]{2})\/([0-9a-f]{62})$/
const LOG_TEMP_RE = /^[0-9a-f]{16}\.olog\.tmp$/

/** A new object log holding `bytes`: a temp file fdatasynced, renamed into place, the folder fsynced. */
function writeLogDurably(dir: string, bytes: Buffer): void {
  const name = randomBytes(8).toString('hex')
  const temp = join(dir, `${name}${OBJECT_LOG_SUFFIX}.tmp`)
  const fd = openSync(
    temp,
    constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
    0o444,
  )
  try {
    let off = 0
    while (off < bytes.length) off += writeSync(fd, bytes, off, bytes.length - off)
    fdatasyncSync(fd)
  } catch (err) {
    closeSync(fd)
    unlinkSync(temp)
    throw err
  }
  closeSync(fd)
  renameSync(temp, join(dir, `${name}${OBJECT_LOG_SUFFIX}`))
  fsyncDir(dir)
}

function optionError(name: string, rule: string, value: unknown): NoaError {
  return Errors.BAD_OPTION(`gc option ${name} ${rule}, got ${JSON.stringify(value)}`, {
    field: name,
  })
}

/** `90s`, `30m`, `1h`, `2d`, `500ms`, or a bare number of seconds, as milliseconds. */
export function parseDuration(text: string, what = 'duration'): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)?$/.exec(text.trim())
  if (!m) {
    throw Errors.BAD_ARGUMENT(
      `${what} must be a number with a unit (ms, s, m, h, d, w), e.g. 1h or 30m, got ${JSON.stringify(text)}`,
    )
  }
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 }[
    m[2] ?? 's'
  ] as number
  return Number(m[1]) * unit
}
