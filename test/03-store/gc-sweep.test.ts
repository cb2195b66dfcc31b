/**
 * The sweep of gc, in process, on the store's edge cases: what it reads again when a log grew
 * with a snapshot, what it leaves alone in the store's folder, files that go while it sweeps,
 * the exact end of the grace period, and what the store forgets of an object gc removed.
 * (Fast, for the mutation run of src/store/gc.ts: scripts/mutation/modules.mjs.)
 */
import { createHash } from 'node:crypto'
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  unlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { ObjectStore, SnapshotEngine } from '../../dist/src/index.js'
import { age, objectIds, write } from '../helpers/gc.js'
import { tempDir } from '../helpers/index.js'
import { setup } from '../helpers/snapshot.js'

const idOf = (text: string) => createHash('sha256').update(text).digest('hex')

/** Two texts whose objects share a shard (their ids start with the same two digits). */
function sameShard(tag: string): [string, string] {
  const byShard = new Map<string, string>()
  for (let i = 0; ; i++) {
    const text = `${tag} ${i}`
    const shard = idOf(text).slice(0, 2)
    const other = byShard.get(shard)
    if (other !== undefined) return [other, text]
    byShard.set(shard, text)
  }
}

/** Appends an entry line to `ws`'s log as its owner would, after the last one: seq and ts follow it. */
function appendLine(root: string, ws: string, entry: Record<string, unknown>): void {
  const file = join(root, 'agent-logs', `${ws}.log`)
  const last = JSON.parse(readFileSync(file, 'utf8').trimEnd().split('\n').at(-1) as string)
  appendFileSync(file, `${JSON.stringify({ ...entry, seq: last.seq + 1, ts: last.ts + 1 })}\n`)
}

afterEach(() => {
  vi.useRealTimers()
})

describe('gc sweep', () => {
  it('refuses options it cannot use, and reports the workspaces it read', async () => {
    const ctx = await setup()
    const { engine } = ctx
    for (const options of [
      { dryRun: 'yes' },
      { graceMs: Number.NaN },
      { graceMs: Infinity },
      { graceMs: '5' },
    ]) {
      await expect(engine.gc(options as never)).rejects.toMatchObject({ code: 'NOA_BAD_OPTION' })
    }
    await write(ctx, 'a', { f: 'stored' })
    await write(ctx, 'b', { g: 'stored too' })
    await ctx.log.close()
    const reports: Array<{ phase: string; workspaces: number }> = []
    const r = await new SnapshotEngine({ root: ctx.root }).gc({ onProgress: (p) => reports.push(p) })
    expect(r).toMatchObject({ missing: 0, reachable: 2, removed: 0 })
    expect(reports[0]).toMatchObject({ phase: 'mark', workspaces: 1 })
    expect(reports.at(-1)).toMatchObject({ workspaces: 2 })
  })

  it('keeps what a snapshot entry appended while gc marks reaches: its record, its tree and its blobs', async () => {
    const ctx = await setup()
    const { root, engine } = ctx
    // A snapshot whose objects nothing else will reach: its own workspace's log is gone.
    await write(ctx, 'src', { f: 'reached only through the late snapshot' })
    await engine.snapshot('src')
    const srcLog = join(root, 'agent-logs', 'src.log')
    const snapshotEntry = readFileSync(srcLog, 'utf8')
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l))
      .find((e) => e.op === 'snapshot')
    expect(snapshotEntry).toBeDefined()
    await write(ctx, 'b', { g: 'b1' })
    const garbage = await engine.store.putBlob('named by nobody')
    await ctx.log.close()
    rmSync(srcLog)
    age(root)
    const before = objectIds(root)
    // Another writer appends that snapshot to b while gc walks the logs.
    let appended = false
    const r = await new SnapshotEngine({ root }).gc({
      dryRun: false,
      onProgress: (p) => {
        if (appended || p.phase !== 'mark') return
        appended = true
        appendLine(root, 'b', { op: 'snapshot', snapshot_id: snapshotEntry.snapshot_id })
      },
    })
    expect(appended).toBe(true)
    expect(r.removed).toBe(1)
    expect(objectIds(root)).toEqual(before.filter((id) => id !== garbage))
    expect(objectIds(root)).toContain(idOf('reached only through the late snapshot'))
  })

  it('keeps what a workspace created while gc marks reaches: the new log is read whole', async () => {
    const ctx = await setup()
    const { root, engine } = ctx
    await write(ctx, 'a', { f: 'a1' })
    const late = await engine.store.putBlob('named by a workspace created during gc')
    const garbage = await engine.store.putBlob('named by nobody')
    await ctx.log.close()
    age(root)
    let created = false
    const r = await new SnapshotEngine({ root }).gc({
      dryRun: false,
      onProgress: (p) => {
        if (created || p.phase !== 'mark') return
        created = true
        const entry = { seq: 1, op: 'write', path: 'f', blob: late, ts: Date.now() * 1000 }
        writeFileSync(join(root, 'agent-logs', 'late.log'), `${JSON.stringify(entry)}\n`)
      },
    })
    expect(created).toBe(true)
    expect(r.removed).toBe(1)
    expect(objectIds(root)).toContain(late)
    expect(objectIds(root)).not.toContain(garbage)
  })

  it('lists what it removes in the order of their ids', async () => {
    const ctx = await setup()
    const { root, engine } = ctx
    const ids: string[] = []
    for (let i = 0; i < 12; i++) ids.push(await engine.store.putBlob(`garbage ${i}`))
    age(root)
    const removed: string[] = []
    const r = await engine.gc({ dryRun: false, onRemove: (item) => removed.push(item.name) })
    expect(r.removed).toBe(12)
    expect(removed).toEqual([...ids].sort())
  })

  it('leaves alone what is not its own in the store folder: other files and folders, whatever their age', async () => {
    const ctx = await setup()
    const { root, engine } = ctx
    const garbage = await engine.store.putBlob('named by nobody')
    const objects = join(root, 'objects')
    writeFileSync(join(objects, 'NOTES'), 'a file of the user') // at the top, not a temp file
    writeFileSync(join(objects, 'ab'), 'a file named like a shard') // where a shard folder would be
    mkdirSync(join(objects, 'not-a-shard'))
    const lookalike = join(objects, 'not-a-shard', idOf('x').slice(2)) // named like an object
    writeFileSync(lookalike, 'x')
    const stray = join(engine.store.pathOf(garbage), '..', 'NOTES') // in a shard folder, not a temp file
    writeFileSync(stray, 'a file of the user')
    age(root)
    for (const f of [join(objects, 'NOTES'), join(objects, 'ab'), lookalike, stray]) {
      utimesSync(f, new Date(0), new Date(0))
    }
    const r = await engine.gc({ dryRun: false, graceMs: 0 })
    expect(r).toMatchObject({ removed: 1, temps: 0 })
    expect(objectIds(root)).not.toContain(garbage)
    for (const f of [join(objects, 'NOTES'), join(objects, 'ab'), lookalike, stray]) {
      expect(existsSync(f)).toBe(true)
    }
  })

  it('refuses a store folder or a shard it cannot read rather than sweep as if it were empty', async () => {
    const ctx = await setup()
    const { root, engine } = ctx
    await engine.store.putBlob('named by nobody')
    const loop = join(root, 'objects', 'cd')
    rmSync(loop, { recursive: true, force: true })
    symlinkSync(loop, loop) // a shard that cannot be listed (ELOOP)
    await expect(engine.gc({ dryRun: false, graceMs: 0 })).rejects.toMatchObject({ code: 'ELOOP' })

    const other = await setup()
    rmSync(join(other.root, 'objects'), { recursive: true, force: true })
    writeFileSync(join(other.root, 'objects'), 'not a folder')
    await expect(other.engine.gc({ dryRun: false })).rejects.toMatchObject({ code: 'ENOTDIR' })
  })

  it('goes on past files and shards another gc removed while it swept', async () => {
    const ctx = await setup()
    const { root, engine } = ctx
    const [a, b] = sameShard('object')
    const t1 = join(root, 'objects', '.blob-00000000000a.tmp')
    const t2 = join(root, 'objects', '.blob-00000000000b.tmp')
    const ids = [await engine.store.putBlob(a), await engine.store.putBlob(b)].sort()
    // Two objects in other shards than those: the first removed takes the other's shard away.
    let first = ''
    let second = ''
    for (let i = 0; second === ''; i++) {
      const id = await engine.store.putBlob(`elsewhere ${i}`)
      if (id.slice(0, 2) === ids[0]?.slice(0, 2)) continue
      if (first === '') first = id
      else if (id.slice(0, 2) !== first.slice(0, 2)) second = id
    }
    const [early, late] = [first, second].sort() as [string, string]
    writeFileSync(t1, 'half a blob')
    writeFileSync(t2, 'half a blob')
    age(root)
    for (const t of [t1, t2]) utimesSync(t, new Date(0), new Date(0))
    const removed: string[] = []
    const r = await engine.gc({
      dryRun: false,
      onRemove: (item) => {
        removed.push(item.name)
        // Another gc takes what this one was about to look at.
        if (item.path === t1) unlinkSync(t2)
        if (item.name === ids[0]) unlinkSync(engine.store.pathOf(ids[1] as string))
        if (item.name === early) rmSync(join(root, 'objects', late.slice(0, 2)), { recursive: true })
      },
    })
    expect(removed).toEqual(['.blob-00000000000a.tmp', ...[ids[0], early].sort()])
    expect(r).toMatchObject({ temps: 1, removed: 2 })
    expect(objectIds(root)).toEqual([])
  })

  it('an object another gc removes just before this one does is not counted twice; any other failure to remove one is an error', async () => {
    const ctx = await setup()
    const { root, engine } = ctx
    const [a, b] = [
      await engine.store.putBlob('taken by another gc'),
      await engine.store.putBlob('removed here'),
    ]
    age(root)
    // The store forgets an object just before gc unlinks it: there, another gc takes `a` first.
    const forget = engine.store.forget.bind(engine.store)
    engine.store.forget = (id: string) => {
      if (id === a) unlinkSync(engine.store.pathOf(a))
      forget(id)
    }
    const removed: string[] = []
    const r = await engine.gc({ dryRun: false, onRemove: (item) => removed.push(item.name) })
    expect(r).toMatchObject({ removed: 1 })
    expect(removed).toEqual([b])
    expect(objectIds(root)).toEqual([])
    // Something that cannot be unlinked (a folder put in its place): gc fails, naming it.
    const c = await engine.store.putBlob('cannot be unlinked')
    age(root)
    engine.store.forget = (id: string) => {
      rmSync(engine.store.pathOf(id))
      mkdirSync(engine.store.pathOf(id))
      forget(id)
    }
    await expect(engine.gc({ dryRun: false })).rejects.toMatchObject({ code: 'EISDIR' })
    expect(existsSync(engine.store.pathOf(c))).toBe(true)
  })

  it('removes an object exactly as old as the grace period, and keeps one a second younger', async () => {
    const ctx = await setup()
    const { root, engine } = ctx
    const old = await engine.store.putBlob('as old as the grace period')
    const young = await engine.store.putBlob('a second younger')
    const temp = join(root, 'objects', '.blob-00000000000a.tmp')
    const youngTemp = join(root, 'objects', '.blob-00000000000b.tmp')
    writeFileSync(temp, 'half a blob')
    writeFileSync(youngTemp, 'half a blob')
    // Whole seconds: mtimes set and read back exactly.
    const now = Math.floor(Date.now() / 1000) * 1000
    const graceMs = 60_000
    for (const [f, t] of [
      [engine.store.pathOf(old), now - graceMs],
      [temp, now - graceMs],
      [engine.store.pathOf(young), now - graceMs + 1000],
      [youngTemp, now - graceMs + 1000],
    ] as const) {
      utimesSync(f, t / 1000, t / 1000)
    }
    vi.useFakeTimers({ toFake: ['Date'], now })
    const r = await engine.gc({ dryRun: false, graceMs })
    vi.useRealTimers()
    expect(r).toMatchObject({ removed: 1, young: 1, temps: 1 })
    expect(objectIds(root)).toEqual([young])
    expect(existsSync(temp)).toBe(false)
    expect(existsSync(youngTemp)).toBe(true)
  })

  it('an object gc removed is no longer taken as stored: a snapshot naming it says it is missing until it is put again', async () => {
    const ctx = await setup()
    const { root, engine } = ctx
    const text = 'stored, removed, named'
    const blob = await engine.store.putBlob(text)
    age(root)
    expect((await engine.gc({ dryRun: false })).removed).toBe(1)
    await ctx.log.append('w', { op: 'write', path: 'f', blob })
    expect((await engine.snapshot('w')).missingBlobs).toEqual([{ path: 'f', blob, workspace: 'w', seq: 1 }])
    expect(await engine.store.putBlob(text)).toBe(blob)
    expect(existsSync(engine.store.pathOf(blob))).toBe(true)
    await ctx.log.append('w', { op: 'write', path: 'g', blob })
    expect((await engine.snapshot('w')).missingBlobs).toEqual([])
  })
})

describe('object store writes, for gc', () => {
  it('finds the objects it has in place and freshens them, rewriting none; an exact one of the wrong size is replaced', async () => {
    const root = tempDir()
    const store = new ObjectStore(root)
    const texts = ['', 'some bytes']
    const ids = await store.putObjects(texts.map((t) => Buffer.from(t)))
    age(root)
    const before = ids.map((id) => statSync(store.pathOf(id)))
    const started = Date.now()
    expect(await store.putObjects(texts.map((t) => Buffer.from(t)))).toEqual(ids)
    ids.forEach((id, i) => {
      const st = statSync(store.pathOf(id))
      expect(st.ino).toBe(before[i]?.ino) // not written again
      expect(st.mtimeMs).toBeGreaterThanOrEqual(started - 1000) // freshened: gc's grace starts again
    })
    // An object that need not be exact (a pack may be encoded again) is left as it is.
    const loose = { id: ids[1] as string, data: Buffer.from('a longer encoding of it'), exact: false }
    await store.write([loose])
    expect(statSync(store.pathOf(ids[1] as string)).ino).toBe(before[1]?.ino)
    await store.write([{ ...loose, exact: true }])
    expect(readFileSync(store.pathOf(ids[1] as string), 'utf8')).toBe('a longer encoding of it')
  })

  it('a streamed put that cannot use its shard folder fails, leaving no temp file behind', async () => {
    const root = tempDir()
    const store = new ObjectStore(root)
    await store.putBlob('makes the store folder')
    const text = 'lands in a shard that is a file'
    const shard = join(root, 'objects', idOf(text).slice(0, 2))
    rmSync(shard, { recursive: true, force: true })
    writeFileSync(shard, 'not a folder')
    await expect(store.putBlob(Readable.from([text]))).rejects.toMatchObject({ code: 'NOA_NOT_DIRECTORY' })
    expect(readdirSync(join(root, 'objects')).filter((n) => n.endsWith('.tmp'))).toEqual([])
  })
})
