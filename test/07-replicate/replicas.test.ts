/** What a new user meets with replication: `noa replicate init --replicas 3` on a single server. */
import { jetstreamManager } from '@nats-io/jetstream'
import { describe, expect, it } from 'vitest'
import { runCliAsync } from '../helpers/index.js'
import { uniqueNames, useNats, withConnection } from '../helpers/nats.js'

const nats = useNats()

describe('noa replicate init --replicas', () => {
  it('refuses more replicas than a single server can hold, creating nothing', async () => {
    const url = nats.url()
    const clustered = await withConnection(url, async (nc) => Boolean(nc.info?.cluster))
    const { prefix, stream } = uniqueNames()
    const r = await runCliAsync([
      'replicate',
      'init',
      '--nats',
      url,
      '--prefix',
      prefix,
      '--stream',
      stream,
      '--replicas',
      '3',
    ])
    if (clustered) {
      // NOA_TEST_NATS_URL named a cluster: there, 3 replicas are what it is for.
      expect(r.status).toBe(0)
      return
    }
    expect(r.status).toBe(1)
    expect(r.stderr).toBe(
      `noa replicate: replicas 3 needs a JetStream cluster of at least 3 servers, but ${url} is a single server (not in a cluster), which keeps one copy of each message: use replicas 1 there, or connect to a cluster\n`,
    )
    const names = await withConnection(url, async (nc) => {
      const jsm = await jetstreamManager(nc)
      const out: string[] = []
      for await (const s of jsm.streams.list()) out.push(s.config.name)
      return out
    })
    expect(names).not.toContain(stream)
    // One replica is what it holds.
    const one = await runCliAsync([
      'replicate',
      'init',
      '--nats',
      url,
      '--prefix',
      prefix,
      '--stream',
      stream,
    ])
    expect([one.status, one.stdout]).toEqual([0, `created stream ${stream} for ${prefix}.>\n`])
    await withConnection(url, async (nc) => (await jetstreamManager(nc)).streams.delete(stream))
  })
})
