/**
 * A process compressing and saving a session is killed with SIGKILL at random moments: the
 * state left must always load, and every archive it points to must exist and agree with it
 * (archives are written before the state that names them; each file is temp + fsync + rename).
 */
import { readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { expect, it } from 'vitest'
import { auditSession, loadState } from '../../dist/src/context/index.js'
import { DIST, killAfterFirstOutput, tempDir } from '../helpers/index.js'

const CHILD = `
import { ContextSession } from ${JSON.stringify(pathToFileURL(join(DIST, 'context', 'index.js')).href)}
const [base] = process.argv.slice(2)
const big = (label) => label + ' ' + 'x'.repeat(2000 + Math.floor(Math.random() * 4000))
const conv = [{ role: 'user', content: [{ type: 'text', text: 'Task.' }] }]
const session = ContextSession.open({ baseDir: base, sessionId: 's', zone: 'utc' })
let next = session.state.messageRefs.byRef.size + 1
session.save()
process.stdout.write('ready\\n')
for (let round = 0; ; round++) {
  for (let i = 0; i < 3; i++) conv.push({ role: 'assistant', content: [{ type: 'text', text: big('r' + round + ' m' + i) }] })
  const ref = (n) => 'm' + String(n).padStart(5, '0')
  session.compress(conv, [{ startRef: ref(next + 1), endRef: ref(next + 3), summary: 'round ' + round, topic: '' }])
  next += 3
  const active = session.state.blocks.filter((b) => b.active && b.tier === 1).map((b) => b.blockId)
  if (active.length >= 2) session.compress(conv, [{ startRef: active[0], endRef: active[1], summary: 'fold ' + round, topic: '' }])
  // Many saves of a changing state, so that kills land inside writes.
  for (let k = 0; k < 20; k++) {
    session.state.nudge.lastPerMessageNudgeTokens = k
    session.save()
  }
}
`

it('SIGKILL during compressions and saves leaves a loadable state whose archives all agree', async () => {
  const dir = tempDir()
  const script = join(dir, 'writer.mjs')
  writeFileSync(script, CHILD)
  let maxBlocks = 0
  for (let round = 0; round < 6; round++) {
    const base = join(dir, `base${round}`)
    await killAfterFirstOutput(script, [base], 40 + Math.floor(Math.random() * 300))
    const load = loadState(base, 's')
    expect(load.error).toBeUndefined()
    expect(load.exists).toBe(true)
    const audit = auditSession({ baseDir: base, sessionId: 's' })
    expect(audit.problems).toEqual([])
    maxBlocks = Math.max(maxBlocks, load.state.blocks.length)
    for (const f of readdirSync(join(base, 's')))
      expect(f).toMatch(/^(state\.json|tier[12]|\.noa-context\.lock|\.noa-state-[0-9a-f]{12}\.tmp)$/)
  }
  expect(maxBlocks).toBeGreaterThan(0)
})
