/** Garbage collection and snapshot retention, in process (beside other processes: gc-live.test.ts). */
import { createHash } from 'node:crypto'
import { appendFileSync, readdirSync, readFileSync, utimesSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { PassThrough, Writable } from 'node:stream'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { AgentLog, SnapshotEngine } from '../../dist/src/index.js'
import { age, contents, objectIds, write } from '../helpers/gc.js'
import { blobOf, runCli, tempDir } from '../helpers/index.js'
import { refusal, setup } from '../helpers/snapshot.js'

describe('gc', () => {
  it('keeps an aged object a writer stores again (found, not written: freshened) within the grace period', async () => {
    const ctx = await setup()
    const { root, engine } = ctx
    const again = await engine.store.putBlob('stored again by a writer, as bytes')
    const streamed = await engine.store.putBlob('stored again by a writer, as a stream')
    const untouched = await engine.store.putBlob('nobody stores this one again')
    await ctx.log.close()
    age(root)
    // Other processes store the same bytes again, before any entry names them: the objects are
    // found in place, so each writer sets its mtime to now instead of writing it. A gc that read
    // the logs before their entries land must still keep them.
    const writer = new SnapshotEngine({ root })
    expect(await writer.store.putBlob('stored again by a writer, as bytes')).toBe(again)
    const put = runCli(['blob', 'put', '-', '--root', root], {
      input: 'stored again by a writer, as a stream',
    })
    expect(put.stdout.trim()).toBe(streamed)
    const r = await new SnapshotEngine({ root }).gc({ dryRun: false, graceMs: 3_600_000 })
    expect(r.removed).toBe(1)
    const left = objectIds(root)
    expect(left).toContain(again)
    expect(left).toContain(streamed)
    expect(left).not.toContain(untouched)
  })

  it('keeps an aged object that an entry appended while gc marks names: the logs that grew are read again', async () => {
    const ctx = await setup()
    const { root, engine } = ctx
    await write(ctx, 'a', { f: 'a1' })
    await write(ctx, 'b', { f: 'b1' })
    const late = [
      await engine.store.putBlob('named late in a'),
      await engine.store.putBlob('named late in b'),
    ]
    const garbage = await engine.store.putBlob('named by nobody')
    await ctx.log.close()
    age(root)
    // Another process appends to both logs while gc walks them (at its first progress report,
    // after it read one of them): a write entry naming an object already stored, so nothing
    // freshens it. Appended as that process's owner would, after the last line.
    const appendLine = (ws: string, blob: string) => {
      const file = join(root, 'agent-logs', `${ws}.log`)
      const last = JSON.parse(readFileSync(file, 'utf8').trimEnd().split('\n').at(-1) as string)
      appendFileSync(
        file,
        `${JSON.stringify({ seq: last.seq + 1, op: 'write', path: 'late', blob, ts: last.ts + 1 })}\n`,
      )
    }
    let appended = false
    const r = await new SnapshotEngine({ root }).gc({
      dryRun: false,
      onProgress: (p) => {
        if (appended || p.phase !== 'mark') return
        appended = true
        appendLine('a', late[0] as string)
        appendLine('b', late[1] as string)
      },
    })
    expect(appended).toBe(true)
    expect(r.removed).toBe(1)
    const left = objectIds(root)
    expect(left).toEqual(expect.arrayContaining(late))
    expect(left).not.toContain(garbage)
    expect(runCli(['verify', '--objects', '--root', root]).status).toBe(0)
  })

  it('dry run by default; removes only what no log reaches and nothing younger than the grace period', async () => {
    const ctx = await setup()
    const { root, engine } = ctx
    await write(ctx, 'main', { a: 'a1', b: 'b1' })
    const s1 = await engine.snapshot('main')
    await write(ctx, 'main', { a: 'a2' }) // a1 is now only in s1
    const s2 = await engine.snapshot('main')
    await engine.fork('feat', s1.snapshotId as string)
    await write(ctx, 'feat', { c: 'c-unsnapshotted' }) // reached by a write after the head
    const garbage = await engine.store.putBlob('nobody wants me')
    const young = await engine.store.putBlob('just uploaded')
    age(root)
    utimesSync(engine.store.pathOf(young), new Date(), new Date())
    writeFileSync(join(root, 'objects', '.blob-0123456789ab.tmp'), 'half a blob') // an interrupted put
    utimesSync(join(root, 'objects', '.blob-0123456789ab.tmp'), new Date(0), new Date(0))
    const before = objectIds(root)
    const dry = runCli(['gc', '--root', root])
    expect(dry.status).toBe(0)
    expect(dry.stdout).toBe(
      `would remove ${garbage} (15 bytes)\nwould remove temp file .blob-0123456789ab.tmp (11 bytes)\ndry run: would free 26 B: 1 unreachable object and 1 temp file; kept ${before.length - 2} reachable and 1 younger than the grace period, of ${before.length} objects (noa gc --yes removes them)\n`.replace(
        /would remove (\w{64}) \(15 bytes\)\nwould remove temp file (.*)\n/,
        'would remove temp file $2\nwould remove $1 (15 bytes)\n',
      ),
    )
    expect(dry.stderr).toBe('') // no progress when piped
    expect(objectIds(root)).toEqual(before)
    // On a terminal, a progress line is drawn on stderr and erased at the end.
    const { main } = await import('../../dist/src/cli/main.js')
    let drawn = ''
    const stdin = new PassThrough()
    stdin.end()
    const sink = (add: (s: string) => void) =>
      new Writable({
        write(chunk, _encoding, done) {
          add(String(chunk))
          done()
        },
      })
    const status = await main(['gc', '--root', root], {
      stdin,
      stdout: sink(() => {}),
      stderr: sink((t) => {
        drawn += t
      }),
      env: process.env,
      isTTY: true,
    })
    expect(status).toBe(0)
    const erase = '\r\x1b[K'
    expect(
      drawn.split(erase).some((line) => /^gc: sweeping: \d+\/256 folders, 2 to remove$/.test(line)),
    ).toBe(true)
    expect(drawn.endsWith('\r\x1b[K')).toBe(true)
    const r = await engine.gc({ dryRun: false })
    expect(r).toMatchObject({ removed: 1, removedBytes: 15, temps: 1, young: 1, missing: 0, dryRun: false })
    expect(objectIds(root)).toEqual(before.filter((id) => id !== garbage))
    expect(await contents(engine, s1.snapshotId as string)).toEqual({ a: 'a1', b: 'b1' })
    expect(await contents(engine, s2.snapshotId as string)).toEqual({ a: 'a2', b: 'b1' })
    expect(runCli(['verify', '--objects', '--root', root]).status).toBe(0)
    // With no grace, the young one goes too; a second gc finds nothing.
    const json = JSON.parse(runCli(['gc', '--yes', '--grace', '0', '--json', '--root', root]).stdout)
    expect(json).toMatchObject({ removed: 1, items: [{ kind: 'object', name: young }] })
    expect(JSON.parse(runCli(['gc', '--yes', '--grace', '0', '--json', '--root', root]).stdout).removed).toBe(
      0,
    )
    expect(runCli(['gc', '--grace', 'soon', '--root', root]).status).toBe(2)
    expect((await refusal(engine.gc({ graceMs: -1 }))).code).toBe('NOA_BAD_OPTION')
  })

  it('a temp file an interrupted writer left goes once it is older than the grace period, in the store or a shard', async () => {
    const ctx = await setup()
    const { root, engine } = ctx
    const kept = await engine.store.putBlob('a stored blob')
    const shard = join(root, 'objects', kept.slice(0, 2))
    const temps = {
      oldTop: join(root, 'objects', '.blob-00000000000a.tmp'),
      youngTop: join(root, 'objects', '.blob-00000000000b.tmp'),
      oldShard: join(shard, '.obj-00000000000c.tmp'),
      youngShard: join(shard, '.obj-00000000000d.tmp'),
    }
    for (const f of Object.values(temps)) writeFileSync(f, 'half written')
    for (const f of [temps.oldTop, temps.oldShard]) utimesSync(f, new Date(0), new Date(0))
    const r = await engine.gc({ dryRun: false })
    expect(r).toMatchObject({ temps: 2, removed: 0 })
    const left = (dir: string) => readdirSync(dir).filter((n) => n.endsWith('.tmp'))
    expect(left(join(root, 'objects'))).toEqual(['.blob-00000000000b.tmp'])
    expect(left(shard)).toEqual(['.obj-00000000000d.tmp'])
  })

  it('prune records the drop in the log; gc then frees what only the dropped snapshots held', async () => {
    const ctx = await setup()
    const { root, log, engine } = ctx
    const ids: string[] = []
    for (let i = 0; i < 5; i++) {
      await write(ctx, 'ws', { f: `v${i}`, keep: 'same' })
      ids.push((await engine.snapshot('ws', { message: `s${i}` })).snapshotId as string)
    }
    const before = await Promise.all(ids.map((id) => contents(engine, id)))
    await log.close()
    const p = runCli(['snapshot', 'prune', 'ws', '--keep-last', '2', '--root', root])
    expect(p.status).toBe(0)
    const [pruneId, ...dropped] = p.stdout.trim().split('\n')
    expect(dropped).toEqual(
      ids
        .slice(0, 3)
        .reverse()
        .map((id) => `dropped ${id}`),
    )
    const lines = readFileSync(join(root, 'agent-logs', 'ws.log'), 'utf8')
      .trimEnd()
      .split('\n')
    expect(JSON.parse(lines.at(-1) as string)).toMatchObject({
      op: 'snapshot',
      snapshot_id: pruneId,
      message: 'prune: dropped 3 snapshots',
    })
    const list = runCli(['snapshots', 'ws', '--root', root]).stdout
    expect(list.match(/\(pruned\)/g)?.length).toBe(3)
    expect(runCli(['history', 'ws', '--root', root]).stdout).toMatch(/prune ws@\d+ .* \[dropped 3\]\n$/)
    expect(runCli(['snapshot', 'prune', 'ws', '--keep-last', '2', '--root', root]).stderr).toMatch(
      /nothing to drop/,
    )
    age(root)
    const gc = runCli(['gc', '--yes', '--json', '--root', root])
    const freed = JSON.parse(gc.stdout)
    expect(freed.removed).toBeGreaterThanOrEqual(3) // v0, v1, v2 (and trees no one else needs)
    const reader = new SnapshotEngine({ root })
    for (let i = 3; i < 5; i++) expect(await contents(reader, ids[i] as string)).toEqual(before[i])
    // A dropped snapshot's tree is rebuilt from the log; its blobs are gone, and checkout says which.
    expect(Object.fromEntries((await reader.tree(ids[0] as string)).entries()).keep).toBeDefined()
    const co = runCli(['checkout', ids[0] as string, join(tempDir(), 'o'), '--root', root])
    expect(co.status).toBe(1)
    expect(co.stderr).toMatch(/1 blob is not in the object store: "f" \(blob \w+, written at seq 1 of ws\)/)
    expect(runCli(['verify', '--objects', '--root', root]).status).toBe(0)
    expect(runCli(['snapshot', 'prune', 'ws', '--root', root]).status).toBe(2)
  })

  it("pruning again and again keeps no tree for ever: an earlier prune's snapshot goes once every kept one is newer", async () => {
    const ctx = await setup()
    const { engine } = ctx
    const snap = async (i: number) => {
      await write(ctx, 'ws', { f: `v${i}` })
      return (await engine.snapshot('ws', { message: `s${i}` })).snapshotId as string
    }
    const s0 = await snap(0)
    await snap(1)
    await write(ctx, 'ws', { f: 'v-prune-1' }) // the first prune's snapshot holds a state of its own
    const p1 = await engine.prune('ws', { keepLast: 1 })
    expect(p1.dropped).toEqual([s0])
    // Nothing new: nothing to drop, the prune's snapshot stays (it is the head).
    expect((await engine.prune('ws', { keepLast: 1 })).dropped).toEqual([])
    const s2 = await snap(2)
    const p2 = await engine.prune('ws', { keepLast: 1 })
    expect(p2.dropped).toContain(p1.snapshotId)
    const listed = await engine.listSnapshots('ws')
    const byId = new Map(listed.map((s) => [s.snapshotId, s]))
    expect(byId.get(p1.snapshotId as string)?.pruned).toBe(true)
    expect(byId.get(s0)?.pruned).toBe(true) // what the first prune dropped stays dropped
    expect(byId.get(s2)?.pruned).toBe(false)
    const tree = byId.get(p1.snapshotId as string)?.tree as string
    await engine.gc({ dryRun: false, graceMs: 0 })
    expect(engine.store.has(tree)).toBe(false)
    expect(await contents(engine, s2)).toEqual({ f: 'v2' })
  })

  it('property: after any workload and gc, every snapshot still referenced has the same files', async () => {
    const ctx = await setup()
    const { log, engine } = ctx
    let run = 0
    const step = fc.oneof(
      fc.record({ t: fc.constant('write' as const), ws: fc.nat(2), path: fc.nat(5), n: fc.nat(1000) }),
      fc.record({ t: fc.constant('delete' as const), ws: fc.nat(2), path: fc.nat(5) }),
      fc.record({ t: fc.constant('snapshot' as const), ws: fc.nat(2) }),
      fc.record({ t: fc.constant('fork' as const), ws: fc.nat(2) }),
      fc.record({ t: fc.constant('merge' as const), ws: fc.nat(2), from: fc.nat(2) }),
      fc.record({ t: fc.constant('prune' as const), ws: fc.nat(2), keep: fc.nat(2) }),
      fc.record({ t: fc.constant('gc' as const) }),
    )
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 5, maxLength: 30 }), async (steps) => {
        const p = `r${run++}`
        const names = [`${p}a`, `${p}b`, `${p}c`]
        await log.openWorkspace(names[0] as string)
        const live = new Set([names[0] as string])
        const check = async () => {
          const expected = new Map<string, Record<string, string>>()
          for (const ws of live) {
            for (const s of await engine.listSnapshots(ws)) {
              if (!s.pruned && !expected.has(s.snapshotId))
                expected.set(s.snapshotId, await contents(engine, s.snapshotId))
            }
          }
          await engine.gc({ dryRun: false, graceMs: 0 })
          for (const [id, files] of expected) expect(await contents(engine, id)).toEqual(files)
        }
        for (const s of steps) {
          const ws = names[('ws' in s ? s.ws : 0) % names.length] as string
          if (s.t === 'gc') {
            await check()
            continue
          }
          if (!live.has(ws)) {
            if (s.t !== 'fork') continue
            const from = [...live][0] as string
            const head = (await engine.snapshot(from, { allowEmpty: true })).snapshotId as string
            await engine.fork(ws, head)
            live.add(ws)
            continue
          }
          if (s.t === 'write') {
            await log.append(ws, {
              op: 'write',
              path: `p${s.path}`,
              blob: await engine.store.putBlob(`${p} ${s.n}`),
            })
          } else if (s.t === 'delete') await log.append(ws, { op: 'delete', path: `p${s.path}` })
          else if (s.t === 'snapshot') await engine.snapshot(ws)
          else if (s.t === 'prune') await engine.prune(ws, { keepLast: s.keep })
          else if (s.t === 'merge') {
            const from = names[s.from] as string
            if (from !== ws && live.has(from)) await engine.merge(ws, [from])
          }
        }
        await check()
      }),
      { numRuns: 15 },
    )
  }, 120_000)
})

describe('gc of object logs', () => {
  const obj = (text: string) => {
    const data = Buffer.from(text)
    const id = createHash('sha256').update(data).digest('hex')
    return { id, data, path: `objects/${id.slice(0, 2)}/${id.slice(2)}`, readOnly: true, packed: true }
  }
  const logsOf = (root: string) => {
    try {
      return readdirSync(join(root, 'object-logs')).filter((n) => n.endsWith('.olog'))
    } catch {
      return []
    }
  }

  it("rewrites a dead writer's log with only its reachable objects; keeps a live one's, and one all reachable", async () => {
    const root = tempDir()
    const kept = obj('reachable, named by an entry')
    const garbage = obj('written beside an entry that names something else')
    const writer = await AgentLog.open({ root, workers: 0 })
    await writer.append('w', { op: 'write', path: 'a', blob: kept.id }, { files: [kept, garbage] })
    const engine = new SnapshotEngine({ log: writer })
    // The writer is alive: its log stays, whatever the grace.
    expect(await engine.gc({ dryRun: false, graceMs: 0 })).toMatchObject({
      logs: 1,
      logsKept: 1,
      logBytes: 0,
    })
    expect(logsOf(root)).toHaveLength(1)
    await writer.close()

    const log = await AgentLog.open({ root, workers: 0 })
    try {
      const store = new SnapshotEngine({ log })
      // Within the grace period (default one hour): kept.
      expect(await store.gc({ dryRun: false })).toMatchObject({ logs: 1, logsKept: 1, logsRewritten: 0 })
      // A dry run says what would go, and nothing does.
      const dry = await store.gc({ graceMs: 0 })
      expect(dry).toMatchObject({ logs: 1, logsRewritten: 1, logObjectsRemoved: 1 })
      const [before] = logsOf(root)
      expect(logsOf(root)).toEqual([before])
      const r = await store.gc({ dryRun: false, graceMs: 0 })
      expect(r).toMatchObject({ logs: 1, logsRewritten: 1, logsRemoved: 0, logObjectsRemoved: 1, missing: 0 })
      expect(r.logBytes).toBeGreaterThan(garbage.data.length)
      // A new log holds the reachable object alone; no file of its own was made for it.
      const after = logsOf(root)
      expect(after).toHaveLength(1)
      expect(after[0]).not.toBe(before)
      expect(objectIds(root)).toEqual([])
      // All reachable now: a second gc keeps it as it is.
      expect(await store.gc({ dryRun: false, graceMs: 0 })).toMatchObject({
        logs: 1,
        logsKept: 1,
        logBytes: 0,
      })
      expect(logsOf(root)).toEqual(after)
    } finally {
      await log.close()
    }
    // A new process reads the kept object from the new log; verify finds nothing missing.
    expect(runCli(['blob', 'get', kept.id, '--root', root]).stdout).toBe(kept.data.toString())
    expect(runCli(['verify', '--objects', '--root', root]).status).toBe(0)
    expect(runCli(['blob', 'get', garbage.id, '--root', root]).status).not.toBe(0)
  })

  it('removes a dead log none of whose objects is reachable, and a temp file a killed gc left', async () => {
    const root = tempDir()
    const writer = await AgentLog.open({ root, workers: 0 })
    await writer.append('w', { op: 'write', path: 'a', blob: blobOf(7) }, { files: [obj('nobody names me')] })
    await writer.close()
    writeFileSync(join(root, 'object-logs', '0123456789abcdef.olog.tmp'), 'half a rewrite')
    const log = await AgentLog.open({ root, workers: 0 })
    try {
      const r = await new SnapshotEngine({ log }).gc({ dryRun: false, graceMs: 0 })
      expect(r).toMatchObject({ logs: 1, logsRemoved: 1, logsRewritten: 0, logObjectsRemoved: 1 })
    } finally {
      await log.close()
    }
    expect(readdirSync(join(root, 'object-logs'))).toEqual([])
  })
})
