/**
 * A compaction killed (SIGKILL, a real process) right after each of its file operations, one run
 * per step until a run completes: every state it leaves opens and verifies, is the old log or
 * the new one (never a mix), holds every acknowledged entry after its base, and replays to the
 * same files; compacting again then completes and leaves no temp file behind.
 */
import { spawn } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { AgentLog, type Entry, ObjectStore, SnapshotEngine } from '../../dist/src/index.js'
import { tempDir } from '../helpers/index.js'

const CHILD = new URL('../fixtures/compact-child.mjs', import.meta.url).pathname
const blob = (i: number) => i.toString(16).padStart(64, '0')

interface Run {
  killed: boolean
  lastAcked: number
  snapshotSeq: number
  steps: string[]
}

function runChild(root: string, killAfter: number, archive: string): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CHILD, root, String(killAfter), archive], {
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let out = ''
    let err = ''
    child.stdout.on('data', (d) => {
      out += d
    })
    child.stderr.on('data', (d) => {
      err += d
    })
    child.on('error', reject)
    child.on('exit', (code, signal) => {
      const events = out
        .split('\n')
        .filter((l) => l.trim() !== '')
        .map((l) => JSON.parse(l) as { event: string; last?: number; seq?: number })
      const done = events.some((e) => e.event === 'done')
      if (!done && signal !== 'SIGKILL') {
        reject(new Error(`child exited ${code} ${signal}: ${err}`))
        return
      }
      resolve({
        killed: !done,
        lastAcked: Math.max(...events.filter((e) => e.event === 'acked').map((e) => e.last as number)),
        snapshotSeq: events.find((e) => e.event === 'snapshot')?.seq as number,
        steps: err.split('\n').filter((l) => l.startsWith('compact-step ')),
      })
    })
  })
}

/** What the child wrote: seq → the write it acknowledged (the snapshot entry is seq 301). */
function expectedWrite(seq: number): { path: string; blob: string } | null {
  if (seq <= 300) return { path: `d${(seq - 1) % 7}/f${(seq - 1) % 40}`, blob: blob(seq - 1) }
  if (seq === 301) return null
  return { path: `late/${seq - 302}`, blob: blob(1000 + seq - 302) }
}

function expectedFiles(last: number): Map<string, string> {
  const files = new Map<string, string>()
  for (let seq = 1; seq <= last; seq++) {
    const w = expectedWrite(seq)
    if (w) files.set(w.path, w.blob)
  }
  return files
}

describe('compaction crash safety (SIGKILL after every step)', () => {
  it('every state opens, verifies, is the old log or the new one, and keeps every acknowledged entry', async () => {
    const states = { old: 0, compacted: 0 }
    const killedAfter: string[] = []
    for (let k = 1; k < 60; k++) {
      const root = tempDir()
      const archive = join(tempDir(), 'archive')
      const run = await runChild(root, k, archive)
      expect(run.snapshotSeq).toBe(300)
      expect(run.lastAcked).toBe(361)
      const store = new ObjectStore(root)
      const log = await AgentLog.open({ root, workers: 0, objects: store })
      onTestFinished(() => log.close().then(() => undefined))
      const engine = new SnapshotEngine({ log, store })
      await log.recover('ws')
      const v = await log.verify('ws')
      expect(v.ok, `killed after ${run.steps.at(-1)}: ${JSON.stringify(v.problem)}`).toBe(true)
      const first = readFileSync(join(root, 'agent-logs', 'ws.log'), 'utf8').split('\n')[0] as string
      if (v.base) {
        states.compacted++
        expect(v.base.seq).toBe(300)
        expect(first).toMatch(/^\{"seq":300,"op":"base","snapshot_id":"noa_[0-9a-f]+","ts":\d+\}$/)
      } else {
        states.old++
        expect(JSON.parse(first).seq).toBe(1)
      }
      // Every acknowledged entry after the base (or from 1), in order, as it was written.
      const entries: Entry[] = []
      for await (const e of log.read('ws')) entries.push(e)
      const from = v.base ? 301 : 1
      expect(entries.map((e) => e.seq)).toEqual(Array.from({ length: 361 - from + 1 }, (_, i) => from + i))
      for (const e of entries) {
        const w = expectedWrite(e.seq)
        if (w) expect(e).toMatchObject({ op: 'write', ...w })
        else expect(e.op).toBe('snapshot')
      }
      expect(new Map((await engine.replay('ws')).tree.entries())).toEqual(expectedFiles(361))
      // Compacting again completes and leaves only the log (a crashed run's temp is replaced).
      const again = await log.compact('ws')
      expect(again.baseSeq).toBe(300)
      expect((await log.verify('ws')).ok).toBe(true)
      expect(readdirSync(join(root, 'agent-logs'))).toEqual(['ws.log'])
      expect(new Map((await engine.replay('ws')).tree.entries())).toEqual(expectedFiles(361))
      await log.close()
      if (!run.killed) break
      killedAfter.push(run.steps.at(-1)?.replace(/^compact-step \d+ /, '') ?? '?')
    }
    // Every step was a crash point, both outcomes were seen, and the run ended by completing.
    expect(killedAfter.some((s) => s.startsWith('rename') && s.includes('agent-logs'))).toBe(true)
    expect(killedAfter.some((s) => s.startsWith('fdatasync'))).toBe(true)
    expect(states.old).toBeGreaterThan(0)
    expect(states.compacted).toBeGreaterThan(0)
  }, 300_000)
})
