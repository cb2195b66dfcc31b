/**
 * Replication of compacted logs (docs/compaction.md): a fresh stream gets the base record first
 * and a mirror that pulls it converges byte for byte (objects included: it replays to the same
 * files); a publisher whose log is compacted while it publishes goes on after the stream's end;
 * a stream that ends before the base is refused by name.
 */
import { describe, expect, it } from 'vitest'
import { AgentLog, ObjectStore, SnapshotEngine } from '../../dist/src/index.js'
import { replicatePush } from '../../dist/src/replicate/index.js'
import { runCliAsync, tempDir } from '../helpers/index.js'
import { uniqueNames, useNats, waitFor } from '../helpers/nats.js'
import { dropStream, entries, initStreamCli, logBytes, messageCount } from '../helpers/replicate.js'

const nats = useNats()

async function withStore<T>(
  root: string,
  fn: (log: AgentLog, engine: SnapshotEngine) => Promise<T>,
): Promise<T> {
  const store = new ObjectStore(root)
  const log = await AgentLog.open({ root, workers: 1, objects: store })
  try {
    return await fn(log, new SnapshotEngine({ log, store }))
  } finally {
    await log.close()
  }
}

async function replicate(op: 'push' | 'pull', root: string, prefix: string) {
  return runCliAsync(['replicate', op, '--root', root, '--nats', nats.url(), '--prefix', prefix, '--json'])
}

async function filesOf(root: string, ws: string): Promise<Array<[string, string]>> {
  return [...(await new SnapshotEngine({ root }).replay(ws)).tree.entries()]
}

describe('replicating a compacted workspace', () => {
  it('a fresh stream gets the base record first; a mirror converges byte for byte and replays the same', async () => {
    const { prefix, stream } = uniqueNames()
    const a = tempDir()
    const b = tempDir()
    await initStreamCli(nats.url(), prefix, stream)
    try {
      await withStore(a, async (log, engine) => {
        await log.appendMany('ws', entries('ws', 1, 200))
        await engine.snapshot('ws')
        await log.appendMany('ws', entries('ws', 201, 30))
        expect(await log.compact('ws')).toMatchObject({ compacted: true, baseSeq: 200 })
      })
      const push = await replicate('push', a, prefix)
      expect(push.stderr).toBe('')
      expect(JSON.parse(push.stdout).workspaces).toEqual([
        { workspace: 'ws', from: 200, to: 231, entries: 32 },
      ])
      const pull = await replicate('pull', b, prefix)
      expect(pull.stderr).toBe('')
      expect(pull.status).toBe(0)
      expect(logBytes(b, 'ws').equals(logBytes(a, 'ws'))).toBe(true)
      expect((await runCliAsync(['verify', 'ws', '--root', b])).status).toBe(0)
      expect(await filesOf(b, 'ws')).toEqual(await filesOf(a, 'ws'))
      // Both go on: appends on the origin reach the mirror, after the base, byte for byte.
      await withStore(a, (log) => log.appendMany('ws', entries('ws', 231, 5)))
      expect((await replicate('push', a, prefix)).status).toBe(0)
      expect((await replicate('pull', b, prefix)).status).toBe(0)
      expect(logBytes(b, 'ws').equals(logBytes(a, 'ws'))).toBe(true)
      // The mirror's log is an ordinary compacted log: the engine appends after it.
      await withStore(b, async (log) =>
        expect((await log.append('ws', { op: 'delete', path: 'x' })).seq).toBe(237),
      )
    } finally {
      await dropStream(nats.url(), stream)
    }
  })

  it('a log compacted after it was pushed goes on from the stream’s end; one pushed only up to before its base is refused by name', async () => {
    const { prefix, stream } = uniqueNames()
    const a = tempDir()
    const b = tempDir()
    await initStreamCli(nats.url(), prefix, stream)
    try {
      await withStore(a, async (log, engine) => {
        await log.appendMany('ws', entries('ws', 1, 100))
        await engine.snapshot('ws')
        await log.appendMany('lag', entries('lag', 1, 10))
      })
      expect((await replicate('push', a, prefix)).status).toBe(0)
      expect((await replicate('pull', b, prefix)).status).toBe(0)
      await withStore(a, async (log, engine) => {
        await log.appendMany('ws', entries('ws', 101, 20))
        expect((await log.compact('ws')).baseSeq).toBe(100)
        await log.appendMany('lag', entries('lag', 11, 40))
        await engine.snapshot('lag')
        expect((await log.compact('lag')).baseSeq).toBe(50)
      })
      const push = await replicate('push', a, prefix)
      expect(push.status).toBe(1)
      const report = JSON.parse(push.stdout)
      expect(report.workspaces).toEqual([{ workspace: 'ws', from: 102, to: 121, entries: 20 }])
      expect(report.failed).toEqual([expect.objectContaining({ workspace: 'lag', code: 'NOA_COMPACTED' })])
      expect(JSON.stringify(report.failed)).toContain('compacted up to seq 50')
      expect(JSON.stringify(report.failed)).toContain('ends at seq 10')
      // The mirror that had the whole history gets the new entries: from seq 101 on it is the
      // origin's log byte for byte (before it, it keeps what it had).
      expect((await replicate('pull', b, prefix)).status).toBe(0)
      const tail = (root: string) => {
        const text = logBytes(root, 'ws').toString()
        return text.slice(text.indexOf('{"seq":101,'))
      }
      expect(tail(b)).toBe(tail(a))
    } finally {
      await dropStream(nats.url(), stream)
    }
  })

  it('a following publisher goes on when the log is compacted under it (the new file, found by seq)', async () => {
    const { prefix, stream } = uniqueNames()
    const a = tempDir()
    const b = tempDir()
    await initStreamCli(nats.url(), prefix, stream)
    const stop = new AbortController()
    let following: Promise<unknown> | null = null
    try {
      await withStore(a, async (log, engine) => {
        await log.appendMany('ws', entries('ws', 1, 50))
        following = replicatePush({
          nats: nats.url(),
          root: a,
          prefix,
          follow: true,
          signal: stop.signal,
          roundMs: 1,
          objects: false,
        })
        await waitFor('the first entries to be published', async () =>
          ((await messageCount(nats.url(), stream)) ?? 0) >= 50 ? true : null,
        )
        await engine.snapshot('ws') // seq 51, covering 50
        await log.appendMany('ws', entries('ws', 52, 10))
        await waitFor('the snapshot and the next entries', async () =>
          ((await messageCount(nats.url(), stream)) ?? 0) >= 61 ? true : null,
        )
        expect((await log.compact('ws')).baseSeq).toBe(50)
        await log.appendMany('ws', entries('ws', 62, 15))
        await waitFor('the entries after the compaction', async () =>
          ((await messageCount(nats.url(), stream)) ?? 0) >= 76 ? true : null,
        )
      })
      stop.abort()
      await following
      expect((await replicate('pull', b, prefix)).status).toBe(0)
      const text = logBytes(a, 'ws').toString()
      const mirrored = logBytes(b, 'ws').toString()
      expect(mirrored.slice(mirrored.indexOf('{"seq":51,'))).toBe(text.slice(text.indexOf('{"seq":51,')))
    } finally {
      stop.abort()
      await (following as Promise<unknown> | null)?.catch(() => {})
      await dropStream(nats.url(), stream)
    }
  })
})
