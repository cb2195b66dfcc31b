/**
 * A retention policy, as NoaSaver and NoaSession take it and `noa prune` applies it to a root:
 * `{ keepLast?: N, keepWithinMs?: MS }`. An item (a checkpoint, a session item, a snapshot) is
 * kept when any rule keeps it, as restic's and borg's --keep-last / --keep-within do: the
 * newest N, and every one made within the last MS milliseconds. The newest is always kept.
 */

import { Errors } from '../engine/errors.js'
import { checkOptionKeys } from '../engine/options.js'
import { describe } from './names.js'

export interface Retention {
  /** Keep the newest N (an integer >= 1). */
  keepLast?: number
  /** Keep those made within this many milliseconds (a number > 0). */
  keepWithinMs?: number
}

const KEYS = new Set(['keepLast', 'keepWithinMs'])

/** The policy as given, checked; undefined when none was given (retention off). */
export function checkRetention(value: unknown, owner: string): Retention | undefined {
  if (value === undefined) return undefined
  const field = (k: string) => `retention.${k}`
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw Errors.BAD_OPTION(
      `${owner} option retention must be an object such as { keepLast: 10 } or { keepWithinMs: 86400000 }, got ${describe(value)}`,
      { field: 'retention' },
    )
  }
  checkOptionKeys(value, KEYS, `${owner} retention`)
  const { keepLast, keepWithinMs } = value as Retention
  if (keepLast === undefined && keepWithinMs === undefined) {
    throw Errors.BAD_OPTION(`${owner} option retention needs keepLast or keepWithinMs (what to keep)`, {
      field: 'retention',
    })
  }
  if (keepLast !== undefined && (!Number.isSafeInteger(keepLast) || keepLast < 1)) {
    throw Errors.BAD_OPTION(
      `${owner} option retention.keepLast must be an integer >= 1 (the newest is always kept), got ${describe(keepLast)}`,
      { field: field('keepLast') },
    )
  }
  if (
    keepWithinMs !== undefined &&
    (typeof keepWithinMs !== 'number' || !Number.isFinite(keepWithinMs) || keepWithinMs <= 0)
  ) {
    throw Errors.BAD_OPTION(
      `${owner} option retention.keepWithinMs must be a number of milliseconds > 0, got ${describe(keepWithinMs)}`,
      { field: field('keepWithinMs') },
    )
  }
  return {
    ...(keepLast !== undefined ? { keepLast } : {}),
    ...(keepWithinMs !== undefined ? { keepWithinMs } : {}),
  }
}

/**
 * Which of `items` (newest first; `ts` in unix µs) the policy drops at `nowUs`: those neither
 * among the newest keepLast nor within keepWithinMs. The first (newest) is always kept.
 */
export function droppedBy<T extends { ts: number }>(
  policy: Retention,
  items: readonly T[],
  nowUs: number,
): T[] {
  const out: T[] = []
  const last = Math.max(1, policy.keepLast ?? 0)
  for (const [i, item] of items.entries()) {
    if (i < last) continue
    if (policy.keepWithinMs !== undefined && nowUs - item.ts <= policy.keepWithinMs * 1000) continue
    out.push(item)
  }
  return out
}
