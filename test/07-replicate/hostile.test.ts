/**
 * Replication of a root others can write into. A corrupt log, a log planted as a symlink to a
 * file outside or as a FIFO, beside healthy ones: push publishes exactly the healthy workspaces,
 * whole, the same on every run, names each bad file and exits 1; status does the same. The
 * replication folder's own files (checkpoints, the published-objects list, the mirror's object
 * parts) are refused by name when planted, never followed.
 */
import { execFileSync } from 'node:child_process'
import { appendFileSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { replicatePush, replicationStatus } from '../../dist/src/replicate/index.js'
import { ObjectScanner, ObjectSink } from '../../dist/src/replicate/objects.js'
import { FILE_PLANTS, FOLDER_PLANTS, outsideState, refusal, TORN } from '../helpers/hostile.js'
import { runCliAsync, tempDir } from '../helpers/index.js'
import { streamContents, uniqueNames, useNats } from '../helpers/nats.js'
import { dropStream, expectExactlyOnce, fill, initStreamCli } from '../helpers/replicate.js'

const nats = useNats()

/** A root with three healthy workspaces and four bad logs (and a stray file, which is no log). */
async function hostileRoot(): Promise<{ root: string; outside: string; bad: string[] }> {
  const root = tempDir()
  const outside = tempDir()
  await fill(root, { main: [1, 40], 'feature.x': [1, 7], one: [1, 1], corrupt: [1, 10], tail: [1, 4] })
  const logs = join(root, 'agent-logs')
  // A complete line in the middle that is not an entry: corruption, not a torn tail.
  const lines = readFileSync(join(logs, 'corrupt.log'), 'utf8').split('\n')
  lines.splice(5, 0, '{"seq":99,"op":"nonsense"}')
  writeFileSync(join(logs, 'corrupt.log'), lines.join('\n'))
  // The same as the last complete line: even reading only the tail meets it.
  appendFileSync(join(logs, 'tail.log'), 'not an entry\n')
  writeFileSync(join(outside, 'target.txt'), TORN)
  symlinkSync(join(outside, 'target.txt'), join(logs, 'linked.log'))
  execFileSync('mkfifo', [join(logs, 'fifo.log')])
  writeFileSync(join(logs, 'README'), 'not a log')
  return { root, outside, bad: ['corrupt', 'fifo', 'linked', 'tail'].map((w) => join(logs, `${w}.log`)) }
}

describe('a bad log beside healthy ones', () => {
  it('push publishes exactly the healthy workspaces, whole and the same on every run; status names the rest', async () => {
    const { root, outside, bad } = await hostileRoot()
    const before = outsideState(outside)
    const runs: string[][] = []
    for (let run = 0; run < 2; run++) {
      const { prefix, stream } = uniqueNames()
      await initStreamCli(nats.url(), prefix, stream)
      try {
        const r = await runCliAsync([
          'replicate',
          'push',
          '--root',
          root,
          '--nats',
          nats.url(),
          '--prefix',
          prefix,
          '--json',
        ])
        expect(r.status).toBe(1)
        const report = JSON.parse(r.stdout)
        expect(report.workspaces.map((w: { workspace: string }) => w.workspace)).toEqual([
          'feature.x',
          'main',
          'one',
        ])
        expect(report.entries).toBe(48)
        expect(report.failed.map((f: { file: string }) => f.file)).toEqual(bad)
        expect(report.failed.map((f: { code: string }) => f.code)).toEqual([
          'NOA_CORRUPT_LOG',
          'NOA_NOT_REGULAR_FILE',
          'NOA_NOT_REGULAR_FILE',
          'NOA_CORRUPT_LOG',
        ])
        for (const file of bad) expect(r.stderr).toContain(file)
        await expectExactlyOnce(nats.url(), stream, prefix, { main: 40, 'feature.x': 7, one: 1 })
        const subjects = [...(await streamContents(nats.url(), stream, prefix)).keys()].sort()
        runs.push(subjects)
        expect(subjects).toEqual([`${prefix}.feature.x`, `${prefix}.main`, `${prefix}.one`])

        const status = await runCliAsync([
          'replicate',
          'status',
          '--root',
          root,
          '--nats',
          nats.url(),
          '--prefix',
          prefix,
        ])
        expect(status.status).toBe(1)
        expect(status.stdout).toMatch(/main\s+40\s+40\s+in-sync/)
        // Status reads the tails only: the log corrupt in the middle shows as not pushed.
        expect(status.stdout).toMatch(/corrupt\s+10\s+0\s+push\s+10/)
        for (const file of bad.slice(1)) expect(status.stderr).toContain(file)
      } finally {
        await dropStream(nats.url(), stream)
      }
    }
    expect(runs[0]?.map((s) => s.split('.').slice(1).join('.'))).toEqual(
      runs[1]?.map((s) => s.split('.').slice(1).join('.')),
    )
    const offline = await replicationStatus({ root })
    expect(offline.failed.map((f) => f.file)).toEqual(bad.slice(1))
    expect(offline.workspaces.filter((w) => !w.error).map((w) => w.workspace)).toEqual([
      'corrupt',
      'feature.x',
      'main',
      'one',
    ])
    expect(outsideState(outside)).toEqual(before)
  })

  it('push of a missing root is a named error and creates nothing', async () => {
    const missing = join(tempDir(), 'nope')
    const err = await refusal(replicatePush({ nats: nats.url(), root: missing }))
    expect(err.code).toBe('NOA_BAD_ROOT')
    expect(readdirSync(dirname(missing))).toEqual([])
  })
})

describe('replication files planted by someone else', () => {
  for (const { name, plant } of FILE_PLANTS) {
    it(`${name} as the push checkpoint or the published-objects list is refused`, async () => {
      const { prefix, stream } = uniqueNames()
      await initStreamCli(nats.url(), prefix, stream)
      try {
        for (const file of [`push.${prefix}.json`, `push.${prefix}.objects`]) {
          const root = tempDir()
          const outside = tempDir()
          await fill(root, { w: [1, 3] })
          mkdirSync(join(root, 'replication'))
          mkdirSync(join(root, 'objects', 'ab'), { recursive: true })
          await plant(join(root, 'replication', file), outside)
          const before = outsideState(outside)
          const err = await refusal(replicatePush({ nats: nats.url(), root, prefix }))
          expect(err.code, file).toBe('NOA_NOT_REGULAR_FILE')
          expect(err.message).toContain(join(root, 'replication', file))
          if (file.endsWith('.json'))
            expect((await refusal(replicationStatus({ root, prefix }))).code).toBe('NOA_NOT_REGULAR_FILE')
          // Nothing was published before the refusal.
          expect((await streamContents(nats.url(), stream, prefix)).size).toBe(0)
          expect(outsideState(outside)).toEqual(before)
        }
      } finally {
        await dropStream(nats.url(), stream)
      }
    })
  }

  for (const { name, plant } of FOLDER_PLANTS) {
    it(`${name} as replication/ is refused before anything is published`, async () => {
      const { prefix, stream } = uniqueNames()
      await initStreamCli(nats.url(), prefix, stream)
      try {
        const root = tempDir()
        const outside = tempDir()
        await fill(root, { w: [1, 3] })
        await plant(join(root, 'replication'), outside)
        const before = outsideState(outside)
        const err = await refusal(replicatePush({ nats: nats.url(), root, prefix }))
        expect(err.code).toBe('NOA_NOT_DIRECTORY')
        expect((await streamContents(nats.url(), stream, prefix)).size).toBe(0)
        const pull = await refusal(
          runCliAsync(['replicate', 'pull', '--root', root, '--nats', nats.url(), '--prefix', prefix]).then(
            (r) => {
              if (r.status !== 0) throw Object.assign(new Error(r.stderr), { code: 'EXIT' })
            },
          ),
        )
        expect(pull.message).toContain('not a folder')
        expect(outsideState(outside)).toEqual(before)
      } finally {
        await dropStream(nats.url(), stream)
      }
    })

    it(`${name} as an object shard is reported by the scanner and refused by the mirror's sink`, async () => {
      const root = tempDir()
      const outside = tempDir()
      mkdirSync(join(root, 'objects'), { recursive: true })
      const shard = join(root, 'objects', 'ab')
      await plant(shard, outside)
      const before = outsideState(outside)
      const scanner = new ObjectScanner(root, 'noa')
      expect(scanner.scan()).toEqual([])
      expect([...scanner.problems.values()]).toEqual([
        expect.objectContaining({ file: shard, code: 'NOA_NOT_DIRECTORY' }),
      ])
      const sink = new ObjectSink(root)
      await sink.start()
      const data = Buffer.from('x')
      const id = `ab${'0'.repeat(62)}`
      expect((await refusal(sink.put(id, 1, 0, data, 1, false))).code).toBe('NOA_NOT_DIRECTORY')
      await sink.close()
      expect(outsideState(outside)).toEqual(before)
    })
  }

  it("a symlinked replication/tmp is not emptied through, and the mirror's parts are refused", async () => {
    const root = tempDir()
    const outside = tempDir()
    writeFileSync(join(outside, 'keep.txt'), TORN)
    mkdirSync(join(root, 'replication'), { recursive: true })
    symlinkSync(outside, join(root, 'replication', 'tmp'))
    const sink = new ObjectSink(root)
    expect((await refusal(sink.start())).code).toBe('NOA_NOT_DIRECTORY')
    expect((await refusal(sink.put(`cd${'1'.repeat(62)}`, 10, 0, Buffer.from('12345'), 1, false))).code).toBe(
      'NOA_NOT_DIRECTORY',
    )
    expect(outsideState(outside)).toEqual({ 'keep.txt': TORN })
  })
})
