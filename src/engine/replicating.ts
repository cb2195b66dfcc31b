/**
 * Replicated acks (issue 34): with the AgentLog option `replicate`, an append is published to a
 * JetStream stream after its local commit, and with `durability: 'replicated'` it resolves only
 * once the stream acknowledged the message holding it. The replicate layer, above the engine,
 * installs what does it (src/replicate/acks.ts; the package entry loads it), so that the engine
 * does not import that layer: this leaf holds it, as forwarding.ts holds the daemon's client.
 */
import type { Ack } from './entry.js'

/** The AgentLog option `replicate` (checked by the replicate layer, which names the field). */
export interface ReplicateOptions {
  /** Server URL(s), comma-separated, or an open `NatsConnection` (left open). */
  nats: string | object
  /** Subject prefix (default `noa`): workspace `ws` is published on `<prefix>.<ws>`. */
  prefix?: string
  /** Stream name; by default the stream that captures `<prefix>.>`. */
  stream?: string
  /**
   * `replicated` (default): an append resolves after its local commit and JetStream's
   * acknowledgement of its message (on an R3 stream, a majority of servers stored it).
   * `local`: it resolves after the local commit; the same publisher sends it right after.
   */
  durability?: 'replicated' | 'local'
}

/** What an AgentLog opened with `replicate` asks of the replicate layer. */
export interface Replication {
  /**
   * Before an append of `workspace` is sent to its owner: throws the workspace's refusal (it
   * diverged from the stream); returns a promise while the workspace's place on the stream is
   * being read (its first replicated append), undefined when it can go at once.
   */
  before(workspace: string): Promise<void> | undefined
  /**
   * After the local commit of `acks` (in seq order; `bodies` their bodies, or null when not at
   * hand, then the lines are read from the log): resolves once they are on the stream (or at
   * once with durability `local`), rejects with the reason they never will be.
   */
  after(workspace: string, acks: readonly Ack[], bodies: readonly string[] | null): Promise<void>
  /** Publishes what is committed (unless the servers are away), then lets the connection go. */
  close(): Promise<void>
}

export interface ReplicationLayer {
  /** Checks the option (NOA_BAD_OPTION naming `replicate.<field>`); → what `open` takes. */
  check(value: unknown): unknown
  /** Connects, checks the stream, and publishes what local logs hold that the stream does not. */
  open(root: string, checked: unknown): Promise<Replication>
}

let current: ReplicationLayer | null = null

/** Installs (or, with null, removes) the replicate layer. */
export function installReplication(layer: ReplicationLayer | null): void {
  current = layer
}

/** The replicate layer installed, if any. */
export function installedReplication(): ReplicationLayer | null {
  return current
}
