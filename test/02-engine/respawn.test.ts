/**
 * An owner worker that dies: what was in flight on it fails with a named error, never hangs;
 * its locks are released; a new owner takes over its workspaces (replaying its journal), and
 * the other owners never notice.
 */
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { readEntries } from '../../dist/src/engine/index.js'
import { AgentLog, type EntryInput } from '../../dist/src/index.js'
import { blobOf, tempDir } from '../helpers/index.js'

const CRASH = new URL('../fixtures/crash-io.mjs', import.meta.url).href

function write(i: number): EntryInput {
  return { op: 'write', path: `f${i}`, blob: blobOf(i) }
}

async function seqs(file: string): Promise<number[]> {
  const out: number[] = []
  for await (const e of readEntries(file)) out.push(e.seq)
  return out
}

describe('owner worker respawn', () => {
  for (const commits of [1, 2, 3, 6]) {
    it(`dies at its commit ${commits}: in-flight appends fail by name, the next ones go on`, async () => {
      const root = tempDir()
      const marker = join(root, 'died')
      const log = await AgentLog.open({
        root,
        workers: 1,
        loneInThread: false, // a worker's death: the lone lane's owner runs on this thread
        ioModule: CRASH,
        ioOptions: { marker, atCommit: commits },
      })
      let acked = 0
      try {
        for (let i = 1; i <= 8; i++) {
          const r = await log.append('w', write(i)).then(
            (a) => a,
            (e) => e,
          )
          if ('seq' in r) {
            acked++
            expect(r.seq).toBe(acked)
          } else {
            expect(r.code).toBe('NOA_WORKER_FAILED')
            expect(existsSync(marker)).toBe(true)
          }
        }
        expect(acked).toBe(7)
        // The lock of the dead worker's descriptor was released: the new owner holds it now.
        expect((await log.verify('w')).ok).toBe(true)
      } finally {
        await log.close()
      }
      expect(await seqs(join(root, 'agent-logs', 'w.log'))).toEqual([1, 2, 3, 4, 5, 6, 7])
    })
  }
})
