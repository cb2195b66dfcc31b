/** What the replicated-ack tests read back: every entry a stream holds per workspace, messages split. */
import { jetstreamManager, type StoredMsg } from '@nats-io/jetstream'
import { withConnection } from './nats.js'

export interface StreamEntry {
  /** The entry's seq (from its line). */
  seq: number
  line: string
  /** The stream sequence of the message that holds it. */
  streamSeq: number
  msgId: string
}

/**
 * Every entry on `<prefix>.<workspace>` subjects, in stream order, keyed by workspace (fences
 * skipped). Read message by message from the stream's leader (no consumer: one placed on a
 * replica that is catching up after a restart would see only what that replica has).
 */
export async function streamEntries(url: string, stream: string, prefix: string) {
  return withConnection(url, async (nc) => {
    const jsm = await jetstreamManager(nc)
    const info = await jsm.streams.info(stream)
    const out = new Map<string, StreamEntry[]>()
    if (info.state.messages === 0) return out
    const seqs: number[] = []
    for (let s = info.state.first_seq; s <= info.state.last_seq; s++) seqs.push(s)
    const msgs: Array<StoredMsg | null> = []
    for (let i = 0; i < seqs.length; i += 32) {
      const part = await Promise.all(
        seqs.slice(i, i + 32).map((seq) => jsm.streams.getMessage(stream, { seq }).catch(() => null)),
      )
      msgs.push(...part)
    }
    for (const m of msgs) {
      if (!m?.subject.startsWith(`${prefix}.`)) continue
      const ws = m.subject.slice(prefix.length + 1)
      const list = out.get(ws) ?? []
      const msgId = m.header?.get('Nats-Msg-Id') ?? ''
      if (!m.header?.get('Noa-Fence')) {
        for (const line of m.string().split('\n')) {
          list.push({ seq: JSON.parse(line).seq, line, streamSeq: m.seq, msgId })
        }
      }
      out.set(ws, list)
    }
    return out
  })
}
