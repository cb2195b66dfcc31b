/**
 * A real three-server JetStream cluster on loopback for the tests of replicated acks, shared
 * workspaces and failover (issue 34). `.ci/run` starts one and exports its client URLs,
 * comma-separated, as NOA_TEST_NATS_CLUSTER; without it each test file that asks starts its own,
 * and a test that kills, stops or restarts servers always starts its own (`startNatsCluster`).
 * Streams on it are R3: a publish is acknowledged once two of the three servers stored it.
 *
 * The starter itself is bench/nats-cluster.ts (the benchmarks start the same cluster; bench/
 * cannot import vitest): here it is given the binary natsServerBinary finds, with its message
 * when there is none.
 */
import { afterAll, beforeAll } from 'vitest'
import {
  type NatsCluster,
  startNatsCluster as startCluster,
  waitClusterReady,
} from '../../dist/bench/nats-cluster.js'
import { natsServerBinary } from './nats.js'

export type { ClusterNode, NatsCluster } from '../../dist/bench/nats-cluster.js'
export { waitClusterReady }

/** Starts three nats-servers with JetStream, routed to each other, on free loopback ports. */
export function startNatsCluster(): Promise<NatsCluster> {
  return startCluster({ bin: natsServerBinary() })
}

/**
 * The cluster for this test file: NOA_TEST_NATS_CLUSTER when set, else one started for the file.
 * Call at the top level of a test file; `urls()` is valid inside tests.
 */
export function useNatsCluster(): { urls(): string } {
  let urls = process.env.NOA_TEST_NATS_CLUSTER ?? ''
  let own: NatsCluster | null = null
  beforeAll(async () => {
    if (urls) return waitClusterReady(urls)
    own = await startNatsCluster()
    urls = own.urls
  }, 60_000)
  afterAll(async () => {
    await own?.stop()
  })
  return {
    urls: () => {
      if (!urls) throw new Error('no cluster: useNatsCluster() must run at the top level of the test file')
      return urls
    },
  }
}
