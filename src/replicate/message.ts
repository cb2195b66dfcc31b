/**
 * What one message on a workspace subject carries (issue 34's contract, shared by the publisher,
 * the mirror, `status`, replicated acks, shared workspaces and failover):
 *
 * - **entries**: one or more consecutive log lines of the workspace, joined by `\n` (no
 *   trailing `\n`; a single entry is exactly its line, as every message written before issue 34).
 *   `Nats-Msg-Id` is `<workspace>:<last seq>`; a message with more than one entry also carries
 *   `Noa-First-Seq: <first seq>`. Seqs follow one another and ts rise, inside the message.
 * - **fence**: written by `promote` when a host takes a workspace over. Empty body,
 *   `Noa-Fence: <writer id>`, `Nats-Msg-Id: <workspace>:fence:<after>:<writer id>`, where
 *   `after` is the last entry seq it follows. It moves the subject's last sequence, so every
 *   publish that still expects the sequence before it (the old writer's) is refused. Readers
 *   skip it; the entries after it must go on from `after + 1`.
 *
 * `decodeMessage` checks all of it and refuses anything else with NOA_REPLICATION naming the
 * stream seq, so a reader never applies a message it does not understand.
 */
import { replicationError } from './failures.js'
import { countersOf } from './lines.js'
import { entryMsgId } from './subjects.js'

export const HDR_FIRST_SEQ = 'Noa-First-Seq'
export const HDR_FENCE = 'Noa-Fence'

/** A writer id: what a fence names (a host name, a root's id): a short token. */
const WRITER_RE = /^[A-Za-z0-9_.-]{1,128}$/

export type DecodedMessage =
  | { kind: 'entries'; first: number; last: number; lastTs: number; lines: Buffer[] }
  | { kind: 'fence'; writer: string; after: number }

export interface EncodedMessage {
  data: Buffer
  /** Headers to set besides Nats-Expected-Last-Subject-Sequence. */
  headers: Record<string, string>
  msgId: string
  first: number
  last: number
}

/** Header access as both @nats-io message kinds have it. */
export interface HeaderSource {
  get(name: string): string
}

const NL = 0x0a

/** The message for consecutive lines of one workspace (each without its `\n`). */
export function encodeEntries(workspace: string, lines: readonly Uint8Array[]): EncodedMessage {
  if (lines.length === 0) throw new Error('encodeEntries: no lines')
  const first = countersOf(lines[0] as Uint8Array).seq
  const last = countersOf(lines[lines.length - 1] as Uint8Array).seq
  if (last - first + 1 !== lines.length) {
    throw replicationError(
      `workspace ${workspace}: lines ${first}..${last} are not ${lines.length} consecutive entries`,
      {
        workspace,
      },
    )
  }
  const parts: Uint8Array[] = []
  for (let i = 0; i < lines.length; i++) {
    if (i > 0) parts.push(Buffer.from([NL]))
    parts.push(lines[i] as Uint8Array)
  }
  const msgId = entryMsgId(workspace, last)
  const headers: Record<string, string> = { 'Nats-Msg-Id': msgId }
  if (lines.length > 1) headers[HDR_FIRST_SEQ] = String(first)
  return { data: Buffer.concat(parts), headers, msgId, first, last }
}

export function fenceMsgId(workspace: string, after: number, writer: string): string {
  return `${workspace}:fence:${after}:${writer}`
}

/** The fence a promote publishes after entry `after` (see the module comment). */
export function encodeFence(workspace: string, after: number, writer: string): EncodedMessage {
  if (!WRITER_RE.test(writer)) {
    throw replicationError(`writer id ${JSON.stringify(writer)} must be 1 to 128 letters, digits, _ . or -`, {
      field: 'writer',
    })
  }
  const msgId = fenceMsgId(workspace, after, writer)
  return {
    data: Buffer.alloc(0),
    headers: { 'Nats-Msg-Id': msgId, [HDR_FENCE]: writer },
    msgId,
    first: after + 1,
    last: after,
  }
}

/** Splits and checks one message of `workspace`'s subject (stream seq `streamSeq`). */
export function decodeMessage(
  workspace: string,
  streamSeq: number,
  data: Uint8Array,
  headers: HeaderSource | undefined,
): DecodedMessage {
  const bad = (why: string) =>
    replicationError(`stream seq ${streamSeq} (workspace ${workspace}): ${why}`, { workspace, streamSeq })
  const msgId = headers?.get('Nats-Msg-Id') ?? ''
  const fence = headers?.get(HDR_FENCE) ?? ''
  if (fence !== '') {
    const m = /^(.*):fence:(\d+):([^:]+)$/.exec(msgId)
    if (!m || m[1] !== workspace || m[3] !== fence || !WRITER_RE.test(fence) || data.byteLength !== 0)
      throw bad(
        `a fence with Nats-Msg-Id ${JSON.stringify(msgId)} that does not name this workspace and writer ${JSON.stringify(fence)}`,
      )
    return { kind: 'fence', writer: fence, after: Number(m[2]) }
  }
  const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength)
  const lines: Buffer[] = []
  let from = 0
  for (;;) {
    const nl = buf.indexOf(NL, from)
    lines.push(buf.subarray(from, nl < 0 ? buf.length : nl))
    if (nl < 0) break
    from = nl + 1
  }
  let prev: { seq: number; ts: number } | null = null
  let first = 0
  for (const line of lines) {
    let c: { seq: number; ts: number }
    try {
      c = countersOf(line)
    } catch (err) {
      throw bad(`not a log line: ${(err as Error).message}`)
    }
    if (prev === null) first = c.seq
    else if (c.seq !== prev.seq + 1 || c.ts <= prev.ts)
      throw bad(
        `entry seq ${c.seq} (ts ${c.ts}) does not follow seq ${prev.seq} (ts ${prev.ts}) inside the message`,
      )
    prev = c
  }
  const last = (prev as { seq: number; ts: number }).seq
  const lastTs = (prev as { seq: number; ts: number }).ts
  if (msgId !== entryMsgId(workspace, last))
    throw bad(`Nats-Msg-Id ${JSON.stringify(msgId)} does not name ${entryMsgId(workspace, last)}`)
  const firstHdr = headers?.get(HDR_FIRST_SEQ) ?? ''
  if (lines.length > 1 ? firstHdr !== String(first) : firstHdr !== '' && firstHdr !== String(first))
    throw bad(`${HDR_FIRST_SEQ} ${JSON.stringify(firstHdr)} does not match its first entry's seq ${first}`)
  return { kind: 'entries', first, last, lastTs, lines }
}
