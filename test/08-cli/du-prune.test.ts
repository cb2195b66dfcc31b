/**
 * `noa du` against the real file sizes of a root, and what it says prune and gc would free
 * against what they then free; `noa prune` over a whole root: a dry run changes nothing, --yes
 * drops in every matching workspace (and no other), bad input is refused and changes nothing.
 */
import { lstatSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { runCli, runMain, tempDir } from '../helpers/index.js'

interface Du {
  total: number
  categories: Record<'logs' | 'checksums' | 'objects' | 'packs' | 'journals' | 'other', number>
  reachable: { objects: number; bytes: number }
  workspaces: Array<{
    workspace: string
    kind: string
    log: number
    checksums: number
    own: { objects: number; bytes: number }
    shared: { objects: number; bytes: number }
    prunable: number
    compactable: number
  }>
  free: { gc: number; prune: number; compact: number }
}

function filesUnder(dir: string): number {
  let n = 0
  for (const name of readdirSync(dir)) {
    const st = lstatSync(join(dir, name))
    if (st.isDirectory()) n += filesUnder(join(dir, name))
    else if (st.isFile()) n += st.size
  }
  return n
}

const sizeIn = (root: string, dir: string) => {
  try {
    return filesUnder(join(root, dir))
  } catch {
    return 0
  }
}

const objectSize = (root: string, id: string) =>
  statSync(join(root, 'objects', id.slice(0, 2), id.slice(2))).size

function cli(args: string[], input?: string): string {
  const r = runCli(args, input === undefined ? {} : { input })
  expect(r.status, `noa ${args.join(' ')}: ${r.stderr}`).toBe(0)
  return r.stdout
}

function blob(root: string, dir: string, text: string): string {
  const f = join(dir, `${text.length}-${Math.random()}`)
  writeFileSync(f, text)
  return cli(['blob', 'put', f, '--root', root]).trim()
}

function append(root: string, ws: string, lines: object[]): void {
  cli(['append', ws, '--root', root], lines.map((l) => `${JSON.stringify(l)}\n`).join(''))
}

async function du(root: string): Promise<Du> {
  const r = await runMain(['du', '--root', root, '--json'])
  expect(r.status, r.stderr).toBe(0)
  return JSON.parse(r.stdout) as Du
}

describe('noa du', () => {
  it('adds up to the files on disk, splits own and shared objects, and says what prune, gc and compact free', async () => {
    const dir = tempDir('noa-du-')
    const root = join(dir, 'noa')
    const x = blob(root, dir, 'shared by w1 and w2\n')
    const y = blob(root, dir, 'only w1, kept\n')
    const z = blob(root, dir, 'only in the first snapshot of w1\n')
    const loose = blob(root, dir, 'nothing names this one\n')
    append(root, 'w1', [
      { op: 'write', path: 'a', blob: x },
      { op: 'write', path: 'z', blob: z },
    ])
    const s1 = JSON.parse(cli(['snapshot', 'w1', '--root', root, '--json'])) as {
      snapshotId: string
      tree: string
    }
    append(root, 'w1', [
      { op: 'delete', path: 'z' },
      { op: 'write', path: 'y', blob: y },
    ])
    const s2 = JSON.parse(cli(['snapshot', 'w1', '--root', root, '--json'])) as {
      snapshotId: string
      tree: string
    }
    append(root, 'w2', [{ op: 'write', path: 'b', blob: x }])

    const d = await du(root)
    // Every file under the root, by kind, as on disk.
    expect(d.total).toBe(filesUnder(root))
    expect(d.categories.logs).toBe(sizeIn(root, 'agent-logs'))
    expect(d.categories.checksums).toBe(sizeIn(root, 'checksums'))
    expect(d.categories.objects).toBe(sizeIn(root, 'objects'))
    expect(d.categories.packs).toBe(sizeIn(root, 'object-logs'))
    expect(d.categories.journals).toBe(sizeIn(root, 'journal'))
    expect(Object.values(d.categories).reduce((a, b) => a + b, 0)).toBe(d.total)
    const w1 = d.workspaces.find((w) => w.workspace === 'w1')
    const w2 = d.workspaces.find((w) => w.workspace === 'w2')
    if (!w1 || !w2) throw new Error('a workspace is missing from noa du')
    expect(w1.log).toBe(statSync(join(root, 'agent-logs', 'w1.log')).size)
    expect(w1.checksums).toBe(statSync(join(root, 'checksums', 'w1.sum')).size)
    expect(w2.log).toBe(statSync(join(root, 'agent-logs', 'w2.log')).size)
    // x is reached by both; y, z, both trees and both records by w1 alone.
    expect(w2.shared).toEqual({ objects: 1, bytes: objectSize(root, x) })
    expect(w2.own).toEqual({ objects: 0, bytes: 0 })
    expect(w1.shared).toEqual({ objects: 1, bytes: objectSize(root, x) })
    const own = [y, z, s1.tree, s2.tree, s1.snapshotId.slice(4), s2.snapshotId.slice(4)]
    expect(w1.own).toEqual({ objects: 6, bytes: own.reduce((n, id) => n + objectSize(root, id), 0) })
    expect(d.reachable).toEqual({ objects: 7, bytes: w1.own.bytes + objectSize(root, x) })
    // Only the first snapshot's tree reaches z (its tree is its own object).
    expect(w1.prunable).toBe(objectSize(root, z) + objectSize(root, s1.tree))
    expect(d.free.prune).toBe(w1.prunable)
    // Compact: the log before w1's head snapshot entry (its last line); w2 has no snapshot.
    const text = readFileSync(join(root, 'agent-logs', 'w1.log'), 'utf8')
    expect(w1.compactable).toBe(text.slice(0, text.lastIndexOf('\n', text.length - 2) + 1).length)
    expect(w2.compactable).toBe(0)
    expect(d.free.compact).toBe(w1.compactable)
    // gc would free the unreferenced blob, as gc itself says.
    expect(d.free.gc).toBe(objectSize(root, loose))
    const gc = JSON.parse(cli(['gc', '--grace', '0', '--root', root, '--json'])) as { removedBytes: number }
    expect(gc.removedBytes).toBe(d.free.gc)

    // Prune to the heads, then gc: what du said prune frees goes; the prune's record comes.
    const pruned = JSON.parse(cli(['prune', '--keep-last', '1', '--yes', '--root', root, '--json'])) as {
      workspaces: Array<{ workspace: string; snapshotId: string | null; dropped: string[] }>
    }
    const p1 = pruned.workspaces.find((w) => w.workspace === 'w1')
    expect(p1?.dropped).toEqual([s1.snapshotId])
    cli(['gc', '--yes', '--grace', '0', '--root', root])
    const after = await du(root)
    const record = objectSize(root, String(p1?.snapshotId).slice(4))
    expect(after.reachable.bytes).toBe(d.reachable.bytes - d.free.prune + record)
    expect(after.total).toBe(filesUnder(root))
    expect(after.free.gc).toBe(0)
    expect(after.free.prune).toBe(0)
  })

  it('says what it is in words too', async () => {
    const dir = tempDir('noa-du-')
    const root = join(dir, 'noa')
    append(root, 'w', [{ op: 'write', path: 'a', blob: blob(root, dir, 'a\n') }])
    const r = await runMain(['du', '--root', root])
    expect(r.status).toBe(0)
    expect(r.stdout).toMatch(
      /^workspace +log +checksums +own objects +shared objects +prunable +compactable\n/,
    )
    expect(r.stdout).toMatch(
      /would free: gc 0 B, prune to the heads then gc 0 B, compact behind the heads 0 B/,
    )
  })
})

describe('noa prune', () => {
  function threeSnapshots(root: string, dir: string, ws: string): string[] {
    const ids: string[] = []
    for (let i = 0; i < 3; i++) {
      append(root, ws, [{ op: 'write', path: 'f', blob: blob(root, dir, `${ws} ${i}\n`) }])
      ids.push(
        (JSON.parse(cli(['snapshot', ws, '--root', root, '--json'])) as { snapshotId: string }).snapshotId,
      )
    }
    return ids
  }
  const logSizes = (root: string) =>
    Object.fromEntries(
      readdirSync(join(root, 'agent-logs')).map((f) => [f, statSync(join(root, 'agent-logs', f)).size]),
    )

  it('is a dry run without --yes; with it, drops in each workspace the glob matches and no other', () => {
    const dir = tempDir('noa-prune-')
    const root = join(dir, 'noa')
    const a1 = threeSnapshots(root, dir, 'agent-1')
    const a2 = threeSnapshots(root, dir, 'agent-2')
    const b = threeSnapshots(root, dir, 'build')
    const sizes = logSizes(root)
    const dry = runCli(['prune', '--keep-last', '1', '--workspace', 'agent-?', '--root', root])
    expect(dry.status, dry.stderr).toBe(0)
    expect(dry.stdout.trim().split('\n').sort()).toEqual(
      [
        ...a1.slice(0, 2).map((id) => `agent-1\twould drop ${id}`),
        ...a2.slice(0, 2).map((id) => `agent-2\twould drop ${id}`),
      ].sort(),
    )
    expect(dry.stderr).toMatch(/^dry run: would drop 4 snapshots of 2 workspaces/)
    expect(logSizes(root)).toEqual(sizes)

    const done = JSON.parse(
      cli(['prune', '--keep-last', '1', '--workspace', 'agent-*', '--yes', '--root', root, '--json']),
    ) as {
      dryRun: boolean
      dropped: number
    }
    expect(done).toMatchObject({ dryRun: false, dropped: 4 })
    const snaps = (ws: string) =>
      JSON.parse(cli(['snapshots', ws, '--root', root, '--json'])) as Array<{
        snapshotId: string
        pruned: boolean
      }>
    for (const [ws, ids] of [
      ['agent-1', a1],
      ['agent-2', a2],
    ] as const) {
      const s = snaps(ws)
      expect(
        s
          .filter((x) => x.pruned)
          .map((x) => x.snapshotId)
          .sort(),
      ).toEqual(ids.slice(0, 2).sort())
    }
    expect(snaps('build').filter((x) => x.pruned)).toEqual([])
    expect(statSync(join(root, 'agent-logs', 'build.log')).size).toBe(sizes['build.log'])
    expect(b).toHaveLength(3)
    // Every workspace now: only build has anything left to drop.
    const again = JSON.parse(cli(['prune', '--keep-last', '1', '--yes', '--root', root, '--json'])) as {
      dropped: number
    }
    expect(again.dropped).toBe(2)
  })

  it('refuses bad input by name and changes nothing', () => {
    const dir = tempDir('noa-prune-')
    const root = join(dir, 'noa')
    threeSnapshots(root, dir, 'w')
    const sizes = logSizes(root)
    for (const [args, status, message] of [
      [[], 2, /--keep-last N \(or --keep-within DURATION\) is required/],
      [['--keep-last', '0'], 2, /--keep-last must be an integer >= 1/],
      [['--keep-within', 'soon'], 2, /--keep-within must be a number with a unit/],
      [['--keep-last', '1', '--workspace', '[w'], 2, /"\[" without its "\]"/],
      [['--keep-last', '1', '--workspace', 'x*', '--yes'], 1, /no workspace of .* matches "x\*"/],
    ] as const) {
      const r = runCli(['prune', ...args, '--root', root])
      expect(r.status, r.stderr).toBe(status)
      expect(r.stderr).toMatch(message)
    }
    expect(logSizes(root)).toEqual(sizes)
  })
})
