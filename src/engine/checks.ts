/**
 * What the engine may ask of the object store above it before an entry is appended. The engine
 * sits below the store and never imports it: the store (or anything else that knows the
 * objects) hands an implementation to `AgentLog.open({ objects })`.
 *
 * Snapshot and merge entries are the store's records. Without `objects` the engine refuses them
 * from every caller but the store's own path (`STORE_APPEND`, below), because it cannot tell a
 * real record from a forged one; with `objects` it lets through those the store vouches for.
 */
import type { EntryInput } from './entry.js'

export interface ObjectChecks {
  /** Whether a blob with this hash (64 lowercase hex) is stored. */
  hasBlob(hash: string): boolean
  /**
   * Throws a NoaError when the snapshot or merge entries of `entries`, about to be appended to
   * `workspace` in this order, do not name records the store wrote for that workspace.
   * `where(i)` names entry i in messages (e.g. `entry 3`, `stdin:7`).
   */
  checkRecords(workspace: string, entries: readonly EntryInput[], where: (i: number) => string): void
  /**
   * The last seq that snapshot `snapshotId` of `workspace` covers, when its record and its tree
   * are stored; null otherwise (another workspace's, unknown, or its tree collected). What
   * `AgentLog.compact` needs to put a base record in place of the entries up to it.
   */
  snapshotCover?(workspace: string, snapshotId: string): number | null
}

/**
 * The store's own path into the engine: appends snapshot and merge entries without asking
 * `objects` (the store has just written the records they name, or names a fork base that is
 * not this workspace's). Not exported from the package: a normal caller cannot reach it by
 * accident, only by importing this module on purpose.
 */
export const STORE_APPEND: unique symbol = Symbol('noa.storeAppend')

/**
 * On the array of acks an `appendMany` (or STORE_APPEND) resolves with: the log file's size in
 * bytes just after the last line of that append, as its owner wrote it. An adapter that follows
 * the log (adapters/follow.ts) takes it as what it has accounted for, without a stat.
 */
export const LOG_END: unique symbol = Symbol('noa.logEnd')

/**
 * Beside LOG_END: a function that says whether the log can have changed since that append
 * without this process knowing. It answers false (look at the file) once the workspace's owner
 * has closed any descriptor since it committed the append (closing the log releases its lock,
 * and then another process may write it), or once something else was appended to the workspace
 * through this AgentLog. While it answers true, this process still holds the workspace's lock
 * (no other process can append, recover or cut it) and nothing else was appended here, so a
 * follower needs no stat to know the file is as this append left it.
 */
export const LOG_HELD: unique symbol = Symbol('noa.logHeld')

export function isRecordEntry(entry: unknown): boolean {
  if (typeof entry !== 'object' || entry === null) return false
  const op = (entry as { op?: unknown }).op
  return op === 'snapshot' || op === 'merge'
}
