import { spawn } from 'node:child_process'
import { appendFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import {
  formatRecord,
  loadTranscript,
  type TranscriptRecord,
  transcriptPath,
} from '../../dist/src/transcript/index.js'
import { tempDir } from '../helpers/index.js'

const CHILD = fileURLToPath(new URL('../fixtures/transcript-crash-child.mjs', import.meta.url))

interface Round {
  printed: string[]
  stderr: string
  signal: NodeJS.Signals | null
}

/** Runs the child until it has acknowledged a few appends, waits a random moment, then SIGKILLs it. */
function crashRound(dir: string, round: number): Promise<Round> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CHILD, dir, 's', String(round)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let out = ''
    let stderr = ''
    let armed = false
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString('utf8')
      if (!armed && out.split('\n').length > 4) {
        armed = true
        setTimeout(() => child.kill('SIGKILL'), 10 + Math.floor(Math.random() * 150))
      }
    })
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString('utf8')
    })
    child.on('error', reject)
    child.on('close', (_code, signal) => {
      const printed = out.split('\n').filter((l) => /^[0-9a-f]{32}$/.test(l))
      resolve({ printed, stderr, signal })
    })
  })
}

describe('durable mode survives SIGKILL', () => {
  it('every append the child saw resolve is in the file afterwards, the file loads, the chain is whole', async () => {
    const dir = tempDir()
    const file = transcriptPath(dir, 's')
    const acknowledged = new Set<string>()
    for (let round = 1; round <= 4; round++) {
      const r = await crashRound(dir, round)
      expect(r.stderr).toBe('')
      expect(r.signal).toBe('SIGKILL')
      expect(r.printed.length).toBeGreaterThan(0)
      for (const id of r.printed) acknowledged.add(id)

      // Whatever the kill interrupted, the file loads (a torn tail at most: a torn line left from the
      // previous round and glued onto would be a malformed middle line) and holds every acknowledged record.
      const t = await loadTranscript(file)
      const uuids = new Set(t.records.map((x) => x.uuid))
      for (const id of acknowledged) expect(uuids.has(id)).toBe(true)
      // One chain across all rounds: each resumed writer continued after the last record in the file.
      expect(t.records[0]?.parent_uuid).toBeUndefined()
      for (let i = 1; i < t.records.length; i++)
        expect(t.records[i]?.parent_uuid).toBe(t.records[i - 1]?.uuid)

      // A kill rarely tears a write; a power cut can. Tear the end the way it would (a random
      // prefix of a line) so the next round must resume past it and cut it before appending.
      if (round % 2 === 1) {
        const line = formatRecord({ ...(t.records.at(-1) as TranscriptRecord), uuid: 'f'.repeat(32) })
        appendFileSync(file, line.slice(0, 1 + Math.floor(Math.random() * (line.length - 2))))
        expect((await loadTranscript(file)).tornTail).not.toBeNull()
      }
    }
  })
})
