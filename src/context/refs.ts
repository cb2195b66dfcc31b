/**
 * Message refs (`m00001`…`m99999`) and block ids (`b1`, `b2`, …), as Norma reads and assigns them.
 * A ref is given once to each message id the first time it is seen, and never reassigned; a
 * message that must never be compressed gets `BLOCKED` instead.
 */
import { goToLower, goTrimSpace } from '../gocompat/index.js'
import {
  BLOCKED_REF,
  type CoreMessage,
  MAX_REF_INDEX,
  type MessageRefMap,
  MIN_REF_INDEX,
  REF_WIDTH,
} from './types.js'

/** `m00042` for 42; '' outside 1…99999. */
export function indexToRef(index: number): string {
  if (!Number.isInteger(index) || index < MIN_REF_INDEX || index > MAX_REF_INDEX) return ''
  return `m${String(index).padStart(REF_WIDTH, '0')}`
}

const REF = /^m0*(\d{1,5})$/

/** 42 for `m00042`, ` M42 ` or `m042`; undefined for anything else. */
export function refToIndex(ref: string): number | undefined {
  const m = REF.exec(goToLower(goTrimSpace(ref)))
  if (!m) return undefined
  const n = Number(m[1])
  return n >= MIN_REF_INDEX && n <= MAX_REF_INDEX ? n : undefined
}

const BLOCK_ID = /^b0*(\d{1,9})$/
const TIER_SUFFIX = /\(t\d+\)$/
/** Go's strconv.Atoi: an optional sign and decimal digits, within int64. */
const ATOI = /^[+-]?\d+$/

/** `b7` for `b7`, `b007`, `7`, `B7(T1)`; undefined for anything else. */
export function parseBlockId(s: string): string | undefined {
  const t = goToLower(goTrimSpace(s)).replace(TIER_SUFFIX, '')
  const m = BLOCK_ID.exec(t)
  if (m) {
    const n = Number(m[1])
    return n >= 1 ? `b${n}` : undefined
  }
  if (ATOI.test(t)) {
    const n = Number(t)
    if (Number.isSafeInteger(n) && n >= 1) return `b${n}`
  }
  return undefined
}

/** The number of a block id (`b12` → 12); NaN for anything else. */
export function blockNumber(blockId: string): number {
  return /^b\d+$/.test(blockId) ? Number(blockId.slice(1)) : Number.NaN
}

export type BoundaryKind = 'message' | 'block'

export interface Boundary {
  kind: BoundaryKind
  /** The normalized ref or block id. */
  id: string
  num: number
}

/** A range end as the model wrote it: a message ref first, else a block id. */
export function parseBoundary(s: string): Boundary | undefined {
  const n = refToIndex(s)
  if (n !== undefined) return { kind: 'message', id: indexToRef(n), num: n }
  const b = parseBlockId(s)
  if (b !== undefined) return { kind: 'block', id: b, num: blockNumber(b) }
  return undefined
}

export function emptyRefs(): MessageRefMap {
  return { byRaw: new Map(), byRef: new Map() }
}

/** The highest ref index in use (0 when none). */
export function highestUsedIndex(refs: MessageRefMap): number {
  let highest = 0
  for (const ref of refs.byRaw.values()) {
    if (ref === BLOCKED_REF) continue
    const i = refToIndex(ref)
    if (i !== undefined && i > highest) highest = i
  }
  return highest
}

export interface AssignRefsOptions {
  /** Messages that get `BLOCKED` instead of a ref. */
  isProtected?: (m: CoreMessage) => boolean
  /** Messages that get nothing (summary and nudge messages of a view). */
  shouldSkip?: (m: CoreMessage) => boolean
}

/**
 * Norma's `AssignRefs` from the highest index in use + 1: each message id seen for the first
 * time gets the next free ref (or `BLOCKED`); ids already known keep theirs. Returns new maps.
 */
export function assignRefs(
  messages: readonly CoreMessage[],
  existing: MessageRefMap,
  options: AssignRefsOptions = {},
): { refs: MessageRefMap; assigned: number } {
  const refs: MessageRefMap = { byRaw: new Map(existing.byRaw), byRef: new Map(existing.byRef) }
  let cursor = Math.max(highestUsedIndex(existing) + 1, MIN_REF_INDEX)
  let assigned = 0
  for (const m of messages) {
    if (m.id === '') continue
    if (options.shouldSkip?.(m)) continue
    if (refs.byRaw.has(m.id)) continue
    if (options.isProtected?.(m)) {
      refs.byRaw.set(m.id, BLOCKED_REF)
      continue
    }
    let i = cursor
    while (i <= MAX_REF_INDEX && refs.byRef.has(indexToRef(i))) i++
    if (i > MAX_REF_INDEX) break
    const ref = indexToRef(i)
    cursor = i + 1
    refs.byRaw.set(m.id, ref)
    refs.byRef.set(ref, m.id)
    assigned++
  }
  return { refs, assigned }
}
