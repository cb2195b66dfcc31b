/**
 * Where logs live and the read-only operations on them. None of these needs the owner workers,
 * so the CLI's read commands (log, verify, workspaces) never start a pool.
 */
import { closeSync, existsSync, openSync, readdirSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { checkWorkspace, type Entry, isWorkspaceName } from './entry.js'
import { NoaError } from './errors.js'
import { type EntryReadOptions, readChunks, readEntries, readEntryBatches, seekSeq } from './reader.js'
import { countEntries, countersOf, inspectTail, type VerifyReport, verifyLog } from './recovery.js'

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

export function existingLog(root: string, workspace: string): string {
  const file = logPath(root, workspace)
  if (!existsSync(file)) {
    throw new NoaError('NOA_NOT_FOUND', `workspace ${workspace} has no log (${file})`, { workspace, file })
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

/** Workspaces with a log under root, sorted by name. Files whose names are not workspace names are skipped. */
export function workspaceNames(root: string): string[] {
  const dir = logDirOf(root)
  if (!existsSync(dir)) return []
  return readdirSync(dir, { withFileTypes: true })
    .filter((d) => d.isFile() && d.name.endsWith('.log') && isWorkspaceName(d.name.slice(0, -4)))
    .map((d) => d.name.slice(0, -4))
    .sort()
}

export async function workspaceInfo(root: string, workspace: string): Promise<WorkspaceInfo> {
  const file = existingLog(root, workspace)
  const fd = openSync(file, 'r')
  let tail: ReturnType<typeof inspectTail>
  try {
    tail = inspectTail(fd)
  } finally {
    closeSync(fd)
  }
  const { lastSeq, lastTs } = countersOf(file, tail)
  const { entries, bytes } = await countEntries(file)
  return { workspace, file, entries, bytes, lastSeq, lastTs, tornTailBytes: tail.size - tail.validLength }
}

export async function listWorkspaces(root: string): Promise<WorkspaceInfo[]> {
  const out: WorkspaceInfo[] = []
  for (const ws of workspaceNames(root)) out.push(await workspaceInfo(root, ws))
  return out
}

// Generators, so that a missing workspace surfaces when iteration starts, like any read error.
export async function* readWorkspace(
  root: string,
  workspace: string,
  options: EntryReadOptions = {},
): AsyncGenerator<Entry> {
  yield* readEntries(existingLog(root, workspace), options)
}

export async function* readWorkspaceBatches(
  root: string,
  workspace: string,
  options: EntryReadOptions = {},
): AsyncGenerator<Entry[]> {
  yield* readEntryBatches(existingLog(root, workspace), options)
}

/** The stored bytes from the line holding `fromSeq` on, exactly as on disk (complete lines only). */
export async function* readWorkspaceBytes(
  root: string,
  workspace: string,
  fromSeq = 1,
): AsyncGenerator<Buffer> {
  const file = existingLog(root, workspace)
  yield* readChunks(file, { start: fromSeq > 1 ? seekSeq(file, fromSeq) : 0 })
}

export function verifyWorkspace(root: string, workspace: string): Promise<VerifyReport> {
  return verifyLog(existingLog(root, workspace))
}
