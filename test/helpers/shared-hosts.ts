/**
 * Hosts of a shared workspace in one test process (test/07-replicate/shared*.test.ts): an R3
 * stream of the test's own, deleted when the test ends, and hosts that are each a root, an
 * AgentLog and a SharedWorkspaces of their own, closed when the test ends.
 */
import { jetstreamManager } from '@nats-io/jetstream'
import { onTestFinished } from 'vitest'
import { AgentLog } from '../../dist/src/index.js'
import { initStream, type SharedOptions, SharedWorkspaces } from '../../dist/src/replicate/index.js'
import { tempDir } from './index.js'
import { uniqueNames, withConnection } from './nats.js'

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

  return { first, newStream, host }
}
