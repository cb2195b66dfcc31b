/**
 * `noa/serve`: the daemon (`noa serve`) that owns a root's logs for many processes, and the
 * client that talks to it. A host rarely needs either by name: once the package is loaded,
 * `AgentLog.open` on a root a daemon serves returns a RemoteAgentLog by itself.
 */
import './forward.js'
// The daemon's AgentLog takes the option replicate (replicated acks) from Daemon.start's log options.
import '../replicate/acks.js'

export { type ConnectOptions, connectDaemon, RemoteAgentLog } from './client.js'
export type { DaemonInfo } from './connection.js'
export { Daemon, type DaemonStats, type ServeOptions } from './daemon.js'
export { DEFAULT_LIMITS, type Limits, PROTOCOL_VERSION, SOCKET_NAME } from './protocol.js'
