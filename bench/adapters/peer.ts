/**
 * SqliteSaver comes from bench/peers/ (installed there by `npm run bench:adapters`, not by the
 * main install). These files run from dist/bench/adapters/, where Node's resolution would never
 * reach bench/peers/node_modules, so it is required through a require anchored there.
 */
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

export const PEERS_DIR = fileURLToPath(new URL('../../../bench/peers/', import.meta.url))
export const requirePeer = createRequire(join(PEERS_DIR, 'package.json'))
