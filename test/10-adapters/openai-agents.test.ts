/**
 * NoaSession: the Agents SDK's Session contract on a noa workspace, the history readable by
 * `noa` commands, and an agent's `run()` (scripted model, no network) that keeps its history
 * across two processes.
 */
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { AgentInputItem } from '@openai/agents'
import { describe, expect, it } from 'vitest'
import { NoaError } from '../../dist/src/index.js'
import { NoaSession } from '../../dist/src/openai-agents/index.js'
import { runCli, tempDir } from '../helpers/index.js'

const RUN = fileURLToPath(new URL('./fixtures/oa-run.mjs', import.meta.url))

const user = (text: string): AgentInputItem => ({ type: 'message', role: 'user', content: text })
const assistant = (text: string): AgentInputItem => ({
  type: 'message',
  role: 'assistant',
  status: 'completed',
  content: [{ type: 'output_text', text }],
})

describe('NoaSession', () => {
  it('keeps items in order, returns the most recent ones, pops and clears, across instances', async () => {
    const root = join(tempDir('noa-oa-'), 'noa')
    const a = new NoaSession({ root, sessionId: 'chat/1 ünï' })
    try {
      expect(await a.getSessionId()).toBe('chat/1 ünï')
      expect(await a.getItems()).toEqual([])
      expect(await a.popItem()).toBeUndefined()
      await a.addItems([user('one'), assistant('two')])
      await a.addItems([])
      await a.addItems([user('three')])
      expect(await a.getItems()).toEqual([user('one'), assistant('two'), user('three')])
      expect(await a.getItems(2)).toEqual([assistant('two'), user('three')])
      expect(await a.getItems(10)).toHaveLength(3)
      expect(await a.getItems(0)).toEqual([])
      expect(await a.popItem()).toEqual(user('three'))
      await a.addItems([user('four')])
    } finally {
      await a.close()
    }

    // A new instance (the same would hold in a new process) reads what the first one wrote.
    const b = new NoaSession({ root, sessionId: 'chat/1 ünï' })
    try {
      expect(await b.getItems()).toEqual([user('one'), assistant('two'), user('four')])
      const items = await b.getItems()
      ;(items[0] as { content: string }).content = 'changed by the caller'
      expect((await b.getItems(3))[0]).toEqual(user('one')) // callers get copies
      await b.clearSession()
      expect(await b.getItems()).toEqual([])
      await b.addItems([user('after clear')])
      expect(await b.getItems()).toEqual([user('after clear')])
    } finally {
      await b.close()
    }
  })

  it('is a workspace noa reads: log, snapshot, tree and blob show the history', async () => {
    const root = join(tempDir('noa-oa-cli-'), 'noa')
    const s = new NoaSession({ root, sessionId: 's-1' })
    await s.addItems([user('hello'), assistant('hi')])
    await s.popItem()
    await s.close()
    const log = runCli(['log', 'oa.s-1', '--root', root])
      .stdout.trim()
      .split('\n')
      .map((l) => JSON.parse(l))
    expect(log.map((e) => [e.op, e.path])).toEqual([
      ['write', 'items/000000000001'],
      ['write', 'items/000000000002'],
      ['delete', 'items/000000000002'],
    ])
    expect(runCli(['snapshot', 'oa.s-1', '-m', 'after a pop', '--root', root]).status).toBe(0)
    const snaps = JSON.parse(runCli(['snapshots', 'oa.s-1', '--root', root, '--json']).stdout)
    const tree = runCli(['tree', snaps[0].snapshotId, '--root', root]).stdout.trim().split('\n')
    expect(tree).toEqual([`items/000000000001\t${log[0].blob}`])
    expect(JSON.parse(runCli(['blob', 'get', log[0].blob, '--root', root]).stdout)).toEqual(user('hello'))

    // A snapshot (or a fork) in the log is read back through a replay.
    const again = new NoaSession({ root, sessionId: 's-1' })
    expect(await again.getItems()).toEqual([user('hello')])
    expect(runCli(['fork', 'oa.s-2', '--from', snaps[0].snapshotId, '--root', root]).status).toBe(0)
    const forked = new NoaSession({ root, sessionId: 's-2' })
    expect(await forked.getItems()).toEqual([user('hello')])
    await forked.addItems([user('on the fork')])
    expect(await again.getItems()).toEqual([user('hello')])
    await Promise.all([again.close(), forked.close()])
  })

  it('maps a long session id to a hashed workspace that stores the id', async () => {
    const root = join(tempDir('noa-oa-long-'), 'noa')
    const id = `tenant-7:${'x'.repeat(300)}`
    const s = new NoaSession({ root, sessionId: id })
    await s.addItems([user('long')])
    await s.close()
    expect(s.workspace).toMatch(/^oah\.[0-9a-f]{64}$/)
    const log = runCli(['log', s.workspace, '--root', root])
      .stdout.trim()
      .split('\n')
      .map((l) => JSON.parse(l))
    expect(log[0].path).toBe('session')
    expect(runCli(['blob', 'get', log[0].blob, '--root', root]).stdout).toBe(id)
    const back = new NoaSession({ root, sessionId: id })
    expect(await back.getItems()).toEqual([user('long')])
    await back.close()
  })

  it('refuses bad options and items with NoaErrors that name them', async () => {
    const root = join(tempDir('noa-oa-bad-'), 'noa')
    expect(() => new NoaSession({ root, sessionId: '' })).toThrow(/sessionId must be a non-empty string/)
    expect(() => new NoaSession({ root, sesionId: 'x' } as never)).toThrow(
      /unknown NoaSession option sesionId/,
    )
    const s = new NoaSession({ root, sessionId: 'bad' })
    await expect(s.addItems('nope' as never)).rejects.toThrow(NoaError)
    await expect(s.addItems([null as never])).rejects.toThrow(/item 0 must be an object/)
    const cyclic: Record<string, unknown> = { type: 'message' }
    cyclic.self = cyclic
    await expect(s.addItems([cyclic as never])).rejects.toThrow(
      /item 0 cannot be stored as JSON: at .self, a cycle/,
    )
    await expect(s.getItems('3' as never)).rejects.toThrow(/limit must be a number/)
    expect(await s.getItems()).toEqual([]) // nothing was written by the refused calls
    await s.close()
    await expect(s.addItems([user('late')])).rejects.toMatchObject({ code: 'NOA_CLOSED' })
  })

  it("keeps an agent's history across two processes (run() with a scripted model)", () => {
    const root = join(tempDir('noa-oa-run-'), 'noa')
    const turn = (message: string) => {
      const r = spawnSync(process.execPath, [RUN, root, 'support-9', message], { encoding: 'utf8' })
      if (r.status !== 0) throw new Error(`oa-run failed (${r.status}): ${r.stderr}`)
      return JSON.parse(r.stdout.trim().split('\n').pop() as string) as { output: string; items: number }
    }
    expect(turn('hello')).toEqual({ output: 'seen 1 items; user said: hello', items: 2 })
    // The second process's model is given the first turn back, from the workspace.
    expect(turn('and again')).toEqual({ output: 'seen 3 items; user said: hello / and again', items: 4 })
  })
})
