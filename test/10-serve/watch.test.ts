/**
 * Live tail through the daemon with the API: `watch` on a RemoteAgentLog delivers what is there,
 * then every entry other clients append as it commits, in order; a resume from a seq gives no
 * gap and no duplicate; a returned iterator ends its stream in the daemon; a drain ends a watch
 * with NOA_SHUTTING_DOWN and the seq to resume from, and the resumed watch on the restarted
 * daemon misses nothing. Bad arguments fail as in process, on the first next().
 */
import { describe, expect, it } from 'vitest'
import { AgentLog, type EntryInput } from '../../dist/src/index.js'
import { connectDaemon, Daemon, type RemoteAgentLog } from '../../dist/src/serve/index.js'
import { tempDir } from '../helpers/index.js'

const del = (path: string): EntryInput => ({ op: 'delete', path })
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i)

async function streams(log: RemoteAgentLog): Promise<number> {
  return ((await log.serverStatus()) as { streams: number }).streams
}

describe('watch through noa serve', () => {
  it('delivers every entry as other clients commit it, resumes from a seq, and survives a drain by resumeFrom', async () => {
    const root = tempDir()
    let d = await Daemon.start({ root })
    const writer = await connectDaemon({ root })
    const watcher = await connectDaemon({ root })
    await writer.appendMany('w', [del('a'), del('b'), del('c')])
    const stop = new AbortController()
    const seen: number[] = []
    const watching = (async () => {
      for await (const e of watcher.watch('w', { signal: stop.signal })) {
        seen.push(e.seq)
        if (seen.length === 203) stop.abort()
      }
    })()
    for (let i = 0; i < 100; i++) await writer.append('w', del(`s${i}`))
    await Promise.all(Array.from({ length: 50 }, (_, i) => writer.append('w', del(`p${i}`))))
    await writer.appendMany(
      'w',
      Array.from({ length: 50 }, (_, i) => del(`m${i}`)),
    )
    await watching
    expect(seen).toEqual(range(1, 203))

    const resumed: number[] = []
    for await (const e of watcher.watch('w', { fromSeq: 151 })) {
      resumed.push(e.seq)
      if (e.seq === 203) break
    }
    expect(resumed).toEqual(range(151, 203))
    // Both ended watches were cancelled in the daemon, not left reading.
    for (let i = 0; (await streams(writer)) > 0; i++) {
      expect(i).toBeLessThan(100)
      await new Promise((r) => setTimeout(r, 20))
    }

    // A drain ends a live watch by name, with the first seq it did not deliver.
    const got: number[] = []
    const failure = (async () => {
      try {
        for await (const e of watcher.watch('w', { fromSeq: 201 })) got.push(e.seq)
      } catch (err) {
        return err
      }
      return null
    })()
    await writer.appendMany('w', [del('x'), del('y')])
    while (got.length < 5) await new Promise((r) => setTimeout(r, 10))
    await d.drain()
    const err = await failure
    expect(err).toMatchObject({ code: 'NOA_SHUTTING_DOWN', details: { resumeFrom: 206 } })
    expect(got).toEqual(range(201, 205))
    await writer.close()
    await watcher.close()

    // A new daemon on the root: the watch goes on from resumeFrom with nothing missed or repeated.
    d = await Daemon.start({ root })
    const again = await connectDaemon({ root })
    await again.appendMany('w', [del('after1'), del('after2')])
    const rest: string[] = []
    for await (const e of again.watch('w', {
      fromSeq: (err as { details: { resumeFrom: number } }).details.resumeFrom,
    })) {
      rest.push(`${e.seq}:${e.op === 'delete' ? e.path : e.op}`)
      if (e.seq === 207) break
    }
    expect(rest).toEqual(['206:after1', '207:after2'])
    await again.close()
    await d.drain()
  })

  it('refuses bad arguments with the same named errors as in process', async () => {
    const served = tempDir()
    const plain = tempDir()
    const d = await Daemon.start({ root: served })
    const remote = await connectDaemon({ root: served })
    const local = await AgentLog.open({ root: plain, workers: 1 })
    const first = async (log: AgentLog, ws: string, options: object) => {
      const watching = log.watch(ws, options) // both fail on the first next(), not at the call
      try {
        return await watching.next()
      } catch (err) {
        const e = err as { code: string; message: string }
        return { code: e.code, message: e.message.replace(log.root, '<root>') }
      }
    }
    try {
      for (const log of [remote, local]) await log.append('w', del('a'))
      for (const [ws, options] of [
        ['../x', {}],
        ['nope', {}],
        ['w', { fromSeq: 0 }],
        ['w', { fromSeq: 'one' }],
        ['nope', { fromSeq: -1 }],
        ['w', { pollMs: 0 }],
      ] as const) {
        const [r, l] = [await first(remote, ws, options), await first(local, ws, options)]
        expect(r).toHaveProperty('code')
        expect(r).toEqual(l)
      }
    } finally {
      await remote.close()
      await local.close()
      await d.drain()
    }
  })
})
