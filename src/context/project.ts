/**
 * From transcript messages to Noa's messages and back (Norma's `noaadapter.Project` and
 * `Reassemble`). Only what follows the last compaction marker is projected; each content block
 * becomes one message whose id is a hash of its content, so the same block gets the same id in
 * every session that holds it (re-recorded compaction tails included), and its ref with it.
 */
import { createHash } from 'node:crypto'
import { encodeBytes } from '../gocompat/index.js'
import type { ContentBlock, Message } from '../transcript/types.js'
import { lastBoundaryIndex, pairToolBlocks } from '../transcript/view.js'
import {
  type CoreContentType,
  type CoreMessage,
  type CoreRole,
  NUDGE_MESSAGE_ID,
  SUMMARY_ID_PREFIX,
} from './types.js'

/** `h_` + the first 16 hex digits of SHA-256 over `role|type|toolCallID|toolName|text`. */
export function deriveMessageId(
  role: CoreRole,
  contentType: CoreContentType,
  text: string,
  toolCallId: string,
  toolName: string,
): string {
  const seed = `${role}|${contentType}|${toolCallId}|${toolName}|${text}`
  // Go hashes the bytes: a raw tool input keeps bytes that are not UTF-8 (utf8.ts).
  return `h_${createHash('sha256').update(encodeBytes(seed)).digest('hex').slice(0, 16)}`
}

/** Repeats of an id get `_1`, `_2`, … (Norma's ClusterCounter). */
export class IdCounter {
  private readonly counts = new Map<string, number>()
  next(base: string): string {
    const n = this.counts.get(base) ?? 0
    this.counts.set(base, n + 1)
    return n === 0 ? base : `${base}_${n}`
  }
}

// Go RE2: `\s` is [\t\n\f\r ], `$` the end of the text, `[^>]` crosses lines.
const TRAILING_REF_TAG = /(?:^|\n)<noa-ref[\t\n\f\r ]+id="m[0-9]{5}"[^>]*\/>[\t\n\f\r ]*$/

/** Removes a `<noa-ref …/>` tag a view appended to a message. */
export function stripRefTag(text: string): string {
  return text.replace(TRAILING_REF_TAG, '')
}

/** A tool result's text: its non-empty text blocks joined by `\n`. */
export function flattenToolResult(blocks: readonly ContentBlock[] | null | undefined): string {
  const parts: string[] = []
  for (const b of blocks ?? []) if (b.type === 'text' && b.text) parts.push(b.text)
  return parts.join('\n')
}

/** Where a projected message came from in the messages after the last marker. */
export interface Origin {
  message: number
  block: number
}

export interface Projection {
  messages: CoreMessage[]
  /** By message id. */
  origins: Map<string, Origin>
  /** The transcript messages after the last compaction marker (what `origins` points into). */
  source: Message[]
}

function projectBlock(
  role: string,
  b: ContentBlock,
  toolNames: Map<string, string>,
): CoreMessage | undefined {
  const core = (r: CoreRole, contentType: CoreContentType, text: string, toolName = '', toolCallId = '') => ({
    id: '',
    role: r,
    contentType,
    text,
    toolName,
    toolCallId,
  })
  switch (b.type) {
    case 'text':
      return role === 'user'
        ? core('user', 'text', stripRefTag(b.text ?? ''))
        : core('assistant', 'text', b.text ?? '')
    case 'thinking':
      return core('assistant', 'reasoning', b.thinking ?? '')
    case 'tool_use':
      return core('assistant', 'tool-call', b.input ?? '', b.name ?? '', b.id ?? '')
    case 'tool_result': {
      const id = b.tool_use_id ?? ''
      return core(
        'tool',
        'tool-result',
        stripRefTag(flattenToolResult(b.content)),
        toolNames.get(id) ?? '',
        id,
      )
    }
    default:
      return undefined
  }
}

/** Norma's `Project`: one message per content block after the last compaction marker. */
export function project(messages: readonly Message[]): Projection {
  const from = lastBoundaryIndex(messages)
  const source = from >= 0 ? messages.slice(from + 1) : [...messages]
  const toolNames = new Map<string, string>()
  for (const m of source)
    for (const b of m.content ?? []) if (b.type === 'tool_use') toolNames.set(b.id ?? '', b.name ?? '')
  const counter = new IdCounter()
  const out: CoreMessage[] = []
  const origins = new Map<string, Origin>()
  source.forEach((m, mi) => {
    ;(m.content ?? []).forEach((b, bi) => {
      const core = projectBlock(m.role, b, toolNames)
      if (!core) return
      core.id = counter.next(
        deriveMessageId(core.role, core.contentType, core.text, core.toolCallId, core.toolName),
      )
      origins.set(core.id, { message: mi, block: bi })
      out.push(core)
    })
  })
  return { messages: out, origins, source }
}

function isSynthetic(m: CoreMessage): boolean {
  return m.id.startsWith(SUMMARY_ID_PREFIX) || m.id === NUDGE_MESSAGE_ID
}

function rebuildBlock(b: ContentBlock, c: CoreMessage): ContentBlock {
  switch (b.type) {
    case 'text':
      return { ...b, text: c.text }
    case 'thinking':
      return { ...b, thinking: c.text }
    case 'tool_use':
      if (c.text !== (b.input ?? '')) {
        try {
          JSON.parse(c.text)
          return { ...b, input: c.text }
        } catch {
          return b
        }
      }
      return b
    case 'tool_result': {
      const out: ContentBlock = { ...b, content: [{ type: 'text', text: c.text }] }
      if (b.is_error) out.is_error = true
      else delete out.is_error
      return out
    }
    default:
      return b
  }
}

function hasText(m: Message): boolean {
  return (m.content ?? []).some((b) => b.type === 'text' && (b.text ?? '') !== '')
}

/**
 * Norma's `Reassemble` without ref tags: back to transcript messages. Consecutive projected
 * messages of one original message are rebuilt into it; summary messages become user text
 * messages; unpaired tool blocks and messages left empty are dropped.
 */
export function reassemble(
  view: readonly CoreMessage[],
  projection: Projection,
  /** Filled with the id of the projected message each block of the result comes from. */
  ids?: Map<ContentBlock, string>,
): Message[] {
  const { origins, source } = projection
  const note = (b: ContentBlock, id: string): ContentBlock => {
    ids?.set(b, id)
    return b
  }
  let out: Message[] = []
  let i = 0
  while (i < view.length) {
    const c = view[i] as CoreMessage
    if (isSynthetic(c)) {
      out.push({ role: 'user', content: [note({ type: 'text', text: c.text }, c.id)] })
      i++
      continue
    }
    const o = origins.get(c.id)
    if (!o || o.message >= source.length) {
      out.push({
        role: c.role === 'assistant' ? 'assistant' : 'user',
        content: [note({ type: 'text', text: c.text }, c.id)],
      })
      i++
      continue
    }
    const group = [c]
    let j = i + 1
    while (j < view.length && !isSynthetic(view[j] as CoreMessage)) {
      const oj = origins.get((view[j] as CoreMessage).id)
      if (!oj || oj.message !== o.message) break
      group.push(view[j] as CoreMessage)
      j++
    }
    i = j
    const orig = source[o.message] as Message
    const content: ContentBlock[] = []
    for (const g of group) {
      const og = origins.get(g.id) as Origin
      const b = orig.content?.[og.block]
      if (b) content.push(note(rebuildBlock(b, g), g.id))
    }
    if (content.length > 0) out.push({ role: orig.role, content })
  }
  out = pairToolBlocks(out)
  return out.filter((m) => {
    const blocks = m.content ?? []
    if (blocks.length === 0) return false
    if (m.role === 'assistant' && !hasText(m) && !blocks.some((b) => b.type === 'tool_use'))
      return blocks.some((b) => b.type === 'thinking')
    return true
  })
}
