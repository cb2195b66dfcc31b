import { spawn } from 'node:child_process'
import { readdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { progress } from '../../dist/src/cli/progress.js'
import { encodeBody, formatLine } from '../../dist/src/engine/index.js'
import { type EntryInput, SnapshotEngine } from '../../dist/src/index.js'
import {
  lastSnapshotEntry,
  sha256,
  snapshotEntriesBackward,
  TREE_HEADER,
} from '../../dist/src/store/index.js'
import { blobOf, runCli, tempDir } from '../helpers/index.js'
import { files, refusal, setup } from '../helpers/snapshot.js'

/** Object files under root (not the fan-out directories). */
function objectFiles(root: string): string[] {
  try {
    return readdirSync(join(root, 'objects'), { recursive: true, encoding: 'utf8' })
      .filter((f) => /^[0-9a-f]{2}\/[0-9a-f]{62}$/.test(f))
      .sort()
  } catch {
    return []
  }
}

const w = (path: string, n: number): EntryInput => ({ op: 'write', path, blob: blobOf(n) })
const d = (path: string): EntryInput => ({ op: 'delete', path })
const mv = (from: string, to: string): EntryInput => ({ op: 'rename', from, to })

describe('replay rules', () => {
  it('applies writes, deletes, rename chains and delete-then-write', async () => {
    const { log, engine } = await setup()
    await log.appendMany('ws', [
      w('a', 1),
      w('b', 2),
      mv('a', 'x/a1'),
      mv('x/a1', 'x/a2'),
      mv('x/a2', 'a'), // back to its first name
      d('b'),
      w('b', 3), // delete then write
      w('c', 4),
      w('c', 5), // overwrite
      mv('c', 'd'),
      w('c', 6), // the old name is free again
    ])
    const r = await engine.snapshot('ws', { message: 'm' })
    expect(r.entriesReplayed).toBe(11)
    expect(r.seq).toBe(11)
    expect(r.parent).toBeNull()
    expect(await files(engine, r.snapshotId as string)).toEqual({
      a: blobOf(1),
      b: blobOf(3),
      c: blobOf(6),
      d: blobOf(5),
    })
  })

  const failing: Array<[string, EntryInput[], number, RegExp]> = [
    ['delete of a missing path', [w('a', 1), d('b')], 2, /seq 2: cannot delete "b": no such path/],
    ['delete twice', [w('a', 1), d('a'), d('a')], 3, /seq 3: cannot delete "a"/],
    [
      'rename of a missing path',
      [w('a', 1), mv('z', 'y')],
      2,
      /seq 2: cannot rename "z" to "y": no such path "z"/,
    ],
    ['rename onto an existing path', [w('a', 1), w('b', 2), mv('a', 'b')], 3, /seq 3: .*"b" already exists/],
    ['rename of a renamed-away path', [w('a', 1), mv('a', 'b'), mv('a', 'c')], 3, /seq 3: cannot rename "a"/],
  ]
  for (const [name, entries, seq, message] of failing) {
    it(`with strict, refuses ${name}, naming workspace and seq, and makes no snapshot`, async () => {
      const { root, log, engine } = await setup()
      await log.appendMany('ws', entries)
      const before = readFileSync(join(root, 'agent-logs', 'ws.log'))
      const err = await refusal(engine.snapshot('ws', { message: 'x', strict: true }))
      expect(err.code).toBe('NOA_REPLAY')
      expect(err.message).toMatch(/^workspace ws /)
      expect(err.message).toMatch(message)
      expect(err.details).toMatchObject({ workspace: 'ws', seq })
      expect(readFileSync(join(root, 'agent-logs', 'ws.log'))).toEqual(before)
      expect(objectFiles(root)).toEqual([])
      expect(await engine.listSnapshots('ws')).toEqual([])
    })
  }

  // A line that is valid JSON but breaks a field rule (here a `..` segment, which would let a
  // checkout leave the tree): replay validates as `verify` does, for a short log read in one
  // call and for a long one streamed in chunks.
  for (const lines of [50, 40_000]) {
    it(`refuses a log whose line breaks a field rule, naming the line (${lines} lines)`, async () => {
      const { root, log, engine } = await setup()
      await log.appendMany('ws', [w('first', 1)])
      const file = join(root, 'agent-logs', 'ws.log')
      let text = readFileSync(file, 'utf8')
      let offset = 0
      for (let seq = 2; seq <= lines; seq++) {
        const path = seq === lines - 10 ? 'src/../etc/passwd' : `src/f${seq % 300}.ts`
        if (seq === lines - 10) offset = Buffer.byteLength(text)
        text += `{"seq":${seq},"op":"write","path":"${path}","blob":"${blobOf(seq)}","ts":${seq}}\n`
      }
      writeFileSync(file, text)
      const err = await refusal(engine.snapshot('ws', { message: 'x' }))
      expect(err.code).toBe('NOA_CORRUPT_LOG')
      const where = lines < 1000 ? `${file} (line at byte ${offset})` : `${file}:${lines - 10}`
      expect(err.message).toBe(
        `${where}: corrupt entry: path: has a '..' segment in "src/../etc/passwd"; a snapshot with skipDamaged (noa snapshot ws --skip-damaged) leaves the damaged lines out and records which`,
      )
      expect(await engine.listSnapshots('ws')).toEqual([])
    })
  }
})

describe('snapshots', () => {
  it('gives equal trees the same id whatever the order of the entries', async () => {
    const { log, engine } = await setup()
    await log.appendMany('one', [w('src/b.ts', 2), w('src/a.ts', 1), w('README', 3)])
    await log.appendMany('two', [w('README', 9), w('src/a.ts', 1), mv('README', 'R'), mv('R', 'README')])
    await log.appendMany('two', [w('README', 3), w('tmp', 4), d('tmp'), w('src/b.ts', 2)])
    const a = await engine.snapshot('one')
    const b = await engine.snapshot('two')
    expect(a.tree).toBe(b.tree)
    expect(a.snapshotId).not.toBe(b.snapshotId) // records differ: workspace, seq, time
    expect(a.snapshotId).toMatch(/^noa_[0-9a-f]{64}$/)
    const tree = await engine.tree(a.snapshotId as string)
    // Stored per folder: the tree is named by its root folder, which names `src/` by its hash.
    expect(tree.format).toBe('dirs')
    const src = sha256(`noa-tree 2\na.ts\0${blobOf(1)}\nb.ts\0${blobOf(2)}\n`)
    expect(tree.id).toBe(sha256(`noa-tree 2\nREADME\0${blobOf(3)}\nsrc/\0${src}\n`))
    expect(tree.bytes.toString('utf8')).toBe(
      `${TREE_HEADER}README\0${blobOf(3)}\nsrc/a.ts\0${blobOf(1)}\nsrc/b.ts\0${blobOf(2)}\n`,
    )
  })

  it('replays only the entries since the parent and chains parents', async () => {
    const { log, engine } = await setup()
    await log.appendMany(
      'ws',
      Array.from({ length: 40 }, (_, i) => w(`f${i % 9}`, i)),
    )
    const s1 = await engine.snapshot('ws', { message: 'one' })
    expect(s1).toMatchObject({ parent: null, seq: 40, entriesReplayed: 40 })
    expect(s1.entry?.seq).toBe(41)
    await log.appendMany('ws', [w('g', 1), d('f1'), mv('f2', 'h')])
    const s2 = await engine.snapshot('ws', { message: 'two' })
    expect(s2).toMatchObject({ parent: s1.snapshotId, seq: 44, entriesReplayed: 3 })
    const none = await engine.snapshot('ws', { message: 'three' })
    expect(none).toMatchObject({ created: false, snapshotId: s2.snapshotId, entry: null })
    const s3 = await engine.snapshot('ws', { message: 'three', allowEmpty: true })
    expect(s3).toMatchObject({ parent: s2.snapshotId, entriesReplayed: 0, tree: s2.tree })
    const record = await engine.getSnapshot(s2.snapshotId as string)
    expect(record).toMatchObject({
      workspace: 'ws',
      parent: s1.snapshotId,
      since: 40,
      seq: 44,
      message: 'two',
    })
    const list = await engine.listSnapshots('ws')
    expect(list.map((s) => [s.snapshotId, s.kind, s.message])).toEqual([
      [s3.snapshotId, 'snapshot', 'three'],
      [s2.snapshotId, 'snapshot', 'two'],
      [s1.snapshotId, 'snapshot', 'one'],
    ])
    const head = await engine.head('ws')
    expect(head).toMatchObject({ entrySeq: s3.entry?.seq, pos: 45, own: true })
  })

  it('appends the snapshot entry after the objects, with the seed fields', async () => {
    const { root, log, engine } = await setup()
    await log.appendMany('ws', [w('a', 1)])
    const s1 = await engine.snapshot('ws', { message: 'first' })
    await log.append('ws', w('b', 2))
    const s2 = await engine.snapshot('ws', { message: 'second' })
    const lines = readFileSync(join(root, 'agent-logs', 'ws.log'), 'utf8')
      .trimEnd()
      .split('\n')
    expect(lines[1]).toBe(
      `{"seq":2,"op":"snapshot","snapshot_id":"${s1.snapshotId}","message":"first","ts":${s1.entry?.ts}}`,
    )
    expect(lines[3]).toBe(
      `{"seq":4,"op":"snapshot","snapshot_id":"${s2.snapshotId}","parent":"${s1.snapshotId}","message":"second","ts":${s2.entry?.ts}}`,
    )
  })

  it('resolves a snapshot id to its tree without any log', async () => {
    const { root, log, engine } = await setup()
    await log.appendMany('ws', [w('a', 1), w('b/c', 2)])
    const s = await engine.snapshot('ws')
    await log.close()
    renameSync(join(root, 'agent-logs'), join(root, 'moved-away'))
    const reader = new SnapshotEngine({ root })
    expect(await files(reader, s.snapshotId as string)).toEqual({ a: blobOf(1), 'b/c': blobOf(2) })
    const r = runCli(['tree', s.snapshotId as string, '--root', root])
    expect(r.stdout).toBe(`a\t${blobOf(1)}\nb/c\t${blobOf(2)}\n`)
  })

  it('stays exact while appends run concurrently, and serializes snapshots of one workspace', async () => {
    const { log, engine } = await setup()
    await log.openWorkspace('ws')
    const writers = Array.from({ length: 4 }, async (_, k) => {
      for (let i = 0; i < 60; i++) {
        await log.append('ws', w(`w${k}/f${i % 7}`, k * 1000 + i))
        if (i % 9 === 8) await log.append('ws', d(`w${k}/f${i % 7}`))
      }
    })
    const taken: string[] = []
    const snapshots = (async () => {
      for (let i = 0; i < 4; i++) {
        const [a, b] = await Promise.all([
          engine.snapshot('ws', { allowEmpty: true }),
          engine.snapshot('ws', { allowEmpty: true }),
        ])
        expect(b?.parent).toBe(a?.snapshotId) // the second waited for the first
        taken.push(a.snapshotId as string, b.snapshotId as string)
      }
    })()
    await Promise.all([...writers, snapshots])
    const last = await engine.snapshot('ws', { allowEmpty: true })
    expect(last.parent).toBe(taken.at(-1))
    expect((await engine.replay('ws', { fromScratch: true })).tree.id).toBe(last.tree)
    const listed = (await engine.listSnapshots('ws')).map((s) => s.snapshotId)
    expect(listed).toEqual([last.snapshotId, ...taken.reverse()])
  })

  it('property: incremental snapshots equal a full replay from empty', async () => {
    const { log, engine } = await setup()
    let n = 0
    const op = fc.record({ kind: fc.nat(9), path: fc.nat(11), other: fc.nat(11), blob: fc.nat(5) })
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(op, { maxLength: 25 }), { minLength: 1, maxLength: 4 }),
        async (rounds) => {
          const ws = `p${n++}`
          const model = new Map<string, string>()
          const paths = (i: number) =>
            ['a', 'b', 'src/a', 'src/b', 'src/x/y', 'é', '😀', 'z z', 'a\nb', 'ｚ', 'A', 'a.b'][i] as string
          for (const ops of rounds) {
            const entries: EntryInput[] = []
            for (const o of ops) {
              const live = [...model.keys()]
              if (o.kind < 6 || live.length === 0) {
                const blob = blobOf(o.blob)
                model.set(paths(o.path), blob)
                entries.push({ op: 'write', path: paths(o.path), blob })
              } else if (o.kind < 8) {
                const path = live[o.path % live.length] as string
                model.delete(path)
                entries.push({ op: 'delete', path })
              } else {
                const from = live[o.path % live.length] as string
                const to = paths(o.other)
                if (model.has(to)) continue
                model.set(to, model.get(from) as string)
                model.delete(from)
                entries.push({ op: 'rename', from, to })
              }
            }
            if (entries.length > 0) await log.appendMany(ws, entries)
            else await log.openWorkspace(ws)
            const s = await engine.snapshot(ws, { allowEmpty: true })
            const full = await engine.replay(ws, { fromScratch: true })
            expect(full.tree.id).toBe(s.tree)
            expect(full.parent).toBeNull()
            expect(Object.fromEntries((await engine.tree(s.snapshotId as string)).entries())).toEqual(
              Object.fromEntries(model),
            )
          }
        },
      ),
      { numRuns: 25 },
    )
  })
})

describe('forks', () => {
  it('starts a workspace from a snapshot; its snapshots take the base as parent', async () => {
    const { root, log, engine } = await setup()
    await log.appendMany('main', [w('a', 1), w('b', 2)])
    const base = await engine.snapshot('main', { message: 'base' })
    const f = await engine.fork('feat', base.snapshotId as string)
    expect(f).toMatchObject({ workspace: 'feat', base: base.snapshotId, fromWorkspace: 'main' })
    expect(f.entry.seq).toBe(1)
    const line = readFileSync(join(root, 'agent-logs', 'feat.log'), 'utf8')
    expect(line).toBe(
      `{"seq":1,"op":"snapshot","snapshot_id":"${base.snapshotId}","message":"fork of main at ${base.snapshotId}","ts":${f.entry.ts}}\n`,
    )
    const same = await engine.snapshot('feat')
    expect(same).toMatchObject({
      created: false,
      snapshotId: base.snapshotId,
      tree: base.tree,
      entriesReplayed: 0,
    })
    await log.appendMany('feat', [d('a'), w('c', 3)])
    const s = await engine.snapshot('feat', { message: 'work' })
    expect(await files(engine, s.snapshotId as string)).toEqual({ b: blobOf(2), c: blobOf(3) })
    // From scratch, the fork's log starts at its base (the base's tree did not come from it).
    const scratch = await engine.replay('feat', { fromScratch: true })
    expect(scratch).toMatchObject({ parent: base.snapshotId, since: 1, entriesReplayed: 2 })
    expect(scratch.tree.id).toBe(s.tree)
    expect(await files(engine, base.snapshotId as string)).toEqual({ a: blobOf(1), b: blobOf(2) })
    const kinds = (await engine.listSnapshots('feat')).map((x) => x.kind)
    expect(kinds).toEqual(['snapshot', 'fork'])
  })

  it('refuses an existing workspace and an unknown snapshot, writing nothing', async () => {
    const { root, log, engine } = await setup()
    await log.append('main', w('a', 1))
    const base = await engine.snapshot('main')
    const exists = await refusal(engine.fork('main', base.snapshotId as string))
    expect(exists.code).toBe('NOA_EXISTS')
    const unknown = await refusal(engine.fork('new', `noa_${'0'.repeat(64)}`))
    expect(unknown.code).toBe('NOA_NOT_FOUND')
    expect(unknown.message).toContain(`unknown snapshot noa_${'0'.repeat(64)}`)
    expect(readdirSync(join(root, 'agent-logs')).sort()).toEqual(['main.log'])
    const bad = await refusal(engine.fork('../x', base.snapshotId as string))
    expect(bad.code).toBe('NOA_BAD_WORKSPACE')
  })
})

describe('finding snapshot entries in a log', () => {
  it('finds every snapshot entry newest first across chunk boundaries, and nothing in paths', async () => {
    const root = tempDir()
    const file = join(root, 'x.log')
    const lines: string[] = []
    const ids: string[] = []
    let seq = 0
    for (let i = 0; i < 6000; i++) {
      const body =
        i % 97 === 5
          ? encodeBody({ op: 'snapshot', snapshot_id: `noa_${i}`, message: `m${i}` })
          : encodeBody({ op: 'write', path: `dir/"op":"snapshot"/p${'p'.repeat(i % 200)}`, blob: blobOf(i) })
      if (i % 97 === 5) ids.push(`noa_${i}`)
      lines.push(formatLine(++seq, body, 1000 + seq))
    }
    writeFileSync(file, `${lines.join('')}{"seq":99999,"op":"snap`) // a torn tail is ignored
    expect(statSync(file).size).toBeGreaterThan(3 * (1 << 18))
    const found = [...snapshotEntriesBackward(file)].map((f) => f.entry.snapshot_id)
    expect(found).toEqual(ids.reverse())
    expect(lastSnapshotEntry(file)?.entry.snapshot_id).toBe(ids[0])
    writeFileSync(file, lines.filter((l) => !l.includes('"op":"snapshot"')).join(''))
    expect(lastSnapshotEntry(file)).toBeNull()
  })
})

/** Runs the snapshot loop until it has printed `min` ids, then SIGKILLs it after a random delay. */
function runAndKill(root: string, min: number): Promise<string[]> {
  const script = new URL('../fixtures/snapshot-loop.mjs', import.meta.url).pathname
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, root, 'ws'], { stdio: ['ignore', 'pipe', 'pipe'] })
    const ids: string[] = []
    let text = ''
    let stderr = ''
    let armed = false
    child.stderr.on('data', (b) => {
      stderr += b
    })
    child.stdout.on('data', (b: Buffer) => {
      text += b.toString()
      const parts = text.split('\n')
      text = parts.pop() as string
      ids.push(...parts)
      if (!armed && ids.length >= min) {
        armed = true
        setTimeout(() => child.kill('SIGKILL'), Math.floor(Math.random() * 60))
      }
    })
    child.on('error', reject)
    child.on('exit', (_code, signal) =>
      signal === 'SIGKILL' ? resolve(ids) : reject(new Error(`snapshot loop ended: ${stderr}`)),
    )
  })
}

describe('crash safety', () => {
  it('objects written without their entry change nothing (the entry is written last)', async () => {
    const { root, log, engine } = await setup()
    await log.appendMany('ws', [w('a', 1)])
    const s1 = await engine.snapshot('ws')
    // What a crash right before the entry's append leaves behind: a stored tree and record.
    const orphan = await engine.store.putSnapshot(
      { workspace: 'ws', tree: s1.tree, since: 0, seq: 1, message: 'never appended', ts: 1 },
      [],
    )
    expect(objectFiles(root).length).toBe(3)
    expect((await engine.head('ws'))?.record.id).toBe(s1.snapshotId)
    await log.append('ws', w('b', 2))
    const s2 = await engine.snapshot('ws')
    expect(s2.parent).toBe(s1.snapshotId)
    expect((await engine.listSnapshots('ws')).map((s) => s.snapshotId)).not.toContain(orphan.id)
  })

  it('after SIGKILL at random moments, every snapshot entry resolves to whole objects', async () => {
    const root = tempDir()
    let printed = 0
    for (let round = 0; round < 3; round++) {
      const ids = await runAndKill(root, 2 + round)
      printed += ids.length
      const reader = new SnapshotEngine({ root })
      const listed = await reader.listSnapshots('ws')
      expect(listed.length).toBeGreaterThanOrEqual(printed) // every acknowledged snapshot is there
      for (const s of listed) {
        const tree = await reader.tree(s.snapshotId) // hash-checked: present and whole
        expect(tree.id).toBe(s.tree)
      }
      printed = listed.length
    }
    const check = runCli(['verify', 'ws', '--root', root])
    expect(check.status === 0 || /partial last line/.test(check.stderr)).toBe(true)
  })
})

describe('noa snapshot, snapshots, tree, fork (CLI)', () => {
  it('prints ids, JSON with the documented fields, sorted trees and the list', async () => {
    const root = tempDir()
    const input = [w('b/x', 1), w('a', 2), w('a b', 3), w('tab\there', 4)]
      .map((e) => JSON.stringify(e))
      .join('\n')
    expect(runCli(['append', 'main', '--root', root, '--no-blob-check'], { input }).status).toBe(0)
    const s = runCli(['snapshot', 'main', '-m', 'first', '--root', root])
    expect(s.status).toBe(0)
    const id = s.stdout.trim()
    expect(id).toMatch(/^noa_[0-9a-f]{64}$/)
    const t = runCli(['tree', id, '--root', root])
    expect(t.stdout).toBe(
      `a\t${blobOf(2)}\na b\t${blobOf(3)}\nb/x\t${blobOf(1)}\n"tab\\there"\t${blobOf(4)}\n`,
    )
    const j = runCli(['snapshot', 'main', '-m', 'second', '--json', '--allow-empty', '--root', root])
    const out = JSON.parse(j.stdout)
    expect(Object.keys(out)).toEqual([
      'created',
      'snapshotId',
      'tree',
      'parent',
      'seq',
      'entriesReplayed',
      'noEffect',
      'missingBlobs',
      'skipped',
    ])
    expect(out).toMatchObject({ created: true, parent: id, seq: 5, entriesReplayed: 0 })
    const list = runCli(['snapshots', 'main', '--root', root])
    expect(list.stdout.split('\n').map((l) => l.split('\t').slice(0, 4).join(' '))).toEqual([
      'snapshot kind seq entry',
      `${out.snapshotId} snapshot 5 6`,
      `${id} snapshot 4 5`,
      '',
    ])
    const f = runCli(['fork', 'feat', '--from', id, '--root', root])
    expect(f.status).toBe(0)
    expect(runCli(['fork', 'feat', '--from', id, '--root', root]).status).toBe(1)
    const fs2 = JSON.parse(runCli(['snapshot', 'feat', '--json', '--root', root]).stdout)
    expect(fs2).toMatchObject({ created: false, snapshotId: id, tree: out.tree })
  })

  it('exits 1 on unknown workspaces and ids, 2 on usage errors', () => {
    const root = tempDir()
    const zero = `noa_${'0'.repeat(64)}`
    const cases: Array<[string[], number, RegExp]> = [
      [['snapshot', 'nope'], 1, /noa snapshot: workspace nope has no log/],
      [['snapshots', 'nope'], 1, /workspace nope has no log/],
      [['tree', zero], 1, /unknown snapshot noa_0{64}/],
      [['tree', 'noa_z7x9'], 1, /unknown snapshot noa_z7x9/],
      [['tree', 'not-an-id'], 1, /workspace not-an-id has no log/], // tree takes ws refs too
      [['tree', 'a/b'], 1, /is not a snapshot id \(noa_…\), a workspace name or ws@seq/],
      [['fork', 'x', '--from', zero], 1, /unknown snapshot/],
      [['fork', 'x'], 2, /--from <snapshot_id> is required/],
      [['snapshot'], 2, /usage: noa snapshot/],
      [['snapshot', 'a', '--bogus'], 2, /usage: noa snapshot/],
    ]
    for (const [args, status, message] of cases) {
      const r = runCli([...args, '--root', root])
      expect(r.status, args.join(' ')).toBe(status)
      expect(r.stderr, args.join(' ')).toMatch(message)
      expect(r.stdout).toBe('')
    }
  })
})

describe('replay progress (CLI)', () => {
  function io(isTTY: boolean) {
    const err = new PassThrough()
    let text = ''
    err.on('data', (b) => {
      text += b
    })
    const out = new PassThrough()
    return { io: { stdin: new PassThrough(), stdout: out, stderr: err, env: {}, isTTY }, text: () => text }
  }
  const at = { workspace: 'ws', seq: 500, first: 1, last: 1000, entries: 500 }

  it('redraws one line on a terminal and erases it at the end; says nothing for a short replay', async () => {
    const tty = io(true)
    const p = progress(tty.io, 'replaying')
    p.onProgress(at) // too early: a short replay shows nothing
    expect(tty.text()).toBe('')
    await sleep(350)
    p.onProgress(at)
    const erase = '\r\x1b[K'
    expect(tty.text().startsWith(erase)).toBe(true)
    expect(tty.text().slice(erase.length)).toMatch(
      /^replaying: ws seq 500\/1000 50%, 500 entries \(\d+\/s\)$/,
    )
    p.done()
    expect(tty.text().endsWith('\r\x1b[K')).toBe(true)
    const pipe = io(false)
    const q = progress(pipe.io, 'replaying')
    q.onProgress(at)
    q.done()
    expect(pipe.text()).toBe('')
  })
})
