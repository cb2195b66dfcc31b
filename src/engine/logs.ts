/**
 * Where logs live and the read-only operations on them. None of these needs the owner workers,
 * so the CLI's read commands (log, verify, workspaces) never start a pool.
 */
import { closeSync, fstatSync, lstatSync, readdirSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { byteStart, isCompactTemp, readBase } from './base.js'
import { checkWorkspace, type Entry, isWorkspaceName, parseCounters, WORKSPACE_RE } from './entry.js'
import { Errors } from './errors.js'
import { checkDirsBelow, checkRoot, kindOf, openFileSync, READ, statFile } from './files.js'
import { recoverJournalsLocked, refuseIfQuarantined, withRootLock } from './journal-recovery.js'
import { readThroughJournals } from './journal-view.js'
import { loadNative } from './native.js'

function kindAt(file: string): string {
  try {
    return kindOf(lstatSync(file))
  } catch {
    return 'file that vanished'
  }
}

import { withPath } from './errors.js'
import {
  type EntryReadOptions,
  findLastNewline,
  readAt,
  readChunks,
  readEntries,
  readEntryBatches,
  seekSeq,
} from './reader.js'
import {
  countEntries,
  countersOf,
  type DamagedBlock,
  inspectTail,
  type VerifyOptions,
  type VerifyReport,
  verifyLog,
} from './recovery.js'
import { damagedBlocks, readSidecar, sidecarPath } from './sidecar.js'

export const DEFAULT_ROOT = './.noa'

export function resolveRoot(root: string | undefined): string {
  return resolve(root ?? process.env.NOA_ROOT ?? DEFAULT_ROOT)
}

export function logDirOf(root: string): string {
  return join(root, 'agent-logs')
}

/** The log file of a workspace; the name is checked first, so it cannot leave the log folder. */
export function logPath(root: string, workspace: string): string {
  return join(logDirOf(root), `${checkWorkspace(workspace)}.log`)
}

/**
 * The log of a workspace that must exist: the root must be a folder, `agent-logs/` a real folder
 * and the log a regular file (a symlink, FIFO or folder planted there is refused, not followed).
 */
export function existingLog(root: string, workspace: string): string {
  const file = logPath(root, workspace)
  checkRoot(root, true)
  checkDirsBelow(root, logDirOf(root))
  if (statFile(file, 'workspace log') === undefined) {
    throw Errors.NOT_FOUND(`workspace ${workspace} has no log (${file})`, { workspace, file })
  }
  return file
}

export interface WorkspaceInfo {
  workspace: string
  file: string
  entries: number
  bytes: number
  lastSeq: number
  lastTs: number
  /** Bytes of a partial last line (torn write) waiting for recovery. */
  tornTailBytes: number
}

/** Something in `agent-logs/` that is not a workspace log noa can use. */
export interface LogProblem {
  file: string
  code: string
  message: string
}

export interface LogDirScan {
  /** Workspaces whose log is a regular file, sorted by name. */
  workspaces: string[]
  /** Every other entry of `agent-logs/`: not a regular file, or not named `<workspace>.log`. */
  problems: LogProblem[]
}

/**
 * What `agent-logs/` holds: the workspaces with a regular log file, and everything else reported
 * (a symlink, FIFO, socket or folder where a log should be; a file that is not `<name>.log`),
 * so that a whole-root command never says "fine" about a file it skipped. A missing root is an
 * error; a root without `agent-logs/` has no workspaces.
 */
export function scanLogDir(root: string): LogDirScan {
  checkRoot(root, true)
  const dir = logDirOf(root)
  if (checkDirsBelow(root, dir) !== null) return { workspaces: [], problems: [] }
  const workspaces: string[] = []
  const problems: LogProblem[] = []
  for (const d of readdirSync(dir, { withFileTypes: true })) {
    if (isCompactTemp(d.name) && d.isFile()) continue
    const file = join(dir, d.name)
    const name = d.name.endsWith('.log') ? d.name.slice(0, -4) : null
    if (name === null || !isWorkspaceName(name)) {
      problems.push({
        file,
        code: 'NOA_BAD_WORKSPACE',
        message: `${file} is not a workspace log (logs are named <workspace>.log, names match ${WORKSPACE_RE.source})`,
      })
    } else if (d.isFile()) {
      workspaces.push(name)
    } else {
      const kind = d.isSymbolicLink() ? 'symlink' : kindAt(file)
      problems.push({
        file,
        code: 'NOA_NOT_REGULAR_FILE',
        message: `${file} is a ${kind}, not a regular file: workspace ${name} cannot be used (noa does not follow symlinks inside its root)`,
      })
    }
  }
  workspaces.sort()
  return { workspaces, problems }
}

/** Workspaces with a regular log file under root, sorted by name (see scanLogDir for the rest). */
export function workspaceNames(root: string): string[] {
  return scanLogDir(root).workspaces
}

export async function workspaceInfo(root: string, workspace: string): Promise<WorkspaceInfo> {
  const file = existingLog(root, workspace)
  const fd = openFileSync(file, READ, { what: 'workspace log' })
  let tail: ReturnType<typeof inspectTail>
  try {
    tail = inspectTail(fd)
  } finally {
    closeSync(fd)
  }
  const { lastSeq, lastTs } = countersOf(file, tail)
  const { entries, bytes } = await countEntries(file)
  // A compacted log's base record is a line, not an entry.
  const based = readBase(file) === null ? 0 : 1
  return {
    workspace,
    file,
    entries: entries - based,
    bytes,
    lastSeq,
    lastTs,
    tornTailBytes: tail.size - tail.validLength,
  }
}

/** A whole-root listing that goes on past a bad log: each failure reported with its file. */
export interface WorkspaceScan {
  workspaces: WorkspaceInfo[]
  problems: LogProblem[]
}

export interface ListOptions {
  /** Called before each log is counted, with how many were before it and how many there are. */
  onProgress?: (done: number, total: number, workspace: string) => void
}

export async function scanWorkspaces(root: string, options: ListOptions = {}): Promise<WorkspaceScan> {
  const { workspaces: names, problems } = scanLogDir(root)
  readThroughJournals(root)
  const workspaces: WorkspaceInfo[] = []
  for (const [i, ws] of names.entries()) {
    options.onProgress?.(i, names.length, ws)
    try {
      workspaces.push(await workspaceInfo(root, ws))
    } catch (err) {
      problems.push(problemOf(err, logPath(root, ws)))
    }
  }
  problems.sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : 0))
  return { workspaces, problems }
}

export function problemOf(err: unknown, file: string): LogProblem {
  const e = err as { code?: unknown; message?: unknown }
  return {
    file,
    code: typeof e?.code === 'string' ? e.code : 'ERROR',
    message: typeof e?.message === 'string' ? e.message : String(err),
  }
}

/**
 * Every workspace of the root. A log that cannot be listed (corrupt, not a regular file) is an
 * error naming it, never skipped; `scanWorkspaces` lists the healthy ones and reports the rest,
 * files in `agent-logs/` that are not named like logs included.
 */
export async function listWorkspaces(root: string, options: ListOptions = {}): Promise<WorkspaceInfo[]> {
  const { workspaces, problems: all } = await scanWorkspaces(root, options)
  // A stray file with another name is reported by scanWorkspaces but is no workspace of ours.
  const problems = all.filter((p) => p.code !== 'NOA_BAD_WORKSPACE')
  const first = problems[0]
  if (first) {
    const message =
      problems.length === 1 ? first.message : `${first.message} (and ${problems.length - 1} more problems)`
    throw first.code === 'NOA_NOT_REGULAR_FILE'
      ? Errors.NOT_REGULAR_FILE(message, { file: first.file, problems })
      : Errors.CORRUPT_LOG(message, { file: first.file, problems })
  }
  return workspaces
}

// Generators, so that a missing workspace surfaces when iteration starts, like any read error.
export async function* readWorkspace(
  root: string,
  workspace: string,
  options: EntryReadOptions = {},
): AsyncGenerator<Entry> {
  const file = existingLog(root, workspace)
  readThroughJournals(root)
  yield* readEntries(file, options)
}

export async function* readWorkspaceBatches(
  root: string,
  workspace: string,
  options: EntryReadOptions = {},
): AsyncGenerator<Entry[]> {
  const file = existingLog(root, workspace)
  readThroughJournals(root)
  yield* readEntryBatches(file, options)
}

/** The stored bytes from the line holding `fromSeq` on, exactly as on disk (complete lines only). */
export async function* readWorkspaceBytes(
  root: string,
  workspace: string,
  fromSeq = 1,
): AsyncGenerator<Buffer> {
  const file = existingLog(root, workspace)
  readThroughJournals(root)
  yield* readChunks(file, { start: byteStart(file, fromSeq, fromSeq > 1 ? seekSeq(file, fromSeq) : 0) })
}

export async function verifyWorkspace(
  root: string,
  workspace: string,
  options: VerifyOptions = {},
): Promise<VerifyReport> {
  const file = existingLog(root, workspace)
  readThroughJournals(root)
  const report = await verifyLog(file, options)
  return checkSidecar(root, workspace, file, report)
}

/**
 * The checksum sidecar's view of a log: each recorded block's bytes against its CRC32C. A
 * damaged block (a flipped byte that is still valid JSON, say) makes the report not ok, naming
 * its byte range and seq range; a log without a usable sidecar is verified by its lines alone.
 */
export function checkSidecar(
  root: string,
  workspace: string,
  file: string,
  report: VerifyReport,
): VerifyReport {
  const fd = openFileSync(file, READ, { what: 'workspace log' })
  try {
    const st = fstatSync(fd, { bigint: true })
    const sidecar = readSidecar(sidecarPath(root, workspace), st.ino, Number(st.size))
    if (sidecar === null) return report
    const damaged = damagedBlocks(fd, sidecar.blocks).map((b) => ({
      offset: b.offset,
      length: b.length,
      firstSeq: b.firstSeq,
      lastSeq: b.firstSeq + b.entries - 1,
    }))
    report.checksummedBytes = sidecar.blocks.reduce((n, b) => n + b.length, 0)
    if (damaged.length === 0) return report
    report.damaged = damaged
    const first = damaged[0] as DamagedBlock
    const more = damaged.length > 1 ? ` (and ${damaged.length - 1} more damaged blocks)` : ''
    const reason = `damaged block: bytes ${first.offset}-${first.offset + first.length - 1}, seqs ${first.firstSeq}-${first.lastSeq} do not match their checksum${more}`
    if (report.ok) {
      report.ok = false
      report.problem = { line: 0, reason }
    } else if (report.problem) {
      report.problem.reason += `; ${reason}`
    }
    return report
  } finally {
    closeSync(fd)
  }
}

/** What recovering a workspace found and did. */
export interface RecoverReport {
  workspace: string
  file: string
  created: boolean
  /** Bytes of a partial last line that were cut. */
  truncatedBytes: number
  size: number
  lastSeq: number
  lastTs: number
}

/**
 * Recovery of one workspace without an owner: under the root lock, the journals of dead
 * processes are replayed, then the log is locked, a partial last line cut (ftruncate +
 * fdatasync) and its last seq and ts read. What opening a workspace in an owner does, for the
 * processes that only recover (the CLI's `recover`, a read-only tool): no worker is started.
 */
export function recoverLog(root: string, workspace: string): RecoverReport {
  const file = existingLog(root, workspace)
  const native = loadNative()
  return withRootLock(root, () => {
    recoverJournalsLocked(root)
    refuseIfQuarantined(root, workspace)
    let fd: number
    try {
      fd = native.openAppend(file, false, true)
    } catch (err) {
      const e = err as NodeJS.ErrnoException
      if (e.syscall === 'flock') {
        throw Errors.WORKSPACE_LOCKED(`workspace ${workspace} is locked by another writer (${file})`, {
          workspace,
          file,
        })
      }
      throw withPath(err, file)
    }
    try {
      const tail = inspectTail(fd)
      const { lastSeq, lastTs } = countersOf(file, tail)
      const truncatedBytes = tail.size - tail.validLength
      if (truncatedBytes > 0) {
        native.ftruncate(fd, tail.validLength)
        native.fdatasync(fd)
      }
      return { workspace, file, created: false, truncatedBytes, size: tail.validLength, lastSeq, lastTs }
    } finally {
      native.close(fd)
    }
  })
}

/**
 * Cuts a workspace's log just after entry `afterSeq` (replication's resync, which moved the
 * lines after it aside first): under the root lock, with the journals of dead processes
 * replayed and the log locked, as recovery cuts a torn tail (ftruncate, then fdatasync). A crash
 * leaves the log whole or cut, never in between. Refused with nothing changed when another
 * process holds the workspace (NOA_WORKSPACE_LOCKED), or when its last seq is no longer
 * `expectLast` (NOA_CONFLICT: someone appended since the caller looked).
 */
export function cutLogAfter(
  root: string,
  workspace: string,
  afterSeq: number,
  expectLast: number,
): { size: number; cutBytes: number } {
  const file = existingLog(root, workspace)
  const native = loadNative()
  return withRootLock(root, () => {
    recoverJournalsLocked(root)
    refuseIfQuarantined(root, workspace)
    let fd: number
    try {
      fd = native.openAppend(file, false, true)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).syscall === 'flock') {
        throw Errors.WORKSPACE_LOCKED(`workspace ${workspace} is locked by another writer (${file})`, {
          workspace,
          file,
        })
      }
      throw withPath(err, file)
    }
    try {
      const tail = inspectTail(fd)
      const { lastSeq } = countersOf(file, tail)
      if (lastSeq !== expectLast || tail.size !== tail.validLength) {
        throw Errors.CONFLICT(
          `workspace ${workspace} changed while it was being cut (its last seq is ${lastSeq}, not ${expectLast}); nothing was changed`,
          { workspace, file },
        )
      }
      const at = afterSeq === 0 ? 0 : seekSeq(file, afterSeq + 1)
      if (afterSeq > 0 && readBase(file)?.seq !== afterSeq) {
        let before = -1
        if (at > 0) {
          const prev = findLastNewline(fd, at - 1)
          const buf = Buffer.allocUnsafe(at - 1 - (prev + 1))
          readAt(fd, buf, prev + 1)
          before = parseCounters(buf.toString('utf8')).seq
        }
        if (before !== afterSeq)
          throw Errors.CONFLICT(`workspace ${workspace}: ${file} has no entry ${afterSeq} to cut after`, {
            workspace,
            file,
          })
      }
      native.ftruncate(fd, at)
      native.fdatasync(fd)
      return { size: at, cutBytes: tail.validLength - at }
    } finally {
      native.close(fd)
    }
  })
}
