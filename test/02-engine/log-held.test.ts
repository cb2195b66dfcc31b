/**
 * LOG_HELD, what lets an adapter's log follower skip its stat after its own append: true while
 * the owner has closed nothing since (the workspace's lock held) and nothing else was appended
 * to the workspace through this AgentLog; false, for good, after either, after a release, after
 * an eviction at the open-file bound, and after the log closes; for worker and in-thread owners.
 */
import { describe, expect, it } from 'vitest'
import { AgentLog } from '../../dist/src/engine/agent-log.js'
import { LOG_END, LOG_HELD, STORE_APPEND } from '../../dist/src/engine/checks.js'
import { tempDir } from '../helpers/index.js'

type Acks = Array<{ seq: number }> & { [LOG_END]?: number; [LOG_HELD]?: () => boolean }

const entry = (path: string) => ({ op: 'delete' as const, path })

async function own(log: AgentLog, ws: string, path = 'x'): Promise<() => boolean> {
  const acks = (await log[STORE_APPEND](ws, [entry(path)])) as Acks
  const held = acks[LOG_HELD]
  expect(typeof held).toBe('function')
  return held as () => boolean
}

describe('LOG_HELD', () => {
  for (const workers of [0, 1]) {
    describe(`workers: ${workers}`, () => {
      it('stays true until something else is appended to the workspace through this log', async () => {
        const log = await AgentLog.open({ root: tempDir(), workers })
        try {
          const held = await own(log, 'w')
          expect(held()).toBe(true)
          expect(held()).toBe(true)
          await log.append('other', entry('y')) // another workspace: this one is as it was
          expect(held()).toBe(true)
          await log.append('w', entry('z'))
          expect(held()).toBe(false)
          const again = await own(log, 'w')
          expect(again()).toBe(true)
          expect(held()).toBe(false) // once false, false
        } finally {
          await log.close()
        }
      })

      it('is false once the workspace was released (its lock let go), and after the log closed', async () => {
        const log = await AgentLog.open({ root: tempDir(), workers })
        const held = await own(log, 'w')
        await log.release('w')
        expect(held()).toBe(false)
        const reopened = await own(log, 'w')
        expect(reopened()).toBe(true)
        await log.close()
        expect(reopened()).toBe(false)
      })

      it('is false once the owner closed the file to make room for another (maxOpenFiles)', async () => {
        const log = await AgentLog.open({ root: tempDir(), workers, maxOpenFiles: 1 })
        try {
          const held = await own(log, 'a')
          expect(held()).toBe(true)
          await log.append('b', entry('y')) // a's descriptor (and lock) goes to make room
          expect(held()).toBe(false)
        } finally {
          await log.close()
        }
      })
    })
  }
})
