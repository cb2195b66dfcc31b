/**
 * The live tail as Server-Sent Events: `event: entries` with a JSON array of entries, sent at
 * most every 100 ms (or at 1,000 entries), so a writer at 10,000 entries/s costs the page ten
 * messages a second. The follower pulls: while the socket has more than 1 MiB unsent, it is not
 * read further, so a tab that falls behind holds the server's memory to that, not to the log.
 */
import type { ServerResponse } from 'node:http'
import type { Entry } from '../engine/entry.js'

const FLUSH_MS = 100
const BATCH = 1000
const HIGH_WATER = 1 << 20
const HEARTBEAT_MS = 15_000

export async function streamEntries(
  res: ServerResponse,
  entries: AsyncIterable<Entry>,
  signal: AbortSignal,
  headers: Record<string, string>,
): Promise<void> {
  res.writeHead(200, { ...headers, 'content-type': 'text/event-stream; charset=utf-8' })
  res.write(': noa ui live\n\n')
  let batch: Entry[] = []
  let timer: NodeJS.Timeout | null = null
  const flush = () => {
    if (timer) clearTimeout(timer)
    timer = null
    if (batch.length === 0 || res.destroyed) return
    res.write(`event: entries\ndata: ${JSON.stringify(batch)}\n\n`)
    batch = []
  }
  const heartbeat = setInterval(() => {
    if (!res.destroyed) res.write(': ping\n\n')
  }, HEARTBEAT_MS)
  try {
    for await (const e of entries) {
      if (signal.aborted) break
      batch.push(e)
      if (batch.length >= BATCH) flush()
      else timer ??= setTimeout(flush, FLUSH_MS)
      if (res.writableLength > HIGH_WATER) {
        await new Promise<void>((resolve) => {
          const done = () => {
            res.off('drain', done)
            signal.removeEventListener('abort', done)
            resolve()
          }
          res.on('drain', done)
          signal.addEventListener('abort', done)
        })
      }
    }
  } catch (err) {
    if (!signal.aborted && !res.destroyed) {
      const message = err instanceof Error ? err.message : String(err)
      res.write(`event: problem\ndata: ${JSON.stringify({ message })}\n\n`)
    }
  } finally {
    clearInterval(heartbeat)
    flush()
  }
}
