/**
 * The package entry `noa/replicate`: replication, whose replicatePull appends to its root through an AgentLog. It loads the daemon
 * forwarder first, so that a program importing only this subpath talks to a `noa serve` running
 * on its root, as one importing `noa` does, instead of opening the root beside the daemon and
 * taking its workspace locks away.
 */
import '../serve/forward.js'

export * from '../replicate/index.js'
