/**
 * Hosts of a shared workspace in one test process (test/07-replicate/shared*.test.ts): an R3
 * stream of the test's own, deleted when the test ends, and hosts that are each a root, an
 * AgentLog and a SharedWorkspaces of their own, closed when the test ends.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { jetstreamManager } from '@nats-io/jetstream'
import { expect, onTestFinished } from 'vitest'
import { AgentLog } from '../../dist/src/index.js'
import { initStream, type SharedOptions, SharedWorkspaces } from '../../dist/src/replicate/index.js'
import { tempDir } from './index.js'
import { streamContents, uniqueNames, withConnection } from './nats.js'

export function sharedHosts(cluster: { urls(): string }) {
  const first = () => cluster.urls().split(',')[0] as string

  async function newStream(replicas = 3) {
    const names = uniqueNames()
    await initStream({ nats: cluster.urls(), prefix: names.prefix, stream: names.stream, replicas })
    onTestFinished(() =>
      withConnection(first(), async (nc) => {
        await (await jetstreamManager(nc)).streams.delete(names.stream).catch(() => {})
      }),
    )
    return names
  }

  async function host(prefix: string, workspaces: string[], extra: Partial<SharedOptions> = {}) {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1 })
    const shared = await SharedWorkspaces.open({ log, nats: cluster.urls(), prefix, workspaces, ...extra })
    onTestFinished(async () => {
      await shared.close().catch(() => {})
      await log.close()
    })
    return { root, log, shared }
  }

  const logOf = (root: string, ws: string) => readFileSync(join(root, 'agent-logs', `${ws}.log`))

  /**
   * The workspace's order as the stream holds it: its messages in stream order (each may carry
   * several lines), a message that does not start right after the entries before it skipped (a
   * racer nats-server 2.9 stored with a stale expectation, nats-io/nats-server#4320); the order
   * itself has no gap.
   */
  async function streamLines(stream: string, prefix: string, ws: string): Promise<Buffer> {
    const contents = await streamContents(first(), stream, prefix)
    let last = 0
    let out = ''
    for (const m of contents.get(`${prefix}.${ws}`) ?? []) {
      const lines = m.line.split('\n')
      const seqs = lines.map((l) => JSON.parse(l).seq as number)
      if ((seqs[0] as number) <= last) continue
      expect(seqs[0]).toBe(last + 1)
      last = seqs[seqs.length - 1] as number
      out += lines.map((l) => `${l}\n`).join('')
    }
    return Buffer.from(out)
  }

  return { first, newStream, host, logOf, streamLines }
}
