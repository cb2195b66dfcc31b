/**
 * The three-server cluster the replicated-ack, shared-workspace and failover tests stand on:
 * an R3 stream keeps taking publishes, acknowledged by a majority, while its leader is killed.
 */
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import { connect } from '@nats-io/transport-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type NatsCluster, startNatsCluster, useNatsCluster } from '../helpers/nats-cluster.js'

describe('a three-server JetStream cluster on loopback', () => {
  let cluster: NatsCluster
  beforeAll(async () => {
    cluster = await startNatsCluster()
  }, 60_000)
  afterAll(async () => {
    await cluster?.stop()
  })

  it('keeps an R3 stream writable when its leader is SIGKILLed, and the restarted node catches up', async () => {
    const nc = await connect({
      servers: cluster.urls.split(','),
      maxReconnectAttempts: -1,
      reconnectTimeWait: 100,
    })
    try {
      const jsm = await jetstreamManager(nc)
      await jsm.streams.add({ name: 'R3', subjects: ['r3.>'], num_replicas: 3 })
      const js = jetstream(nc)
      const ack1 = await js.publish('r3.a', 'one')
      expect(ack1.seq).toBe(1)
      const leader = await cluster.streamLeader('R3')
      const node = cluster.nodes.find((n) => n.name === leader)
      expect(node).toBeDefined()
      await node?.kill()
      let ack2 = null
      for (let i = 0; i < 100 && !ack2; i++) {
        ack2 = await js.publish('r3.a', 'two', { msgID: 'two', timeout: 2000 }).catch(() => null)
        if (!ack2) await new Promise((r) => setTimeout(r, 200))
      }
      expect(ack2?.seq).toBe(2)
      expect(await cluster.streamLeader('R3')).not.toBe(leader)
      await node?.start()
      const info = await jsm.streams.info('R3')
      expect(info.state.messages).toBe(2)
      expect(info.config.num_replicas).toBe(3)
    } finally {
      await nc.close()
    }
  }, 90_000)
})

describe('the shared cluster (NOA_TEST_NATS_CLUSTER, as .ci/run starts it)', () => {
  const cluster = useNatsCluster()
  it('takes an R3 stream with three replicas in it', async () => {
    const nc = await connect({ servers: cluster.urls().split(',') })
    const name = `SHARED_${process.pid}_${Date.now().toString(36)}`
    try {
      const jsm = await jetstreamManager(nc)
      const info = await jsm.streams.add({ name, subjects: [`${name.toLowerCase()}.>`], num_replicas: 3 })
      expect(info.config.num_replicas).toBe(3)
      const ack = await jetstream(nc).publish(`${name.toLowerCase()}.x`, 'x')
      expect(ack.seq).toBe(1)
      const after = await jsm.streams.info(name)
      expect((after.cluster?.replicas ?? []).length).toBe(2)
      await jsm.streams.delete(name)
    } finally {
      await nc.close()
    }
  })
})
