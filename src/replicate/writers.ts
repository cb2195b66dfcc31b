/**
 * Which workspaces this root writes since it took them over (`noa replicate promote`):
 * `<root>/replication/writers.<prefix>.json`, replaced atomically (temp, fsync, rename, folder
 * fsync) as the checkpoints are. Unlike a checkpoint it is not a hint: `pull` leaves these
 * workspaces alone, and `push` continues after a fence only when it is the one recorded here
 * (any other fence fences it). A stream made again (another creation time) voids it.
 *
 * One file holds every workspace of the prefix, and several processes may change it at once
 * (two promotes of different workspaces, a resync beside them): each change is read, made and
 * written under the flock of the replication folder, so none is lost. Readers take no lock;
 * the rename gives them the old file or the new one.
 */
import { join } from 'node:path'
import { writeFileAtomic } from '../engine/atomic.js'
import { isNoaError } from '../engine/errors.js'
import { withFolderLock } from '../engine/locks.js'
import { ensureReplicationDir, readReplicationFile, replicationDir } from './checkpoint.js'
import { replicationError } from './failures.js'

export interface WriterRecord {
  /** The writer id the fence names. */
  writer: string
  /** The last entry seq before the fence. */
  after: number
  /** Stream sequence of the fence: what this root's first publish after it expects. */
  fenceStreamSeq: number
  promotedAt: string
}

/** A workspace this root wrote until another writer fenced it, and resync made it a mirror. */
export interface FencedRecord {
  writer: string
  after: number
  /** Stream sequence of the fence that ended this root's writing. */
  streamSeq: number
  resyncedAt: string
}

export interface WritersFile {
  version: 1
  kind: 'writers'
  prefix: string
  stream: string
  streamCreated: string
  workspaces: Record<string, WriterRecord>
  /** Fenced here: push publishes none of their new entries until this root promotes them again. */
  fenced?: Record<string, FencedRecord>
}

export function writersPath(root: string, prefix: string): string {
  return join(replicationDir(root), `writers.${prefix}.json`)
}

/** The record, or null when this root never promoted a workspace of this prefix. */
export function loadWriters(root: string, prefix: string): WritersFile | null {
  const file = writersPath(root, prefix)
  let bytes: Buffer | null
  try {
    bytes = readReplicationFile(root, file, 'writers record')
  } catch (err) {
    if (isNoaError(err)) throw err // a symlink, a folder or a FIFO there: named already
    throw unreadable(file, (err as Error).message, err)
  }
  if (bytes === null) return null
  let data: WritersFile
  try {
    data = JSON.parse(bytes.toString('utf8'))
  } catch (err) {
    throw unreadable(file, `not JSON (${(err as Error).message})`, err)
  }
  const ok =
    data !== null &&
    typeof data === 'object' &&
    data.version === 1 &&
    data.kind === 'writers' &&
    data.prefix === prefix &&
    typeof data.stream === 'string' &&
    typeof data.streamCreated === 'string' &&
    typeof data.workspaces === 'object' &&
    data.workspaces !== null &&
    Object.values(data.workspaces).every(
      (w) =>
        w !== null &&
        typeof w === 'object' &&
        typeof w.writer === 'string' &&
        Number.isSafeInteger(w.after) &&
        Number.isSafeInteger(w.fenceStreamSeq),
    )
  // It decides what push publishes: one that cannot be read is an error, never ignored.
  if (!ok) throw unreadable(file, `not a version 1 writers record for prefix ${prefix}`)
  return data
}

function unreadable(file: string, reason: string, cause?: unknown) {
  return replicationError(
    `writers record ${file} cannot be read: ${reason}; it says which workspaces this root writes, so nothing that needs it goes on (restore it, or remove it and promote this root's workspaces again)`,
    { file },
    cause,
  )
}

/** The workspaces this root writes on that stream (empty for another stream or none). */
export function ownedOn(
  root: string,
  prefix: string,
  stream: { name: string; created: string },
): Map<string, WriterRecord> {
  const f = loadWriters(root, prefix)
  if (f === null || f.stream !== stream.name || f.streamCreated !== stream.created) return new Map()
  return new Map(Object.entries(f.workspaces))
}

/** The workspaces another writer fenced on this root (resync made them mirrors). */
export function fencedOn(
  root: string,
  prefix: string,
  stream: { name: string; created: string },
): Map<string, FencedRecord> {
  const f = loadWriters(root, prefix)
  if (f === null || f.stream !== stream.name || f.streamCreated !== stream.created) return new Map()
  return new Map(Object.entries(f.fenced ?? {}))
}

/**
 * Records, durably, that this root writes a workspace (a promote: any fenced record goes), or
 * with `record` null that it does not (a resync: `fenced` says by whose fence).
 */
export function recordWriter(
  root: string,
  prefix: string,
  stream: { name: string; created: string },
  ws: string,
  record: WriterRecord | null,
  fenced?: FencedRecord,
): void {
  const dir = ensureReplicationDir(root)
  // Read again under the lock: what another process recorded since this one last looked stays.
  withFolderLock(dir, () => {
    const old = loadWriters(root, prefix)
    const same = old !== null && old.stream === stream.name && old.streamCreated === stream.created
    const f: WritersFile = {
      version: 1,
      kind: 'writers',
      prefix,
      stream: stream.name,
      streamCreated: stream.created,
      workspaces: same ? old.workspaces : {},
      fenced: same ? (old.fenced ?? {}) : {},
    }
    const marks = f.fenced as Record<string, FencedRecord>
    if (record === null) {
      delete f.workspaces[ws]
      if (fenced) marks[ws] = fenced
    } else {
      f.workspaces[ws] = record
      delete marks[ws]
    }
    writeFileAtomic(writersPath(root, prefix), `${JSON.stringify(f, null, 1)}\n`, {
      base: root,
      what: 'writers record',
    })
  })
}
