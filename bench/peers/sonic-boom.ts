/**
 * sonic-boom 4 (pino's file writer) with `{ sync: true, fsync: true }`: every `write()` is a
 * writeSync followed by an fsyncSync before it returns. One instance (one file) per workspace.
 */
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import type { SonicBoom } from 'sonic-boom'
import { lazy, lineFor, type Peer, requirePeer, Seqs, wsName } from './common.js'

const lib = lazy(() => requirePeer('sonic-boom') as typeof SonicBoom)

export const sonicBoom: Peer = {
  id: 'sonic-boom',
  label: 'sonic-boom {sync, fsync}',
  kind: 'peer',
  how: "`{ sync: true, fsync: true }`, one instance per workspace: `write()` = writeSync + fsyncSync of that file, on the caller's thread",
  load: lib,
  async writer(dir, workspaces) {
    const SonicBoomClass = lib()
    mkdirSync(join(dir, 'sonic-boom'), { recursive: true })
    const booms = Array.from(
      { length: workspaces },
      (_, k) =>
        new SonicBoomClass({
          dest: join(dir, 'sonic-boom', `${wsName(k)}.log`),
          sync: true,
          fsync: true,
          append: true,
        }),
    )
    const seqs = new Seqs(workspaces)
    return {
      async append(k, i) {
        ;(booms[k] as SonicBoom).write(lineFor(seqs.take(k), i))
      },
      async close() {
        for (const b of booms) b.destroy()
      },
    }
  },
}
