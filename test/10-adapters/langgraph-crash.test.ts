/**
 * SIGKILL while checkpoints are being put: every put that had resolved is there for a new
 * process (getTuple and list), with its writes, and the thread's log and snapshots stay
 * consistent enough for noa to verify, replay and snapshot it, and for the saver to go on.
 */
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { SnapshotEngine } from '../../dist/src/index.js'
import { NoaSaver } from '../../dist/src/langgraph/index.js'
import { runCli, tempDir } from '../helpers/index.js'

const LOOP = fileURLToPath(new URL('./fixtures/lg-put-loop.mjs', import.meta.url))

interface Acked {
  thread: string
  id: string
  step: number
}

/** Runs the put loop, SIGKILLs it once `lines` puts were acknowledged; returns those. */
function putUntilKilled(root: string, threads: number, lines: number): Promise<Acked[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [LOOP, root, String(threads)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let out = ''
    let err = ''
    child.stdout.on('data', (d) => {
      out += d
      if (out.split('\n').length > lines) child.kill('SIGKILL')
    })
    child.stderr.on('data', (d) => {
      err += d
    })
    child.on('error', reject)
    child.on('exit', (code, signal) => {
      if (signal !== 'SIGKILL') return reject(new Error(`put loop exited with ${code}: ${err}`))
      // A line cut by the kill was not acknowledged as a whole: only complete lines count.
      const complete = out.slice(0, out.lastIndexOf('\n') + 1)
      resolve(
        complete
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as Acked),
      )
    })
  })
}

describe('NoaSaver under SIGKILL', () => {
  it('keeps every checkpoint whose put resolved, and goes on after recovery', async () => {
    const root = join(tempDir('noa-lg-crash-'), 'noa')
    const acked = await putUntilKilled(root, 4, 60)
    expect(acked.length).toBeGreaterThanOrEqual(60)

    const saver = await NoaSaver.open({ root })
    try {
      for (const a of acked) {
        const t = await saver.getTuple({ configurable: { thread_id: a.thread, checkpoint_id: a.id } })
        expect(t?.checkpoint.channel_values).toEqual({
          step: a.step,
          notes: 'x'.repeat(a.step % 4 === 0 ? 5000 : 10),
        })
        expect(t?.pendingWrites).toEqual([[`task-${a.step}`, 'step', a.step + 1]])
      }
      const listed = new Set<string>()
      for await (const t of saver.list({ configurable: {} })) listed.add(t.checkpoint.id)
      for (const a of acked) expect(listed.has(a.id)).toBe(true)

      // The saver goes on from the newest checkpoint of each thread (a torn tail is cut first).
      for (const thread of new Set(acked.map((a) => a.thread))) {
        const latest = await saver.getTuple({ configurable: { thread_id: thread } })
        expect(latest).toBeDefined()
        const next = {
          ...(latest?.checkpoint as NonNullable<typeof latest>['checkpoint']),
          id: `${latest?.checkpoint.id}z`,
        }
        const config = await saver.put(
          latest?.config ?? {},
          next,
          { source: 'loop', step: 999, parents: {} },
          {},
        )
        const back = await saver.getTuple(config)
        expect(back?.checkpoint.channel_values).toEqual(latest?.checkpoint.channel_values)
      }
    } finally {
      await saver.close()
    }

    // The snapshots the saver wrote agree with a replay of the log from scratch.
    const engine = new SnapshotEngine({ root })
    for (const thread of new Set(acked.map((a) => a.thread))) {
      const ws = NoaSaver.workspaceOf(thread)
      expect(runCli(['verify', ws, '--root', root]).status).toBe(0)
      const head = await engine.head(ws)
      const incremental = await engine.replay(ws)
      const scratch = await engine.replay(ws, { fromScratch: true })
      expect(incremental.tree.id).toBe(scratch.tree.id)
      expect(head?.record.tree).toBe(incremental.tree.id) // nothing after the last snapshot
      expect(runCli(['snapshot', ws, '-m', 'after the crash', '--root', root]).status).toBe(0)
    }
  })
})
