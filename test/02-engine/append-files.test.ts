/**
 * Files written beside entries (AppendOptions.files): in place and read-only once the append
 * resolves, carried by the commit journal (or fsynced first without one), refused by name when
 * their path would leave the root or enter the engine's own folders.
 */
import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { AgentLog, type EntryInput } from '../../dist/src/index.js'
import { blobOf, tempDir } from '../helpers/index.js'

/** An object of the store as a file beside an entry: named by the SHA-256 of its bytes. */
function objectPath(data: Buffer): string {
  const sha = createHash('sha256').update(data).digest('hex')
  return `objects/${sha.slice(0, 2)}/${sha.slice(2)}`
}

function write(i: number): EntryInput {
  return { op: 'write', path: `f${i}`, blob: blobOf(i) }
}

async function journalReady(log: AgentLog): Promise<void> {
  for (let i = 0; i < 400; i++) {
    if ((await log.status()).every((s) => s.journal?.state === 'ready')) return
    await new Promise((r) => setTimeout(r, 5))
  }
  throw new Error('the journal was never allocated')
}

describe('append files', () => {
  for (const durability of ['journal', 'fdatasync'] as const) {
    it(`writes each file in place before the append resolves (${durability})`, async () => {
      const root = tempDir()
      const log = await AgentLog.open({ root, workers: 1, durability })
      try {
        await log.append('w', write(0))
        await log.append('w', write(1))
        if (durability === 'journal') await journalReady(log)
        const data = (i: number) => Buffer.from(`file ${i} `.repeat(i + 1))
        const acks = await Promise.all(
          Array.from({ length: 20 }, (_, i) =>
            log.append('w', write(i + 2), {
              files: [
                { path: objectPath(data(i)), data: data(i), readOnly: true },
                { path: `extra/deep/e${i}`, data: data(i) },
              ],
            }),
          ),
        )
        expect(acks.map((a) => a.seq).sort((a, b) => a - b)).toEqual(
          Array.from({ length: 20 }, (_, i) => i + 3),
        )
        for (let i = 0; i < 20; i++) {
          const o = join(root, objectPath(data(i)))
          expect(readFileSync(o).equals(data(i))).toBe(true)
          expect(statSync(o).mode & 0o222).toBe(0) // read-only
          expect(statSync(join(root, 'extra', 'deep', `e${i}`)).mode & 0o200).toBe(0o200)
        }
        const status = await log.status()
        expect(status.reduce((n, s) => n + s.filesWritten, 0)).toBe(40)
        if (durability === 'journal') expect(status.reduce((n, s) => n + s.rounds, 0)).toBeGreaterThan(0)
        // No temp file is left behind.
        for (const shard of readdirSync(join(root, 'objects')))
          expect(readdirSync(join(root, 'objects', shard)).filter((n) => n.endsWith('.tmp'))).toEqual([])
      } finally {
        await log.close()
      }
      // A clean close syncs what the journal still covered and removes it.
      expect(existsSync(join(root, 'journal'))).toBe(false)
    })
  }

  it('refuses a path that would leave the root or enter the engine folders, naming it; nothing is written', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 0 })
    try {
      const data = Buffer.from('x')
      for (const path of [
        '../out/x',
        '/abs/x',
        'objects/../x',
        'a//b',
        'top',
        'agent-logs/w2.log',
        'journal/j',
        'checksums/s',
        'a/./b',
        '',
        'objects/ab/cd',
        `objects/${'a'.repeat(64)}`,
        `objects/${'A'.repeat(2)}/${'a'.repeat(62)}`,
      ]) {
        const err = await log.append('w', write(1), { files: [{ path, data }] }).catch((e) => e)
        expect(err.code, path).toBe('NOA_BAD_OPTION')
        expect(err.message).toContain(JSON.stringify(path))
      }
      const twice = await log
        .append('w', write(1), {
          files: [
            { path: 'a/b', data },
            { path: 'a/b', data },
          ],
        })
        .catch((e) => e)
      expect(twice.message).toContain('named twice')
      const notBytes = await log
        .append('w', write(1), { files: [{ path: 'a/b', data: 'text' as unknown as Buffer }] })
        .catch((e) => e)
      expect(notBytes.code).toBe('NOA_BAD_OPTION')
      expect(notBytes.message).toContain('files[0].data')
      const notArray = await log.append('w', write(1), { files: {} as never }).catch((e) => e)
      expect(notArray.code).toBe('NOA_BAD_OPTION')
      expect(await log.workspaces()).toEqual([])
      expect(existsSync(join(root, 'a'))).toBe(false)
      expect(existsSync(join(root, '..', 'out'))).toBe(false)
    } finally {
      await log.close()
    }
  })

  it('refuses a folder planted as a symlink out of the root: the append fails by name, nothing is written outside', async () => {
    const root = tempDir()
    const outside = tempDir()
    mkdirSync(root, { recursive: true })
    symlinkSync(outside, join(root, 'objects'))
    const log = await AgentLog.open({ root, workers: 1 })
    try {
      const err = await log
        .append('w', write(1), { files: [{ path: objectPath(Buffer.from('x')), data: Buffer.from('x') }] })
        .catch((e) => e)
      expect(err.code).toBe('NOA_NOT_DIRECTORY')
      expect(err.message).toContain(join(root, 'objects'))
      expect(readdirSync(outside)).toEqual([])
      // The entry was not committed either; the workspace goes on.
      expect((await log.append('w', write(2))).seq).toBe(1)
    } finally {
      await log.close()
    }
  })

  for (const workers of [0, 1]) {
    it(`a file that cannot be put in place fails its append by name, leaving no temp file (workers: ${workers})`, async () => {
      const root = tempDir()
      const log = await AgentLog.open({ root, workers })
      try {
        // The target is a folder with something in it: the rename onto it fails.
        mkdirSync(join(root, 'd', 'taken', 'x'), { recursive: true })
        const files = Array.from({ length: 40 }, (_, i) => ({ path: `d/f${i}`, data: Buffer.from(`f${i}`) }))
        files.splice(25, 0, { path: 'd/taken', data: Buffer.from('t') })
        const err = await log.append('w', write(1), { files }).catch((e) => e)
        expect(err.code).toBe('NOA_NOT_REGULAR_FILE')
        expect(err.message).toContain(join(root, 'd', 'taken'))
        expect(readdirSync(join(root, 'd')).filter((n) => n.endsWith('.tmp'))).toEqual([])
        expect(statSync(join(root, 'd', 'taken')).isDirectory()).toBe(true)
        // Nothing was committed (the next entry is seq 1); the same files go in once the path is free.
        rmSync(join(root, 'd', 'taken'), { recursive: true })
        expect((await log.append('w', write(2), { files })).seq).toBe(1)
        expect(readFileSync(join(root, 'd', 'taken'), 'utf8')).toBe('t')
        expect(readFileSync(join(root, 'd', 'f39'), 'utf8')).toBe('f39')
      } finally {
        await log.close()
      }
    })
  }

  it('takes a copy of the bytes: changing the buffer after the call changes nothing', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 1 })
    try {
      const data = Buffer.from('before')
      const p = log.append('w', write(1), { files: [{ path: 'd/f', data }] })
      data.write('after!')
      await p
      expect(readFileSync(join(root, 'd', 'f'), 'utf8')).toBe('before')
    } finally {
      await log.close()
    }
  })
})
