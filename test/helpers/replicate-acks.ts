/** What the replicated-ack tests read back: every entry a stream holds per workspace, messages split. */
import { DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream'
import { withConnection } from './nats.js'

export interface StreamEntry {
  /** The entry's seq (from its line). */
  seq: number
  line: string
  /** The stream sequence of the message that holds it. */
  streamSeq: number
  msgId: string
}

/** Every entry on `<prefix>.<workspace>` subjects, in stream order, keyed by workspace (fences skipped). */
export async function streamEntries(url: string, stream: string, prefix: string) {
  return withConnection(url, async (nc) => {
    const jsm = await jetstreamManager(nc)
    const info = await jsm.streams.info(stream)
    const out = new Map<string, StreamEntry[]>()
    if (info.state.messages === 0) return out
    const consumer = await jetstream(nc).consumers.get(stream, {
      filter_subjects: `${prefix}.>`,
      deliver_policy: DeliverPolicy.All,
    })
    let seen = 0
    while (seen < info.state.messages) {
      const batch = await consumer.fetch({ max_messages: 1000, expires: 2000 })
      let got = 0
      for await (const m of batch) {
        got++
        seen++
        const ws = m.subject.slice(prefix.length + 1)
        const list = out.get(ws) ?? []
        const msgId = m.headers?.get('Nats-Msg-Id') ?? ''
        if (!m.headers?.get('Noa-Fence')) {
          for (const line of m.string().split('\n')) {
            list.push({ seq: JSON.parse(line).seq, line, streamSeq: m.seq, msgId })
          }
        }
        out.set(ws, list)
        if (m.info.pending === 0) {
          batch.stop()
          seen = info.state.messages
        }
      }
      if (got === 0) break
    }
    return out
  })
}
