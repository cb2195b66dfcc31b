/**
 * Cross-machine merge: workspaces written on one machine, pulled into
 * another root through the stream, merged there with `noa merge`, give the same tree as the
 * same merge on the origin. The second case also snapshots and forks, and shows the objects
 * travelling with the logs.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { replicatePull, replicatePush } from '../../dist/src/replicate/index.js'
import { runCliAsync, tempDir } from '../helpers/index.js'
import { uniqueNames, useNats } from '../helpers/nats.js'
import { dropStream, initStreamCli } from '../helpers/replicate.js'

const nats = useNats()

async function cli(args: string[], input = ''): Promise<string> {
  const r = await runCliAsync(args, input)
  if (r.status !== 0) throw new Error(`noa ${args.join(' ')} exited ${r.status}: ${r.stderr}`)
  return r.stdout
}

function writes(paths: Record<string, string>): string {
  return Object.entries(paths)
    .map(([path, blob]) => JSON.stringify(blob === '' ? { op: 'delete', path } : { op: 'write', path, blob }))
    .join('\n')
}

const blob = (c: string) => c.repeat(64)

/** `noa merge … --json` in a root, then the merged tree as `noa tree` prints it. */
async function mergeTree(root: string, target: string, sources: string[]) {
  const out = JSON.parse(await cli(['merge', target, ...sources, '--root', root, '--json']))
  const tree = await cli(['tree', out.snapshotId, '--root', root])
  return { base: out.base as string | undefined, conflicts: out.conflicts as unknown[], tree }
}

describe('noa merge on workspaces that arrived through a mirror', () => {
  it('merges mirrored workspaces into the same tree as on their origin', async () => {
    const { prefix, stream } = uniqueNames()
    await initStreamCli(nats.url(), prefix, stream)
    try {
      const origin = tempDir()
      const mirror = tempDir()
      await cli(
        ['append', 'main', '--root', origin, '--no-blob-check'],
        writes({ 'a.txt': blob('1'), 'b.txt': blob('2') }),
      )
      await cli(['append', 'feat-1', '--root', origin, '--no-blob-check'], writes({ 'c.txt': blob('3') }))
      await cli(
        ['append', 'feat-2', '--root', origin, '--no-blob-check'],
        writes({ 'd.txt': blob('4'), 'e.txt': blob('5') }),
      )
      await replicatePush({ nats: nats.url(), root: origin, prefix })
      await replicatePull({ nats: nats.url(), root: mirror, prefix })

      const there = await mergeTree(mirror, 'main', ['feat-1', 'feat-2'])
      const here = await mergeTree(origin, 'main', ['feat-1', 'feat-2'])
      expect(there.conflicts).toEqual([])
      expect(there.tree).toBe(here.tree)
      expect(there.tree).toMatch(/^c\.txt\t3{64}$/m)
    } finally {
      await dropStream(nats.url(), stream)
    }
  })

  it('finds the common base snapshot on the mirror: the object store travels with the logs', async () => {
    const { prefix, stream } = uniqueNames()
    await initStreamCli(nats.url(), prefix, stream)
    try {
      const origin = tempDir()
      const mirror = tempDir()
      const file = join(origin, 'content.txt')
      writeFileSync(file, 'hello\n')
      const hash = (await cli(['blob', 'put', file, '--root', origin])).trim()
      await cli(
        ['append', 'main', '--root', origin, '--no-blob-check'],
        writes({ 'hello.txt': hash, 'old.txt': blob('1') }),
      )
      await cli(['snapshot', 'main', '-m', 'first', '--root', origin])
      // A second snapshot with few changes stores its tree as a delta against the first:
      // a file that is not named by the hash of its own bytes.
      await cli(['append', 'main', '--root', origin, '--no-blob-check'], writes({ 'more.txt': blob('9') }))
      const base = (await cli(['snapshot', 'main', '-m', 'base', '--root', origin]))
        .trim()
        .split(/\s+/)[0] as string
      await cli(['fork', 'feat-1', '--from', base, '--root', origin])
      await cli(['fork', 'feat-2', '--from', base, '--root', origin])
      await cli(['append', 'feat-1', '--root', origin, '--no-blob-check'], writes({ 'one.txt': blob('3') }))
      await cli(
        ['append', 'feat-2', '--root', origin, '--no-blob-check'],
        writes({ 'two.txt': blob('4'), 'old.txt': '' }),
      )
      await replicatePush({ nats: nats.url(), root: origin, prefix })
      const pulled = await replicatePull({ nats: nats.url(), root: mirror, prefix })
      expect(pulled.objects).toBeGreaterThan(0)

      const there = await mergeTree(mirror, 'main', ['feat-1', 'feat-2'])
      expect(there.base).toBe(base)
      expect(there.conflicts).toEqual([])
      expect(there.tree).toBe((await mergeTree(origin, 'main', ['feat-1', 'feat-2'])).tree)
      expect(there.tree).not.toMatch(/old\.txt/)
      expect(await cli(['blob', 'get', hash, '--root', mirror])).toBe('hello\n')
    } finally {
      await dropStream(nats.url(), stream)
    }
  })
})
