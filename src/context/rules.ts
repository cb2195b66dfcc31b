/**
 * Which messages may be compressed and how a range keeps the conversation well formed (Norma's
 * protected.go, recommend.go, toolpairs.go, turnintegrity.go): Compress calls and protected
 * tools are never compressed, a tool call stays with its result, reasoning stays with the turn
 * it belongs to, and (when configured) the most recent messages are left alone.
 */
import type { ContextConfig } from './config.js'
import { coveredMessageIds } from './state.js'
import { countTokens } from './tokens.js'
import {
  ALWAYS_PROTECTED_TOOLS,
  BLOCKED_REF,
  COMPRESS_TOOL_NAME,
  type CompressionState,
  type CoreMessage,
  NEVER_PRESERVE_RECENT_TOOLS,
  SUMMARY_HEADER,
  SUMMARY_ID_PREFIX,
  TOOL_PAIR_MAX_SCAN,
} from './types.js'

/** `Name` matches that tool (any case); `Prefix*` every tool starting so. */
export function matchToolPattern(pattern: string, toolName: string): boolean {
  if (pattern === '' || toolName === '') return false
  const p = pattern.toLowerCase()
  const n = toolName.toLowerCase()
  return p.endsWith('*') ? n.startsWith(p.slice(0, -1)) : p === n
}

/** A call or result of a tool whose messages are never compressed (and get `BLOCKED`). */
export function isMessageProtected(m: CoreMessage, cfg: ContextConfig): boolean {
  if (m.toolName === '') return false
  if (ALWAYS_PROTECTED_TOOLS.includes(m.toolName)) return true
  if (cfg.protectedTools.some((p) => matchToolPattern(p, m.toolName))) return true
  return cfg.isToolProtected?.(m.toolName) === true
}

export function protectedToolCallIds(msgs: readonly CoreMessage[], cfg: ContextConfig): Set<string> {
  const ids = new Set<string>()
  for (const m of msgs) if (m.toolCallId !== '' && isMessageProtected(m, cfg)) ids.add(m.toolCallId)
  return ids
}

export function isProtectedWithPairing(m: CoreMessage, cfg: ContextConfig, callIds: Set<string>): boolean {
  return isMessageProtected(m, cfg) || (m.toolCallId !== '' && callIds.has(m.toolCallId))
}

/** A summary message a view put in place of a block. */
export function isRenderedSummary(m: CoreMessage): boolean {
  return (
    m.id.startsWith(SUMMARY_ID_PREFIX) &&
    m.role === 'user' &&
    m.contentType === 'text' &&
    m.text.startsWith(SUMMARY_HEADER)
  )
}

function isNeverPreserveRecentTool(m: CoreMessage): boolean {
  if (m.toolName === '') return false
  const n = m.toolName.toLowerCase()
  return NEVER_PRESERVE_RECENT_TOOLS.some((t) => t.toLowerCase() === n)
}

/**
 * Refs of the recent messages a compression must leave alone: the last `preserveRecentMessages`
 * visible messages, the most recent ones up to `preserveRecentTokens`, and the latest user
 * message. Empty with noa's default config.
 */
export function protectedRefs(
  msgs: readonly CoreMessage[],
  state: CompressionState,
  cfg: ContextConfig,
): Set<string> {
  const out = new Set<string>()
  const covered = coveredMessageIds(state)
  const visible: Array<{ ref: string; tokens: number; isUser: boolean }> = []
  for (const m of msgs) {
    if (m.id === '' || covered.has(m.id) || isRenderedSummary(m) || m.text.startsWith(SUMMARY_HEADER))
      continue
    const ref = state.messageRefs.byRaw.get(m.id)
    if (ref === undefined || ref === BLOCKED_REF || isNeverPreserveRecentTool(m)) continue
    visible.push({ ref, tokens: countTokens(m.text), isUser: m.role === 'user' })
  }
  if (cfg.preserveRecentMessages > 0) {
    for (const v of visible.slice(Math.max(visible.length - cfg.preserveRecentMessages, 0))) out.add(v.ref)
  }
  if (cfg.preserveRecentTokens > 0) {
    let acc = 0
    for (let i = visible.length - 1; i >= 0 && acc < cfg.preserveRecentTokens; i--) {
      const v = visible[i] as (typeof visible)[number]
      out.add(v.ref)
      acc += v.tokens
    }
  }
  if (cfg.preserveRecentMessages > 0) {
    for (let i = visible.length - 1; i >= 0; i--) {
      const v = visible[i] as (typeof visible)[number]
      if (v.isUser) {
        out.add(v.ref)
        break
      }
    }
  }
  return out
}

export function isAssistantAct(m: CoreMessage): boolean {
  return m.role === 'assistant' && (m.contentType === 'text' || m.contentType === 'tool-call')
}

/** A turn: a run of reasoning, then the assistant's text and calls, then the results of those calls. */
export interface TurnGroup {
  reasoning: number[]
  acts: number[]
  results: number[]
}

export function turnGroups(msgs: readonly CoreMessage[]): TurnGroup[] {
  const groups: TurnGroup[] = []
  let i = 0
  while (i < msgs.length) {
    const m = msgs[i] as CoreMessage
    if (m.contentType !== 'reasoning' && !isAssistantAct(m)) {
      i++
      continue
    }
    const g: TurnGroup = { reasoning: [], acts: [], results: [] }
    while (i < msgs.length && (msgs[i] as CoreMessage).contentType === 'reasoning') g.reasoning.push(i++)
    const calls = new Set<string>()
    while (i < msgs.length && isAssistantAct(msgs[i] as CoreMessage)) {
      const id = (msgs[i] as CoreMessage).toolCallId
      if (id !== '') calls.add(id)
      g.acts.push(i++)
    }
    while (
      i < msgs.length &&
      (msgs[i] as CoreMessage).contentType === 'tool-result' &&
      calls.has((msgs[i] as CoreMessage).toolCallId)
    ) {
      g.results.push(i++)
    }
    if (g.reasoning.length > 0 || g.acts.length > 0) groups.push(g)
  }
  return groups
}

/**
 * Takes back from `folded` every message of a turn whose reasoning would be compressed while
 * one of its tool calls stays visible (providers that echo reasoning reject such a request).
 */
export function withdrawSplitTurns(
  msgs: readonly CoreMessage[],
  folded: Set<string>,
): { kept: Set<string>; withdrawn: string[] } {
  if (folded.size === 0) return { kept: folded, withdrawn: [] }
  const kept = new Set(folded)
  const withdrawn: string[] = []
  for (const g of turnGroups(msgs)) {
    if (g.reasoning.length === 0) continue
    if (!g.reasoning.some((i) => kept.has((msgs[i] as CoreMessage).id))) continue
    const callVisible = g.acts.some((i) => {
      const m = msgs[i] as CoreMessage
      return m.contentType === 'tool-call' && !kept.has(m.id)
    })
    if (!callVisible) continue
    for (const i of [...g.reasoning, ...g.acts, ...g.results]) {
      const id = (msgs[i] as CoreMessage).id
      if (kept.delete(id)) withdrawn.push(id)
    }
  }
  return { kept, withdrawn }
}

function adjustForToolPairs(start: number, end: number, msgs: readonly CoreMessage[]): [number, number] {
  if (start < 0 || end >= msgs.length || start > end) return [start, end]
  const inRange = new Set<string>()
  for (let i = start; i <= end; i++) {
    const m = msgs[i] as CoreMessage
    if (m.toolCallId !== '' && m.toolName !== COMPRESS_TOOL_NAME) inRange.add(m.toolCallId)
  }
  if (inRange.size === 0) return [start, end]
  const forward = Math.min(end + TOOL_PAIR_MAX_SCAN, msgs.length - 1)
  const backward = Math.max(start - TOOL_PAIR_MAX_SCAN, 0)
  for (let i = end + 1; i <= forward; i++) {
    const id = (msgs[i] as CoreMessage).toolCallId
    if (id === '' || !inRange.has(id)) break
    end = i
  }
  for (let i = start - 1; i >= backward; i--) {
    const id = (msgs[i] as CoreMessage).toolCallId
    if (id === '' || !inRange.has(id)) break
    start = i
  }
  return [start, end]
}

function adjustForReasoning(start: number, end: number, msgs: readonly CoreMessage[]): [number, number] {
  if (start < 0 || end >= msgs.length || start > end) return [start, end]
  if ((msgs[end] as CoreMessage).contentType === 'reasoning') {
    let i = end + 1
    while (i < msgs.length && (msgs[i] as CoreMessage).contentType === 'reasoning') i++
    while (i < msgs.length && isAssistantAct(msgs[i] as CoreMessage)) end = i++
  }
  if (isAssistantAct(msgs[start] as CoreMessage)) {
    for (let i = start - 1; i >= 0 && (msgs[i] as CoreMessage).contentType === 'reasoning'; i--) start = i
  }
  return [start, end]
}

/** Widens a range of view indexes so that it does not cut a tool pair or a reasoning run. */
export function adjustRangeForPairs(
  start: number,
  end: number,
  msgs: readonly CoreMessage[],
): [number, number] {
  for (let round = 0; round < 2; round++) {
    let [s, e] = adjustForReasoning(start, end, msgs)
    ;[s, e] = adjustForToolPairs(s, e, msgs)
    if (s === start && e === end) break
    start = s
    end = e
  }
  return [start, end]
}
