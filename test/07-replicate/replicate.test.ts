import { createHash, randomBytes } from 'node:crypto'
import { existsSync, mkdirSync, readFileSync, readlinkSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { open } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import { describe, expect, it } from 'vitest'
import { AgentLog, isNoaError, NoaError } from '../../dist/src/index.js'
import {
  replicatePull,
  replicatePush,
  replicationStatus,
  streamProblems,
} from '../../dist/src/replicate/index.js'
import { runCliAsync, tempDir } from '../helpers/index.js'
import {
  createStream,
  streamContents,
  uniqueNames,
  useNats,
  waitFor,
  withConnection,
} from '../helpers/nats.js'
import {
  dropStream,
  expectExactlyOnce,
  fill,
  initStreamCli,
  lineCount,
  logBytes,
  messageCount,
  NS,
} from '../helpers/replicate.js'

const nats = useNats()

/** Resolves once the stream's de-duplication has forgotten every id published before the call. */
async function dedupForgotten(url: string, subject: string): Promise<void> {
  await withConnection(url, async (nc) => {
    const js = jetstream(nc)
    const first = await js.publish(subject, '', { msgID: 'probe' })
    expect(first.duplicate).toBe(false)
    await waitFor('the de-duplication window to pass', async () =>
      (await js.publish(subject, '', { msgID: 'probe' })).duplicate ? null : true,
    )
  })
}

describe('replicate push and pull (CLI)', () => {
  it('rebuilds logs byte for byte in another root, and a second push sends only what is new', async () => {
    const { prefix, stream } = uniqueNames()
    const a = tempDir()
    const b = tempDir()
    await initStreamCli(nats.url(), prefix, stream)
    try {
      await fill(a, { main: [1, 300], 'feature.login': [1, 40], w3: [1, 1] })
      const args = ['--nats', nats.url(), '--prefix', prefix]
      const push1 = await runCliAsync(['replicate', 'push', '--root', a, ...args, '--json'])
      expect(push1.stderr).toBe('')
      expect(push1.status).toBe(0)
      const r1 = JSON.parse(push1.stdout)
      expect(r1.entries).toBe(341)
      expect(r1.stream).toBe(stream)

      const pull1 = await runCliAsync(['replicate', 'pull', '--root', b, ...args])
      expect(pull1.stderr).toBe('')
      expect(pull1.status).toBe(0)
      expect(pull1.stdout).toMatch(/^pulled 341 entries into 3 workspaces/)
      for (const ws of ['main', 'feature.login', 'w3'])
        expect(logBytes(b, ws).equals(logBytes(a, ws))).toBe(true)

      await fill(a, { main: [301, 25], w4: [1, 10] })
      const push2 = JSON.parse(
        (await runCliAsync(['replicate', 'push', '--root', a, ...args, '--json'])).stdout,
      )
      expect(push2.entries).toBe(35)
      expect(push2.workspaces).toEqual([
        { workspace: 'main', from: 301, to: 325, entries: 25 },
        { workspace: 'w4', from: 1, to: 10, entries: 10 },
      ])
      const again = JSON.parse(
        (await runCliAsync(['replicate', 'push', '--root', a, ...args, '--json'])).stdout,
      )
      expect(again.entries).toBe(0)

      const pull2 = JSON.parse(
        (await runCliAsync(['replicate', 'pull', '--root', b, ...args, '--json'])).stdout,
      )
      expect(pull2.entries).toBe(35)
      expect(pull2.skipped).toBe(0)
      for (const ws of ['main', 'feature.login', 'w3', 'w4']) {
        expect(logBytes(b, ws).equals(logBytes(a, ws))).toBe(true)
      }
      const verify = await runCliAsync(['verify', '--root', b])
      expect(verify.status).toBe(0)
      await expectExactlyOnce(nats.url(), stream, prefix, { main: 325, 'feature.login': 40, w3: 1, w4: 10 })

      // The mirrored logs are ordinary logs: the engine appends after them with the next seq.
      const log = await AgentLog.open({ root: b, workers: 1 })
      try {
        expect((await log.append('w4', { op: 'delete', path: 'x' })).seq).toBe(11)
      } finally {
        await log.close()
      }
    } finally {
      await dropStream(nats.url(), stream)
    }
  })

  it('sends the object store along, large objects in parts, verified by hash', async () => {
    const { prefix, stream } = uniqueNames()
    const a = tempDir()
    const b = tempDir()
    await initStreamCli(nats.url(), prefix, stream)
    try {
      const put = (bytes: Buffer) => {
        const id = createHash('sha256').update(bytes).digest('hex')
        mkdirSync(join(a, 'objects', id.slice(0, 2)), { recursive: true })
        writeFileSync(join(a, 'objects', id.slice(0, 2), id.slice(2)), bytes, { mode: 0o444 })
        return id
      }
      const small = put(Buffer.from('{"tree":"small"}\n'))
      const empty = put(Buffer.alloc(0))
      const large = put(randomBytes(2_500_000)) // more than one message (the default max payload is 1 MB)
      writeFileSync(join(a, 'objects', small.slice(0, 2), '.tmp-being-written'), 'not an object')
      await fill(a, { ws: [1, 5] })
      const pushed = await replicatePush({ nats: nats.url(), root: a, prefix })
      expect(pushed.objects).toBe(3)
      expect((await replicatePush({ nats: nats.url(), root: a, prefix })).objects).toBe(0)

      const pulled = await replicatePull({ nats: nats.url(), root: b, prefix })
      expect(pulled.objects).toBe(3)
      for (const id of [small, empty, large]) {
        const file = join(b, 'objects', id.slice(0, 2), id.slice(2))
        expect(createHash('sha256').update(readFileSync(file)).digest('hex')).toBe(id)
        expect(statSync(file).mode & 0o777).toBe(0o444)
      }
      const contents = await streamContents(nats.url(), stream, prefix)
      expect(contents.get(`${prefix}._obj.${large}`)?.length).toBe(3)
      expect((await replicatePull({ nats: nats.url(), root: b, prefix })).objects).toBe(0)
    } finally {
      await dropStream(nats.url(), stream)
    }
  })

  it('sends the objects an object log holds (packed files), as files of their own on the mirror', async () => {
    const { prefix, stream } = uniqueNames()
    const a = tempDir()
    const b = tempDir()
    await initStreamCli(nats.url(), prefix, stream)
    try {
      const objects = [Buffer.from('logged one'), randomBytes(1_500_000)].map((bytes) => {
        const id = createHash('sha256').update(bytes).digest('hex')
        return { id, bytes, path: `objects/${id.slice(0, 2)}/${id.slice(2)}` }
      })
      const log = await AgentLog.open({ root: a, workers: 0 })
      try {
        for (const [i, o] of objects.entries()) {
          await log.append(
            'ws',
            { op: 'write', path: `f${i}`, blob: o.id },
            { files: [{ path: o.path, data: o.bytes, readOnly: true, packed: true }] },
          )
        }
      } finally {
        await log.close()
      }
      expect(existsSync(join(a, 'objects'))).toBe(false) // only in the object log
      const pushed = await replicatePush({ nats: nats.url(), root: a, prefix })
      expect(pushed.objects).toBe(2)
      expect((await replicatePush({ nats: nats.url(), root: a, prefix })).objects).toBe(0)
      const pulled = await replicatePull({ nats: nats.url(), root: b, prefix })
      expect(pulled.objects).toBe(2)
      for (const o of objects) {
        const file = join(b, 'objects', o.id.slice(0, 2), o.id.slice(2))
        expect(readFileSync(file).equals(o.bytes)).toBe(true)
      }
    } finally {
      await dropStream(nats.url(), stream)
    }
  })

  it('status shows the lag of each workspace in entries and seconds, both ways', async () => {
    const { prefix, stream } = uniqueNames()
    const a = tempDir()
    const b = tempDir()
    await initStreamCli(nats.url(), prefix, stream)
    try {
      await fill(a, { one: [1, 10], two: [1, 4] })
      await replicatePush({ nats: nats.url(), root: a, prefix })
      await replicatePull({ nats: nats.url(), root: b, prefix })
      await fill(a, { one: [11, 5] })

      const local = await replicationStatus({ root: a, prefix, nats: nats.url() })
      expect(local.source).toBe('server')
      const one = local.workspaces.find((w) => w.workspace === 'one')
      expect(one).toMatchObject({ direction: 'push', lagEntries: 5, local: { seq: 15 }, stream: { seq: 10 } })
      expect(one?.lagSeconds).toBeGreaterThanOrEqual(0)
      expect(local.workspaces.find((w) => w.workspace === 'two')).toMatchObject({
        direction: 'in-sync',
        lagEntries: 0,
        lagSeconds: 0,
      })
      // Without a server: the push checkpoint stands for the stream.
      const offline = await replicationStatus({ root: a, prefix })
      expect(offline.source).toBe('checkpoint')
      expect(offline.workspaces.find((w) => w.workspace === 'one')).toMatchObject({ lagEntries: 5 })

      await replicatePush({ nats: nats.url(), root: a, prefix })
      const mirror = await replicationStatus({ root: b, prefix, nats: nats.url() })
      const behind = mirror.workspaces.find((w) => w.workspace === 'one')
      expect(behind).toMatchObject({
        direction: 'pull',
        lagEntries: 5,
        local: { seq: 10 },
        stream: { seq: 15 },
      })
      expect(behind?.lagSeconds).toBeGreaterThanOrEqual(0)

      const cli = await runCliAsync([
        'replicate',
        'status',
        '--root',
        b,
        '--nats',
        nats.url(),
        '--prefix',
        prefix,
      ])
      expect(cli.status).toBe(0)
      expect(cli.stdout).toMatch(/^one\s+10\s+15\s+pull\s+5\s+\d+\.\d{3}$/m)
      await replicatePull({ nats: nats.url(), root: b, prefix })
      const json = await runCliAsync([
        'replicate',
        'status',
        '--root',
        b,
        '--nats',
        nats.url(),
        '--prefix',
        prefix,
        '--json',
      ])
      const after = JSON.parse(json.stdout)
      expect(after.workspaces.map((w: { direction: string }) => w.direction)).toEqual(['in-sync', 'in-sync'])
    } finally {
      await dropStream(nats.url(), stream)
    }
  })

  it('a root can push its own workspaces and pull the others: each side ends with both, byte-equal', async () => {
    const { prefix, stream } = uniqueNames()
    const a = tempDir()
    const b = tempDir()
    await initStreamCli(nats.url(), prefix, stream)
    const stop = new AbortController()
    let following: Promise<unknown> | null = null
    try {
      const opts = { nats: nats.url(), prefix }
      await fill(a, { alpha: [1, 10] })
      await replicatePush({ ...opts, root: a })
      // b follows the stream while its own agents write beta and b publishes it.
      following = replicatePull({ ...opts, root: b, follow: true, signal: stop.signal })
      await waitFor('alpha on b', () =>
        existsSync(join(b, 'agent-logs', 'alpha.log')) && lineCount(b, 'alpha') === 10 ? true : null,
      )
      await fill(b, { beta: [1, 5] })
      // alpha is only a copy on b: the stream has all of it, so b publishes nothing for it.
      const fromB = await replicatePush({ ...opts, root: b })
      expect(fromB.workspaces).toEqual([{ workspace: 'beta', from: 1, to: 5, entries: 5 }])
      const intoA = await replicatePull({ ...opts, root: a })
      expect(intoA).toMatchObject({ entries: 5, skipped: 10 }) // a's own alpha, checked byte-equal
      await fill(a, { alpha: [11, 2] })
      await replicatePush({ ...opts, root: a })
      await waitFor('alpha 11..12 on b', () => (lineCount(b, 'alpha') === 12 ? true : null))
      // b's agents write beta on (the follower never took it over) and b publishes it again.
      await fill(b, { beta: [6, 1] })
      await replicatePush({ ...opts, root: b })
      const total = (await messageCount(nats.url(), stream)) as number
      const checkpoint = join(b, 'replication', `pull.${prefix}.json`)
      await waitFor('the follower to read everything', () =>
        existsSync(checkpoint) && JSON.parse(readFileSync(checkpoint, 'utf8')).streamSeq >= total
          ? true
          : null,
      )
      stop.abort()
      const followed = (await following) as Awaited<ReturnType<typeof replicatePull>>
      expect(followed.workspaces.map((w) => w.workspace)).toEqual(['alpha'])
      expect(followed.skipped).toBe(6) // b's own beta came back through the stream
      await replicatePull({ ...opts, root: a })
      for (const ws of ['alpha', 'beta']) expect(logBytes(a, ws).equals(logBytes(b, ws))).toBe(true)
      await expectExactlyOnce(nats.url(), stream, prefix, { alpha: 12, beta: 6 })
    } finally {
      // Let the follower finish (and save its checkpoint) before the test's folders go.
      stop.abort()
      await following?.catch(() => {})
      await dropStream(nats.url(), stream)
    }
  })

  it('reports a workspace whose name cannot be a subject instead of replicating it', async () => {
    const { prefix, stream } = uniqueNames()
    const a = tempDir()
    await initStreamCli(nats.url(), prefix, stream)
    try {
      await fill(a, { fine: [1, 2], 'bad..name': [1, 2], 'trailing.': [1, 1] })
      const r = await runCliAsync([
        'replicate',
        'push',
        '--root',
        a,
        '--nats',
        nats.url(),
        '--prefix',
        prefix,
      ])
      expect(r.status).toBe(0)
      expect(r.stderr).toMatch(/workspace bad\.\.name skipped: its name would give an empty subject token/)
      expect(r.stdout).toMatch(/pushed 2 entries from 1 workspace and /)
      const s = await replicationStatus({ root: a, prefix, nats: nats.url() })
      expect(s.workspaces.find((w) => w.workspace === 'trailing.')?.replicable).toBe(false)
    } finally {
      await dropStream(nats.url(), stream)
    }
  })
})

describe('streams noa cannot use', () => {
  it('says what is wrong with a stream configuration', () => {
    const good = {
      name: 'S',
      subjects: ['noa.>'],
      retention: 'limits',
      storage: 'file',
      duplicate_window: 120 * 1000 * NS,
      max_msgs: -1,
      max_bytes: -1,
      max_age: 0,
      max_msgs_per_subject: -1,
    } as unknown as Parameters<typeof streamProblems>[0]
    expect(streamProblems(good, 'noa')).toEqual([])
    expect(streamProblems({ ...good, subjects: ['>'] }, 'noa')).toEqual([])
    expect(streamProblems({ ...good, subjects: ['*.>'] }, 'noa')).toEqual([])
    expect(streamProblems({ ...good, subjects: ['noa.*'] }, 'noa')[0]).toMatch(/do not capture noa\.>/)
    expect(streamProblems({ ...good, subjects: ['site.noa.>'] }, 'site.noa')).toEqual([])
    expect(streamProblems({ ...good, duplicate_window: 0 }, 'noa')[0]).toMatch(/no de-duplication window/)
    expect(streamProblems({ ...good, retention: 'workqueue' } as typeof good, 'noa')[0]).toMatch(
      /retention is workqueue/,
    )
    expect(streamProblems({ ...good, storage: 'memory' } as typeof good, 'noa')[0]).toMatch(
      /storage is memory/,
    )
    expect(streamProblems({ ...good, max_age: 60 * 1000 * NS, max_msgs_per_subject: 10 }, 'noa')[0]).toMatch(
      /max_msgs_per_subject 10, max_age 60s\) would delete old entries/,
    )
  })

  it('refuses a missing stream, wrong subjects, work-queue retention, memory storage and limits', async () => {
    const a = tempDir()
    await fill(a, { ws: [1, 3] })
    const missing = uniqueNames()
    const r = await runCliAsync([
      'replicate',
      'push',
      '--root',
      a,
      '--nats',
      nats.url(),
      '--prefix',
      missing.prefix,
    ])
    expect(r.status).toBe(1)
    expect(r.stderr).toMatch(
      new RegExp(`no JetStream stream on .* captures ${missing.prefix}\\.>: create it with`),
    )
    const pull = await runCliAsync([
      'replicate',
      'pull',
      '--root',
      a,
      '--nats',
      nats.url(),
      '--prefix',
      missing.prefix,
    ])
    expect(pull.status).toBe(1)

    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ subjects: ['PREFIX.only'] }, /do not capture PREFIX\.>/],
      [{ retention: 'workqueue' }, /retention is workqueue/],
      [{ storage: 'memory' }, /storage is memory/],
      [{ max_msgs_per_subject: 5 }, /max_msgs_per_subject 5\) would delete old entries/],
    ]
    await Promise.all(
      cases.map(async ([config, message]) => {
        const { prefix, stream } = uniqueNames()
        const subjects = (config.subjects as string[] | undefined)?.map((s) =>
          s.replace('PREFIX', prefix),
        ) ?? [`${prefix}.>`]
        await createStream(nats.url(), stream, { ...config, subjects } as never)
        const out = await runCliAsync([
          'replicate',
          'push',
          '--root',
          a,
          '--nats',
          nats.url(),
          '--prefix',
          prefix,
          '--stream',
          stream,
        ])
        expect(out.status).toBe(1)
        expect(out.stderr).toMatch(new RegExp(`stream ${stream} cannot hold noa's replicated logs`))
        expect(out.stderr).toMatch(new RegExp(message.source.replace('PREFIX', prefix)))
      }),
    )
  })

  it('init fixes what can be changed in place and refuses what cannot', async () => {
    const a = tempDir()
    await fill(a, { ws: [1, 3] })
    const fixable = uniqueNames()
    await createStream(nats.url(), fixable.stream, {
      subjects: [`${fixable.prefix}.x`],
      max_msgs_per_subject: 3,
    })
    const fix = await runCliAsync([
      'replicate',
      'init',
      '--nats',
      nats.url(),
      '--prefix',
      fixable.prefix,
      '--stream',
      fixable.stream,
    ])
    expect(fix.status).toBe(0)
    expect(fix.stdout).toMatch(
      /updated stream .*: subjects \+= .*\.> \(replacing .*\.x\), max_msgs_per_subject = -1/,
    )
    const push = await runCliAsync([
      'replicate',
      'push',
      '--root',
      a,
      '--nats',
      nats.url(),
      '--prefix',
      fixable.prefix,
    ])
    expect(push.status).toBe(0)
    const again = await runCliAsync(['replicate', 'init', '--nats', nats.url(), '--prefix', fixable.prefix])
    expect(again.stdout).toMatch(/is ready for/)

    const broken = uniqueNames()
    await createStream(nats.url(), broken.stream, {
      subjects: [`${broken.prefix}.>`],
      retention: 'interest',
    } as never)
    const refused = await runCliAsync(['replicate', 'init', '--nats', nats.url(), '--prefix', broken.prefix])
    expect(refused.status).toBe(1)
    expect(refused.stderr).toMatch(/cannot be fixed in place: retention is interest/)
  })

  it('fails clearly when no server answers', async () => {
    const a = tempDir()
    const r = await runCliAsync(['replicate', 'push', '--root', a, '--nats', 'nats://127.0.0.1:1'])
    expect(r.status).toBe(1)
    expect(r.stderr).toMatch(/cannot connect to NATS at nats:\/\/127\.0\.0\.1:1/)
  })

  it('usage errors exit 2', async () => {
    const cases = [
      ['replicate'],
      ['replicate', 'sideways'],
      ['replicate', 'push'],
      ['replicate', 'pull', '--nats', 'nats://x', '--bogus'],
      ['replicate', 'push', '--nats', 'nats://x', '--prefix', 'a..b'],
      ['replicate', 'init', '--nats', 'nats://x', '--replicas', 'three'],
      ['replicate', 'push', '--nats', 'nats://x', '--follow', '--nice', '-1'],
    ]
    const results = await Promise.all(cases.map((args) => runCliAsync(args)))
    results.forEach((r, i) => {
      expect(r.status, (cases[i] as string[]).join(' ')).toBe(2)
      expect(r.stderr).toMatch(/usage: noa replicate push/)
    })
  })
})

describe('order and exactly once', () => {
  it('a second publisher for a workspace is refused: by the duplicate check, then by the expected sequence', async () => {
    for (const path of ['duplicate', 'expected-sequence'] as const) {
      const { prefix, stream } = uniqueNames()
      await initStreamCli(nats.url(), prefix, stream)
      if (path === 'expected-sequence') {
        // 100 ms, the server's minimum, so that the test can outlive it.
        await withConnection(nats.url(), async (nc) => {
          await (await jetstreamManager(nc)).streams.update(stream, { duplicate_window: 100 * NS })
        })
      }
      try {
        // Two roots share history up to seq 3, then each appends its own seq 4 onwards.
        const a = tempDir()
        const b = tempDir()
        const ws = 'shared'
        await fill(a, { [ws]: [1, 3] })
        await replicatePush({ nats: nats.url(), root: a, prefix })
        await replicatePull({ nats: nats.url(), root: b, prefix })
        await fill(a, { [ws]: [100, 3] })
        await fill(b, { [ws]: [200, 4] })

        // b reads the stream (seq 3 is last), then a publishes its 4..6 before b sends its 4.
        let release!: () => void
        const gate = new Promise<void>((resolve) => {
          release = resolve
        })
        let reached!: () => void
        const atGate = new Promise<void>((resolve) => {
          reached = resolve
        })
        const second = replicatePush({
          nats: nats.url(),
          root: b,
          prefix,
          beforePublish: async () => {
            reached()
            await gate
          },
        })
        try {
          await atGate
          expect((await replicatePush({ nats: nats.url(), root: a, prefix })).entries).toBe(3)
          // Outlive the de-duplication window, so that only the expected sequence stands in the way:
          // a probe published after a's entries is taken as new again only once the server has
          // forgotten its id, and it forgets ids in the order they came, a's first.
          if (path === 'expected-sequence') await dedupForgotten(nats.url(), `${prefix}.dedup-probe`)
        } finally {
          release()
        }
        const err = await second.then(
          () => null,
          (e: unknown) => e,
        )
        expect(isNoaError(err, 'NOA_REPLICATION'), String(err)).toBe(true)
        const message = (err as NoaError).message
        if (path === 'duplicate') {
          expect(message).toMatch(/took it as a duplicate of stream seq \d+ .*another publisher/)
        } else {
          expect(message).toMatch(/the server refused seq 4 \(expected last subject sequence \d+ is stale\)/)
        }
        // Nothing of b's reached the stream: it holds a's entries exactly once.
        const stored = (await streamContents(nats.url(), stream, prefix)).get(`${prefix}.${ws}`) ?? []
        const aLines = logBytes(a, ws).toString('utf8').trimEnd().split('\n')
        expect(stored.map((e) => e.line)).toEqual(aLines)
      } finally {
        await dropStream(nats.url(), stream)
      }
    }
  })

  it('fdatasyncs each log before it publishes what it read from it', async () => {
    const { prefix, stream } = uniqueNames()
    await initStreamCli(nats.url(), prefix, stream)
    // Every FileHandle.datasync of this process (the publisher flushes a log through its own
    // read-only handle) and every publish, in the order they happen.
    const events: string[] = []
    const probe = await open(tmpdir(), 'r')
    const proto = Object.getPrototypeOf(probe) as { datasync(this: { fd: number }): Promise<void> }
    await probe.close()
    const real = proto.datasync
    proto.datasync = function (this: { fd: number }) {
      events.push(`sync ${readlinkSync(`/proc/self/fd/${this.fd}`)}`)
      return real.call(this)
    }
    try {
      const a = tempDir()
      await fill(a, { w1: [1, 3], w2: [1, 2] })
      await replicatePush({
        nats: nats.url(),
        root: a,
        prefix,
        beforePublish: async (ws: string, seq: number) => {
          events.push(`publish ${ws} ${seq}`)
        },
      } as Parameters<typeof replicatePush>[0])
      for (const ws of ['w1', 'w2']) {
        const published = events.indexOf(`publish ${ws} 1`)
        const synced = events.indexOf(`sync ${join(a, 'agent-logs', `${ws}.log`)}`)
        expect(published, `${ws} was published`).toBeGreaterThanOrEqual(0)
        expect(
          synced,
          `${ws}.log was fdatasynced before its first publish: ${events.join(', ')}`,
        ).toBeGreaterThanOrEqual(0)
        expect(synced).toBeLessThan(published)
      }
      await expectExactlyOnce(nats.url(), stream, prefix, { w1: 3, w2: 2 })
    } finally {
      proto.datasync = real
      await dropStream(nats.url(), stream)
    }
  })

  it('a publisher whose checkpoint is gone sends nothing twice, also past the de-duplication window', async () => {
    const { prefix, stream } = uniqueNames()
    await initStreamCli(nats.url(), prefix, stream)
    await withConnection(nats.url(), async (nc) => {
      await (await jetstreamManager(nc)).streams.update(stream, { duplicate_window: 100 * NS })
    })
    try {
      const a = tempDir()
      await fill(a, { w: [1, 5] })
      expect((await replicatePush({ nats: nats.url(), root: a, prefix })).entries).toBe(5)
      // The checkpoint says nothing was published, and the server no longer knows the ids:
      // only where the stream is tells the publisher where to go on.
      rmSync(join(a, 'replication'), { recursive: true })
      await dedupForgotten(nats.url(), `${prefix}.dedup-probe`)
      await fill(a, { w: [6, 2] })
      expect((await replicatePush({ nats: nats.url(), root: a, prefix })).entries).toBe(2)
      await expectExactlyOnce(nats.url(), stream, prefix, { w: 7 })
    } finally {
      await dropStream(nats.url(), stream)
    }
  })

  it('a publisher whose log diverged from the stream stops at the junction', async () => {
    const { prefix, stream } = uniqueNames()
    await initStreamCli(nats.url(), prefix, stream)
    try {
      const a = tempDir()
      const b = tempDir()
      await fill(a, { w: [1, 5] })
      await replicatePush({ nats: nats.url(), root: a, prefix })
      await fill(b, { w: [50, 3] }) // b's own seq 1..3: shorter than the stream, and different
      const err = await replicatePush({ nats: nats.url(), root: b, prefix }).catch((e: unknown) => e)
      expect(isNoaError(err, 'NOA_REPLICATION')).toBe(true)
      expect((err as Error).message).toMatch(/workspace w \(seq 3\): the stream and .* disagree/)
    } finally {
      await dropStream(nats.url(), stream)
    }
  })

  it('the mirror refuses a gap in the stream and a local log that diverged', async () => {
    const { prefix, stream } = uniqueNames()
    await initStreamCli(nats.url(), prefix, stream)
    try {
      const a = tempDir()
      await fill(a, { w: [1, 3] })
      const lines = logBytes(a, 'w').toString('utf8').trimEnd().split('\n')
      // Publish seq 1 and 3 by hand, as a broken publisher would (without expectations).
      await withConnection(nats.url(), async (nc) => {
        const js = jetstream(nc)
        for (const i of [0, 2]) await js.publish(`${prefix}.w`, lines[i] as string, { msgID: `w:${i + 1}` })
      })
      const b = tempDir()
      const err = await replicatePull({ nats: nats.url(), root: b, prefix }).catch((e: unknown) => e)
      expect(isNoaError(err, 'NOA_REPLICA_GAP')).toBe(true)
      expect((err as Error).message).toMatch(/entries 2\.\.2 are not in the stream/)
      expect(logBytes(b, 'w').toString()).toBe(`${lines[0]}\n`)

      const c = tempDir()
      await fill(c, { w: [70, 1] }) // a different seq 1
      const diverged = await replicatePull({ nats: nats.url(), root: c, prefix }).catch((e: unknown) => e)
      expect(isNoaError(diverged, 'NOA_REPLICATION')).toBe(true)
      expect((diverged as Error).message).toMatch(
        /entry seq 1 .* differs from the line in .*: this log has diverged/,
      )
    } finally {
      await dropStream(nats.url(), stream)
    }
  })

  it('bad options are refused by name', async () => {
    // Each refusal is a NoaError with the stable code and the option it names in details.field.
    const cases: Array<[Promise<unknown>, RegExp, string]> = [
      [replicatePush({ nats: nats.url(), prefix: 'a b' }), /prefix must be/, 'prefix'],
      [replicatePull({ nats: nats.url(), bogus: 1 } as never), /unknown pull option bogus/, 'bogus'],
      [replicatePush({} as never), /push needs nats/, 'nats'],
    ]
    for (const [call, message, field] of cases) {
      const err = await call.then(
        () => null,
        (e: unknown) => e,
      )
      expect(err).toBeInstanceOf(NoaError)
      expect(isNoaError(err, 'NOA_BAD_OPTION'), String(err)).toBe(true)
      expect((err as NoaError).message).toMatch(message)
      expect((err as NoaError).details).toMatchObject({ field })
    }
  })
})
