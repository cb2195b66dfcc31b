/**
 * Crash safety of the commit journal with real processes: a writer is SIGKILLed (in the middle of
 * a checkpoint, or at a random moment), the bytes its logs had not yet made durable are thrown
 * away as a power cut would, and a second process replays the dead journal.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import {
  closeSync,
  existsSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  truncateSync,
} from 'node:fs'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { readEntries } from '../../dist/src/engine/index.js'
import { REC_FILE } from '../../dist/src/engine/journal-format.js'
import { scanJournal } from '../../dist/src/engine/journal-recovery.js'
import { listing } from '../helpers/hostile.js'
import { runCli, tempDir } from '../helpers/index.js'

const WRITER = new URL('../fixtures/journal-writer.mjs', import.meta.url).pathname

type Acked = Map<string, Map<number, string>>

/**
 * Writers not yet seen to exit: killed after each test, so that a test that failed or timed out
 * (before it killed its writer) leaves no writer appending on.
 */
const live = new Set<ChildProcess>()
function started<C extends ChildProcess>(child: C): C {
  live.add(child)
  child.once('exit', () => live.delete(child))
  return child
}
afterEach(() => {
  for (const child of live) child.kill('SIGKILL')
  live.clear()
})

function runAndKill(
  root: string,
  mode: 'plain' | 'slow' | 'files' | 'lane',
  minAcks: number,
): Promise<Acked> {
  return new Promise((resolve, reject) => {
    const child = started(
      spawn(process.execPath, [WRITER, root, mode], { stdio: ['ignore', 'pipe', 'pipe'] }),
    )
    const acked: Acked = new Map()
    let text = ''
    let count = 0
    let stderr = ''
    let killed = false
    const kill = () => {
      if (killed) return
      killed = true
      child.kill('SIGKILL')
    }
    child.stderr.on('data', (d) => {
      stderr += d
      // In the middle of a checkpoint: its fdatasync has been announced and is being held.
      if (mode === 'slow' && count >= minAcks && stderr.includes('CHECKPOINT')) kill()
    })
    child.stdout.on('data', (d: Buffer) => {
      text += d.toString()
      const parts = text.split('\n')
      text = parts.pop() as string
      for (const line of parts) {
        const [ws, seq, path] = line.split(' ') as [string, string, string]
        const seen = acked.get(ws) ?? new Map<number, string>()
        seen.set(Number(seq), path)
        acked.set(ws, seen)
        count++
      }
      if (mode !== 'slow' && count >= minAcks && !killed) setTimeout(kill, Math.floor(Math.random() * 100))
      if (mode === 'slow' && count >= minAcks) stderr = stderr.slice(-20) // only checkpoints from now on
    })
    child.on('error', reject)
    child.on('exit', (_code, signal) => {
      if (signal !== 'SIGKILL') reject(new Error(`writer ended without SIGKILL: ${stderr}`))
      else resolve(acked)
    })
  })
}

/**
 * The worst a power cut does to a log whose newest bytes are only in the page cache: every
 * byte of its current owner's run of records still in a journal is gone. A workspace that moved
 * between owners (the lone lane) was made durable at each move, so the journal of an owner it
 * left may still hold records of its earlier bytes; what can be lost starts where the journal
 * holding its newest bytes begins its last unbroken run of records of it.
 */
function losePageCache(root: string): number {
  const dir = join(root, 'journal')
  let cut = 0
  const runs = new Map<string, Array<{ journal: string; offset: number; end: number }>>()
  for (const name of existsSync(dir) ? readdirSync(dir) : []) {
    if (!name.endsWith('.jnl')) continue
    const fd = openSync(join(dir, name), 'r')
    try {
      const scanned = scanJournal(fd)
      if (!scanned) continue
      for (const r of scanned.records) {
        if (r.type === REC_FILE) {
          // A file written beside an entry, not yet synced by a checkpoint: gone with the cache.
          rmSync(join(root, r.target), { force: true })
          cut++
          continue
        }
        const list = runs.get(r.target) ?? []
        list.push({ journal: name, offset: r.offset, end: r.offset + r.data.length })
        runs.set(r.target, list)
      }
    } finally {
      closeSync(fd)
    }
  }
  for (const [target, records] of runs) {
    const newest = records.reduce((a, b) => (b.end > a.end ? b : a))
    const own = records.filter((r) => r.journal === newest.journal).sort((a, b) => a.offset - b.offset)
    let from = newest.offset
    for (let i = own.indexOf(newest) - 1; i >= 0 && (own[i] as { end: number }).end === from; i--) {
      from = (own[i] as { offset: number }).offset
    }
    const log = join(root, 'agent-logs', `${target}.log`)
    // Bytes past every live record of the log were committed without one still live: their
    // frames were freed by a checkpoint (after its fdatasync of the log) or they went straight to
    // the file (fdatasynced before their ack; the lone lane's owner does so until its journal is
    // ready). Either fdatasync made the whole file durable, the runs' bytes before them included,
    // so a power cut loses nothing acknowledged of it (bytes of a direct commit not yet
    // acknowledged may stay: the checks are about acknowledged entries).
    if (statSync(log).size > newest.end) continue
    if (statSync(log).size > from) {
      truncateSync(log, from)
      cut++
    }
  }
  return cut
}

/** Adds one run's acknowledgements to those of the runs before it. */
function mergeAcked(acked: Acked, got: Acked): void {
  for (const [ws, seen] of got) {
    const all = acked.get(ws) ?? new Map<number, string>()
    for (const [seq, path] of seen) all.set(seq, path)
    acked.set(ws, all)
  }
}

async function checkLogs(root: string, acked: Acked): Promise<void> {
  for (const [ws, seen] of acked) {
    const paths: string[] = []
    for await (const e of readEntries(join(root, 'agent-logs', `${ws}.log`))) {
      expect(e.seq).toBe(paths.length + 1)
      paths.push((e as { path: string }).path)
    }
    for (const [seq, path] of seen) expect(paths[seq - 1], `${ws} seq ${seq}`).toBe(path)
  }
}

/**
 * A second process that only reads (noa verify, noa log) sees every acknowledged entry through
 * the dead journals and changes nothing; then noa recover replays them and removes them.
 */
async function readThroughThenRecover(root: string, acked: Acked): Promise<void> {
  const before = listing(root)
  const verify = runCli(['verify', '--root', root])
  expect(verify.status, verify.stderr).toBe(0)
  for (const [ws, seen] of acked) {
    const log = runCli(['log', ws, '--root', root, '--json'])
    expect(log.status, log.stderr).toBe(0)
    const paths = log.stdout
      .trim()
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => (JSON.parse(l) as { path: string }).path)
    for (const [seq, path] of seen) expect(paths[seq - 1], `noa log ${ws} seq ${seq}`).toBe(path)
  }
  expect(listing(root), 'a command that only reads changed the root').toEqual(before)
  const recover = runCli(['recover', '--root', root])
  expect(recover.status, recover.stderr).toBe(0)
  expect(readdirSync(join(root, 'journal')).filter((n) => n.endsWith('.jnl'))).toEqual([])
}

describe('commit journal crash safety (SIGKILL)', () => {
  for (const mode of ['slow', 'plain', 'lane'] as const) {
    const when =
      mode === 'slow'
        ? 'in the middle of a checkpoint'
        : mode === 'plain'
          ? 'at random moments'
          : "at random moments while workspaces move between the caller's thread and the workers"
    it(`killed ${when}, with unsynced log bytes lost: a second process replays every acknowledged entry`, async () => {
      const root = tempDir()
      const acked: Acked = new Map()
      let cuts = 0
      for (let round = 0; round < 3; round++) {
        const got = await runAndKill(root, mode, 300 + Math.floor(Math.random() * 500))
        mergeAcked(acked, got)
        cuts += losePageCache(root)
        await readThroughThenRecover(root, acked)
        await checkLogs(root, acked)
      }
      // The journals did hold bytes the logs had lost (the replay was needed, and done).
      expect(cuts).toBeGreaterThan(0)
      expect([...acked.values()].reduce((n, m) => n + m.size, 0)).toBeGreaterThan(900)
    })
  }

  it('killed at random moments with files written beside the entries, their unsynced files and log bytes lost: a second process puts every acknowledged file back', async () => {
    const root = tempDir()
    const acked: Acked = new Map()
    let cuts = 0
    for (let round = 0; round < 2; round++) {
      const got = await runAndKill(root, 'files', 200 + Math.floor(Math.random() * 300))
      mergeAcked(acked, got)
      cuts += losePageCache(root)
      await readThroughThenRecover(root, acked)
      await checkLogs(root, acked)
      for (const [ws, seen] of acked) {
        for (const [seq, path] of seen) {
          if (path.startsWith('warm')) continue
          const data = Buffer.from(`${ws} ${path}`)
          const sha = createHash('sha256').update(data).digest('hex')
          const file = join(root, 'objects', sha.slice(0, 2), sha.slice(2))
          expect(existsSync(file), `${ws} seq ${seq}: ${file}`).toBe(true)
          expect(readFileSync(file).equals(data)).toBe(true)
          expect(statSync(file).mode & 0o222).toBe(0)
        }
      }
    }
    expect(cuts).toBeGreaterThan(0)
  })

  it('snapshots only in a dead journal: snapshots, history, tree and diff read through it, write nothing, and show what noa recover then makes durable', async () => {
    const root = tempDir()
    const child = started(
      spawn(process.execPath, ['--input-type=module', '-e', SNAPSHOT_WRITER, root], {
        stdio: ['ignore', 'pipe', 'inherit'],
      }),
    )
    const ready = await new Promise<{ s1: string; s2: string }>((resolve, reject) => {
      let out = ''
      child.stdout.on('data', (d) => {
        out += d
        const nl = out.indexOf('\n')
        if (nl >= 0) resolve(JSON.parse(out.slice(0, nl)))
      })
      child.on('exit', (code) => reject(new Error(`the writer exited (${code}) before its snapshots`)))
    })
    child.kill('SIGKILL')
    await new Promise((r) => child.once('exit', r))
    // The snapshots' rounds, and the writes between them, are only in the journal.
    expect(losePageCache(root)).toBeGreaterThan(0)
    expect(readFileSync(join(root, 'agent-logs', 'a.log'), 'utf8')).not.toContain(ready.s2)

    const commands = [
      ['snapshots', 'a', '--json'],
      ['history', 'a', '--json'],
      ['tree', ready.s2, '--json'],
      ['diff', ready.s1, ready.s2, '--json'],
      ['diff', 'a@3', 'a', '--json'],
      ['log', 'a', '--json'],
    ]
    const before = listing(root)
    const seen = commands.map((args) => {
      const r = runCli([...args, '--root', root])
      expect(r.status, `noa ${args.join(' ')}: ${r.stderr}`).toBe(0)
      return r.stdout
    })
    expect(listing(root), 'a command that only reads changed the root').toEqual(before)
    expect(JSON.parse(seen[0] as string).map((x: { snapshotId: string }) => x.snapshotId)).toEqual([
      ready.s2,
      ready.s1,
    ])
    expect(seen[2]).toContain('src/late.ts')
    expect(seen[3]).toContain('src/late.ts')

    // What they showed is what the replay makes durable.
    const recover = runCli(['recover', '--root', root])
    expect(recover.status, recover.stderr).toBe(0)
    expect(readFileSync(join(root, 'agent-logs', 'a.log'), 'utf8')).toContain(ready.s2)
    const after = commands.map((args) => runCli([...args, '--root', root]).stdout)
    expect(after).toEqual(seen)
  })
})

/**
 * Appends to workspace `a` and snapshots it twice through one owner with a journal, prints the
 * two snapshot ids, then waits to be killed: the second snapshot's round is the newest frame of
 * the journal (the journal is far from full, so no checkpoint has made it durable in the log).
 */
const SNAPSHOT_WRITER = `
const dist = ${JSON.stringify(new URL('../../dist/src/index.js', import.meta.url).href)}
const { AgentLog, SnapshotEngine } = await import(dist)
const root = process.argv[1]
const log = await AgentLog.open({ root, workers: 1 })
const engine = new SnapshotEngine({ root, log })
const put = async (path, text) => ({ op: 'write', path, blob: await engine.store.putBlob(text) })
// Two commits go straight to the file; the journal is allocated at the second.
await log.append('a', await put('README.md', 'one\\n'))
await log.append('a', await put('src/a.ts', 'a\\n'))
for (;;) {
  const [s] = await log.status()
  if (s.journal?.state === 'ready') break
  await new Promise((r) => setTimeout(r, 5))
}
await log.append('a', await put('src/b.ts', 'b\\n'))
const s1 = await engine.snapshot('a')
await log.append('a', await put('src/late.ts', 'late\\n'))
await log.append('a', { op: 'delete', path: 'src/a.ts' })
const s2 = await engine.snapshot('a')
process.stdout.write(JSON.stringify({ s1: s1.snapshotId, s2: s2.snapshotId }) + '\\n')
setInterval(() => {}, 1000)
`
