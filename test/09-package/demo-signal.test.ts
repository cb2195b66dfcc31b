/**
 * Ctrl-C during `npm start`: the demo stops at its next step, closes its logs, removes its
 * temporary root unless --keep, says so, and exits with the signal's shell code.
 */
import { spawn } from 'node:child_process'
import { existsSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { DIST } from '../helpers/index.js'

const DEMO = join(DIST, 'demo.js')

/** Starts the demo for far longer than the test, signals it once it appends, and waits for its end. */
async function interrupt(signal: NodeJS.Signals, extra: string[] = []) {
  const child = spawn(process.execPath, [DEMO, '--agents', '2', '--seconds', '600', ...extra], {
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let stdout = ''
  let stderr = ''
  child.stderr.on('data', (d) => {
    stderr += d
  })
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  try {
    await new Promise<void>((resolve) => {
      child.stdout.on('data', (d) => {
        stdout += d
        if (stdout.includes('1. log: ')) resolve()
      })
    })
    child.kill(signal)
    const code = await exited
    const root = /temporary root \((.+)\)/.exec(stdout)?.[1] as string
    return { code, stdout, stderr, root }
  } finally {
    child.kill('SIGKILL')
  }
}

describe('npm start, interrupted', () => {
  it('SIGINT: stops, removes its root and says so; exit 130', async () => {
    const r = await interrupt('SIGINT')
    expect(r.root).toBeTruthy()
    expect(r.code).toBe(130)
    expect(r.stderr).toContain('noa demo: SIGINT: stopping at the next step\n')
    expect(r.stderr).toContain(`noa demo: stopped by SIGINT; removed its temporary root ${r.root}`)
    expect(r.stderr).not.toMatch(/Error|\n\s+at /) // no stack trace
    expect(r.stdout).not.toContain('summary (')
    expect(existsSync(r.root)).toBe(false)
  })

  it('SIGTERM with --keep: stops and keeps its root; exit 143', async () => {
    const r = await interrupt('SIGTERM', ['--keep'])
    try {
      expect(r.code).toBe(143)
      expect(r.stderr).toContain(`noa demo: stopped by SIGTERM; its files are kept in ${r.root}\n`)
      expect(existsSync(join(r.root, 'agent-logs'))).toBe(true)
    } finally {
      rmSync(r.root, { recursive: true, force: true })
    }
  })
})
