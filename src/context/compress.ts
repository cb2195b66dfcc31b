/**
 * Applying a compression to a view (Norma's `ApplyCompression` and `DecideTier`, tier.go; the
 * range's boundaries are resolved by boundaries.ts):
 * - a range given by message refs makes a tier-1 block over the messages it spans;
 * - a range with a block id at either end absorbs the active blocks of the lowest tier L
 *   present in it (plus loose messages) into a block of tier min(maxTier, L + 1); the absorbed
 *   blocks become inactive, blocks of other tiers survive;
 * - refused: ranges whose messages total fewer than `minCompressRange` characters (unless a
 *   block id is named), Compress calls and protected tools (never compressed), re-summarizing
 *   top-tier blocks with no new message, empty summaries;
 * - the archive is written before the state changes; if it cannot be, nothing changes.
 */
import type { NoaError } from '../engine/errors.js'
import { type GoInt, goIntAdd, goIntCompare, goTrimSpace } from '../gocompat/index.js'
import { type Archiver, type ArchiveSource, archiveDocument, renderArchiveUnchecked } from './archive.js'
import { isBoundaryError, ResolveContext, type ResolvedRange, resolveBoundaries } from './boundaries.js'
import type { ContextConfig } from './config.js'
import { indexToRef, refToIndex } from './refs.js'
import {
  adjustRangeForPairs,
  isProtectedWithPairing,
  isRenderedSummary,
  protectedRefs,
  protectedToolCallIds,
  withdrawSplitTurns,
} from './rules.js'
import {
  activeBlocks,
  allocateBlockId,
  blockIdFromSummaryId,
  cloneState,
  coveredMessageIds,
  findBlock,
} from './state.js'
import { countTokens, runeLength } from './tokens.js'
import {
  BLOCKED_REF,
  type CompressionBlock,
  type CompressionState,
  type CompressRange,
  type CoreMessage,
  MAX_REF_INDEX,
  type MessageRefMap,
} from './types.js'

export interface TierDecision {
  /** The tier absorbed (L). */
  targetTier: GoInt
  outputTier: GoInt
  consumedBlockIds: string[]
  survivingBlockIds: string[]
}

/** Norma's `DecideTier`. */
export function decideTier(r: ResolvedRange, state: CompressionState, cfg: ContextConfig): TierDecision {
  const maxTier = cfg.maxTier < 2 ? 3 : cfg.maxTier
  const d: TierDecision = { targetTier: 1, outputTier: 1, consumedBlockIds: [], survivingBlockIds: [] }
  if (r.kind !== 'block') return d
  const nested = r.nestedBlockIds
    .map((id) => findBlock(state, id))
    .filter((b): b is CompressionBlock => b?.active === true)
  let lowest: GoInt = 0
  for (const b of nested) if (lowest === 0 || goIntCompare(b.tier, lowest) < 0) lowest = b.tier
  if (goIntCompare(lowest, 0) > 0) d.targetTier = lowest
  const next = goIntAdd(d.targetTier, 1)
  d.outputTier = goIntCompare(next, maxTier) > 0 ? maxTier : next
  for (const b of nested) (b.tier === d.targetTier ? d.consumedBlockIds : d.survivingBlockIds).push(b.blockId)
  return d
}

function refIndexOf(id: string, refs: MessageRefMap): number {
  const ref = refs.byRaw.get(id)
  if (ref === undefined || ref === BLOCKED_REF) return MAX_REF_INDEX + 1
  return refToIndex(ref) ?? MAX_REF_INDEX + 1
}

/** Ids in ref order (stable, for ids without a ref). */
function sortedByRef(ids: Iterable<string>, refs: MessageRefMap): string[] {
  return [...ids].sort((a, b) => refIndexOf(a, refs) - refIndexOf(b, refs))
}

function refSpan(ids: readonly string[], refs: MessageRefMap): [string, string] {
  let lo = ''
  let hi = ''
  let loN = MAX_REF_INDEX + 1
  let hiN = -1
  for (const id of ids) {
    const ref = refs.byRaw.get(id)
    if (ref === undefined || ref === BLOCKED_REF) continue
    const n = refToIndex(ref)
    if (n === undefined) continue
    if (n < loN) {
      loN = n
      lo = ref
    }
    if (n > hiN) {
      hiN = n
      hi = ref
    }
  }
  return [lo, hi]
}

export interface ApplyInput {
  ranges: readonly CompressRange[]
  /** The view the ranges refer to (after `processTurn`). */
  messages: readonly CoreMessage[]
  state: CompressionState
  config: ContextConfig
  /** The Compress call's tool_use id ('' when none). */
  callId?: string
  archiver: Archiver
  /** The archive's `created:` value. */
  created: string
  /** Unix seconds, the blocks' createdAt. */
  now: number
}

export interface ApplyResult {
  /** The new state, or the input state when no block was created. */
  state: CompressionState
  blocksCreated: CompressionBlock[]
  tokensCompressed: GoInt
  errors: string[]
  warnings: string[]
  /** Nested blocks of another tier than the one absorbed. */
  survivingBlockIds: string[]
}

interface Entry {
  req: CompressRange
  resolved?: ResolvedRange
  err?: NoaError
  skipped: boolean
}

function sizeGate(
  entries: readonly Entry[],
  in_: ApplyInput,
  unknown: number,
  consumed: number,
  resolvable: number,
): string | undefined {
  const minChars = in_.config.minCompressRange
  if (minChars <= 0) return undefined
  let total = 0
  let hasBlock = false
  const byId = new Map<string, CoreMessage>()
  for (const m of in_.messages) if (!byId.has(m.id)) byId.set(m.id, m)
  for (const e of entries) {
    if (!e.resolved || e.skipped) continue
    if (e.resolved.kind === 'block') {
      hasBlock = true
      continue
    }
    for (const id of e.resolved.messageIds) {
      const m = byId.get(id)
      if (m) total += runeLength(m.text)
    }
  }
  if (hasBlock || total >= minChars) return undefined
  const state = in_.state
  const diagnostics = `[diagnostics: session highest ref=${indexToRef(Math.max(highestRef(state), 1))}, unknown ranges in request=${unknown}/${in_.ranges.length}, session history=${state.stats.compressionCount} compression(s), ${state.blocks.length} block(s)]`
  if (resolvable === 0 && consumed === 0 && unknown > 0) {
    return (
      `None of the ${in_.ranges.length} requested range(s) resolved — every ref is unknown to this session. ` +
      'Refs are per-session snapshots, assigned once when a message is first rendered; no compression ' +
      'reassigns them, so an unknown ref cannot have come from an earlier compression here. ' +
      `Use the refs shown in the <noa-ref> tags of the current context. ${diagnostics}`
    )
  }
  if (consumed > 0) {
    const active = activeBlocks(state)
    const live =
      active.length === 0
        ? ''
        : `Active blocks: ${(active[0] as CompressionBlock).blockId}..${(active[active.length - 1] as CompressionBlock).blockId}.`
    return `Every requested range is already compressed — its content is covered by an active block. ${live} ${diagnostics}`
  }
  const n = entries.filter((e) => e.resolved && !e.skipped).length
  return `Total compressible content too small (${total} chars across ${n} range(s), min ${minChars}). Combine more messages into fewer, larger ranges.`
}

function highestRef(state: CompressionState): number {
  let highest = 0
  for (const ref of state.messageRefs.byRaw.values()) {
    if (ref === BLOCKED_REF) continue
    const i = refToIndex(ref)
    if (i !== undefined && i > highest) highest = i
  }
  return highest
}

class RangeRefused extends Error {}

function validateSummary(req: CompressRange, cfg: ContextConfig, direct: number, consumed: number): void {
  const s = goTrimSpace(req.summary)
  if (s === '')
    throw new RangeRefused('Summary is empty — provide a meaningful summary of the compressed range.')
  const n = runeLength(s)
  if (n < cfg.minSummaryLength) {
    throw new RangeRefused(
      `Summary too short (${n} chars, min ${cfg.minSummaryLength}). A summary this brief cannot stand in for the content it replaces.`,
    )
  }
  const max =
    req.summaryMaxChars !== undefined && req.summaryMaxChars > 0 ? req.summaryMaxChars : cfg.maxSummaryLength
  if (n > max) {
    throw new RangeRefused(
      `Summary too long (${n} chars, max ${max}). Strip noise — keep critical paths, decisions, errors, and code references. ` +
        "Or pass summaryMaxChars to increase the limit — don't lose critical info just to fit.",
    )
  }
  if (direct === 0 && consumed === 0)
    throw new RangeRefused(
      'Range contains no compressible messages — all are already covered by active blocks or protected.',
    )
}

interface Built {
  block: CompressionBlock
  content: string
}

function buildBlock(
  req: CompressRange,
  r: ResolvedRange,
  state: CompressionState,
  in_: ApplyInput,
  preExisting: Set<string>,
  warnings: string[],
  surviving: string[],
): Built {
  const msgs = in_.messages
  const cfg = in_.config
  let start = r.startIndex
  let end = r.endIndex
  let messageIds = r.messageIds
  let nested = r.nestedBlockIds
  if (r.kind === 'message') {
    const [ns, ne] = adjustRangeForPairs(start, end, msgs)
    if (ns !== start || ne !== end) {
      start = ns
      end = ne
      messageIds = []
      for (let i = start; i <= end && i < msgs.length; i++) {
        const m = msgs[i] as CoreMessage
        if (m.id !== '' && !isRenderedSummary(m)) messageIds.push(m.id)
      }
      nested = new ResolveContext(msgs, state).nestedActive(start, end)
    }
  }
  const tier = decideTier(
    { ...r, startIndex: start, endIndex: end, messageIds, nestedBlockIds: nested },
    state,
    cfg,
  )
  for (const id of tier.survivingBlockIds) if (!surviving.includes(id)) surviving.push(id)

  const effective = new Set(messageIds)
  const consumedBlocks: CompressionBlock[] = []
  for (const id of tier.consumedBlockIds) {
    const b = findBlock(state, id)
    if (!b) continue
    consumedBlocks.push(b)
    for (const mid of b.effectiveMessageIds) effective.add(mid)
  }
  let direct = new Set([...effective].filter((id) => !preExisting.has(id)))

  const byId = new Map<string, CoreMessage>()
  for (const m of msgs) if (!byId.has(m.id)) byId.set(m.id, m)
  const callIds = protectedToolCallIds(msgs, cfg)
  for (const id of [...direct]) {
    const m = byId.get(id)
    if (m && isProtectedWithPairing(m, cfg, callIds)) {
      direct.delete(id)
      effective.delete(id)
    }
  }
  const recent = protectedRefs(msgs, state, cfg)
  const hit: string[] = []
  for (const id of [...direct]) {
    const ref = state.messageRefs.byRaw.get(id)
    if (ref !== undefined && recent.has(ref)) {
      hit.push(ref)
      direct.delete(id)
      effective.delete(id)
    }
  }
  if (hit.length > 0) {
    hit.sort()
    if (direct.size === 0 && consumedBlocks.length === 0) {
      throw new RangeRefused(
        `Range is entirely within the protected zone (the last ${cfg.preserveRecentMessages} messages and/or the most recent user message): ${hit.join(', ')}. Adjust startId/endId to older messages.`,
      )
    }
    warnings.push(
      `Excluded ${hit.length} protected message(s) ${hit.join(', ')} from compression range (recent/last-user zone).`,
    )
  }
  const { kept, withdrawn } = withdrawSplitTurns(msgs, direct)
  if (withdrawn.length > 0) {
    direct = kept
    for (const id of withdrawn) effective.delete(id)
    if (direct.size === 0 && consumedBlocks.length === 0) {
      throw new RangeRefused(
        'Range would split a turn at the protected-zone boundary: a visible tool-call must keep its reasoning run ' +
          '(strict-echo providers reject a rebuilt request that lost it). Shrink the range to end before the turn starts, ' +
          'or wait until the whole turn ages out of the protected zone.',
      )
    }
    warnings.push(
      `Withdrew ${withdrawn.length} message(s) to keep turn(s) intact (a visible tool-call would have lost its reasoning run).`,
    )
  }
  if (r.kind !== 'block' && direct.size === 0 && consumedBlocks.length > 0) {
    throw new RangeRefused(
      `Range contains no new content — it is already covered by blocks ${(consumedBlocks[0] as CompressionBlock).blockId}..${(consumedBlocks[consumedBlocks.length - 1] as CompressionBlock).blockId}. ` +
        'To consolidate them, pass their block ids as startId/endId instead.',
    )
  }
  const maxTier = cfg.maxTier < 2 ? 3 : cfg.maxTier
  if (tier.targetTier === maxTier && direct.size === 0) {
    throw new RangeRefused(
      `Tier ${maxTier} is the terminal layer — re-summarizing T${maxTier} blocks into another T${maxTier} block reclaims nothing. ` +
        'Compress a lower tier, or include new uncompressed messages in the range.',
    )
  }
  validateSummary(req, cfg, direct.size, consumedBlocks.length)

  let compressed = 0
  for (const id of direct) {
    const m = byId.get(id)
    if (m) compressed += countTokens(m.text)
  }
  for (const b of consumedBlocks) compressed += countTokens(b.summary)

  const effIds = sortedByRef(effective, state.messageRefs)
  const directIds = sortedByRef(direct, state.messageRefs)
  let [startRef, endRef] = refSpan(effIds, state.messageRefs)
  if (startRef === '') {
    startRef = req.startRef
    endRef = req.endRef
  }
  const block: CompressionBlock = {
    blockId: allocateBlockId(state),
    tier: tier.outputTier,
    topic: req.topic,
    summary: req.summary,
    directMessageIds: directIds,
    effectiveMessageIds: effIds,
    directBlockIds: tier.consumedBlockIds,
    archivePath: '',
    archiveRel: '',
    compressedTokens: compressed,
    startRef,
    endRef,
    createdAt: in_.now,
    active: true,
    compressCallId: in_.callId ?? '',
  }
  const absorbed = new Map(consumedBlocks.map((b) => [b.blockId, b]))
  const entries: ArchiveSource[] = []
  for (let i = start; i <= end && i < msgs.length; i++) {
    const m = msgs[i] as CoreMessage
    const bid = blockIdFromSummaryId(m.id)
    if (bid !== undefined) {
      const b = absorbed.get(bid)
      if (b) entries.push({ block: b })
      continue
    }
    if (direct.has(m.id)) entries.push({ message: m, ref: state.messageRefs.byRaw.get(m.id) ?? '' })
  }
  const content = renderArchiveUnchecked(
    archiveDocument({
      blockId: block.blockId,
      tier: block.tier,
      sessionId: state.sessionId,
      created: in_.created,
      startRef,
      endRef,
      topic: req.topic,
      summary: req.summary,
      entries,
      originalTokens: compressed,
    }),
  )
  return { block, content }
}

/** Norma's `ApplyCompression`. Never throws for a refused range: see `errors`. */
export function applyCompression(in_: ApplyInput): ApplyResult {
  const res: ApplyResult = {
    state: in_.state,
    blocksCreated: [],
    tokensCompressed: 0,
    errors: [],
    warnings: [],
    survivingBlockIds: [],
  }
  if (in_.ranges.length === 0) return res
  let unknown = 0
  let consumed = 0
  let resolvable = 0
  const entries: Entry[] = in_.ranges.map((req) => {
    try {
      const resolved = resolveBoundaries(req.startRef, req.endRef, in_.messages, in_.state)
      resolvable++
      res.warnings.push(...resolved.warnings)
      return { req, resolved, skipped: false }
    } catch (err) {
      if (!isBoundaryError(err)) throw err
      if (err.details.kind === 'consumed') consumed++
      else unknown++
      return { req, err, skipped: false }
    }
  })
  const order = entries
    .filter((e) => e.resolved)
    .sort((a, b) => (a.resolved as ResolvedRange).startIndex - (b.resolved as ResolvedRange).startIndex)
  let acceptedMax = -1
  for (const e of order) {
    const r = e.resolved as ResolvedRange
    if (r.startIndex <= acceptedMax) {
      e.skipped = true
      res.warnings.push(
        `Skipped range (${e.req.startRef}..${e.req.endRef}) — overlaps an earlier range in the batch; the earlier range takes precedence. Keep ranges disjoint.`,
      )
      continue
    }
    if (r.endIndex > acceptedMax) acceptedMax = r.endIndex
  }
  const gate = sizeGate(entries, in_, unknown, consumed, resolvable)
  if (gate !== undefined) {
    res.errors.push(gate)
    return res
  }
  const working = cloneState(in_.state)
  const preExisting = coveredMessageIds(in_.state)
  const built: Built[] = []
  for (const e of entries) {
    if (e.err) {
      res.errors.push(e.err.message)
      continue
    }
    if (e.skipped) continue
    try {
      built.push(
        buildBlock(
          e.req,
          e.resolved as ResolvedRange,
          working,
          in_,
          preExisting,
          res.warnings,
          res.survivingBlockIds,
        ),
      )
    } catch (err) {
      if (!(err instanceof RangeRefused)) throw err
      res.errors.push(err.message)
    }
  }
  if (built.length === 0) return res
  const written: string[] = []
  for (const b of built) {
    try {
      const p = in_.archiver.write(b.block.tier, b.block.blockId, b.block.startRef, b.block.endRef, b.content)
      b.block.archivePath = p.abs
      b.block.archiveRel = p.rel
      written.push(p.abs)
    } catch (err) {
      for (const p of written) {
        try {
          in_.archiver.remove(p)
        } catch {
          // the error that matters is the write's
        }
      }
      res.errors.push(
        `Failed to archive ${b.block.blockId}: ${(err as Error).message}. No blocks were created — the originals must be on disk before they leave the context.`,
      )
      return { ...res, state: in_.state, blocksCreated: [], tokensCompressed: 0, survivingBlockIds: [] }
    }
  }
  for (const b of built) {
    working.blocks.push(b.block)
    res.blocksCreated.push(b.block)
    res.tokensCompressed = goIntAdd(res.tokensCompressed, b.block.compressedTokens)
    for (const id of b.block.directBlockIds) {
      const child = findBlock(working, id)
      if (child) child.active = false
    }
  }
  working.stats.compressionCount = goIntAdd(working.stats.compressionCount, res.blocksCreated.length)
  working.stats.tokensCompressed = goIntAdd(working.stats.tokensCompressed, res.tokensCompressed)
  working.nudge.lastPerMessageNudgeTokens = 0
  working.nudge.lastNudgeShownTokens = 0
  working.nudge.lastShownByTier = new Map()
  res.state = working
  return res
}
