/**
 * Where push and pull remember how far they got, under the root: `replication/push.<prefix>.json`
 * and `replication/pull.<prefix>.json`, replaced atomically (temp + fsync + rename + directory
 * fsync), so a crash leaves the old checkpoint or the new one.
 *
 * A checkpoint is a hint that saves work, never the authority: the publisher reconciles each
 * workspace with what the stream holds before it publishes, and the mirror skips entries its
 * logs already have. A stale checkpoint therefore costs a little re-reading, not a duplicate.
 */
import { closeSync, readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { mkdirDurable, writeFileAtomic } from '../engine/atomic.js'
import { checkDirsBelow, openFileSync, READ } from '../engine/files.js'

export const REPLICATION_DIR = 'replication'

/** Where the publisher got to in one workspace. */
export interface PushPosition {
  /** Last entry the stream acknowledged. */
  seq: number
  ts: number
  /** Byte offset in the log just after that entry's line. */
  offset: number
  /** Its stream sequence: the next publish expects it as the subject's last. */
  streamSeq: number
}

/** Where the mirror got to in one workspace. */
export interface PullPosition {
  seq: number
  ts: number
  /** Stream sequence of the message that carried `seq`. */
  streamSeq: number
}

interface Common {
  version: 1
  prefix: string
  stream: string
  /** The stream's creation time: a different one means the stream was made again. */
  streamCreated: string
  savedAt: string
}

export interface PushCheckpoint extends Common {
  kind: 'push'
  workspaces: Record<string, PushPosition>
}

export interface PullCheckpoint extends Common {
  kind: 'pull'
  /** Every message up to this stream sequence is applied (or was not for this mirror). */
  streamSeq: number
  /** Messages left in the stream after `streamSeq` when the checkpoint was saved. */
  pending: number
  workspaces: Record<string, PullPosition>
}

export type Checkpoint = PushCheckpoint | PullCheckpoint

export function replicationDir(root: string): string {
  return join(root, REPLICATION_DIR)
}

export function checkpointPath(root: string, kind: Checkpoint['kind'], prefix: string): string {
  return join(replicationDir(root), `${kind}.${prefix}.json`)
}

/** Creates `<root>/replication` (and the root) durably if missing; a symlink there is refused. */
export function ensureReplicationDir(root: string): string {
  const dir = replicationDir(root)
  mkdirDurable(root, dir)
  return dir
}

/**
 * A file of the replication folder (a checkpoint, the published-objects list): its text, or
 * null when it does not exist. Never through a symlink, never from a FIFO (NOA_NOT_REGULAR_FILE).
 */
export function readReplicationFile(root: string, file: string, what: string): Buffer | null {
  if (checkDirsBelow(root, dirname(file)) !== null) return null
  let fd: number
  try {
    fd = openFileSync(file, READ, { what })
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
    throw err
  }
  try {
    return readFileSync(fd)
  } finally {
    closeSync(fd)
  }
}

function isCounter(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0
}

/**
 * The checkpoint, or null when there is none or it cannot be used (the reason goes to `warn`):
 * starting over is always safe, only slower.
 */
export function loadCheckpoint<K extends Checkpoint['kind']>(
  root: string,
  kind: K,
  prefix: string,
  warn: (message: string) => void = () => {},
): Extract<Checkpoint, { kind: K }> | null {
  const file = checkpointPath(root, kind, prefix)
  // What cannot be opened safely is refused (named); what opens but does not parse is a hint lost.
  const bytes = readReplicationFile(root, file, 'checkpoint')
  if (bytes === null) return null
  let data: unknown
  try {
    data = JSON.parse(bytes.toString('utf8'))
  } catch (err) {
    warn(`ignoring checkpoint ${file}: ${(err as Error).message}`)
    return null
  }
  const c = data as Partial<Checkpoint>
  const ok =
    c !== null &&
    typeof c === 'object' &&
    c.version === 1 &&
    c.kind === kind &&
    c.prefix === prefix &&
    typeof c.stream === 'string' &&
    typeof c.streamCreated === 'string' &&
    typeof c.workspaces === 'object' &&
    c.workspaces !== null &&
    Object.values(c.workspaces).every(
      (p) =>
        p !== null && typeof p === 'object' && isCounter(p.seq) && isCounter(p.ts) && isCounter(p.streamSeq),
    ) &&
    (kind === 'push'
      ? Object.values((c as PushCheckpoint).workspaces).every((p) => isCounter(p.offset))
      : isCounter((c as PullCheckpoint).streamSeq))
  if (!ok) {
    warn(`ignoring checkpoint ${file}: not a version 1 ${kind} checkpoint for prefix ${prefix}`)
    return null
  }
  return c as Extract<Checkpoint, { kind: K }>
}

export function saveCheckpoint(root: string, checkpoint: Checkpoint): void {
  ensureReplicationDir(root)
  checkpoint.savedAt = new Date().toISOString()
  writeFileAtomic(
    checkpointPath(root, checkpoint.kind, checkpoint.prefix),
    `${JSON.stringify(checkpoint, null, 1)}\n`,
    { base: root, what: 'checkpoint' },
  )
}
