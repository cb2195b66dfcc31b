/**
 * gc beside processes: a live writer that snapshots and prunes while gc runs round after round,
 * and gc itself SIGKILLed at random moments. Seconds each, in processes of their own: the
 * in-process gc tests are gc.test.ts.
 */
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { SnapshotEngine } from '../../dist/src/index.js'
import { SteppedChild } from '../helpers/child.js'
import { age, contents, objectIds, write } from '../helpers/gc.js'
import { CLI, runCli, runCliAsync, tempDir } from '../helpers/index.js'
import { setup } from '../helpers/snapshot.js'

describe('gc beside processes', () => {
  it('beside a live process that snapshots and prunes, gc in a loop removes nothing it needs', async () => {
    const root = tempDir()
    // Old garbage for gc to find, and a workspace of the writer's to go on from.
    for (let i = 0; i < 50; i++) runCli(['blob', 'put', '-', '--root', root], { input: `garbage ${i}` })
    const script = new URL('../fixtures/gc-writer.mjs', import.meta.url).pathname
    const rounds = 40
    const writer = new SteppedChild(script, [root, 'ws', String(rounds), 'prune'])
    const ids: string[] = []
    let removed = 0
    for (let round = 0; round < rounds; round++) {
      ids.push((await writer.next('round')).snapshotId as string)
      // Everything the writer made so far is named by its log now, or garbage (overwritten blobs,
      // pruned snapshots' trees). Aged past the grace period, all of it is gc's to judge by what
      // the logs reach; what the writer makes during this gc is new, inside the default grace
      // period (one hour) whatever the machine's speed, and is kept by it.
      age(root)
      const gc = runCliAsync(['gc', '--yes', '--json', '--root', root])
      writer.go()
      const r = await gc
      expect(r.status, r.stderr).toBe(0)
      removed += JSON.parse(r.stdout).removed
      // Nothing any snapshot so far needs has gone, whatever the writer did meanwhile.
      const v = runCli(['verify', '--objects', '--root', root])
      expect(v.status, `round ${round}: ${v.stderr}`).toBe(0)
    }
    await writer.done()
    expect(removed).toBeGreaterThanOrEqual(50)
    expect(ids.length).toBe(rounds)
    const reader = new SnapshotEngine({ root })
    const live = (await reader.listSnapshots('ws')).filter((s) => !s.pruned)
    expect(live.length).toBeGreaterThanOrEqual(2)
    for (const s of live) {
      const dir = join(tempDir(), 'o')
      await reader.checkout(s.snapshotId, dir)
    }
  }, 120_000)

  it('SIGKILL during gc --yes leaves a store that verifies and whose snapshots all check out', async () => {
    const ctx = await setup()
    const { root, engine } = ctx
    for (let i = 0; i < 6; i++) {
      await write(ctx, 'ws', Object.fromEntries(Array.from({ length: 30 }, (_, k) => [`f${k}`, `${i}-${k}`])))
      await engine.snapshot('ws')
    }
    await engine.prune('ws', { keepLast: 2 })
    for (let i = 0; i < 1500; i++) await engine.store.putBlob(`garbage ${i}`)
    await ctx.log.close()
    age(root)
    const keep = (await engine.listSnapshots('ws')).filter((s) => !s.pruned)
    const want = await Promise.all(keep.map((s) => contents(engine, s.snapshotId)))
    const total = objectIds(root).length
    for (let round = 0; round < 3; round++) {
      await new Promise<void>((resolve, reject) => {
        const child = spawn(process.execPath, [CLI, 'gc', '--yes', '--root', root], { stdio: 'ignore' })
        setTimeout(() => child.kill('SIGKILL'), 150 + Math.floor(Math.random() * 200))
        child.on('error', reject)
        child.on('exit', () => resolve())
      })
      const v = runCli(['verify', '--objects', '--root', root])
      expect(v.status, v.stderr).toBe(0)
      const reader = new SnapshotEngine({ root })
      for (let i = 0; i < keep.length; i++) {
        expect(await contents(reader, (keep[i] as { snapshotId: string }).snapshotId)).toEqual(want[i])
      }
    }
    expect(runCli(['gc', '--yes', '--root', root]).status).toBe(0)
    expect(objectIds(root).length).toBeLessThan(total - 1500)
  }, 60_000)
})
