/**
 * Transparent forwarding: once this module is loaded (the package entry and the CLI load it),
 * `AgentLog.open` on a root that a daemon serves returns an AgentLog that talks to the daemon;
 * on any other root it opens in process as before. Costs one lstat when no socket is there.
 */
import type { AgentLog, AgentLogOptions } from '../engine/agent-log.js'
import { installForwarder } from '../engine/forwarding.js'
import { socketState } from './paths.js'

/** Roots this process serves itself: its own AgentLog on them must not go through its socket. */
const served = new Set<string>()

export function markServed(root: string): void {
  served.add(root)
}

export function unmarkServed(root: string): void {
  served.delete(root)
}

async function forward(root: string, options: AgentLogOptions): Promise<AgentLog | null> {
  if (served.has(root)) return null
  if (socketState(root) === 'none') return null
  const { connectRoot } = await import('./client.js')
  return connectRoot(root, options)
}

installForwarder(forward)
