/**
 * A journal planted in a root (a shared folder, say) is never replayed blindly: each journal below
 * is one noa's writer cannot have made, or one made by someone else. For each: nothing outside
 * the root changes, no acknowledged byte changes, the commands that only read write nothing (a
 * listing of the root with sizes, modes, mtimes and hashes is the same before and after) and
 * `verify` fails naming the journal; the next writer moves it aside to journal/quarantine/ with a
 * note, names it on stderr, refuses the workspaces it names (NOA_JOURNAL) and goes on with every
 * other workspace; `recover` fails naming it. Huge and sparse journals are refused in bounded
 * time and memory.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { readEntries } from '../../dist/src/engine/index.js'
import { fileRecordHeader } from '../../dist/src/engine/journal-format.js'
import { AgentLog } from '../../dist/src/index.js'
import { listing, outsideState } from '../helpers/hostile.js'
import { blobOf, runCli, tempDir } from '../helpers/index.js'
import {
  CASES,
  dataRecord,
  JOURNAL,
  journalBytes,
  lastTs,
  line,
  makeRoot,
  objectPath,
  plant,
  type Root,
} from '../helpers/journals.js'
import { isRoot } from '../helpers/users.js'

const AS_USER = new URL('../fixtures/as-user.mjs', import.meta.url).pathname

function cli(r: Root, args: string[], input = '') {
  return runCli([...args, '--root', r.root], { input })
}

function entryLine(path: string): string {
  return `${JSON.stringify({ op: 'write', path, blob: blobOf(7) })}\n`
}
describe('planted commit journals', () => {
  for (const c of CASES) {
    it(`${c.name}: never replayed, quarantined and named, only its workspaces refused`, async () => {
      const r = await makeRoot()
      const named = c.plant(r)
      const outsideBefore = outsideState(r.outside)
      const before = listing(r.root)

      // Commands that only read write nothing, and verify fails naming the journal.
      for (const args of [['workspaces'], ['log', 'a'], ['log', 'b'], ['history', 'a'], ['snapshots', 'a']]) {
        const out = cli(r, args)
        expect(out.stderr, args.join(' ')).not.toContain('PWNED')
      }
      const verify = cli(r, ['verify'])
      expect(verify.status, verify.stdout).toBe(1)
      expect(verify.stderr).toContain(JOURNAL.split('/')[1])
      expect(verify.stderr).toMatch(c.reason)
      expect(listing(r.root), 'a command that only reads changed the root').toEqual(before)

      // The next writer: an unrelated workspace appends; the journal is moved aside and named.
      const b = cli(r, ['append', 'b', '--no-blob-check'], entryLine('q2'))
      expect(b.status, b.stderr).toBe(0)
      expect(b.stderr).toContain('NOA_JOURNAL_QUARANTINED')
      expect(existsSync(join(r.root, JOURNAL))).toBe(false)
      const quarantined = join(r.root, 'journal', 'quarantine', JOURNAL.split('/')[1] as string)
      expect(existsSync(quarantined)).toBe(true)
      const note = JSON.parse(readFileSync(`${quarantined}.json`, 'utf8')) as {
        reason: string
        workspaces: string[]
      }
      expect(note.reason).toMatch(c.reason)
      expect(note.workspaces).toEqual(named)

      // The workspaces it names are refused, by name; the others go on.
      const a = cli(r, ['append', 'a', '--no-blob-check'], entryLine('p4'))
      if (named.includes('a')) {
        expect(a.status).toBe(1)
        expect(a.stderr).toContain('workspace a is refused')
        expect(a.stderr).toContain(quarantined)
        const recover = cli(r, ['recover', 'a'])
        expect(recover.status).toBe(1)
        expect(recover.stderr).toContain(quarantined)
      } else {
        expect(a.status, a.stderr).toBe(0)
      }
      const recover = cli(r, ['recover'])
      expect(recover.status).toBe(1)
      expect(recover.stderr).toContain(quarantined)

      // No acknowledged byte changed; nothing outside the root did.
      expect(readFileSync(r.aLog).subarray(0, r.aBytes.length).equals(r.aBytes)).toBe(true)
      const aEntries = []
      for await (const e of readEntries(r.aLog)) aEntries.push(e)
      expect(aEntries.map((e) => (e as { path: string }).path)).toEqual(
        named.includes('a') ? ['p1', 'p2', 'p3'] : ['p1', 'p2', 'p3', 'p4'],
      )
      expect(outsideState(r.outside)).toEqual(outsideBefore)
      expect(existsSync(join(r.root, 'memory'))).toBe(false)
      c.after?.(r)

      // Removing the quarantined journal and its note releases the workspace.
      rmSync(quarantined)
      rmSync(`${quarantined}.json`)
      const again = cli(r, ['append', 'a', '--no-blob-check'], entryLine('p5'))
      expect(again.status, again.stderr).toBe(0)
      expect(cli(r, ['verify']).status).toBe(0)
    })
  }

  it('a whole-file record with other bytes under a stored object never replaces it', async () => {
    // An object whose bytes do not hash to its name is an encoded one (a tree stored as a delta,
    // named by what it decodes to): a replay writes it only where nothing is stored yet.
    const r = await makeRoot()
    const good = Buffer.from('a stored object')
    const stored = objectPath(good)
    mkdirSync(join(r.root, stored, '..'), { recursive: true })
    writeFileSync(join(r.root, stored), good, { mode: 0o444 })
    const missing = objectPath(Buffer.from('a tree, named by what it decodes to'))
    const evil = Buffer.from('other bytes')
    plant(
      r,
      journalBytes([
        { header: fileRecordHeader(stored, evil.length, true), data: evil },
        { header: fileRecordHeader(missing, evil.length, true), data: evil },
      ]),
    )
    const before = listing(r.root)
    expect(cli(r, ['verify']).status).toBe(0)
    expect(listing(r.root)).toEqual(before)
    const recover = cli(r, ['recover'])
    expect(recover.status, recover.stderr).toBe(0)
    expect(existsSync(join(r.root, JOURNAL))).toBe(false)
    expect(readFileSync(join(r.root, stored), 'utf8')).toBe('a stored object')
    expect(readFileSync(join(r.root, missing), 'utf8')).toBe('other bytes')
  })

  it('a status() of an AgentLog names the quarantined journal and what it refuses', async () => {
    const r = await makeRoot()
    plant(r, journalBytes([dataRecord('a', r.aIno, 0, Buffer.from(line(1, 'Z', 1)))]))
    const log = await AgentLog.open({ root: r.root, workers: 1 })
    try {
      await log.append('b', { op: 'write', path: 'q3', blob: blobOf(3) })
      const err = await log.append('a', { op: 'write', path: 'p4', blob: blobOf(4) }).catch((e) => e)
      expect(err.code).toBe('NOA_JOURNAL')
      expect(err.details.workspace).toBe('a')
      const [s] = await log.status()
      expect(s?.quarantined.map((q) => q.workspaces)).toEqual([['a']])
      expect(s?.quarantined[0]?.reason).toMatch(/already holds/)
    } finally {
      await log.close()
    }
    expect(readdirSync(join(r.root, 'journal', 'quarantine')).sort()).toEqual([
      '4242-0badf00d-w0.jnl',
      '4242-0badf00d-w0.jnl.json',
    ])
  })

  it('a journal whose trusted records continue the log is still replayed in full', async () => {
    // The legitimate case side by side: the same shape of journal, made as noa's writer makes
    // it, is replayed by the next writer (and read through by a reader before that).
    const r = await makeRoot()
    const ts = lastTs(r.aBytes)
    const data = Buffer.from(line(4, 'p4', ts + 1) + line(5, 'p5', ts + 2))
    const object = Buffer.from('an object written beside p4, only in the journal')
    const objectFile = { header: fileRecordHeader(objectPath(object), object.length, true), data: object }
    plant(r, journalBytes([objectFile, dataRecord('a', r.aIno, r.aBytes.length, data)]))
    const before = listing(r.root)
    const sha = createHash('sha256').update(object).digest('hex')
    const blob = cli(r, ['blob', 'get', sha])
    expect(blob.status, blob.stderr).toBe(0)
    expect(blob.stdout).toBe(object.toString())
    const log = cli(r, ['log', 'a'])
    expect(log.status, log.stderr).toBe(0)
    expect(
      log.stdout
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as { path: string }).path),
    ).toEqual(['p1', 'p2', 'p3', 'p4', 'p5'])
    expect(cli(r, ['verify']).status).toBe(0)
    expect(listing(r.root)).toEqual(before)
    const recover = cli(r, ['recover'])
    expect(recover.status, recover.stderr).toBe(0)
    expect(existsSync(join(r.root, JOURNAL))).toBe(false)
    expect(readFileSync(r.aLog).equals(Buffer.concat([r.aBytes, data]))).toBe(true)
    expect(readFileSync(join(r.root, objectPath(object))).equals(object)).toBe(true)
  })

  it.runIf(isRoot())(
    "another user's journal in a shared root: quarantined by this user, replayed in full by its owner's recovery",
    async () => {
      const r = await makeRoot()
      const ts = lastTs(r.aBytes)
      const data = Buffer.from(line(4, 'p4', ts + 1))
      const path = plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length, data)]))
      chownSync(path, 4242, 4242)
      const b = cli(r, ['append', 'b', '--no-blob-check'], entryLine('q2'))
      expect(b.status, b.stderr).toBe(0)
      expect(b.stderr).toContain('owned by uid 4242')
      // The root is the group's: its owner (uid 4242) recovers it.
      execFileSync('chmod', ['-R', 'a+rwX', r.root])
      chmodSync(join(r.root, 'journal', 'quarantine', '4242-0badf00d-w0.jnl'), 0o600) // as its owner made it
      const asOwner = spawnSync(process.execPath, [AS_USER, '4242', '4242', r.root], { encoding: 'utf8' })
      expect(asOwner.status, asOwner.stderr).toBe(0)
      const done = JSON.parse(asOwner.stdout) as { back: string[]; reports: Array<{ records: number }> }
      expect(done.back).toEqual([join(r.root, JOURNAL)])
      expect(done.reports.map((x) => x.records)).toEqual([1])
      expect(readFileSync(r.aLog).equals(Buffer.concat([r.aBytes, data]))).toBe(true)
      expect(existsSync(join(r.root, 'journal', 'quarantine', '4242-0badf00d-w0.jnl'))).toBe(false)
      expect(cli(r, ['verify']).status).toBe(0)
    },
  )
  it('a journal noa made under umask 000 is still its own: 0600, replayed in full after a SIGKILL', async () => {
    const root = tempDir()
    const child = spawn(process.execPath, ['--input-type=module', '-e', UMASK_WRITER, root], {
      stdio: ['ignore', 'pipe', 'inherit'],
    })
    const acked = await new Promise<number>((resolve, reject) => {
      let out = ''
      child.stdout.on('data', (b) => {
        out += b
        const m = /acked (\d+)\n/.exec(out)
        if (m) resolve(Number(m[1]))
      })
      child.on('exit', (code) => reject(new Error(`writer exited (${code}) before it was ready`)))
    })
    child.kill('SIGKILL')
    await new Promise((r) => child.once('exit', r))
    const journals = readdirSync(join(root, 'journal')).filter((n) => n.endsWith('.jnl'))
    expect(journals.length).toBe(1)
    expect(statSync(join(root, 'journal', journals[0] as string)).mode & 0o777).toBe(0o600)
    const recover = runCli(['recover', '--root', root])
    expect(recover.status, recover.stderr).toBe(0)
    expect(recover.stderr).not.toContain('NOA_JOURNAL_QUARANTINED')
    expect(existsSync(join(root, 'journal', 'quarantine'))).toBe(false)
    const entries = []
    for await (const e of readEntries(join(root, 'agent-logs', 'u.log'))) entries.push(e)
    expect(entries.length).toBe(acked)
  })
})

/** Appends under umask 000 until the journal is allocated and holds a round, then waits to be killed. */
const UMASK_WRITER = `
import { AgentLog } from ${JSON.stringify(new URL('../../dist/src/index.js', import.meta.url).href)}
process.umask(0)
const log = await AgentLog.open({ root: process.argv[1], workers: 1 })
const blob = 'ab'.repeat(32)
let n = 0
for (;;) {
  await log.append('u', { op: 'write', path: 'p' + n, blob })
  n++
  const [s] = await log.status()
  if (s.journal?.state === 'ready' && s.rounds > 0) break
}
process.stdout.write('acked ' + n + '\\n')
setInterval(() => {}, 1000)
`
