/**
 * Where a compression's range is in the view (Norma's `ResolveBoundaries`, boundaries.go): its
 * two boundaries, message refs or block ids, resolved to view indexes (a ref absorbed by an
 * active block snapped to that block), the messages and active blocks between them, and
 * NOA_BAD_BOUNDARY naming a boundary that is unknown, consumed or not a ref at all.
 */
import { Errors, isNoaError, type NoaError } from '../engine/errors.js'
import { type BoundaryKind, indexToRef, parseBoundary } from './refs.js'
import { isRenderedSummary } from './rules.js'
import { findBlock, summaryMessageId } from './state.js'
import type { CompressionState, CoreMessage } from './types.js'

export type NotFoundKind = 'unknown' | 'consumed' | 'invalid'

/** A range's boundary that names no message or block of the view (NOA_BAD_BOUNDARY). */
function boundaryError(ref: string, kind: NotFoundKind, message: string): NoaError {
  return Errors.BAD_BOUNDARY(message, { ref, kind })
}

export function isBoundaryError(
  err: unknown,
): err is NoaError & { details: { ref: string; kind: NotFoundKind } } {
  return isNoaError(err, 'NOA_BAD_BOUNDARY')
}

export interface ResolvedRange {
  startIndex: number
  endIndex: number
  kind: BoundaryKind
  /** Ids of the view's messages in the range (summary messages excluded). */
  messageIds: string[]
  /** Active blocks whose summary sits in the range. */
  nestedBlockIds: string[]
  warnings: string[]
}

export class ResolveContext {
  readonly indexOf = new Map<string, number>()
  readonly anchor = new Map<string, number>()

  constructor(
    readonly messages: readonly CoreMessage[],
    readonly state: CompressionState,
  ) {
    messages.forEach((m, i) => {
      if (m.id !== '' && !this.indexOf.has(m.id)) this.indexOf.set(m.id, i)
    })
    for (const b of state.blocks) {
      if (!b.active) continue
      const at = this.indexOf.get(summaryMessageId(b.blockId))
      if (at !== undefined) {
        this.anchor.set(b.blockId, at)
        continue
      }
      let earliest = -1
      for (const id of b.effectiveMessageIds) {
        const i = this.indexOf.get(id)
        if (i !== undefined && (earliest < 0 || i < earliest)) earliest = i
      }
      if (earliest >= 0) this.anchor.set(b.blockId, earliest)
    }
  }

  /** Where the active block that absorbed a message sits. */
  ownerAnchor(rawId: string): { at: number; owner: string } | undefined {
    for (const owner of this.state.blocks) {
      if (!owner.active || owner.directBlockIds.length === 0) continue
      for (const childId of owner.directBlockIds) {
        const child = findBlock(this.state, childId)
        if (!child?.effectiveMessageIds.includes(rawId)) continue
        const at = this.anchor.get(owner.blockId)
        if (at !== undefined) return { at, owner: owner.blockId }
      }
    }
    return undefined
  }

  resolve(ref: { kind: BoundaryKind; id: string; num: number }): { at: number; warning: string } {
    if (ref.kind === 'message') {
      const rawId =
        this.state.messageRefs.byRef.get(ref.id) ?? this.state.messageRefs.byRef.get(indexToRef(ref.num))
      if (rawId === undefined)
        throw boundaryError(ref.id, 'unknown', `${ref.id} does not exist in this session`)
      const at = this.indexOf.get(rawId)
      if (at !== undefined) return { at, warning: '' }
      const owner = this.ownerAnchor(rawId)
      if (owner)
        return { at: owner.at, warning: `Snapped ${ref.id} to block ${owner.owner}, which absorbed it.` }
      throw boundaryError(ref.id, 'consumed', `${ref.id} is already covered by an active block`)
    }
    const b = findBlock(this.state, ref.id)
    if (!b) throw boundaryError(ref.id, 'unknown', `block ${ref.id} does not exist in this session`)
    if (b.active) {
      const at = this.anchor.get(ref.id)
      if (at !== undefined) return { at, warning: '' }
      throw boundaryError(
        ref.id,
        'consumed',
        `block ${ref.id} is active but has no visible content to compress`,
      )
    }
    for (const id of b.effectiveMessageIds) {
      const owner = this.ownerAnchor(id)
      if (owner)
        return { at: owner.at, warning: `Snapped ${ref.id} to block ${owner.owner}, which absorbed it.` }
    }
    throw boundaryError(ref.id, 'consumed', `block ${ref.id} was already consumed by a higher-tier block`)
  }

  nestedActive(si: number, ei: number): string[] {
    const out: string[] = []
    for (const b of this.state.blocks) {
      if (!b.active) continue
      const at = this.anchor.get(b.blockId)
      if (at !== undefined && at >= si && at <= ei) out.push(b.blockId)
    }
    return out
  }
}

function invalid(s: string): NoaError {
  return boundaryError(
    s,
    'invalid',
    `${JSON.stringify(s)} is neither a message ref (mNNNNN) nor a block id (bN)`,
  )
}

/** Norma's `ResolveBoundaries`: the view indexes and contents of a requested range. Throws NOA_BAD_BOUNDARY. */
export function resolveBoundaries(
  startRef: string,
  endRef: string,
  messages: readonly CoreMessage[],
  state: CompressionState,
): ResolvedRange {
  const start = parseBoundary(startRef)
  if (!start) throw invalid(startRef)
  const end = parseBoundary(endRef)
  if (!end) throw invalid(endRef)
  const rc = new ResolveContext(messages, state)
  const warnings: string[] = []
  const s = rc.resolve(start)
  if (s.warning) warnings.push(s.warning)
  const e = rc.resolve(end)
  if (e.warning) warnings.push(e.warning)
  const si = Math.min(s.at, e.at)
  const ei = Math.max(s.at, e.at)
  const messageIds: string[] = []
  for (let i = si; i <= ei && i < messages.length; i++) {
    const m = messages[i] as CoreMessage
    if (m.id !== '' && !isRenderedSummary(m)) messageIds.push(m.id)
  }
  return {
    startIndex: si,
    endIndex: ei,
    kind: start.kind === 'block' || end.kind === 'block' ? 'block' : 'message',
    messageIds,
    nestedBlockIds: rc.nestedActive(si, ei),
    warnings,
  }
}
