/**
 * A root others can write into: whatever is planted where a workspace log or its folder should
 * be (a symlink to a file outside, dangling or not; a symlinked folder; a FIFO, a socket, a
 * folder), the engine refuses it by name, never follows it, never blocks on it, and the file
 * outside is byte-identical afterwards.
 */
import { execFileSync } from 'node:child_process'
import { existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { createServer, type Server } from 'node:net'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { listWorkspaces, readWorkspace, verifyWorkspace } from '../../dist/src/engine/index.js'
import { scanWorkspaces } from '../../dist/src/engine/logs.js'
import { AgentLog, type EntryInput } from '../../dist/src/index.js'
import { blobOf, tempDir } from '../helpers/index.js'

const E: EntryInput = { op: 'write', path: 'a.txt', blob: blobOf(1) }
const TORN = 'first line\nsingle line no newline'

async function refusal(p: Promise<unknown>): Promise<{ code?: string; message: string }> {
  try {
    await p
  } catch (err) {
    return err as { code?: string; message: string }
  }
  throw new Error('expected a refusal')
}

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = []
  for await (const x of it) out.push(x)
  return out
}

const servers: Server[] = []
afterEach(() => {
  for (const s of servers.splice(0)) s.close()
})

async function plantSocket(path: string): Promise<void> {
  const server = createServer()
  servers.push(server)
  await new Promise<void>((resolve) => server.listen(path, resolve))
}

type Plant = (file: string, outside: string) => Promise<void> | void

const PLANTS: Record<string, { plant: Plant; code: string }> = {
  'a symlink to an outside file with a torn-looking tail': {
    plant: (file, outside) => {
      writeFileSync(join(outside, 'p.txt'), TORN)
      symlinkSync(join(outside, 'p.txt'), file)
    },
    code: 'NOA_NOT_REGULAR_FILE',
  },
  'a dangling symlink': {
    plant: (file, outside) => symlinkSync(join(outside, 'created-by-noa.log'), file),
    code: 'NOA_NOT_REGULAR_FILE',
  },
  'a FIFO': { plant: (file) => void execFileSync('mkfifo', [file]), code: 'NOA_NOT_REGULAR_FILE' },
  'a socket': { plant: (file) => plantSocket(file), code: 'NOA_NOT_REGULAR_FILE' },
  'a folder': { plant: (file) => mkdirSync(file), code: 'NOA_NOT_REGULAR_FILE' },
}

function outsideState(outside: string): Record<string, string> {
  const out: Record<string, string> = {}
  for (const name of readdirSync(outside)) out[name] = readFileSync(join(outside, name), 'latin1')
  return out
}

describe('a workspace log planted by someone else', () => {
  for (const [name, { plant, code }] of Object.entries(PLANTS)) {
    it(`${name} is refused by append, read, verify, recover and listed as a problem`, async () => {
      const root = tempDir()
      const outside = tempDir()
      mkdirSync(join(root, 'agent-logs'))
      const file = join(root, 'agent-logs', 'v.log')
      await plant(file, outside)
      const before = outsideState(outside)
      const log = await AgentLog.open({ root, workers: 1 })
      try {
        const err = await refusal(log.append('v', E))
        expect(err.code).toBe(code)
        expect(err.message).toContain(file)
        expect((await refusal(log.recover('v'))).code).toBe(code)
        expect((await refusal(collect(log.read('v')))).code).toBe(code)
        expect((await refusal(verifyWorkspace(root, 'v'))).code).toBe(code)
        // The other workspaces are not affected, and the listing reports the planted file.
        expect((await log.append('ok', E)).seq).toBe(1)
        const scan = await scanWorkspaces(root)
        expect(scan.workspaces.map((w: { workspace: string }) => w.workspace)).toEqual(['ok'])
        expect(scan.problems).toEqual([expect.objectContaining({ file, code: 'NOA_NOT_REGULAR_FILE' })])
        expect((await refusal(listWorkspaces(root))).code).toBe('NOA_NOT_REGULAR_FILE')
      } finally {
        await log.close()
      }
      expect(outsideState(outside)).toEqual(before)
    })
  }

  it('a symlinked agent-logs folder is refused; nothing is created outside', async () => {
    const root = tempDir()
    const outside = tempDir()
    symlinkSync(outside, join(root, 'agent-logs'))
    const log = await AgentLog.open({ root, workers: 1 })
    try {
      const err = await refusal(log.append('w', E))
      expect(err.code).toBe('NOA_NOT_DIRECTORY')
      expect(err.message).toContain(join(root, 'agent-logs'))
      expect((await refusal(collect(readWorkspace(root, 'w')))).code).toBe('NOA_NOT_DIRECTORY')
      expect((await refusal(scanWorkspaces(root))).code).toBe('NOA_NOT_DIRECTORY')
    } finally {
      await log.close()
    }
    expect(readdirSync(outside)).toEqual([])
  })

  it('a root that is a file is refused at open, a missing root by readers', async () => {
    const dir = tempDir()
    writeFileSync(join(dir, 'file'), '')
    expect((await refusal(AgentLog.open({ root: join(dir, 'file') }))).code).toBe('NOA_BAD_ROOT')
    expect((await refusal(listWorkspaces(join(dir, 'missing')))).code).toBe('NOA_BAD_ROOT')
    expect(existsSync(join(dir, 'missing'))).toBe(false)
  })

  it('recover of a workspace that does not exist says so and creates nothing', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1 })
    try {
      await log.append('real', E)
      const err = await refusal(log.recover('typo'))
      expect(err.code).toBe('NOA_NOT_FOUND')
      expect(existsSync(join(root, 'agent-logs', 'typo.log'))).toBe(false)
    } finally {
      await log.close()
    }
  })
})

describe('appendToFile', () => {
  it('refuses any path into agent-logs, directly or through a symlinked folder', async () => {
    const root = tempDir()
    const elsewhere = tempDir()
    const log = await AgentLog.open({ root, workers: 1 })
    try {
      await log.append('w', E)
      const before = readFileSync(join(root, 'agent-logs', 'w.log'))
      const direct = await refusal(log.appendToFile(join(root, 'agent-logs', 'w.log'), 'raw\n'))
      expect(direct.code).toBe('NOA_BAD_ARGUMENT')
      expect(direct.message).toContain('inside the workspace logs folder')
      symlinkSync(join(root, 'agent-logs'), join(elsewhere, 'logs'))
      expect((await refusal(log.appendToFile(join(elsewhere, 'logs', 'w.log'), 'raw\n'))).code).toBe(
        'NOA_BAD_ARGUMENT',
      )
      expect(readFileSync(join(root, 'agent-logs', 'w.log'))).toEqual(before)
      // Outside agent-logs it works as before, and a symlink planted as the file is refused.
      await log.appendToFile(join(elsewhere, 't.jsonl'), 'one\n')
      expect(readFileSync(join(elsewhere, 't.jsonl'), 'utf8')).toBe('one\n')
      writeFileSync(join(elsewhere, 'target'), TORN)
      symlinkSync(join(elsewhere, 'target'), join(elsewhere, 's.jsonl'))
      expect((await refusal(log.appendToFile(join(elsewhere, 's.jsonl'), 'x\n'))).code).toBe(
        'NOA_NOT_REGULAR_FILE',
      )
      expect(readFileSync(join(elsewhere, 'target'), 'utf8')).toBe(TORN)
    } finally {
      await log.close()
    }
  })
})
