import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { readEntries } from '../../dist/src/engine/index.js'
import { AgentLog } from '../../dist/src/index.js'
import { tempDir } from '../helpers/index.js'

const WRITER = new URL('../fixtures/crash-writer.mjs', import.meta.url).pathname

/** Runs the writer until it has acknowledged at least `minAcks` entries plus a random delay, then SIGKILLs it. */
function runAndKill(root: string, minAcks: number): Promise<Map<string, Array<[number, string]>>> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WRITER, root, '3', '8'], { stdio: ['ignore', 'pipe', 'pipe'] })
    const acked = new Map<string, Array<[number, string]>>()
    let text = ''
    let count = 0
    let armed = false
    let stderr = ''
    child.stderr.on('data', (d) => {
      stderr += d
    })
    child.stdout.on('data', (d: Buffer) => {
      text += d.toString()
      const parts = text.split('\n')
      text = parts.pop() as string
      for (const line of parts) {
        const [ws, seq, path] = line.split(' ') as [string, string, string]
        const list = acked.get(ws) ?? []
        list.push([Number(seq), path])
        acked.set(ws, list)
        count++
      }
      if (!armed && count >= minAcks) {
        armed = true
        setTimeout(() => child.kill('SIGKILL'), Math.floor(Math.random() * 150))
      }
    })
    child.on('error', reject)
    child.on('exit', (_code, signal) => {
      if (signal !== 'SIGKILL') reject(new Error(`writer ended without SIGKILL: ${stderr}`))
      else resolve(acked)
    })
  })
}

describe('crash safety (SIGKILL)', () => {
  it('keeps every acknowledged entry across several killed writers', async () => {
    const root = tempDir()
    const acked = new Map<string, Map<number, string>>()
    for (let round = 0; round < 5; round++) {
      const got = await runAndKill(root, 200 + Math.floor(Math.random() * 800))
      for (const [ws, list] of got) {
        const seen = acked.get(ws) ?? new Map()
        for (const [seq, path] of list) seen.set(seq, path)
        acked.set(ws, seen)
      }
      const log = await AgentLog.open({ root, workers: 1 })
      try {
        for (const [ws, seen] of acked) {
          await log.recover(ws)
          const report = await log.verify(ws)
          expect(report.ok, `${ws}: ${report.problem?.reason}`).toBe(true)
          const paths: string[] = []
          for await (const e of readEntries(join(root, 'agent-logs', `${ws}.log`))) {
            expect(e.seq).toBe(paths.length + 1) // contiguous 1..n
            paths.push((e as { path: string }).path)
          }
          // every acknowledged entry is there, under the seq it was acknowledged with
          for (const [seq, path] of seen) expect(paths[seq - 1]).toBe(path)
        }
      } finally {
        await log.close()
      }
    }
    expect([...acked.values()].reduce((n, m) => n + m.size, 0)).toBeGreaterThan(1000)
  })
})
