/**
 * Log compaction (docs/compaction.md): a log's prefix behind a snapshot becomes one base record;
 * every later line stays byte for byte; readers, verify, snapshots, replays, refs, forks and
 * watch understand the base; bad input is refused by name with nothing changed.
 */
import { spawn } from 'node:child_process'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { brotliDecompressSync, gunzipSync } from 'node:zlib'
import { describe, expect, it, onTestFinished } from 'vitest'
import {
  AgentLog,
  type Entry,
  type EntryInput,
  isNoaError,
  type NoaError,
  ObjectStore,
  SnapshotEngine,
} from '../../dist/src/index.js'
import { blobOf, runCli, tempDir } from '../helpers/index.js'

const HOLD = new URL('../fixtures/hold-lock.mjs', import.meta.url).pathname
const w = (path: string, n: number): EntryInput => ({ op: 'write', path, blob: blobOf(n) })

async function open(root = tempDir(), workers = 1) {
  const store = new ObjectStore(root)
  const log = await AgentLog.open({ root, workers, objects: store })
  onTestFinished(() => log.close().then(() => undefined))
  return { root, store, log, engine: new SnapshotEngine({ log, store }) }
}

async function refusal(p: Promise<unknown> | (() => unknown)): Promise<NoaError> {
  try {
    await (typeof p === 'function' ? p() : p)
  } catch (err) {
    if (isNoaError(err)) return err
    throw err
  }
  throw new Error('expected a refusal')
}

async function all<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = []
  for await (const x of it) out.push(x)
  return out
}

const logOf = (root: string, ws = 'ws') => join(root, 'agent-logs', `${ws}.log`)

/** 100 writes over 30 paths, a snapshot (seq 101, covering 100), then 20 more entries (102-121). */
async function history(log: AgentLog, engine: SnapshotEngine, ws = 'ws') {
  await log.appendMany(
    ws,
    Array.from({ length: 100 }, (_, i) => w(`src/f${i % 30}.ts`, i)),
  )
  const snap = await engine.snapshot(ws, { message: 'first' })
  await log.appendMany(ws, [
    ...Array.from({ length: 15 }, (_, i) => w(`src/g${i}.ts`, 1000 + i)),
    { op: 'delete', path: 'src/f1.ts' },
    { op: 'rename', from: 'src/f2.ts', to: 'lib/f2.ts' },
    ...Array.from({ length: 3 }, (_, i) => w(`src/f${i + 3}.ts`, 2000 + i)),
  ])
  return snap
}

/** The bytes of a log from the line of `seq` on. */
function linesFrom(text: string, seq: number): string {
  const at = text.indexOf(`{"seq":${seq},`)
  expect(at).toBeGreaterThan(0)
  return text.slice(at)
}

describe('compact', () => {
  it('replaces the prefix by one base record and keeps every later line byte for byte', async () => {
    const { root, log, engine } = await open()
    const snap = await history(log, engine)
    const before = readFileSync(logOf(root), 'utf8')
    const tsOf100 = JSON.parse(before.split('\n')[99] as string).ts
    const r = await log.compact('ws')
    expect(r).toMatchObject({
      workspace: 'ws',
      compacted: true,
      baseSeq: 100,
      snapshotId: snap.snapshotId,
      bytesBefore: Buffer.byteLength(before),
      archive: null,
    })
    const after = readFileSync(logOf(root), 'utf8')
    expect(r.bytesAfter).toBe(Buffer.byteLength(after))
    const base = `{"seq":100,"op":"base","snapshot_id":"${snap.snapshotId}","ts":${tsOf100}}\n`
    expect(after).toBe(base + linesFrom(before, 101))
    // verify reads the base and the lines after it; the new sidecar covers the whole new log.
    const v = await log.verify('ws')
    expect(v).toMatchObject({ ok: true, entries: 21, firstSeq: 101, lastSeq: 121 })
    expect(v.base).toEqual({ seq: 100, ts: tsOf100, snapshotId: snap.snapshotId })
    expect(v.checksummedBytes).toBe(Buffer.byteLength(after))
    // Nothing left behind in agent-logs/ or checksums/.
    expect(readdirSync(join(root, 'agent-logs'))).toEqual(['ws.log'])
    expect(readdirSync(join(root, 'checksums'))).toEqual(['ws.sum'])
    // A second compaction behind the same snapshot changes nothing.
    const again = await log.compact('ws')
    expect(again).toMatchObject({ compacted: false, baseSeq: 100, snapshotId: snap.snapshotId })
    expect(readFileSync(logOf(root), 'utf8')).toBe(after)
  })

  it('readers start after the base; a seq the base replaced is a named error naming the base seq', async () => {
    const { root, log, engine } = await open()
    await history(log, engine)
    const entries = await all(log.read('ws'))
    await log.compact('ws')
    expect((await all(log.read('ws'))).map((e) => e.seq)).toEqual(entries.slice(100).map((e) => e.seq))
    expect(await all(log.read('ws', { fromSeq: 101 }))).toEqual(entries.slice(100))
    expect((await all(log.read('ws', { fromSeq: 110 })))[0]?.seq).toBe(110)
    for (const fromSeq of [2, 50, 100]) {
      const err = await refusal(all(log.read('ws', { fromSeq })))
      expect(err.code).toBe('NOA_COMPACTED')
      expect(err.details).toMatchObject({ baseSeq: 100, seq: fromSeq })
      expect(err.message).toContain('seqs up to 100 are replaced by snapshot')
      expect((await refusal(all(log.readBytes('ws', fromSeq)))).code).toBe('NOA_COMPACTED')
      expect((await refusal(all(log.watch('ws', { fromSeq })))).code).toBe('NOA_COMPACTED')
    }
    // Raw bytes from the start are the file as stored, base record first.
    expect(Buffer.concat(await all(log.readBytes('ws'))).toString()).toBe(readFileSync(logOf(root), 'utf8'))
    // The CLI says the same.
    const cli = runCli(['log', 'ws', '--root', root, '--from', '7'])
    expect(cli.status).toBe(1)
    expect(cli.stderr).toContain('seqs up to 100 are replaced by snapshot')
    expect((await log.workspaces()).find((i) => i.workspace === 'ws')).toMatchObject({
      entries: 21,
      lastSeq: 121,
    })
  })

  it('snapshots, replays (from scratch too) and refs start from the base snapshot and agree with before', async () => {
    const { log, engine } = await open()
    const snap = await history(log, engine)
    const now = await engine.replay('ws')
    const scratch = await engine.replay('ws', { fromScratch: true })
    const at110 = await engine.resolve('ws@110')
    const at100 = await engine.resolve('ws@100')
    await log.compact('ws')
    expect([...(await engine.replay('ws')).tree.entries()]).toEqual([...now.tree.entries()])
    expect([...(await engine.replay('ws', { fromScratch: true })).tree.entries()]).toEqual([
      ...scratch.tree.entries(),
    ])
    expect((await engine.resolve('ws@110')).tree.id).toBe(at110.tree.id)
    expect((await engine.resolve('ws@100')).tree.id).toBe(at100.tree.id)
    expect((await engine.resolve('ws@100')).tree.id).toBe(snap.tree)
    expect((await refusal(engine.resolve('ws@99'))).code).toBe('NOA_COMPACTED')
    // A new snapshot after compaction: parent is the head, the tree as a replay says.
    await log.append('ws', w('new.txt', 5))
    const next = await engine.snapshot('ws')
    expect(next.parent).toBe(snap.snapshotId)
    expect(next.seq).toBe(122)
    const expected = new Map(now.tree.entries())
    expected.set('new.txt', blobOf(5))
    expect(new Map((await engine.tree(next.snapshotId as string)).entries())).toEqual(expected)
    expect((await log.verify('ws')).ok).toBe(true)
  })

  it('gc keeps the tree of the base snapshot, even once that snapshot is pruned: replays from the base still work', async () => {
    const { log, engine } = await open()
    const snap = await history(log, engine)
    const scratch = [...(await engine.replay('ws', { fromScratch: true })).tree.entries()]
    await log.compact('ws')
    await log.append('ws', w('later', 9))
    await engine.snapshot('ws')
    const pruned = await engine.prune('ws', { keepLast: 1 })
    expect(pruned.dropped).toContain(snap.snapshotId)
    await engine.gc({ dryRun: false, graceMs: 0 })
    const expected = new Map(scratch)
    expected.set('later', blobOf(9))
    expect(new Map((await engine.replay('ws', { fromScratch: true })).tree.entries())).toEqual(expected)
    expect((await engine.resolve('ws@100')).tree.id).toBe(snap.tree)
  })

  it('appends go on after it in the owner that had the workspace open (seqs continue, sidecar kept up)', async () => {
    for (const workers of [0, 1]) {
      const { log, engine } = await open(tempDir(), workers)
      await history(log, engine)
      await log.compact('ws')
      const acks = await log.appendMany('ws', [w('a', 1), w('b', 2)])
      expect(acks.map((a) => a.seq)).toEqual([122, 123])
      const last = await log.append('ws', w('c', 3))
      expect(last.seq).toBe(124)
      expect((await all(log.read('ws', { fromSeq: 122 }))).map((e: Entry) => e.seq)).toEqual([122, 123, 124])
      await log.close()
      const v = await (await open(log.root)).log.verify('ws')
      expect(v).toMatchObject({ ok: true, firstSeq: 101, lastSeq: 124 })
    }
  })

  it('a watcher across a compaction goes on with no gap and no duplicate', async () => {
    const { log, engine } = await open()
    await history(log, engine)
    const stop = new AbortController()
    const seen: number[] = []
    const watching = (async () => {
      for await (const e of log.watch('ws', { fromSeq: 105, signal: stop.signal, pollMs: 20 })) {
        seen.push(e.seq)
        if (e.seq === 125) stop.abort()
      }
    })()
    while (seen.length < 16) await new Promise((r) => setTimeout(r, 10))
    await log.compact('ws')
    await log.appendMany(
      'ws',
      Array.from({ length: 5 }, (_, i) => w(`late${i}`, i)),
    )
    await watching
    expect(seen).toEqual(Array.from({ length: 21 }, (_, i) => 105 + i))
  })

  it('--before picks the snapshot: by id, or the newest covering only seqs before a seq', async () => {
    const { root, log, engine } = await open()
    const first = await history(log, engine) // covers 100, entry 101
    const second = await engine.snapshot('ws') // covers 121, entry 122
    await log.append('ws', w('z', 1))
    expect(await log.compact('ws', { before: 110 })).toMatchObject({
      baseSeq: 100,
      snapshotId: first.snapshotId,
    })
    expect(readFileSync(logOf(root), 'utf8').split('\n')[1]).toContain('"seq":101,')
    expect(await log.compact('ws', { before: second.snapshotId as string })).toMatchObject({
      compacted: true,
      baseSeq: 121,
      snapshotId: second.snapshotId,
    })
    expect((await log.verify('ws')).entries).toBe(2) // the snapshot entry 122 and the write
    expect((await engine.replay('ws')).tree.get('z')).toBe(blobOf(1))
  })

  it('keeps the replaced lines in a compressed archive (gzip, brotli) that gives them back byte for byte', async () => {
    for (const archiveFormat of ['gzip', 'brotli'] as const) {
      const { root, log, engine } = await open()
      await history(log, engine)
      const before = readFileSync(logOf(root))
      const dir = join(tempDir(), 'archive')
      const r = await log.compact('ws', { archive: dir, archiveFormat })
      const path = join(dir, `ws.1-100.log.${archiveFormat === 'gzip' ? 'gz' : 'br'}`)
      expect(r.archive).toMatchObject({ path, format: archiveFormat })
      const raw = (archiveFormat === 'gzip' ? gunzipSync : brotliDecompressSync)(readFileSync(path))
      expect(raw.toString()).toBe(before.toString().slice(0, before.indexOf('{"seq":101,')))
      expect(readdirSync(dir)).toEqual([`ws.1-100.log.${archiveFormat === 'gzip' ? 'gz' : 'br'}`])
    }
  })

  it('a fork of a compacted workspace, and a compacted fork, replay as before', async () => {
    const { log, engine } = await open()
    const snap = await history(log, engine)
    await log.compact('ws')
    await engine.fork('child', snap.snapshotId as string)
    await log.appendMany('child', [w('c1', 1), w('c2', 2)])
    const own = await engine.snapshot('child')
    await log.append('child', w('c3', 3))
    const tree = [...(await engine.replay('child')).tree.entries()]
    expect(await log.compact('child')).toMatchObject({
      compacted: true,
      baseSeq: 3,
      snapshotId: own.snapshotId,
    })
    expect([...(await engine.replay('child')).tree.entries()]).toEqual(tree)
    expect([...(await engine.replay('child', { fromScratch: true })).tree.entries()]).toEqual(tree)
    // A merge needs the source's entries since the common base (the fork point): the child's
    // compaction replaced them, and the merge says so by name rather than merging a gap.
    const err = await refusal(engine.merge('ws', ['child']))
    expect(err.code).toBe('NOA_COMPACTED')
    expect(err.details).toMatchObject({ baseSeq: 3, workspace: 'child' })
    // Into a compacted target, from a source that still has its entries, a merge works.
    await engine.fork('other', snap.snapshotId as string)
    await log.appendMany('other', [w('o1', 1)])
    const m = await engine.merge('ws', ['other'])
    expect(m.snapshotId).toMatch(/^noa_/)
    expect((await engine.replay('ws')).tree.get('o1')).toBe(blobOf(1))
    expect((await log.verify('ws')).ok).toBe(true)
  })
})

describe('compact refuses bad input by name and changes nothing', () => {
  it('a seq no snapshot covers, a workspace without snapshots, an unknown snapshot', async () => {
    const { root, log, engine } = await open()
    await log.appendMany('bare', [w('a', 1), w('b', 2)])
    await history(log, engine)
    const before = readFileSync(logOf(root))
    const bare = readFileSync(logOf(root, 'bare'))
    for (const [ws, options] of [
      ['ws', { before: 50 }],
      ['ws', { before: 100 }],
      ['ws', { before: 'noa_0123' }],
      ['bare', {}],
    ] as const) {
      const err = await refusal(log.compact(ws, options))
      expect(err.code).toBe('NOA_NOT_COVERED')
      expect(err.message).toMatch(new RegExp(`^workspace ${ws} cannot be compacted: `))
    }
    expect(readFileSync(logOf(root))).toEqual(before)
    expect(readFileSync(logOf(root, 'bare'))).toEqual(bare)
    const cli = runCli(['compact', 'ws', '--root', root, '--before', '50'])
    expect(cli.status).toBe(1)
    expect(cli.stderr).toContain('no snapshot of it covers only seqs before 50')
    expect(readFileSync(logOf(root))).toEqual(before)
  })

  it('an archive folder inside agent-logs/ or another folder of the root, by any path', async () => {
    const { root, log, engine } = await open()
    await history(log, engine)
    const before = readFileSync(logOf(root))
    for (const archive of [
      join(root, 'agent-logs'),
      join(root, 'agent-logs', 'old'),
      join(root, 'agent-logs', '..', 'agent-logs', 'x'),
      join(root, 'checksums', 'x'),
      join(root, 'journal'),
      join(root, 'objects', 'aa'),
    ]) {
      const err = await refusal(log.compact('ws', { archive }))
      expect(err.code).toBe('NOA_BAD_OPTION')
      expect(err.details.field).toBe('archive')
      expect(err.message).toContain("a folder of the root's own")
    }
    expect(existsSync(join(root, 'agent-logs', 'old'))).toBe(false)
    expect(readFileSync(logOf(root))).toEqual(before)
    expect(readdirSync(join(root, 'agent-logs'))).toEqual(['ws.log'])
    const err = await refusal(log.compact('ws', { before: 'latest' }))
    expect(err.code).toBe('NOA_BAD_OPTION')
    expect((await refusal(log.compact('ws', { nope: 1 } as never))).code).toBe('NOA_BAD_OPTION')
  })

  it('a workspace another process is appending to', async () => {
    const { root, log, engine } = await open()
    await history(log, engine)
    await log.release('ws')
    const before = readFileSync(logOf(root))
    const child = spawn(process.execPath, [HOLD, root, 'ws'], { stdio: ['pipe', 'pipe', 'inherit'] })
    onTestFinished(() => {
      child.kill('SIGKILL')
    })
    await new Promise<void>((resolve, reject) => {
      child.stdout.once('data', () => resolve())
      child.once('exit', (code) => reject(new Error(`holder exited ${code}`)))
    })
    const err = await refusal(log.compact('ws', { archive: join(tempDir(), 'a') }))
    expect(err.code).toBe('NOA_WORKSPACE_LOCKED')
    expect(err.message).toContain(`workspace ws is locked by process ${child.pid}`)
    expect(readFileSync(logOf(root))).toEqual(before)
    const cli = runCli(['compact', 'ws', '--root', root])
    expect(cli.status).toBe(1)
    expect(cli.stderr).toContain(`workspace ws is locked by process ${child.pid}`)
    expect(readFileSync(logOf(root))).toEqual(before)
    child.stdin.end()
  })

  it('without an object store to say what a snapshot covers', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 0 })
    onTestFinished(() => log.close().then(() => undefined))
    await log.append('ws', w('a', 1))
    const err = await refusal(log.compact('ws'))
    expect(err.code).toBe('NOA_BAD_OPTION')
    expect(err.details.field).toBe('objects')
  })
})
