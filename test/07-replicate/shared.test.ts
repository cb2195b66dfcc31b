/**
 * Shared workspaces (src/replicate/shared.ts), two hosts in this process (two roots, two
 * connections) on an R3 stream: one order for both, decided by the stream; a host that is behind
 * catches up and renders its entries again after what it missed; ifLastSeq holds across hosts;
 * bad names, streams and local writes are refused with named errors.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { jetstreamManager } from '@nats-io/jetstream'
import { describe, expect, it, onTestFinished } from 'vitest'
import { AgentLog, type EntryInput } from '../../dist/src/index.js'
import { type SharedOptions, SharedWorkspaces } from '../../dist/src/replicate/index.js'
import { blobOf, runCliAsync, tempDir } from '../helpers/index.js'
import { startCli, withConnection } from '../helpers/nats.js'
import { useNatsCluster } from '../helpers/nats-cluster.js'
import { sharedHosts } from '../helpers/shared-hosts.js'

const cluster = useNatsCluster()
const { first, newStream, host, logOf, streamLines } = sharedHosts(cluster)

const write = (tag: string, i: number): EntryInput => ({
  op: 'write',
  path: `${tag}/ファイル-${i}`,
  blob: blobOf(i),
})

function expectOrdered(bytes: Buffer): { seq: number; ts: number; path?: string }[] {
  const entries = bytes
    .toString('utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l))
  entries.forEach((e, i) => {
    expect(e.seq).toBe(i + 1)
    if (i > 0) expect(e.ts).toBeGreaterThan(entries[i - 1].ts)
  })
  return entries
}

async function eventually(what: string, fn: () => boolean, ms = 20_000) {
  const until = Date.now() + ms
  while (!fn()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

describe('shared workspaces', () => {
  it("two hosts appending at once get one order, the stream's, and logs byte-equal to it", async () => {
    const { prefix, stream } = await newStream()
    const a = await host(prefix, ['team'], { writer: 'a' })
    const b = await host(prefix, ['team'], { writer: 'b' })
    const acks: { seq: number; path: string }[] = []
    const run = async (h: typeof a, tag: string) => {
      for (let i = 0; i < 60; i++) {
        if (i % 3 === 0) {
          const es = [write(tag, i), write(tag, i + 1000)]
          const got = await Promise.all([
            h.shared.appendMany('team', es),
            h.shared.append('team', write(tag, i + 2000)),
          ])
          got[0].forEach((ack, k) => {
            acks.push({ seq: ack.seq, path: (es[k] as { path: string }).path })
          })
          acks.push({ seq: got[1].seq, path: `${tag}/ファイル-${i + 2000}` })
        } else {
          const ack = await h.shared.append('team', write(tag, i))
          acks.push({ seq: ack.seq, path: `${tag}/ファイル-${i}` })
        }
      }
    }
    await Promise.all([run(a, 'a'), run(b, 'b')])
    const total = 2 * (40 + 20 * 3)
    await eventually(
      'both logs to hold every entry',
      () => a.shared.lastSeq('team') === total && b.shared.lastSeq('team') === total,
    )
    const fromStream = await streamLines(stream, prefix, 'team')
    expect(logOf(a.root, 'team').equals(fromStream)).toBe(true)
    expect(logOf(b.root, 'team').equals(fromStream)).toBe(true)
    const entries = expectOrdered(fromStream)
    expect(entries.length).toBe(total)
    // Every acknowledgement names the seq its entry got, and no entry is there twice.
    for (const ack of acks) expect(entries[ack.seq - 1]?.path).toBe(ack.path)
    expect(new Set(entries.map((e) => e.path)).size).toBe(total)
    // Readers of the engine see it on either host.
    const read = []
    for await (const e of b.log.read('team')) read.push(e.seq)
    expect(read.length).toBe(total)
  })

  it('a host that is behind catches up from the stream and renders its entries after what it missed', async () => {
    const { prefix, stream } = await newStream()
    const a = await host(prefix, ['ws'])
    const b = await host(prefix, ['ws'], { follow: false })
    for (let i = 0; i < 5; i++) await a.shared.append('ws', write('a', i))
    expect(b.shared.lastSeq('ws')).toBe(0)
    // B still expects an empty subject: refused, it reads A's five entries, then goes after them.
    const ack = await b.shared.append('ws', write('b', 0))
    expect(ack.seq).toBe(6)
    const fromStream = await streamLines(stream, prefix, 'ws')
    expect(logOf(b.root, 'ws').equals(fromStream)).toBe(true)
    const entries = expectOrdered(fromStream)
    expect(entries.map((e) => e.path)).toEqual([
      ...[0, 1, 2, 3, 4].map((i) => `a/ファイル-${i}`),
      'b/ファイル-0',
    ])
    await eventually('A to follow B', () => a.shared.lastSeq('ws') === 6)
    expect(logOf(a.root, 'ws').equals(fromStream)).toBe(true)
  })

  it('ifLastSeq holds across hosts: an expectation the stream has moved past is NOA_SEQ_MISMATCH, nothing written', async () => {
    const { prefix, stream } = await newStream()
    const a = await host(prefix, ['cas'])
    const b = await host(prefix, ['cas'], { follow: false })
    expect((await a.shared.append('cas', write('a', 1), { ifLastSeq: 0 })).seq).toBe(1)
    const refused = await b.shared.append('cas', write('b', 1), { ifLastSeq: 0 }).catch((e) => e)
    expect(refused.code).toBe('NOA_SEQ_MISMATCH')
    expect(refused.details).toMatchObject({ workspace: 'cas', lastSeq: 1, expected: 0 })
    expect((await streamLines(stream, prefix, 'cas')).toString()).not.toContain('b/')
    // B caught up meanwhile: the right expectation goes in.
    expect(b.shared.lastSeq('cas')).toBe(1)
    expect(
      (await b.shared.appendMany('cas', [write('b', 2), write('b', 3)], { ifLastSeq: 1 })).map((x) => x.seq),
    ).toEqual([2, 3])
    const late = await a.shared.append('cas', write('a', 9), { ifLastSeq: 1 }).catch((e) => e)
    expect(late.code).toBe('NOA_SEQ_MISMATCH')
    expect(late.details.lastSeq).toBe(3)
    expect(expectOrdered(await streamLines(stream, prefix, 'cas')).length).toBe(3)
  })

  it('a host opened again catches up at open; a log with entries the stream has not is NOA_REPLICA_DIVERGED', async () => {
    const { prefix, stream } = await newStream()
    const a = await host(prefix, ['w1'])
    const root = tempDir()
    let log = await AgentLog.open({ root, workers: 1 })
    let b = await SharedWorkspaces.open({ log, nats: cluster.urls(), prefix, workspaces: ['w1'] })
    await b.append('w1', write('b', 0))
    await b.close()
    for (let i = 0; i < 4; i++) await a.shared.append('w1', write('a', i))
    b = await SharedWorkspaces.open({ log, nats: cluster.urls(), prefix, workspaces: ['w1'] })
    expect(b.lastSeq('w1')).toBe(5)
    expect(logOf(root, 'w1').equals(await streamLines(stream, prefix, 'w1'))).toBe(true)
    // A write through the plain AgentLog forks the order: the next shared append refuses.
    await log.append('w1', write('local', 1))
    const refused = await b.append('w1', write('b', 1)).catch((e) => e)
    expect(refused.code).toBe('NOA_REPLICA_DIVERGED')
    expect(refused.details).toMatchObject({ workspace: 'w1', seqs: [6] })
    expect(expectOrdered(await streamLines(stream, prefix, 'w1')).length).toBe(5)
    await b.close()
    await log.close()
    // And so does opening it again.
    log = await AgentLog.open({ root, workers: 1 })
    onTestFinished(async () => {
      await log.close()
    })
    const again = await SharedWorkspaces.open({
      log,
      nats: cluster.urls(),
      prefix,
      workspaces: ['w1'],
    }).catch((e) => e)
    expect(again.code).toBe('NOA_REPLICA_DIVERGED')
    expect(again.details.seqs).toEqual([6])
  })

  it('refuses a name that cannot be a subject, a stream noa cannot use and one that is not R3, writing nothing', async () => {
    const { prefix, stream } = await newStream()
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1 })
    onTestFinished(async () => {
      await log.close()
    })
    const open = (o: Partial<SharedOptions>) =>
      SharedWorkspaces.open({
        log,
        nats: cluster.urls(),
        prefix,
        workspaces: ['ok'],
        ...o,
      } as SharedOptions).catch((e) => e)
    const badName = await open({ workspaces: ['ok', 'a..b'] })
    expect(badName.code).toBe('NOA_BAD_WORKSPACE')
    expect(badName.message).toMatch(/a\.\.b.*cannot be shared/)
    expect((await open({ workspaces: ['../x'] })).code).toBe('NOA_BAD_WORKSPACE')
    expect((await open({ workspaces: [] })).code).toBe('NOA_BAD_OPTION')
    expect((await open({ maxTries: 0 })).code).toBe('NOA_BAD_OPTION')
    expect((await open({ replicas: 3 } as never)).code).toBe('NOA_BAD_OPTION')
    // A stream that drops old messages.
    await withConnection(first(), async (nc) => {
      await (await jetstreamManager(nc)).streams.update(stream, { max_msgs: 10 })
    })
    const limited = await open({})
    expect(limited.code).toBe('NOA_STREAM_CONFIG')
    expect(limited.message).toMatch(/max_msgs 10/)
    // An R1 stream: an acknowledgement would not mean a majority.
    const r1 = await newStream(1)
    const single = await open({ prefix: r1.prefix })
    expect(single.code).toBe('NOA_STREAM_CONFIG')
    expect(single.message).toMatch(/1 replica.*need 3/)
    expect(
      readdirSync(root).filter((f) => f === 'agent-logs' && readdirSync(join(root, f)).length > 0),
    ).toEqual([])
    for (const s of [stream, r1.stream]) {
      const n = await withConnection(
        first(),
        async (nc) => (await (await jetstreamManager(nc)).streams.info(s)).state.messages,
      )
      expect(n).toBe(0)
    }
    // Appends: not a shared workspace, a bad entry, a record entry, a bad ifLastSeq.
    const h = await host(`${prefix}x`, ['ok'], {}).catch((e) => e)
    expect(h.code).toBe('NOA_STREAM_CONFIG') // no stream captures that prefix
    await withConnection(first(), async (nc) => {
      await (await jetstreamManager(nc)).streams.update(stream, { max_msgs: -1 })
    })
    const ok = await host(prefix, ['ok'])
    await expect(ok.shared.append('other', write('x', 1))).rejects.toMatchObject({
      code: 'NOA_BAD_WORKSPACE',
    })
    await expect(
      ok.shared.append('ok', { op: 'write', path: '/abs', blob: blobOf(1) }),
    ).rejects.toMatchObject({ code: 'NOA_BAD_ENTRY' })
    await expect(
      ok.shared.append('ok', { op: 'snapshot', snapshot_id: 'noa_ab', message: 'm' }),
    ).rejects.toMatchObject({ code: 'NOA_BAD_ENTRY' })
    await expect(ok.shared.append('ok', write('x', 1), { ifLastSeq: -1 })).rejects.toMatchObject({
      code: 'NOA_BAD_OPTION',
    })
    expect(ok.shared.lastSeq('ok')).toBe(0)
  })
  it("noa replicate share appends from the shell in the stream's order and catches another root up", async () => {
    const { prefix, stream } = await newStream()
    const a = tempDir()
    const b = tempDir()
    const common = ['--nats', cluster.urls(), '--prefix', prefix]
    const input = `${JSON.stringify(write('cli', 1))}\n${JSON.stringify({ op: 'delete', path: 'cli/gone' })}\n`
    const appended = await runCliAsync(
      ['replicate', 'share', 'crew', '--append', '--root', a, ...common],
      input,
    )
    expect(appended.stderr).toBe('')
    expect(appended.status).toBe(0)
    expect(
      appended.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).seq),
    ).toEqual([1, 2])
    // From another root: a stale --if-last-seq is refused, nothing written; the right one goes after.
    const stale = await runCliAsync(
      ['replicate', 'share', 'crew', '--append', '--if-last-seq', '0', '--root', b, ...common],
      input,
    )
    expect(stale.status).toBe(1)
    expect(stale.stderr).toMatch(/expected last seq 0, but it is 2/)
    const more = await runCliAsync(
      ['replicate', 'share', 'crew', '--append', '--if-last-seq', '2', '--root', b, ...common],
      `${JSON.stringify(write('cli', 3))}\n`,
    )
    expect(more.stdout).toMatch(/^\{"seq":3,"ts":\d+\}\n$/)
    const caught = await runCliAsync(['replicate', 'share', 'crew', '--root', a, ...common])
    expect(caught.stdout).toBe('crew: seq 3\n')
    const order = await streamLines(stream, prefix, 'crew')
    expect(logOf(a, 'crew').equals(order)).toBe(true)
    expect(logOf(b, 'crew').equals(order)).toBe(true)
    const bad = await runCliAsync(['replicate', 'share', 'a..b', '--root', a, ...common])
    expect(bad.status).toBe(1)
    expect(bad.stderr).toMatch(/cannot be shared/)
    const usage = await runCliAsync(['replicate', 'share', 'x', 'y', '--append', ...common])
    expect(usage.status).toBe(2)
  })
  it('a log cut inside a message (a crash mid-write) is completed from that message at open', async () => {
    const { prefix, stream } = await newStream()
    const a = await host(prefix, ['cut'])
    await a.shared.appendMany('cut', [write('a', 1), write('a', 2), write('a', 3)])
    await a.shared.appendMany('cut', [write('a', 4), write('a', 5)])
    const root = tempDir()
    let log = await AgentLog.open({ root, workers: 1 })
    let b = await SharedWorkspaces.open({
      log,
      nats: cluster.urls(),
      prefix,
      workspaces: ['cut'],
      follow: false,
    })
    expect(b.lastSeq('cut')).toBe(5)
    await b.close()
    await log.close()
    // Keep entries 1 and 2 only: the first message (1..3) is cut after its second line.
    const file = join(root, 'agent-logs', 'cut.log')
    const bytes = readFileSync(file)
    let nl = -1
    for (let i = 0; i < 2; i++) nl = bytes.indexOf(0x0a, nl + 1)
    writeFileSync(file, bytes.subarray(0, nl + 1))
    log = await AgentLog.open({ root, workers: 1 })
    onTestFinished(async () => {
      await log.close()
    })
    b = await SharedWorkspaces.open({ log, nats: cluster.urls(), prefix, workspaces: ['cut'], follow: false })
    expect(b.lastSeq('cut')).toBe(5)
    expect(logOf(root, 'cut').equals(await streamLines(stream, prefix, 'cut'))).toBe(true)
    expect((await b.append('cut', write('b', 6))).seq).toBe(6)
    await b.close()
  })
  it('noa replicate share --follow keeps a root in step until SIGTERM', async () => {
    const { prefix, stream } = await newStream()
    const root = tempDir()
    const follower = startCli([
      'replicate',
      'share',
      'live',
      '--follow',
      '--root',
      root,
      '--nats',
      cluster.urls(),
      '--prefix',
      prefix,
    ])
    await eventually('the follower to start', () => /following live/.test(follower.stderr()))
    const a = await host(prefix, ['live'])
    for (let i = 0; i < 3; i++) await a.shared.append('live', write('a', i))
    const order = await streamLines(stream, prefix, 'live')
    await eventually('the follower to apply them', () => {
      try {
        return logOf(root, 'live').equals(order)
      } catch {
        return false
      }
    })
    follower.child.kill('SIGTERM')
    expect(await follower.exited).toBe(0)
    expect(follower.stdout()).toBe('live: seq 3\n')
  })
})
