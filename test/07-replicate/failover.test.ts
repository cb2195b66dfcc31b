/**
 * Issue 34, part C, on an R3 stream of a three-server cluster: readers of multi-entry messages
 * and fences (mirror, status, push's catch-up), `promote` (a mirror takes a workspace over and
 * fences the old writer), NOA_REPLICA_DIVERGED for the fenced writer's entries, and `resync`
 * (its divergent entries kept aside, its log made byte-equal to the stream's).
 */
import { spawn } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { jetstreamManager, PubHeaders } from '@nats-io/jetstream'
import { connect, headers, type NatsConnection } from '@nats-io/transport-node'
import { describe, expect, it } from 'vitest'
import { AgentLog, isNoaError } from '../../dist/src/index.js'
import {
  initStream,
  promote,
  replicatePull,
  replicatePush,
  replicationStatus,
  resync,
} from '../../dist/src/replicate/index.js'
import { encodeEntries, encodeFence } from '../../dist/src/replicate/message.js'
import { runCliAsync, tempDir } from '../helpers/index.js'
import { startCli, uniqueNames, waitFor } from '../helpers/nats.js'
import { useNatsCluster } from '../helpers/nats-cluster.js'
import { dropStream, fill, logBytes } from '../helpers/replicate.js'

const cluster = useNatsCluster()

async function withNc<T>(fn: (nc: NatsConnection) => Promise<T>): Promise<T> {
  const nc = await connect({ servers: cluster.urls().split(',') })
  try {
    return await fn(nc)
  } finally {
    await nc.close()
  }
}

/** An R3 stream for `<prefix>.>` made through the API, dropped by the caller. */
async function r3(): Promise<{ prefix: string; stream: string }> {
  const names = uniqueNames()
  const r = await initStream({ nats: cluster.urls(), ...names, replicas: 3 })
  expect(r.config.num_replicas).toBe(3)
  return names
}

function linesOf(root: string, ws: string): Buffer[] {
  const b = logBytes(root, ws)
  const out: Buffer[] = []
  for (let i = 0, nl = b.indexOf(0x0a); nl >= 0; i = nl + 1, nl = b.indexOf(0x0a, i))
    out.push(b.subarray(i, nl))
  return out
}

/** Publishes an encoded message expecting `expect` as the subject's last sequence; its stream seq. */
async function publish(
  subject: string,
  msg: { data: Buffer; headers: Record<string, string> },
  expect: number,
): Promise<number> {
  return withNc(async (nc) => {
    const h = headers()
    for (const [k, v] of Object.entries(msg.headers)) h.set(k, v)
    h.set(PubHeaders.ExpectedLastSubjectSequenceHdr, String(expect))
    const reply = await nc.request(subject, msg.data, { headers: h, timeout: 5000 })
    const ack = JSON.parse(new TextDecoder().decode(reply.data))
    if (ack.error) throw new Error(ack.error.description)
    return ack.seq as number
  })
}

async function messages(stream: string): Promise<number> {
  return withNc(async (nc) => (await (await jetstreamManager(nc)).streams.info(stream)).state.messages)
}

describe('readers of multi-entry messages and fences', () => {
  it('mirrors them byte-equal, status reads them right, and push continues after them', async () => {
    const { prefix, stream } = await r3()
    try {
      const a = tempDir()
      const b = tempDir()
      await fill(a, { w: [1, 10], f: [1, 3] })
      const w = linesOf(a, 'w')
      const f = linesOf(a, 'f')
      // w: entries 1..4 in one message, 5 alone, a fence, 6..10 in one message.
      const s1 = await publish(`${prefix}.w`, encodeEntries('w', w.slice(0, 4)), 0)
      const s2 = await publish(`${prefix}.w`, encodeEntries('w', w.slice(4, 5)), s1)
      const s3 = await publish(`${prefix}.w`, encodeFence('w', 5, 'host-x'), s2)
      await publish(`${prefix}.w`, encodeEntries('w', w.slice(5, 10)), s3)
      // f: 1..3 in one message, then a fence: the subject's last message carries no entry.
      const f1 = await publish(`${prefix}.f`, encodeEntries('f', f), 0)
      const fenceSeq = await publish(`${prefix}.f`, encodeFence('f', 3, 'host-x'), f1)

      const pulled = await replicatePull({ nats: cluster.urls(), root: b, prefix })
      expect(pulled.entries).toBe(13)
      expect(logBytes(b, 'w').equals(logBytes(a, 'w'))).toBe(true)
      expect(logBytes(b, 'f').equals(logBytes(a, 'f'))).toBe(true)

      const status = await replicationStatus({ nats: cluster.urls(), root: b, prefix })
      const row = (ws: string) => status.workspaces.find((x) => x.workspace === ws)
      expect(row('w')).toMatchObject({ direction: 'in-sync', stream: { seq: 10 }, lagEntries: 0 })
      expect(row('f')).toMatchObject({ direction: 'in-sync', stream: { seq: 3 }, lagEntries: 0 })
      expect(row('w')?.stream?.ts).toBe(JSON.parse(String(w[9])).ts)

      // The mirror behind by entries inside a multi-entry message: lag counted by entry.
      const c = tempDir()
      await fill(c, { w: [1, 2] })
      const behind = await replicationStatus({ nats: cluster.urls(), root: c, prefix })
      expect(behind.workspaces.find((x) => x.workspace === 'w')).toMatchObject({
        direction: 'pull',
        lagEntries: 8,
      })

      // Push on the origin: nothing to send, then new entries after the multi-entry message.
      const none = await replicatePush({ nats: cluster.urls(), root: a, prefix })
      expect(none.failed).toEqual([])
      expect(none.entries).toBe(0)
      await fill(a, { w: [11, 3] })
      const more = await replicatePush({ nats: cluster.urls(), root: a, prefix })
      expect(more.failed).toEqual([])
      expect(more.workspaces).toEqual([{ workspace: 'w', from: 11, to: 13, entries: 3 }])
      await replicatePull({ nats: cluster.urls(), root: b, prefix })
      expect(logBytes(b, 'w').equals(logBytes(a, 'w'))).toBe(true)
      // f ends with another writer's fence: a's new entry there is not published.
      await fill(a, { f: [4, 1] })
      const fenced = await replicatePush({ nats: cluster.urls(), root: a, prefix })
      expect(fenced.entries).toBe(0)
      expect(fenced.failed).toMatchObject([{ workspace: 'f', code: 'NOA_REPLICA_DIVERGED', seqs: [4] }])
      expect(await messages(stream)).toBe(4 + 3 + 2) // w: 4 and the 3 pushed; f: 2
      expect(fenceSeq).toBeGreaterThan(f1)
    } finally {
      await dropStream(cluster.urls(), stream)
    }
  }, 60_000)
})

describe('failover', () => {
  it('promote fences the old writer, whose divergent entries are reported, kept aside by resync, and its log made the stream’s', async () => {
    const { prefix, stream } = await r3()
    const nats = cluster.urls()
    try {
      const a = tempDir() // the old writer
      const b = tempDir() // the mirror that takes over
      const c = tempDir() // a third host, mirroring
      await fill(a, { w: [1, 20], other: [1, 5] })
      expect((await replicatePush({ nats, root: a, prefix })).entries).toBe(25)
      await replicatePull({ nats, root: b, prefix })
      expect(logBytes(b, 'w').equals(logBytes(a, 'w'))).toBe(true)

      const cli = await runCliAsync([
        'replicate',
        'promote',
        'w',
        '--nats',
        nats,
        '--root',
        b,
        '--prefix',
        prefix,
        '--writer',
        'host-b',
        '--json',
      ])
      expect(cli.stderr).toBe('')
      expect(cli.status).toBe(0)
      const promoted = JSON.parse(cli.stdout)
      expect(promoted.workspaces).toMatchObject([
        { workspace: 'w', writer: 'host-b', after: 20, already: false },
      ])
      const record = JSON.parse(readFileSync(join(b, 'replication', `writers.${prefix}.json`), 'utf8'))
      expect(record.workspaces.w).toMatchObject({ writer: 'host-b', after: 20 })
      expect(record.workspaces.w.fenceStreamSeq).toBe(promoted.workspaces[0].fenceStreamSeq)

      // The old writer goes on appending, and its push (restarted) is refused.
      await fill(a, { w: [21, 5] })
      const divergentLines = linesOf(a, 'w').slice(20)
      const refused = await replicatePush({ nats, root: a, prefix })
      expect(refused.entries).toBe(0)
      const seqs = [21, 22, 23, 24, 25]
      expect(refused.failed).toMatchObject([{ workspace: 'w', code: 'NOA_REPLICA_DIVERGED', seqs }])
      expect(linesOf(a, 'w')).toHaveLength(25) // never dropped
      const st = await replicationStatus({ nats, root: a, prefix })
      const row = st.workspaces.find((x) => x.workspace === 'w')
      expect(row?.direction).toBe('diverged')
      expect(row?.diverged).toMatchObject({ code: 'NOA_REPLICA_DIVERGED', seqs })
      expect(st.workspaces.find((x) => x.workspace === 'other')?.direction).toBe('in-sync')

      // The new writer appends; its push publishes after the fence, and a third host mirrors it.
      await fill(b, { w: [900, 3] })
      const pushedB = await replicatePush({ nats, root: b, prefix })
      expect(pushedB.failed).toEqual([])
      expect(pushedB.workspaces).toEqual([{ workspace: 'w', from: 21, to: 23, entries: 3 }])
      const own = await replicatePull({ nats, root: b, prefix })
      expect([own.entries, own.skipped]).toEqual([0, 0]) // b writes w now: its messages are not even read back
      await replicatePull({ nats, root: c, prefix })
      expect(logBytes(c, 'w').equals(logBytes(b, 'w'))).toBe(true)
      expect(logBytes(c, 'other').equals(logBytes(a, 'other'))).toBe(true)

      // Still fenced once the new writer's entries are there (same seqs, other bytes).
      const again = await replicatePush({ nats, root: a, prefix })
      expect(again.failed).toMatchObject([{ workspace: 'w', code: 'NOA_REPLICA_DIVERGED', seqs }])
      // A pull into the old writer refuses the same way, and applies nothing to w.
      const pulledA = await replicatePull({ nats, root: a, prefix }).catch((e: unknown) => e)
      expect(isNoaError(pulledA, 'NOA_REPLICA_DIVERGED')).toBe(true)
      expect((pulledA as { details: { seqs: number[] } }).details.seqs).toEqual(seqs)
      expect(linesOf(a, 'w').map(String).slice(20)).toEqual(divergentLines.map(String))

      const rs = await runCliAsync([
        'replicate',
        'resync',
        'w',
        '--nats',
        nats,
        '--root',
        a,
        '--prefix',
        prefix,
        '--json',
      ])
      expect(rs.stderr).toBe('')
      expect(rs.status).toBe(0)
      const report = JSON.parse(rs.stdout)
      expect(report.workspaces).toMatchObject([{ workspace: 'w', common: 20, applied: 3, last: 23 }])
      expect(report.workspaces[0].kept.seqs).toEqual(seqs)
      const kept = readFileSync(report.workspaces[0].kept.file)
      expect(kept.equals(Buffer.concat(divergentLines.flatMap((l) => [l, Buffer.from('\n')])))).toBe(true)
      expect(report.workspaces[0].kept.file.startsWith(join(a, 'replication', 'diverged'))).toBe(true)
      expect(logBytes(a, 'w').equals(logBytes(b, 'w'))).toBe(true)
      expect(
        (await replicationStatus({ nats, root: a, prefix })).workspaces.find((x) => x.workspace === 'w')
          ?.direction,
      ).toBe('in-sync')
      // a is now a mirror of w: nothing to publish, nothing refused.
      expect((await replicatePush({ nats, root: a, prefix })).failed).toEqual([])
      // b's next entries reach a through pull; an entry written on a stays fenced.
      await fill(b, { w: [950, 1] })
      await replicatePush({ nats, root: b, prefix })
      await replicatePull({ nats, root: a, prefix })
      expect(logBytes(a, 'w').equals(logBytes(b, 'w'))).toBe(true)
      const count = await messages(stream)
      await fill(a, { w: [25, 1] })
      const stillFenced = await replicatePush({ nats, root: a, prefix })
      expect(stillFenced.failed).toMatchObject([{ workspace: 'w', code: 'NOA_REPLICA_DIVERGED', seqs: [25] }])
      expect(await messages(stream)).toBe(count)
      await resync({ nats, root: a, prefix, workspaces: ['w'] })

      // A second resync: the workspace no longer diverges, refused, nothing written.
      const before = logBytes(a, 'w')
      const twice = await resync({ nats, root: a, prefix, workspaces: ['w'] }).catch((e: unknown) => e)
      expect(isNoaError(twice, 'NOA_REPLICATION')).toBe(true)
      expect((twice as Error).message).toMatch(/workspace w did not diverge/)
      expect(logBytes(a, 'w').equals(before)).toBe(true)
      expect(readdirSync(join(a, 'replication', 'diverged'))).toHaveLength(2)
      // And resync of a workspace nobody fenced.
      const never = await resync({ nats, root: a, prefix, workspaces: ['other'] }).catch((e: unknown) => e)
      expect(isNoaError(never, 'NOA_REPLICATION')).toBe(true)
    } finally {
      await dropStream(nats, stream)
    }
  }, 90_000)

  it('refuses a promote of a workspace the mirror is behind on, or that cannot be a subject, and writes nothing', async () => {
    const { prefix, stream } = await r3()
    const nats = cluster.urls()
    try {
      const a = tempDir()
      const b = tempDir()
      await fill(a, { v: [1, 10] })
      await replicatePush({ nats, root: a, prefix })
      await replicatePull({ nats, root: b, prefix })
      await fill(a, { v: [11, 2] })
      await replicatePush({ nats, root: a, prefix })
      const count = await messages(stream)
      const behind = await promote({ nats, root: b, prefix, workspaces: ['v'], writer: 'b' }).catch(
        (e: unknown) => e,
      )
      expect(isNoaError(behind, 'NOA_REPLICATION')).toBe(true)
      expect((behind as Error).message).toMatch(
        /workspace v: mirror is behind: local seq 10, stream seq 12; run noa replicate pull first/,
      )
      const badName = await promote({ nats, root: b, prefix, workspaces: ['a..b'] }).catch((e: unknown) => e)
      expect(isNoaError(badName, 'NOA_BAD_WORKSPACE')).toBe(true)
      expect((badName as Error).message).toMatch(/cannot be a subject/)
      const cli = await runCliAsync([
        'replicate',
        'promote',
        'v',
        '--nats',
        nats,
        '--root',
        b,
        '--prefix',
        prefix,
      ])
      expect(cli.status).toBe(1)
      expect(cli.stderr).toMatch(/mirror is behind: local seq 10, stream seq 12/)
      expect(await messages(stream)).toBe(count)
      expect(existsSync(join(b, 'replication', `writers.${prefix}.json`))).toBe(false)
      // Caught up, but the old writer publishes between the check and the fence: the fence is
      // refused by the stream, nothing is fenced or recorded.
      await replicatePull({ nats, root: b, prefix })
      const raced = await promote({
        nats,
        root: b,
        prefix,
        workspaces: ['v'],
        writer: 'b',
        beforeFence: async () => {
          await fill(a, { v: [13, 1] })
          expect((await replicatePush({ nats, root: a, prefix })).entries).toBe(1)
        },
      }).catch((e: unknown) => e)
      expect(isNoaError(raced, 'NOA_REPLICATION')).toBe(true)
      expect((raced as Error).message).toMatch(/workspace v: the stream moved while it was being promoted/)
      expect(await messages(stream)).toBe(count + 1) // a's entry 13, no fence
      expect(existsSync(join(b, 'replication', `writers.${prefix}.json`))).toBe(false)
      expect((await replicatePush({ nats, root: a, prefix })).failed).toEqual([]) // a still writes v
      // Caught up, the same promote goes through; a second one finds it done.
      await replicatePull({ nats, root: b, prefix })
      const ok = await promote({ nats, root: b, prefix, workspaces: ['v'], writer: 'b' })
      expect(ok.workspaces).toMatchObject([{ workspace: 'v', after: 13, already: false }])
      expect(await messages(stream)).toBe(count + 2)
      const done = await promote({ nats, root: b, prefix, workspaces: ['v'], writer: 'b' })
      expect(done.workspaces).toMatchObject([{ workspace: 'v', already: true }])
      expect(await messages(stream)).toBe(count + 2)
      // A crash between the fence and its record: promoting again with the same writer records
      // the fence already there, and publishes nothing.
      const record = join(b, 'replication', `writers.${prefix}.json`)
      rmSync(record)
      const redo = await promote({ nats, root: b, prefix, workspaces: ['v'], writer: 'b' })
      expect(redo.workspaces).toMatchObject([
        { workspace: 'v', already: true, fenceStreamSeq: ok.workspaces[0]?.fenceStreamSeq },
      ])
      expect(JSON.parse(readFileSync(record, 'utf8')).workspaces.v.fenceStreamSeq).toBe(
        ok.workspaces[0]?.fenceStreamSeq,
      )
      expect(await messages(stream)).toBe(count + 2)
    } finally {
      await dropStream(nats, stream)
    }
  }, 60_000)

  it('real processes: the old writer SIGKILLed while it appends and pushes, a mirror promoted, the old writer restarted is fenced and resynced', async () => {
    const { prefix, stream } = await r3()
    const nats = cluster.urls()
    try {
      const a = tempDir()
      const b = tempDir()
      await fill(a, { w: [1, 20] })
      const pusher = startCli([
        'replicate',
        'push',
        '--follow',
        '--nice',
        '0',
        '--root',
        a,
        '--nats',
        nats,
        '--prefix',
        prefix,
      ])
      const index = new URL('../../dist/src/index.js', import.meta.url).href
      const writer = spawn(
        process.execPath,
        [
          '--input-type=module',
          '-e',
          `import { AgentLog } from ${JSON.stringify(index)}
           const log = await AgentLog.open({ root: ${JSON.stringify(a)}, workers: 1 })
           for (let i = 0; ; i++) await log.append('w', { op: 'write', path: 'p-' + i, blob: '${'0'.repeat(64)}' })`,
        ],
        { stdio: 'ignore' },
      )
      const writerExit = new Promise((resolve) => writer.on('exit', resolve))
      await waitFor(
        'the stream to hold 300 entries of w',
        async () => ((await messages(stream)) >= 300 ? true : null),
        30_000,
      )
      writer.kill('SIGKILL')
      pusher.child.kill('SIGKILL')
      await Promise.all([writerExit, pusher.exited])

      await replicatePull({ nats, root: b, prefix })
      const promoted = await promote({ nats, root: b, prefix, workspaces: ['w'], writer: 'host-b' })
      const after = promoted.workspaces[0]?.after as number
      expect(after).toBeGreaterThanOrEqual(300)
      const count = await messages(stream)

      // The old host comes back: its agent appends again (its dead writer's journal replayed first).
      await fill(a, { w: [5000, 3] })
      const local = linesOf(a, 'w')
      expect(local.length).toBeGreaterThan(after)
      const restarted = await runCliAsync([
        'replicate',
        'push',
        '--root',
        a,
        '--nats',
        nats,
        '--prefix',
        prefix,
        '--json',
      ])
      expect(restarted.status).toBe(1)
      const report = JSON.parse(restarted.stdout)
      const seqs = Array.from({ length: local.length - after }, (_, i) => after + 1 + i)
      expect(report.failed).toMatchObject([{ workspace: 'w', code: 'NOA_REPLICA_DIVERGED', seqs }])
      expect(restarted.stderr).toContain('NOA_REPLICA_DIVERGED')
      expect(await messages(stream)).toBe(count)
      expect(linesOf(a, 'w')).toHaveLength(local.length)

      const r = await resync({ nats, root: a, prefix, workspaces: ['w'] })
      expect(r.workspaces[0]?.kept.seqs).toEqual(seqs)
      const kept = readFileSync(r.workspaces[0]?.kept.file as string)
      expect(kept.equals(Buffer.concat(local.slice(after).flatMap((l) => [l, Buffer.from('\n')])))).toBe(true)
      expect(logBytes(a, 'w').equals(logBytes(b, 'w'))).toBe(true)
      // The cut log checks out whole, its checksums included (the sidecar's records past the cut are not used).
      const check = await AgentLog.open({ root: a, workers: 0 })
      try {
        const v = await check.verify('w')
        expect(v).toMatchObject({ ok: true, lastSeq: after, tornTailBytes: 0 })
        expect(v.damaged ?? []).toEqual([])
      } finally {
        await check.close()
      }
    } finally {
      await dropStream(nats, stream)
    }
  }, 120_000)

  it('resync SIGKILLed at any point: run again, it finishes, the divergent entries kept whole and the log the stream’s', async () => {
    const nats = cluster.urls()
    // Killed once its kept file appears, then after a further 0..600 ms: before the record, the
    // cut, during the appends, or after it is done (the states seen on this machine: cut and
    // nothing appended yet, part appended, all done).
    for (const delayMs of [0, 300, 380, 460, 600]) {
      const { prefix, stream } = await r3()
      try {
        const a = tempDir()
        const b = tempDir()
        await fill(a, { w: [1, 20] })
        await replicatePush({ nats, root: a, prefix })
        await replicatePull({ nats, root: b, prefix })
        await promote({ nats, root: b, prefix, workspaces: ['w'], writer: 'host-b' })
        await fill(a, { w: [21, 3000] })
        await fill(b, { w: [900_000, 3000] })
        await replicatePush({ nats, root: b, prefix })
        const divergent = Buffer.concat(
          linesOf(a, 'w')
            .slice(20)
            .flatMap((l) => [l, Buffer.from('\n')]),
        )

        const child = startCli(['replicate', 'resync', 'w', '--nats', nats, '--root', a, '--prefix', prefix])
        const dir = join(a, 'replication', 'diverged')
        await waitFor(
          'the kept file',
          () => (existsSync(dir) && readdirSync(dir).length > 0 ? true : null),
          30_000,
        )
        if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs))
        child.child.kill('SIGKILL')
        await child.exited
        const again = await resync({ nats, root: a, prefix, workspaces: ['w'] }).catch((e: unknown) => e)
        if (again instanceof Error)
          expect(again.message, `killed at ${delayMs} ms`).toMatch(/did not diverge/)
        expect(logBytes(a, 'w').equals(logBytes(b, 'w')), `killed at ${delayMs} ms`).toBe(true)
        const kept = readdirSync(dir).filter((f) => !f.startsWith('.'))
        expect(kept.length).toBeGreaterThanOrEqual(1)
        for (const f of kept) expect(readFileSync(join(dir, f)).equals(divergent), f).toBe(true)
        // Fenced still: an entry written on a is not published.
        await fill(a, { w: [1, 1] })
        const pushed = await replicatePush({ nats, root: a, prefix })
        expect(pushed.failed).toMatchObject([{ workspace: 'w', code: 'NOA_REPLICA_DIVERGED' }])
      } finally {
        await dropStream(nats, stream)
      }
    }
  }, 240_000)
})
