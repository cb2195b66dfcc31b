/** Conversations and transcripts for the context tests. */
import { createHash } from 'node:crypto'
import type { ContentBlock, Message } from '../../dist/src/transcript/index.js'
import { TranscriptWriter } from '../../dist/src/transcript/index.js'

export const user = (text: string): Message => ({ role: 'user', content: [{ type: 'text', text }] })
export const assistant = (text: string): Message => ({ role: 'assistant', content: [{ type: 'text', text }] })

export const toolUse = (id: string, name: string, input: string, before: ContentBlock[] = []): Message => ({
  role: 'assistant',
  content: [...before, { type: 'tool_use', id, name, input }],
})

export const toolResult = (id: string, text: string, isError = false): Message => ({
  role: 'user',
  content: [
    {
      type: 'tool_result',
      tool_use_id: id,
      content: [{ type: 'text', text }],
      ...(isError ? { is_error: true } : {}),
    },
  ],
})

export const marker = (preTokens = 1000): Message => ({
  role: 'user',
  content: [{ type: 'compact_boundary', input: JSON.stringify({ trigger: 'auto', pre_tokens: preTokens }) }],
})

/** A Compress call as the model makes it. */
export function compressUse(
  id: string,
  ranges: Array<Record<string, unknown>>,
  extra: Record<string, unknown> = {},
): Message {
  return toolUse(id, 'Compress', JSON.stringify({ content: ranges, ...extra }))
}

/** Norma's message id, computed here from its definition (independently of the library). */
export function hid(role: string, type: string, text: string, callId = '', tool = ''): string {
  return `h_${createHash('sha256').update(`${role}|${type}|${callId}|${tool}|${text}`).digest('hex').slice(0, 16)}`
}

/** Norma's token estimate, from its definition: CJK runes + ceil(other runes / 4). */
export function tokens(text: string): number {
  let cjk = 0
  let other = 0
  for (const ch of text) {
    const c = ch.codePointAt(0) as number
    if ((c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3040 && c <= 0x30ff) || (c >= 0xac00 && c <= 0xd7af)) cjk++
    else other++
  }
  return cjk + Math.ceil(other / 4)
}

/** Writes messages as a Norma transcript `<dir>/<sessionId>.jsonl`; returns its path. */
export async function writeTranscript(
  dir: string,
  sessionId: string,
  msgs: readonly Message[],
): Promise<string> {
  const w = new TranscriptWriter({ dir, sessionId })
  for (const m of msgs) await w.recordMessage(m)
  await w.close()
  return `${dir}/${sessionId}.jsonl`
}

/** A fixed clock: 2024-06-05T13:00:00Z. */
export const NOW = new Date(Date.UTC(2024, 5, 5, 13, 0, 0))
export const NOW_UNIX = Math.floor(NOW.getTime() / 1000)

/** Runs `noa` in this process (the built CLI's `main`), for tests that make many calls. */
export { runMain as cli } from './index.js'
