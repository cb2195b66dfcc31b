import { spawn } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { readEntries } from '../../dist/src/engine/index.js'
import { AgentLog, type EntryInput } from '../../dist/src/index.js'
import { blobOf, runCli, tempDir } from '../helpers/index.js'

const FAULTY = new URL('../fixtures/faulty-io.mjs', import.meta.url).href
const HOLD = new URL('../fixtures/hold-lock.mjs', import.meta.url).pathname

function write(i: number): EntryInput {
  return { op: 'write', path: `f${i}`, blob: blobOf(i) }
}

async function seqs(file: string): Promise<number[]> {
  const out: number[] = []
  for await (const e of readEntries(file)) out.push(e.seq)
  return out
}

describe('injected I/O faults, file by file (durability: fdatasync)', () => {
  for (const inlineCommit of [true, false]) {
    const how = inlineCommit ? 'inline' : 'pool'
    it(`a failed write (ENOSPC, partly written) rejects its batch and cuts the file back (${how})`, async () => {
      const root = tempDir()
      const trace = join(root, 'trace')
      const log = await AgentLog.open({
        root,
        workers: 1,
        inlineCommit,
        durability: 'fdatasync',
        ioModule: FAULTY,
        ioOptions: { trace, failWriteAt: 2, code: 'ENOSPC', partial: true },
      })
      try {
        expect((await log.append('w', write(1))).seq).toBe(1)
        const file = join(root, 'agent-logs', 'w.log')
        const sizeAfterFirst = readFileSync(file).length
        const err = await log.appendMany('w', [write(2), write(3)]).catch((e) => e)
        expect(err).toMatchObject({ code: 'ENOSPC', syscall: 'write', errno: -28 })
        expect(err.path).toBe(file)
        expect(readFileSync(file).length).toBe(sizeAfterFirst)
        expect(readFileSync(trace, 'utf8')).toMatch(new RegExp(`ftruncate \\d+ ${sizeAfterFirst}`))
        // A failed write does not poison the workspace: the next append continues the seq.
        expect((await log.append('w', write(4))).seq).toBe(2)
        expect(await seqs(file)).toEqual([1, 2])
        expect((await log.verify('w')).ok).toBe(true)
      } finally {
        await log.close()
      }
    })

    it(`a failed fdatasync (EIO) rejects its batch, poisons the workspace until it is reopened (${how})`, async () => {
      const root = tempDir()
      const log = await AgentLog.open({
        root,
        workers: 1,
        inlineCommit,
        durability: 'fdatasync',
        ioModule: FAULTY,
        ioOptions: { failSyncAt: 2, code: 'EIO' },
      })
      try {
        await log.append('w', write(1))
        const err = await log.append('w', write(2)).catch((e) => e)
        expect(err).toMatchObject({ code: 'EIO', syscall: 'fdatasync' })
        const refused = await log.append('w', write(3)).catch((e) => e)
        expect(refused.code).toBe('NOA_WORKSPACE_POISONED')
        expect(refused.message).toMatch(/workspace w refuses appends after a failed fdatasync/)
        // Other workspaces are not affected.
        expect((await log.append('other', write(1))).seq).toBe(1)
        await log.recover('w')
        expect((await log.append('w', write(4))).seq).toBe(2)
        expect(await seqs(join(root, 'agent-logs', 'w.log'))).toEqual([1, 2])
      } finally {
        await log.close()
      }
    })
  }

  it('every ack comes after an fdatasync of its file', async () => {
    const root = tempDir()
    const trace = join(root, 'trace')
    const log = await AgentLog.open({
      root,
      workers: 1,
      durability: 'fdatasync',
      ioModule: FAULTY,
      ioOptions: { trace },
    })
    try {
      for (let i = 0; i < 5; i++) await log.append('w', write(i))
      await Promise.all(Array.from({ length: 20 }, (_, i) => log.append(`w${i % 4}`, write(i))))
    } finally {
      await log.close()
    }
    const ops = readFileSync(trace, 'utf8').trim().split('\n')
    // Each write is followed by the fdatasync of the same fd before that fd is written again.
    const pending = new Map<string, number>()
    for (const op of ops) {
      const words = op.split(' ')
      const kind = words[0] as string
      const fd = (kind === 'fdatasync' ? words[2] : words[1]) as string
      if (kind === 'write') {
        expect(pending.get(fd) ?? 0).toBe(0)
        pending.set(fd, 1)
      } else if (kind === 'fdatasync') pending.set(fd, 0)
    }
    expect([...pending.values()].every((v) => v === 0)).toBe(true)
    expect(ops.filter((o) => o.startsWith('fdatasync')).length).toBeGreaterThanOrEqual(6)
  })
})

describe('cross-process lock', () => {
  it('refuses a second process on the same workspace, naming it', async () => {
    const root = tempDir()
    const child = spawn(process.execPath, [HOLD, root, 'shared'], { stdio: ['pipe', 'pipe', 'inherit'] })
    try {
      await new Promise<void>((resolve, reject) => {
        child.stdout.once('data', () => resolve())
        child.once('exit', (code) => reject(new Error(`holder exited ${code}`)))
      })
      const log = await AgentLog.open({ root, workers: 1 })
      try {
        const err = await log.append('shared', write(1)).catch((e) => e)
        expect(err.code).toBe('NOA_WORKSPACE_LOCKED')
        expect(err.message).toContain(`workspace shared is locked by process ${child.pid} (`)
        expect((await log.append('free', write(1))).seq).toBe(1)
        // The same root opened twice in one process: the holder is this process, and it says so.
        const second = await AgentLog.open({ root, workers: 1 })
        try {
          const again = await second.append('free', write(2)).catch((e) => e)
          expect(again.code).toBe('NOA_WORKSPACE_LOCKED')
          expect(again.message).toContain('workspace free is locked by this process')
        } finally {
          await second.close()
        }
      } finally {
        await log.close()
      }
      const cli = runCli(['append', 'shared', '--root', root], { input: '{"op":"delete","path":"a"}\n' })
      expect(cli.status).toBe(1)
      expect(cli.stderr).toContain(`workspace shared is locked by process ${child.pid} (`)
    } finally {
      child.stdin.end()
      await new Promise((r) => child.once('exit', r))
    }
    // Released with the holder: now it can be written.
    const log = await AgentLog.open({ root, workers: 1 })
    try {
      expect((await log.append('shared', write(1))).seq).toBe(1)
    } finally {
      await log.close()
    }
    expect(existsSync(join(root, 'agent-logs', 'shared.log'))).toBe(true)
  })
})
