/**
 * `npm start`: the demo runs every layer through the public API and ends with a summary and
 * where its files are; what it leaves with --keep is readable by the noa command.
 */
import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { DIST, ROOT_DIR, runCli } from '../helpers/index.js'

const DEMO = join(DIST, 'demo.js')

function rootOf(stdout: string): string {
  const m = /^noa demo: every layer on a temporary root \((.+)\)$/m.exec(stdout)
  if (!m) throw new Error(`no root in the demo's output:\n${stdout}`)
  return m[1] as string
}

describe('npm start', () => {
  it('runs every layer, prints a summary table, and keeps its files with --keep', () => {
    const r = spawnSync(process.execPath, [DEMO, '--agents', '3', '--seconds', '0.5', '--keep'], {
      encoding: 'utf8',
    })
    const root = rootOf(r.stdout)
    try {
      expect(r.stderr).toBe('') // not a terminal: no live line
      expect(r.status).toBe(0)
      expect(r.stdout).toMatch(/^ {3}reopened and verified every log: ok, /m)
      expect(r.stdout).toMatch(/^ {3}conflict: README\.md changed by agent-001 and feature; feature wins/m)
      expect(r.stdout).toMatch(/^ {3}block b1 \(tier 1\): /m)
      const summary = r.stdout.slice(r.stdout.indexOf('\nsummary ('))
      const layers = summary
        .split('\n')
        .slice(3)
        .map((l) => l.trim().split(/\s+/)[0])
      expect(layers.slice(0, 6)).toEqual(['log', 'recovery', 'store', 'transcript', 'memory', 'context'])
      expect(summary).toMatch(/1 conflict reported/)
      expect(summary).toMatch(/chain intact/)
      expect(summary).toContain(`files kept in ${root}:`)

      // What it left is what the noa command reads.
      expect(runCli(['verify', '--root', root]).status).toBe(0)
      const snaps = JSON.parse(runCli(['snapshots', 'agent-001', '--json', '--root', root]).stdout)
      expect(snaps.map((s: { kind: string }) => s.kind)).toEqual(['merge', 'snapshot'])
      const t = JSON.parse(
        runCli(['transcript', 'show', join(root, 'transcripts', 'demo-session.jsonl'), '--json']).stdout,
      )
      expect(t.records).toBe(7)
      const notes = JSON.parse(runCli(['memory', 'list', '--dir', join(root, 'memory'), '--json']).stdout)
      expect(notes.map((n: { name: string }) => n.name).sort()).toEqual([
        'Code style',
        'Deploy steps',
        'On call',
      ])
      const state = JSON.parse(
        runCli(['context', 'state', join(root, 'context'), 'demo-session', '--json']).stdout,
      )
      expect(state.blocks).toHaveLength(1)
      expect(existsSync(join(root, 'context', 'demo-session', 'tier1', 'b1_m00002-m00005.md'))).toBe(true)
    } finally {
      rmSync(root, { recursive: true, force: true })
    }
  })

  it('removes its files without --keep, and says where they were', () => {
    const r = spawnSync(process.execPath, [DEMO, '--agents', '1', '--seconds', '0.2'], { encoding: 'utf8' })
    expect(r.status).toBe(0)
    const root = rootOf(r.stdout)
    expect(r.stdout).toContain(`files were in ${root} (removed; npm start -- --keep keeps them)`)
    expect(existsSync(root)).toBe(false)
  })

  it('uses only the public API', () => {
    const source = readFileSync(join(ROOT_DIR, 'src', 'demo.ts'), 'utf8')
    const from = [...source.matchAll(/^(?:import|export)\b[^;]*?from '([^']+)'/gms)].map((m) => m[1])
    expect(from.length).toBeGreaterThan(3)
    for (const f of from) expect(f === './index.js' || f?.startsWith('node:'), f).toBe(true)
  })
})
