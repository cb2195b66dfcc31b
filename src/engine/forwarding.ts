/**
 * Where `AgentLog.open` finds the way to a daemon (`noa serve`) serving its root. The daemon's
 * client, a layer above the engine, installs it (src/serve/forward.ts), so that the engine does
 * not import that layer; this leaf holds it so that the client can install it without loading
 * the engine's AgentLog (a program that imports only `noa/transcript` stays light until it opens
 * a log). Typed by agent-log.ts (`Forwarder`).
 */
export type ForwarderOf<Log, Options> = (root: string, options: Options) => Promise<Log | null>

let current: ForwarderOf<unknown, never> | null = null

/** Installs (or, with null, removes) the forwarder. */
export function installForwarder<Log, Options>(f: ForwarderOf<Log, Options> | null): void {
  current = f as ForwarderOf<unknown, never> | null
}

/** The forwarder installed, if any. */
export function installedForwarder<Log, Options>(): ForwarderOf<Log, Options> | null {
  return current as ForwarderOf<Log, Options> | null
}
