/**
 * The AgentLog an adapter writes through. A process should run one pool of owner workers per
 * root: a second AgentLog on the same root would fight the first for each workspace's flock
 * (NOA_WORKSPACE_LOCKED). So adapters opened on the same root share one, counted, and the last
 * to close ends it. A caller may also hand in its own open AgentLog, which is never closed here.
 *
 * On a root a daemon serves (`noa serve`), the AgentLog is the daemon's client, whatever the
 * program imported first: this module installs the forwarder itself. The adapter then holds no
 * workspace lock: other clients of the daemon may append to the same workspace between two of
 * its reads, so it commits with a compare-and-append and builds again when it lost (`viaDaemon`).
 */

import { AgentLog } from '../engine/agent-log.js'
import { resolveRoot } from '../engine/logs.js'
// Loaded for its effect: AgentLog.open on a root a daemon serves talks to that daemon. A program
// that imports only `noa/langgraph` would otherwise open the root in process beside the daemon
// and take workspace locks away from it.
import '../serve/forward.js'
import { RemoteAgentLog } from '../serve/client.js'
import { ObjectStore } from '../store/objects.js'

interface Shared {
  log: Promise<AgentLog>
  users: number
}

const shared = new Map<string, Shared>()
/** Pools being closed: a new lease on the same root waits, or its workspaces would still be locked. */
const closing = new Map<string, Promise<unknown>>()

export interface LogLease {
  log: AgentLog
  /**
   * Whether appends go to a daemon (see viaDaemon): nothing is locked in this process, and the
   * workspace can change between any two calls.
   */
  viaDaemon: boolean
  release(): Promise<void>
}

/**
 * Whether `log` is a daemon's client: its workspaces are the daemon's, so this process can
 * neither hold one (openWorkspace takes no lock here) nor know its seqs ahead of an append.
 */
export function viaDaemon(log: AgentLog): boolean {
  return log instanceof RemoteAgentLog
}

export interface LeaseOptions {
  root?: string
  /**
   * Owner worker threads when this lease starts the pool. Default 0: the owner runs on the
   * caller's thread, and only a commit that has nothing else to wait for is synced there (the
   * others' syncs go to the addon's pool threads), which is how a framework's store is used: one
   * step at a time per thread, each awaited. Measured with bench:adapters, a serial step costs
   * less without the hand-off to a worker and back (1,091 against 757 steps/s with two workers),
   * and 100 threads stepping at once do about as well (within the machine's swing across runs;
   * docs/adapters.md, figures).
   */
  workers?: number
}

/** The adapters' default for `workers` (see LeaseOptions). */
const ADAPTER_WORKERS = 0

/** The process's AgentLog for `root`, opened on first use. */
export async function leaseLog(options: LeaseOptions): Promise<LogLease> {
  const root = resolveRoot(options.root)
  await closing.get(root)?.catch(() => {})
  let s = shared.get(root)
  if (!s) {
    // The adapters write their snapshot records themselves and append the entries naming them:
    // the log checks each against the object store, as it does for any hand-written record.
    const objects = new ObjectStore(root)
    const opening = AgentLog.open({ root, objects, workers: options.workers ?? ADAPTER_WORKERS })
    s = { log: opening, users: 0 }
    shared.set(root, s)
    opening.catch(() => {
      if (shared.get(root) === s) shared.delete(root)
    })
  }
  s.users++
  let log: AgentLog
  try {
    log = await s.log
  } catch (err) {
    s.users--
    throw err
  }
  const entry = s
  let released = false
  return {
    log,
    viaDaemon: viaDaemon(log),
    async release() {
      if (released) return
      released = true
      entry.users--
      if (entry.users > 0) return
      if (shared.get(root) === entry) shared.delete(root)
      const done = log.close()
      closing.set(root, done)
      try {
        await done
      } finally {
        if (closing.get(root) === done) closing.delete(root)
      }
    },
  }
}

/** A lease on a log the caller opened and will close. */
export function borrowedLog(log: AgentLog): LogLease {
  return { log, viaDaemon: viaDaemon(log), release: async () => {} }
}
