/**
 * What Norma does to the projected messages each turn before the model sees them (its
 * `ProcessTurn` pipeline): give new messages refs, mark blocks whose messages are gone as
 * inactive, replace what active blocks cover by their summary messages, and hide Compress calls
 * that no longer matter. Norma's token-driven steps (emergency truncation of tool outputs and
 * the nudge) depend on the live token count and are left out: a replay runs them with a count
 * of 0, where they do nothing.
 */
import { goTrimSpace, marshalAny } from '../gocompat/index.js'
import type { ContextConfig } from './config.js'
import { assignRefs as assignRefsTo, blockNumber } from './refs.js'
import { isMessageProtected, isRenderedSummary, turnGroups } from './rules.js'
import { activeBlocks, cloneState, coveredMessageIds, summaryMessageId } from './state.js'
import { countTokens } from './tokens.js'
import {
  BLOCKED_REF,
  COMPRESS_TOOL_NAME,
  type CompressionBlock,
  type CompressionState,
  type CoreMessage,
  KEEP_LAST_ORPHANED,
  NUDGE_MESSAGE_ID,
  SUMMARY_HEADER,
  SUMMARY_STUB_CHARS,
} from './types.js'

export interface TurnResult {
  messages: CoreMessage[]
  state: CompressionState
}

/** Refs for messages seen for the first time; Compress calls and protected tools get BLOCKED. */
export function assignRefsStep(
  msgs: readonly CoreMessage[],
  state: CompressionState,
  cfg: ContextConfig,
): CompressionState {
  const out = cloneState(state)
  out.messageRefs = assignRefsTo(msgs, state.messageRefs, {
    isProtected: (m) => isMessageProtected(m, cfg),
    shouldSkip: (m) => isRenderedSummary(m) || m.id === NUDGE_MESSAGE_ID,
  }).refs
  return out
}

/**
 * Norma's `syncBlocks`: a block is active while its summary or one of its messages is present
 * (a compaction drops them) and no other block absorbed it; token snapshots of refs no longer
 * present are dropped.
 */
export function syncBlocks(msgs: readonly CoreMessage[], state: CompressionState): CompressionState {
  if (state.blocks.length === 0 && state.tokenSnapshot.size === 0) return state
  const out = cloneState(state)
  const present = new Set<string>()
  const liveRefs = new Set<string>()
  for (const m of msgs) {
    if (m.id === '') continue
    present.add(m.id)
    const ref = out.messageRefs.byRaw.get(m.id)
    if (ref !== undefined && ref !== BLOCKED_REF) liveRefs.add(ref)
  }
  if (out.tokenSnapshot.size !== liveRefs.size) {
    out.tokenSnapshot = new Map([...out.tokenSnapshot].filter(([ref]) => liveRefs.has(ref)))
  }
  const consumed = new Set<string>()
  for (const b of out.blocks) for (const id of b.directBlockIds) consumed.add(id)
  for (const b of out.blocks) {
    b.active =
      !consumed.has(b.blockId) &&
      (present.has(summaryMessageId(b.blockId)) || b.effectiveMessageIds.some((id) => present.has(id)))
  }
  return out
}

/** `<noa-archive block="b3" tier="2" range="m00002-m00010" path="…"/>` */
export function archiveTag(b: CompressionBlock): string {
  return `<noa-archive block="${b.blockId}" tier="${b.tier}" range="${b.startRef}-${b.endRef}" path="${b.archivePath}"/>`
}

/** The user message that stands in for an active block. */
export function renderSummaryMessage(b: CompressionBlock): CoreMessage {
  let text = SUMMARY_HEADER
  if (b.topic !== '') text += ` — ${b.topic}`
  const s = goTrimSpace(b.summary)
  if (s !== '') text += `\n${s}`
  text += `\n\n${archiveTag(b)}`
  return {
    id: summaryMessageId(b.blockId),
    role: 'user',
    contentType: 'text',
    text,
    toolName: '',
    toolCallId: '',
  }
}

function stripOrphans(msgs: CoreMessage[]): CoreMessage[] {
  const results = new Set<string>()
  for (const m of msgs) if (m.contentType === 'tool-result' && m.toolCallId !== '') results.add(m.toolCallId)
  let out = msgs.filter(
    (m) =>
      !(
        m.contentType === 'tool-call' &&
        m.toolCallId !== '' &&
        m.toolName !== COMPRESS_TOOL_NAME &&
        !results.has(m.toolCallId)
      ),
  )
  const calls = new Set<string>()
  for (const m of out) if (m.contentType === 'tool-call' && m.toolCallId !== '') calls.add(m.toolCallId)
  out = out.filter(
    (m) => !(m.contentType === 'tool-result' && m.toolCallId !== '' && !calls.has(m.toolCallId)),
  )
  // Reasoning must be followed by the assistant's text or call it led to.
  const keep = out.map(() => true)
  for (let i = 0; i < out.length; ) {
    if ((out[i] as CoreMessage).contentType !== 'reasoning') {
      i++
      continue
    }
    const runStart = i
    while (i < out.length && (out[i] as CoreMessage).contentType === 'reasoning') i++
    const next = out[i]
    if (
      !next ||
      !(next.role === 'assistant' && (next.contentType === 'text' || next.contentType === 'tool-call'))
    )
      for (let j = runStart; j < i; j++) keep[j] = false
  }
  return out.filter((_, i) => keep[i])
}

/**
 * Norma's `prune`: each active block's summary message goes where its first visible message
 * was, the messages it covers go, and the first user message always stays. Reasoning of a turn
 * whose call stays visible is kept, and so are both halves of a Compress call when only one
 * would go.
 */
export function prune(msgs: readonly CoreMessage[], state: CompressionState): CoreMessage[] {
  const covered = coveredMessageIds(state)
  if (covered.size === 0) return [...msgs]
  for (const g of turnGroups(msgs)) {
    if (g.reasoning.length === 0) continue
    if (!g.acts.some((i) => !covered.has((msgs[i] as CoreMessage).id))) continue
    for (const i of g.reasoning) covered.delete((msgs[i] as CoreMessage).id)
  }
  const callMsg = new Map<string, string>()
  const resultMsg = new Map<string, string>()
  const compressCalls = new Set<string>()
  for (const m of msgs) {
    if (m.contentType === 'tool-call' && m.toolName === COMPRESS_TOOL_NAME && m.toolCallId !== '') {
      compressCalls.add(m.toolCallId)
      callMsg.set(m.toolCallId, m.id)
    } else if (m.contentType === 'tool-result' && m.toolCallId !== '') {
      resultMsg.set(m.toolCallId, m.id)
    }
  }
  for (const id of compressCalls) {
    const c = callMsg.get(id)
    const r = resultMsg.get(id)
    if (c === undefined || r === undefined) continue
    if (covered.has(c) !== covered.has(r)) {
      covered.delete(c)
      covered.delete(r)
    }
  }
  const indexOf = new Map<string, number>()
  msgs.forEach((m, i) => {
    if (m.id !== '' && !indexOf.has(m.id)) indexOf.set(m.id, i)
  })
  const firstUser = msgs.findIndex((m) => m.role === 'user')
  const anchored = new Set<string>()
  const anchors = activeBlocks(state).map((b) => {
    let at = indexOf.get(summaryMessageId(b.blockId))
    if (at !== undefined) anchored.add(summaryMessageId(b.blockId))
    else {
      let earliest = -1
      for (const id of b.effectiveMessageIds) {
        const i = indexOf.get(id)
        if (i !== undefined && (earliest < 0 || i < earliest)) earliest = i
      }
      at = Math.max(earliest, 0)
    }
    return { at, block: b, num: blockNumber(b.blockId) || 0 }
  })
  anchors.sort((x, y) => x.at - y.at || x.num - y.num)
  const out: CoreMessage[] = []
  let next = 0
  msgs.forEach((m, i) => {
    while (next < anchors.length && (anchors[next] as (typeof anchors)[number]).at === i)
      out.push(renderSummaryMessage((anchors[next++] as (typeof anchors)[number]).block))
    if (i === firstUser || (!covered.has(m.id) && !anchored.has(m.id))) out.push(m)
  })
  for (; next < anchors.length; next++)
    out.push(renderSummaryMessage((anchors[next] as (typeof anchors)[number]).block))
  return stripOrphans(out)
}

function stubSummary(s: string): string | undefined {
  const runes = [...s]
  return runes.length <= SUMMARY_STUB_CHARS
    ? undefined
    : `${runes.slice(0, SUMMARY_STUB_CHARS - 1).join('')}…`
}

/** A Compress call's input as a view shows it: summaries over 200 characters cut (re-marshaled as Go would). */
export function compactCompressText(text: string): string {
  const brace = text.indexOf('{')
  if (brace < 0) return text
  let obj: unknown
  try {
    obj = JSON.parse(text.slice(brace))
  } catch {
    return text
  }
  if (typeof obj !== 'object' || obj === null || Array.isArray(obj) || !Object.hasOwn(obj, 'content'))
    return text
  const o = obj as Record<string, unknown>
  let arr: unknown
  let wasString = false
  if (Array.isArray(o.content)) arr = o.content
  else if (typeof o.content === 'string') {
    try {
      arr = JSON.parse(o.content)
    } catch {
      return text
    }
    if (arr !== null && !Array.isArray(arr)) return text
    wasString = true
  } else return text
  let changed = false
  for (const it of (arr as unknown[] | null) ?? []) {
    if (typeof it !== 'object' || it === null || Array.isArray(it)) continue
    const item = it as Record<string, unknown>
    if (typeof item.summary !== 'string') continue
    const stub = stubSummary(item.summary)
    if (stub !== undefined) {
      item.summary = stub
      changed = true
    }
  }
  if (!changed) return text
  o.content = wasString ? marshalAny(arr) : arr
  return text.slice(0, brace) + marshalAny(o)
}

/**
 * Norma's `hideCompressCalls`: Compress calls (and their results) are dropped from the view
 * unless they made a block that is still active, or are among the last two that made none;
 * the summaries in the calls that stay are cut to 200 characters.
 */
export function hideCompressCalls(msgs: readonly CoreMessage[], state: CompressionState): CoreMessage[] {
  if (!msgs.some((m) => m.contentType === 'tool-call' && m.toolName === COMPRESS_TOOL_NAME)) return [...msgs]
  const allCalls = new Set<string>()
  const activeCalls = new Set<string>()
  for (const b of state.blocks) {
    if (b.compressCallId === '') continue
    allCalls.add(b.compressCallId)
    if (b.active) activeCalls.add(b.compressCallId)
  }
  const isCompressCall = (m: CoreMessage) =>
    m.contentType === 'tool-call' && m.toolName === COMPRESS_TOOL_NAME && m.toolCallId !== ''
  const orphanKeep = new Set<string>()
  for (let i = msgs.length - 1, kept = 0; i >= 0 && kept < KEEP_LAST_ORPHANED; i--) {
    const m = msgs[i] as CoreMessage
    if (isCompressCall(m) && !allCalls.has(m.toolCallId)) {
      orphanKeep.add(m.toolCallId)
      kept++
    }
  }
  const drop = new Set<string>()
  for (const m of msgs)
    if (isCompressCall(m) && !activeCalls.has(m.toolCallId) && !orphanKeep.has(m.toolCallId))
      drop.add(m.toolCallId)
  const out: CoreMessage[] = []
  for (const m of msgs) {
    if (m.toolCallId !== '' && drop.has(m.toolCallId)) continue
    out.push(isCompressCall(m) ? { ...m, text: compactCompressText(m.text) } : m)
  }
  return out
}

/** The sizing steps of Norma's `ProcessTurn`: refs, block sync, prune, hidden Compress calls. */
export function processTurn(
  msgs: readonly CoreMessage[],
  state: CompressionState,
  cfg: ContextConfig,
): TurnResult {
  let st = assignRefsStep(msgs, state, cfg)
  st = syncBlocks(msgs, st)
  let view = st.blocks.length > 0 ? prune(msgs, st) : [...msgs]
  view = hideCompressCalls(view, st)
  return { messages: view, state: st }
}

/** Norma's `RunPruneOnly`: refs, block sync and prune (what Materialize shows). */
export function pruneOnly(
  msgs: readonly CoreMessage[],
  state: CompressionState,
  cfg: ContextConfig,
): TurnResult {
  let st = assignRefsStep(msgs, state, cfg)
  st = syncBlocks(msgs, st)
  return { messages: st.blocks.length > 0 ? prune(msgs, st) : [...msgs], state: st }
}

/** Norma's `ProjectedTokenCount`: the estimated tokens of the view (the panel's "before"). */
export function projectedTokenCount(
  msgs: readonly CoreMessage[],
  state: CompressionState,
  cfg: ContextConfig,
): number {
  let total = 0
  for (const m of processTurn(msgs, state, cfg).messages) total += countTokens(m.text)
  return total
}
