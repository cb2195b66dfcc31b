/**
 * deleteThread leaves a tombstone: a late writer that read the thread before the delete (another
 * process, through the daemon that serves the root) cannot bring it back by a put or writes
 * against a checkpoint from before it; a put with no parent starts the thread anew, clean.
 */
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { emptyCheckpoint, uuid6 } from '@langchain/langgraph-checkpoint'
import { describe, expect, it } from 'vitest'
import { NoaSaver } from '../../dist/src/langgraph/index.js'
import { SteppedChild } from '../helpers/child.js'
import { runCli, tempDir } from '../helpers/index.js'
import { startDaemon } from '../helpers/serve.js'

const LG = fileURLToPath(new URL('./fixtures/lg-steps.mjs', import.meta.url))
const DELETE = fileURLToPath(new URL('./fixtures/lg-delete.mjs', import.meta.url))

function put(saver: NoaSaver, thread: string, parent: string | undefined, step: number) {
  const c = emptyCheckpoint()
  c.id = uuid6(step)
  c.channel_values = { who: 'new', step }
  c.channel_versions = { who: step + 1, step: step + 1 }
  return saver.put(
    { configurable: { thread_id: thread, checkpoint_ns: '', ...(parent ? { checkpoint_id: parent } : {}) } },
    c,
    { source: 'loop', step, parents: {} },
    { who: step + 1, step: step + 1 },
  )
}

async function listed(saver: NoaSaver, thread: string): Promise<string[]> {
  const out: string[] = []
  for await (const t of saver.list({ configurable: { thread_id: thread } })) out.push(t.checkpoint.id)
  return out
}

describe('NoaSaver tombstones', () => {
  it('a put from another process against a checkpoint from before a deleteThread (by a third) is refused; the thread starts anew only with no parent', async () => {
    const root = join(tempDir('noa-lg-tomb-'), 'noa')
    const d = await startDaemon(root)
    // Process A steps the thread and stops before its fourth put (whose parent is its third).
    const a = new SteppedChild(LG, [root, 'chat', 'A', '6', '3'])
    await a.next('open')
    a.go()
    await a.next('pause')
    // Process B deletes the thread meanwhile.
    const b = new SteppedChild(DELETE, [root, 'chat'])
    await b.next('done')
    await b.done()
    // A goes on: its put names a checkpoint the delete removed, and is refused by name.
    a.go()
    const code = await a.exited
    expect(code).not.toBe(0)
    await expect(a.done()).rejects.toThrow(
      /NOA_CONFLICT[\s\S]*was deleted \(deleteThread\)|was deleted \(deleteThread\)[\s\S]*NOA_CONFLICT/,
    )

    const ws = NoaSaver.workspaceOf('chat')
    const log = runCli(['log', ws, '--root', root])
      .stdout.trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { op: string; path?: string; seq: number })
    const deletedAt = log.findIndex((e) => e.op === 'write' && e.path === 'deleted')
    expect(deletedAt).toBeGreaterThan(0)
    // Nothing of A came in after the delete.
    expect(log.slice(deletedAt + 1).filter((e) => e.op === 'write')).toEqual([])

    const saver = await NoaSaver.open({ root })
    try {
      expect(await listed(saver, 'chat')).toEqual([])
      const old = log
        .filter((e) => e.op === 'write' && e.path?.startsWith('checkpoints/'))
        .map((e) => e.path?.slice(12) as string)
      expect(old.length).toBe(3)
      // This process too: a put or writes against an old checkpoint is refused, nothing written.
      await expect(put(saver, 'chat', old[2], 9)).rejects.toMatchObject({
        code: 'NOA_CONFLICT',
        details: { checkpoint: old[2], deleted: true },
      })
      await expect(
        saver.putWrites(
          { configurable: { thread_id: 'chat', checkpoint_ns: '', checkpoint_id: old[1] } },
          [['x', 1]],
          'task',
        ),
      ).rejects.toMatchObject({ code: 'NOA_CONFLICT' })
      expect(runCli(['log', ws, '--root', root]).stdout.trim().split('\n').length).toBe(log.length)
      // A put with no parent is the new thread: it alone is there, and it goes on from itself.
      const first = await put(saver, 'chat', undefined, 10)
      const second = await put(saver, 'chat', first.configurable?.checkpoint_id as string, 11)
      expect(await listed(saver, 'chat')).toEqual([
        second.configurable?.checkpoint_id,
        first.configurable?.checkpoint_id,
      ])
      expect(
        (await saver.getTuple({ configurable: { thread_id: 'chat' } }))?.checkpoint.channel_values,
      ).toEqual({
        who: 'new',
        step: 11,
      })
    } finally {
      await saver.close()
    }
    await d.stop()
    // A fresh reader (the daemon gone, the root in process) still knows the tombstone.
    const again = await NoaSaver.open({ root })
    try {
      expect((await listed(again, 'chat')).length).toBe(2)
      const old = log
        .filter((e) => e.op === 'write' && e.path?.startsWith('checkpoints/'))
        .map((e) => e.path?.slice(12) as string)
      await expect(put(again, 'chat', old[0], 12)).rejects.toMatchObject({ code: 'NOA_CONFLICT' })
    } finally {
      await again.close()
    }
  })
})
