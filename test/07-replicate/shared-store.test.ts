/**
 * Snapshots, merges and forks on a shared workspace (src/replicate/shared.ts, shared-objects.ts):
 * hosts in this process (roots of their own, connections of their own) on an R3 stream. The
 * store's records go through the stream in its order, the objects they name ahead of them, so a
 * host that did not write a snapshot reads, checks out and merges it with the same bytes, and
 * every host's log stays byte-equal to the stream's order.
 */
import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { describe, expect, it } from 'vitest'
import type { EntryInput } from '../../dist/src/index.js'
import type { SharedOptions } from '../../dist/src/replicate/index.js'
import { KnownObjects } from '../../dist/src/replicate/shared-objects.js'
import { SnapshotEngine } from '../../dist/src/store/index.js'
import { runCliAsync, tempDir } from '../helpers/index.js'
import { streamContents } from '../helpers/nats.js'
import { useNatsCluster } from '../helpers/nats-cluster.js'
import { sharedHosts } from '../helpers/shared-hosts.js'

const cluster = useNatsCluster()
const { first, newStream, host: sharedHost, logOf, streamLines } = sharedHosts(cluster)

async function host(prefix: string, workspaces: string[], extra: Partial<SharedOptions> = {}) {
  const h = await sharedHost(prefix, workspaces, extra)
  return { ...h, engine: h.shared.snapshotEngine() }
}

type Host = Awaited<ReturnType<typeof host>>

/** Every file under `dir`, by path relative to it. */
function filesOf(dir: string): Map<string, string> {
  const out = new Map<string, string>()
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name)
      if (e.isDirectory()) walk(p)
      else out.set(relative(dir, p), readFileSync(p, 'latin1'))
    }
  }
  walk(dir)
  return out
}

async function checkedOut(root: string, ref: string): Promise<Map<string, string>> {
  const dir = tempDir()
  await new SnapshotEngine({ root }).checkout(ref, join(dir, 'out'))
  return filesOf(join(dir, 'out'))
}

/** Both hosts hold everything the stream has for the workspace, and the same bytes as it. */
async function converged(stream: string, prefix: string, ws: string, hosts: Host[]): Promise<Buffer> {
  for (const h of hosts) await h.shared.sync(ws)
  const want = await streamLines(stream, prefix, ws)
  for (const h of hosts) expect(logOf(h.root, ws).equals(want)).toBe(true)
  return want
}

async function writes(h: Host, files: Record<string, string | Buffer>): Promise<EntryInput[]> {
  const out: EntryInput[] = []
  for (const [path, data] of Object.entries(files))
    out.push({ op: 'write', path, blob: await h.engine.store.putBlob(data) })
  return out
}

/** A file big enough to be stored in chunks (store/chunks.ts), each chunk an object of its own. */
const big = Buffer.from(Array.from({ length: 40_000 }, (_, i) => `line ${i} of the big file\n`).join(''))

describe('the store on shared workspaces', () => {
  it("a snapshot taken on one host is in every host's log, and checks out with the same bytes elsewhere", async () => {
    const { prefix, stream } = await newStream()
    const a = await host(prefix, ['team'], { writer: 'a' })
    const b = await host(prefix, ['team'], { writer: 'b' })
    const files = { 'plan.md': 'the plan\n', 'src/main.ts': 'export {}\n', 'data/big.txt': big }
    await a.shared.appendMany('team', await writes(a, files))
    await b.shared.append('team', { op: 'delete', path: 'src/main.ts' })
    await a.shared.sync('team')
    const snap = await a.engine.snapshot('team', { message: 'from a' })
    expect(snap.created).toBe(true)
    expect(snap.missingBlobs).toEqual([])
    const bytes = await converged(stream, prefix, 'team', [a, b])
    expect(bytes.toString()).toContain(`"snapshot_id":"${snap.snapshotId}"`)
    expect(a.shared.stats().objects).toBeGreaterThan(3)

    // Host B never had these objects but through the stream.
    const onB = new SnapshotEngine({ root: b.root })
    expect((await onB.head('team'))?.record.id).toBe(snap.snapshotId)
    const want = new Map([
      ['plan.md', 'the plan\n'],
      ['data/big.txt', big.toString('latin1')],
    ])
    expect(await checkedOut(b.root, snap.snapshotId as string)).toEqual(want)
    expect(await checkedOut(b.root, 'team')).toEqual(want)
    expect((await onB.history('team')).map((n) => n.snapshotId)).toEqual(
      (await a.engine.history('team')).map((n) => n.snapshotId),
    )

    // B snapshots after more entries from both hosts; A reads B's snapshot.
    await b.shared.appendMany('team', await writes(b, { 'notes/b.md': 'from b\n' }))
    await a.shared.append('team', { op: 'rename', from: 'plan.md', to: 'docs/plan.md' })
    await b.shared.sync('team')
    const second = await b.engine.snapshot('team', { message: 'from b' })
    expect(second.parent).toBe(snap.snapshotId)
    await converged(stream, prefix, 'team', [a, b])
    const now = await checkedOut(a.root, second.snapshotId as string)
    expect(now).toEqual(await checkedOut(b.root, second.snapshotId as string))
    expect(now.get('notes/b.md')).toBe('from b\n')
    expect(now.get('docs/plan.md')).toBe('the plan\n')
    expect(await new SnapshotEngine({ root: a.root }).diff(snap.snapshotId as string, 'team')).toEqual(
      await new SnapshotEngine({ root: b.root }).diff(snap.snapshotId as string, 'team'),
    )
  })

  it('a fork from a shared workspace into a local one, merged back from another host, reads the same on every host', async () => {
    const { prefix, stream } = await newStream()
    const a = await host(prefix, ['team'], { writer: 'a' })
    const b = await host(prefix, ['team'], { writer: 'b' })
    await a.shared.appendMany('team', await writes(a, { 'a.txt': 'a 1\n', 'both.txt': 'base\n' }))
    const base = await a.engine.snapshot('team', { message: 'base' })
    await b.shared.sync('team')

    // Fork from the shared workspace on the host that did not write it: a local workspace.
    const fork = await b.engine.fork('feat', base.snapshotId as string)
    expect(fork.base).toBe(base.snapshotId)
    expect(await checkedOut(b.root, 'feat')).toEqual(await checkedOut(a.root, base.snapshotId as string))
    await b.log.appendMany('feat', await writes(b, { 'b.txt': 'only on b\n', 'both.txt': 'b changed it\n' }))
    await b.engine.snapshot('feat', { message: 'work on b' })
    await b.log.appendMany('feat', await writes(b, { 'late.txt': 'after the snapshot\n' }))
    // Meanwhile A goes on in the shared workspace.
    await a.shared.appendMany('team', await writes(a, { 'a2.txt': 'a 2\n' }))
    await b.shared.sync('team')

    const merged = await b.engine.merge('team', ['feat'], { message: 'feat into team' })
    expect(merged.created).toBe(true)
    expect(merged.base).toBe(base.snapshotId)
    await converged(stream, prefix, 'team', [a, b])
    // The source's snapshot the merge made is local to B: its log is not shared.
    expect(logOf(b.root, 'feat').toString()).toContain(merged.sources[0]?.snapshotId as string)

    const onA = new SnapshotEngine({ root: a.root })
    expect((await onA.head('team'))?.record.id).toBe(merged.snapshotId)
    const want = new Map([
      ['a.txt', 'a 1\n'],
      ['a2.txt', 'a 2\n'],
      ['b.txt', 'only on b\n'],
      ['both.txt', 'b changed it\n'],
      ['late.txt', 'after the snapshot\n'],
    ])
    expect(await checkedOut(a.root, merged.snapshotId as string)).toEqual(want)
    expect(await checkedOut(b.root, merged.snapshotId as string)).toEqual(want)
    expect(await checkedOut(a.root, 'team')).toEqual(want)
    // A's history holds the merge's sources (records that came with it).
    const history = await onA.history('team')
    expect(history.map((n) => n.snapshotId)).toContain(merged.sources[0]?.snapshotId)

    // A merges into the shared workspace too (its own local fork), on top of B's merge.
    await a.engine.fork('side', merged.snapshotId as string)
    await a.log.appendMany('side', await writes(a, { 'side.txt': 'from a side\n' }))
    const again = await a.engine.merge('team', ['side'])
    expect(again.base).toBe(merged.snapshotId)
    await converged(stream, prefix, 'team', [a, b])
    expect(await checkedOut(b.root, 'team')).toEqual(new Map([...want, ['side.txt', 'from a side\n']]))
  })

  it('refuses a record the root does not hold, and a record through the plain append, publishing nothing', async () => {
    const { prefix, stream } = await newStream()
    const a = await host(prefix, ['team'], { writer: 'a' })
    await a.shared.appendMany('team', await writes(a, { 'x.txt': 'x\n' }))
    const before = await streamContents(first(), stream, prefix)
    const count = [...before.values()].reduce((n, l) => n + l.length, 0)
    const ghost = `noa_${'ab'.repeat(32)}`
    await expect(
      a.shared.storeAppend('team', [{ op: 'snapshot', snapshot_id: ghost, message: 'ghost' }]),
    ).rejects.toMatchObject({ code: 'NOA_NOT_FOUND', details: { workspace: 'team', snapshot: ghost } })
    await expect(
      a.shared.storeAppend('team', [
        { op: 'merge', from_workspace: 'elsewhere', from_snapshot: ghost },
        { op: 'snapshot', snapshot_id: ghost, message: 'ghost' },
      ]),
    ).rejects.toMatchObject({ code: 'NOA_NOT_FOUND' })
    const snap = await a.engine.snapshot('team')
    await expect(
      a.shared.append('team', { op: 'snapshot', snapshot_id: snap.snapshotId as string, message: 'again' }),
    ).rejects.toMatchObject({ code: 'NOA_BAD_ENTRY' })
    const after = await streamContents(first(), stream, prefix)
    // Only the snapshot's objects and its entry were added.
    const team = after.get(`${prefix}.team`) ?? []
    expect(team.length).toBe((before.get(`${prefix}.team`) ?? []).length + 1)
    expect([...after.values()].reduce((n, l) => n + l.length, 0)).toBeGreaterThan(count + 1)
    expect(a.shared.lastSeq('team')).toBe(2)
    // And appends still go after the refusals, in the order they were made: one whose blob is
    // being published is not overtaken by one that names nothing.
    const [w] = await writes(a, { 'y.txt': 'a blob that goes first\n' })
    const [put, del] = await Promise.all([
      a.shared.append('team', w as EntryInput),
      a.shared.append('team', { op: 'delete', path: 'x.txt' }),
    ])
    expect([put.seq, del.seq]).toEqual([3, 4])
  })

  it('noa snapshot and noa merge --shared-nats write through the stream; the other hosts read them', async () => {
    const { prefix, stream } = await newStream()
    const a = await host(prefix, ['team'], { writer: 'a' })
    await a.shared.appendMany('team', await writes(a, { 'one.txt': 'one\n' }))
    // Host C is a root the CLI shares from.
    const c = tempDir()
    /** A store command on C through the stream: its stdout as JSON once it exits 0 without a word on stderr. */
    const sharedCli = async (args: string[]) => {
      const r = await runCliAsync([
        ...args,
        '--shared-nats',
        cluster.urls(),
        '--shared-prefix',
        prefix,
        '--root',
        c,
        '--json',
      ])
      expect(r.stderr).toBe('')
      expect(r.status).toBe(0)
      return JSON.parse(r.stdout)
    }
    const share = await runCliAsync([
      'replicate',
      'share',
      'team',
      '--nats',
      cluster.urls(),
      '--prefix',
      prefix,
      '--root',
      c,
    ])
    expect(share.stderr).toBe('')
    expect(share.status).toBe(0)
    const snap = await sharedCli(['snapshot', 'team'])
    const id = snap.snapshotId as string
    await a.shared.sync('team')
    expect((await new SnapshotEngine({ root: a.root }).head('team'))?.record.id).toBe(id)
    expect(logOf(a.root, 'team').equals(logOf(c, 'team'))).toBe(true)
    expect(logOf(c, 'team').equals(await streamLines(stream, prefix, 'team'))).toBe(true)

    // A local workspace on C, merged into the shared one by the CLI.
    const fork = await runCliAsync(['fork', 'mine', '--from', id, '--root', c])
    expect(fork.status).toBe(0)
    const blob = await new SnapshotEngine({ root: c }).store.putBlob('from c\n')
    const put = await runCliAsync(
      ['append', 'mine', '--root', c],
      `{"op":"write","path":"c.txt","blob":"${blob}"}\n`,
    )
    expect(put.stderr).toBe('')
    const merge = await sharedCli(['merge', 'team', 'mine'])
    const mergedId = merge.snapshotId as string
    await a.shared.sync('team')
    expect(logOf(a.root, 'team').equals(await streamLines(stream, prefix, 'team'))).toBe(true)
    expect(await checkedOut(a.root, mergedId)).toEqual(
      new Map([
        ['one.txt', 'one\n'],
        ['c.txt', 'from c\n'],
      ]),
    )

    // A fork of the merge into a new shared workspace, by the CLI: a host that never saw team
    // takes team-b from the stream, with every object its base needs.
    const forked = await sharedCli(['fork', 'team-b', '--from', mergedId])
    expect(forked).toMatchObject({ workspace: 'team-b', base: mergedId, seq: 1 })
    const d = await host(prefix, ['team-b'], { writer: 'd' })
    expect(logOf(d.root, 'team-b').equals(await streamLines(stream, prefix, 'team-b'))).toBe(true)
    expect(logOf(d.root, 'team-b').equals(logOf(c, 'team-b'))).toBe(true)
    expect(await checkedOut(d.root, 'team-b')).toEqual(
      new Map([
        ['one.txt', 'one\n'],
        ['c.txt', 'from c\n'],
      ]),
    )

    const usage = await runCliAsync(['snapshot', 'team', '--shared-prefix', prefix, '--root', c])
    expect(usage.status).toBe(2)
    expect(usage.stderr).toContain('--shared-prefix goes with --shared-nats')
  })
})

describe('the objects a host knows are in the stream', () => {
  it('are bounded: past the limit the oldest are forgotten, the newest kept', () => {
    const known = new KnownObjects(3)
    for (const id of ['a', 'b', 'c', 'b', 'd', 'e']) known.add(id)
    expect([...known]).toEqual(['c', 'd', 'e'])
    expect(new KnownObjects().max).toBe(65_536)
  })
})
