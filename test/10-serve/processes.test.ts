/**
 * Many OS processes on one root through the daemon, for several seconds, several of them on the
 * same workspaces: every acknowledged (ws, seq) is in its log exactly once, seq is gapless per
 * workspace, and nothing else is there. Then the same with the daemon SIGKILLed mid-run and
 * restarted: the processes get NOA_DAEMON_LOST for what was in flight and go on through the new
 * daemon; every acknowledged entry survives, and the only other entries are ones whose answer
 * was lost with the daemon (committed before it died).
 */
import { spawn } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { ROOT_DIR, tempDir } from '../helpers/index.js'
import { type DaemonProcess, startDaemon, until } from '../helpers/serve.js'

const APPENDER = join(ROOT_DIR, 'test', 'fixtures', 'serve-appender.mjs')
const PROCESSES = 8
const SECONDS = 3

interface Record {
  acked: Array<[string, number, string]>
  maybe: string[]
  losses: number
}

function runAppender(
  root: string,
  proc: number,
  workspaces: string[],
  out: string,
  untilLoss: boolean,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [
        APPENDER,
        root,
        String(proc),
        workspaces.join(','),
        String(SECONDS),
        out,
        '8',
        ...(untilLoss ? ['until-loss'] : []),
      ],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    )
    let stderr = ''
    child.stderr.on('data', (d) => {
      stderr += d
    })
    child.on('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`appender ${proc} exited ${code}: ${stderr}`)),
    )
  })
}

/** Every process's record, checked against the logs; returns how many entries and losses there were. */
function check(root: string, records: Record[]): { entries: number; losses: number; maybeStored: number } {
  const acked = records.flatMap((r) => r.acked)
  const maybe = new Set(records.flatMap((r) => r.maybe))
  const byWs = new Map<string, Map<number, string>>()
  for (const [ws, seq, path] of acked) {
    const m = byWs.get(ws) ?? new Map<number, string>()
    expect(m.has(seq)).toBe(false) // one acknowledgement per seq
    m.set(seq, path)
    byWs.set(ws, m)
  }
  let entries = 0
  let maybeStored = 0
  for (const [ws, expected] of byWs) {
    const lines = readFileSync(join(root, 'agent-logs', `${ws}.log`), 'utf8')
      .trim()
      .split('\n')
    const seen = new Set<string>()
    lines.forEach((line, i) => {
      const e = JSON.parse(line) as { seq: number; path: string }
      expect(e.seq).toBe(i + 1) // gapless
      expect(seen.has(e.path)).toBe(false) // exactly once
      seen.add(e.path)
      const want = expected.get(e.seq)
      if (want !== undefined) expect(e.path).toBe(want)
      else {
        expect(maybe.has(e.path)).toBe(true) // nothing but entries whose answer was lost
        maybeStored++
      }
    })
    for (const [seq] of expected) expect(seq).toBeLessThanOrEqual(lines.length)
    entries += lines.length
  }
  return { entries, losses: records.reduce((n, r) => n + r.losses, 0), maybeStored }
}

async function run(root: string, kill?: (d: DaemonProcess, outs: string[]) => Promise<DaemonProcess>) {
  const tmp = tempDir()
  let d = await startDaemon(root)
  const outs = Array.from({ length: PROCESSES }, (_, k) => join(tmp, `p${k}.json`))
  // Each process writes its own pair's workspace and the one they all share.
  const procs = outs.map((out, k) =>
    runAppender(root, k, [`own-${k % 4}`, 'shared'], out, kill !== undefined),
  )
  if (kill) d = await kill(d, outs)
  await Promise.all(procs)
  expect((await d.stop()).code).toBe(0)
  return outs.map((o) => JSON.parse(readFileSync(o, 'utf8')) as Record)
}

describe('many processes through noa serve', () => {
  it(`${PROCESSES} processes for ${SECONDS} s, several on the same workspaces: every ack exactly once, gapless`, async () => {
    const root = tempDir()
    const records = await run(root)
    const { entries, losses } = check(root, records)
    expect(losses).toBe(0)
    expect(entries).toBe(records.reduce((n, r) => n + r.acked.length, 0))
    // All of them did append to the one shared workspace, and each pair to its own (each
    // process goes on until it has), however slowly they went: no rate is asked of them.
    const writers = (ws: string) =>
      new Set(readFileSync(join(root, 'agent-logs', `${ws}.log`), 'utf8').match(/"p\d+\//g)).size
    expect(writers('shared')).toBe(PROCESSES)
    for (let k = 0; k < 4; k++) expect(writers(`own-${k}`)).toBe(2)
  })

  it('the same with the daemon SIGKILLed mid-run and restarted', async () => {
    const root = tempDir()
    const records = await run(root, async (d, outs) => {
      // Mid-run: once every process is appending (each has entries in the shared log); they
      // go on until they have seen this daemon die and the next one answer.
      const shared = join(root, 'agent-logs', 'shared.log')
      await until(
        'every process to append to the shared workspace',
        () =>
          existsSync(shared) && new Set(readFileSync(shared, 'utf8').match(/"p\d+\//g)).size === PROCESSES,
      )
      await d.stop('SIGKILL')
      // The next daemon only once each process has seen this one die (an append lost with it).
      await until('every process to lose an append', () => outs.every((o) => existsSync(`${o}.lost`)))
      return startDaemon(root)
    })
    check(root, records)
    for (const r of records) {
      expect(r.losses).toBeGreaterThan(0) // each process did see the daemon die
      expect(r.acked.length).toBeGreaterThan(0)
    }
  })
})
