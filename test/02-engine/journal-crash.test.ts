/**
 * Crash safety of the commit journal with real processes: a writer is SIGKILLed (in the middle of
 * a checkpoint, or at a random moment), the bytes its logs had not yet made durable are thrown
 * away as a power cut would, and a second process replays the dead journal.
 */
import { spawn } from 'node:child_process'
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
import { describe, expect, it } from 'vitest'
import { readEntries } from '../../dist/src/engine/index.js'
import { REC_FILE } from '../../dist/src/engine/journal-format.js'
import { scanJournal } from '../../dist/src/engine/journal-recovery.js'
import { listing } from '../helpers/hostile.js'
import { runCli, tempDir } from '../helpers/index.js'

const WRITER = new URL('../fixtures/journal-writer.mjs', import.meta.url).pathname

type Acked = Map<string, Map<number, string>>

function runAndKill(root: string, mode: 'plain' | 'slow' | 'files', minAcks: number): Promise<Acked> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WRITER, root, mode], { stdio: ['ignore', 'pipe', 'pipe'] })
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
 * byte from the first one the journal still covers is gone.
 */
function losePageCache(root: string): number {
  const dir = join(root, 'journal')
  let cut = 0
  for (const name of existsSync(dir) ? readdirSync(dir) : []) {
    if (!name.endsWith('.jnl')) continue
    const fd = openSync(join(dir, name), 'r')
    try {
      const scanned = scanJournal(fd)
      if (!scanned) continue
      const first = new Map<string, number>()
      for (const r of scanned.records) {
        if (r.type === REC_FILE) {
          // A file written beside an entry, not yet synced by a checkpoint: gone with the cache.
          rmSync(join(root, r.target), { force: true })
          cut++
          continue
        }
        first.set(r.target, Math.min(first.get(r.target) ?? r.offset, r.offset))
      }
      for (const [target, offset] of first) {
        const log = join(root, 'agent-logs', `${target}.log`)
        if (statSync(log).size > offset) {
          truncateSync(log, offset)
          cut++
        }
      }
    } finally {
      closeSync(fd)
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
  for (const mode of ['slow', 'plain'] as const) {
    const when = mode === 'slow' ? 'in the middle of a checkpoint' : 'at random moments'
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
})
