/**
 * Whole sessions: resuming one (Norma's `agentcore.Session.Resume`) and accounting for it with
 * its sidechains.
 */
import { type LoadOptions, loadTranscript, type TornTail } from './loader.js'
import { listSidechains, transcriptPath } from './paths.js'
import { addUsage, type Message, type TranscriptRecord, type Usage, zeroUsage } from './types.js'
import { lastUuid, messages } from './view.js'

export interface ResumeOptions extends LoadOptions {
  /** Resume a sidechain instead of the main transcript (Norma resumes only the main one). */
  agentId?: string
}

export interface Resumed {
  file: string
  /** False when the session has no transcript yet (Norma resumes it as empty). */
  exists: boolean
  /** The conversation to continue with. */
  messages: Message[]
  /** Trailing assistant messages with a tool_use that were dropped (their results were never recorded). */
  dropped: Message[]
  /** Usage of every message, the dropped ones included (Norma's rule). */
  usage: Usage
  /**
   * What new records chain after: the uuid of the last record in the file, whatever its type
   * (a dropped tool_use or a boundary record included). Undefined when there is none.
   */
  parentUuid: string | undefined
  /** Every record loaded. */
  records: TranscriptRecord[]
  tornTail: TornTail | null
}

function hasToolUse(m: Message): boolean {
  return (m.content ?? []).some((b) => b.type === 'tool_use')
}

/**
 * Norma's `cleanResumed`: drops the last message while it is an assistant message with at least
 * one tool_use (a crash between the call and its result leaves one the model API would refuse).
 */
export function cleanResumed(msgs: readonly Message[]): { kept: Message[]; dropped: Message[] } {
  let end = msgs.length
  while (end > 0) {
    const m = msgs[end - 1] as Message
    if (m.role !== 'assistant' || !hasToolUse(m)) break
    end--
  }
  return { kept: msgs.slice(0, end), dropped: msgs.slice(end) }
}

/**
 * Loads a session's transcript to continue it. Continue the file with
 * `new TranscriptWriter({ dir, sessionId, parentUuid: resumed.parentUuid })`.
 */
export async function resume(dir: string, sessionId: string, options: ResumeOptions = {}): Promise<Resumed> {
  const { agentId, ...load } = options
  const t = await loadTranscript(transcriptPath(dir, sessionId, agentId), load)
  // Norma mode resumes with Norma's view (blocks of every type).
  const conv = messages(t.records, { strict: load.strict ?? false })
  const { kept, dropped } = cleanResumed(conv.messages)
  const last = lastUuid(t.records)
  return {
    file: t.file,
    exists: t.exists,
    messages: kept,
    dropped,
    usage: conv.usage,
    parentUuid: last === '' ? undefined : last,
    records: t.records,
    tornTail: t.tornTail,
  }
}

export interface FileUsage {
  file: string
  exists: boolean
  records: number
  messages: number
  /** Summed as `messages()` sums it. */
  usage: Usage
  tornTail: TornTail | null
}

export interface SidechainUsage extends FileUsage {
  agentId: string
}

export interface SessionUsage {
  sessionId: string
  main: FileUsage
  /** One per sidechain file, by agent id. */
  sidechains: SidechainUsage[]
  /** Main plus every sidechain (Norma never adds them up). */
  total: Usage
}

async function fileUsage(file: string, options: LoadOptions): Promise<FileUsage> {
  const t = await loadTranscript(file, options)
  const conv = messages(t.records)
  return {
    file,
    exists: t.exists,
    records: t.records.length,
    messages: conv.messages.length,
    usage: conv.usage,
    tornTail: t.tornTail,
  }
}

/** Token usage of a session: the main transcript and, beside it, each sidechain. */
export async function sessionUsage(
  dir: string,
  sessionId: string,
  options: LoadOptions = {},
): Promise<SessionUsage> {
  const main = await fileUsage(transcriptPath(dir, sessionId), options)
  const sidechains: SidechainUsage[] = []
  for (const s of await listSidechains(dir, sessionId)) {
    sidechains.push({ agentId: s.agentId, ...(await fileUsage(s.file, options)) })
  }
  const total = addUsage(zeroUsage(), main.usage)
  for (const s of sidechains) addUsage(total, s.usage)
  return { sessionId, main, sidechains, total }
}
