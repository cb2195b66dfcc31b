import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { closeSync, existsSync, mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import {
  APPEND_CREATE,
  checkDirsBelow,
  checkRoot,
  filePathProblem,
  fileSize,
  mkdirBelow,
  openFileSync,
  READ,
  statFile,
  WRITE_NEW,
} from '../../dist/src/engine/files.js'
import { tempDir } from '../helpers/index.js'

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn()
  } catch (err) {
    return (err as { code?: string }).code
  }
  return undefined
}

describe('safe file opens', () => {
  it('opens regular files and creates new ones', () => {
    const dir = tempDir()
    const f = join(dir, 'a.txt')
    closeSync(openFileSync(f, WRITE_NEW))
    expect(statFile(f)?.isFile()).toBe(true)
    closeSync(openFileSync(f, READ))
    expect(statFile(join(dir, 'missing'))).toBeUndefined()
  })

  it('refuses a symlink to an outside file, existing or dangling, and leaves the target alone', () => {
    const dir = tempDir()
    const outside = tempDir()
    const target = join(outside, 'p.txt')
    writeFileSync(target, 'single line no newline')
    symlinkSync(target, join(dir, 'v.log'))
    symlinkSync(join(outside, 'nothing'), join(dir, 'd.log'))
    expect(codeOf(() => openFileSync(join(dir, 'v.log'), APPEND_CREATE))).toBe('NOA_NOT_REGULAR_FILE')
    expect(codeOf(() => openFileSync(join(dir, 'd.log'), APPEND_CREATE))).toBe('NOA_NOT_REGULAR_FILE')
    expect(codeOf(() => statFile(join(dir, 'v.log')))).toBe('NOA_NOT_REGULAR_FILE')
    expect(readFileSync(target, 'utf8')).toBe('single line no newline')
    expect(existsSync(join(outside, 'nothing'))).toBe(false)
  })

  it('fileSize answers as statFile does: the size, -1 for nothing, an error naming anything else', () => {
    const dir = tempDir()
    const outside = tempDir()
    writeFileSync(join(dir, 'a.log'), 'x'.repeat(1234))
    writeFileSync(join(dir, 'empty.log'), '')
    writeFileSync(join(outside, 'p.txt'), 'outside')
    symlinkSync(join(outside, 'p.txt'), join(dir, 'v.log'))
    symlinkSync(join(outside, 'nothing'), join(dir, 'd.log'))
    mkdirSync(join(dir, 'folder.log'))
    execFileSync('mkfifo', [join(dir, 'f.log')])
    expect(fileSize(join(dir, 'a.log'))).toBe(1234)
    expect(fileSize(join(dir, 'empty.log'))).toBe(0)
    expect(fileSize(join(dir, 'missing.log'))).toBe(-1)
    expect(fileSize(join(dir, 'no-folder', 'missing.log'))).toBe(-1)
    for (const planted of ['v.log', 'd.log', 'folder.log', 'f.log']) {
      const p = join(dir, planted)
      expect(codeOf(() => fileSize(p, 'workspace log'))).toBe('NOA_NOT_REGULAR_FILE')
      expect(codeOf(() => fileSize(p))).toBe(codeOf(() => statFile(p)))
    }
    // A file where a folder should be, and a name too long: the same errors as statFile's.
    for (const p of [join(dir, 'a.log', 'below.log'), join(dir, 'n'.repeat(300))]) {
      expect(codeOf(() => fileSize(p))).toBeDefined()
      expect(codeOf(() => fileSize(p))).toBe(codeOf(() => statFile(p)))
    }
    expect(readFileSync(join(outside, 'p.txt'), 'utf8')).toBe('outside')
  })

  it('refuses a FIFO without blocking, a socket and a directory', async () => {
    const dir = tempDir()
    execFileSync('mkfifo', [join(dir, 'f.log')])
    expect(codeOf(() => openFileSync(join(dir, 'f.log'), READ))).toBe('NOA_NOT_REGULAR_FILE')
    expect(codeOf(() => openFileSync(join(dir, 'f.log'), APPEND_CREATE))).toBe('NOA_NOT_REGULAR_FILE')
    const sock = join(dir, 's.log')
    const server = createServer()
    await new Promise<void>((r) => server.listen(sock, r))
    try {
      expect(codeOf(() => openFileSync(sock, READ))).toBe('NOA_NOT_REGULAR_FILE')
    } finally {
      server.close()
    }
    mkdirSync(join(dir, 'x.log'))
    expect(codeOf(() => openFileSync(join(dir, 'x.log'), READ))).toBe('NOA_NOT_REGULAR_FILE')
  })

  it('names an over-long name', () => {
    const dir = tempDir()
    expect(codeOf(() => openFileSync(join(dir, 'x'.repeat(300)), WRITE_NEW))).toBe('NOA_NAME_TOO_LONG')
  })

  it('checks every folder below the base and creates what is missing', () => {
    const base = tempDir()
    const outside = tempDir()
    symlinkSync(outside, join(base, 'agent-logs'))
    expect(codeOf(() => checkDirsBelow(base, join(base, 'agent-logs')))).toBe('NOA_NOT_DIRECTORY')
    expect(codeOf(() => mkdirBelow(base, join(base, 'agent-logs', 'x')))).toBe('NOA_NOT_DIRECTORY')
    writeFileSync(join(base, 'file'), '')
    expect(codeOf(() => mkdirBelow(base, join(base, 'file', 'y')))).toBe('NOA_NOT_DIRECTORY')
    const made = mkdirBelow(base, join(base, 'a', 'b', 'c'))
    expect(made).toEqual([join(base, 'a'), join(base, 'a', 'b'), join(base, 'a', 'b', 'c')])
    expect(statSync(join(base, 'a', 'b', 'c')).isDirectory()).toBe(true)
    expect(mkdirBelow(base, join(base, 'a', 'b'))).toEqual([])
  })

  it('accepts a root that is a symlink to a folder, refuses one that is a file', () => {
    const real = tempDir()
    const link = join(tempDir(), 'root')
    symlinkSync(real, link)
    checkRoot(link, true)
    writeFileSync(join(real, 'f'), '')
    expect(codeOf(() => checkRoot(join(real, 'f'), false))).toBe('NOA_BAD_ROOT')
    expect(codeOf(() => checkRoot(join(real, 'nope'), true))).toBe('NOA_BAD_ROOT')
    expect(codeOf(() => checkRoot(join(real, 'nope'), false))).toBeUndefined()
  })
})

describe('file paths beside entries', () => {
  it("takes a store object's path at once, and still refuses what only looks like one", () => {
    for (let i = 0; i < 50; i++) {
      const id = createHash('sha256').update(String(i)).digest('hex')
      expect(filePathProblem(`objects/${id.slice(0, 2)}/${id.slice(2)}`)).toBeNull()
    }
    const id = 'ab'.repeat(32)
    for (const bad of [
      `objects/${id.slice(0, 2)}/${id.slice(2, 63)}`,
      `objects/${id.slice(0, 2)}/${id.slice(2)}0`,
      `objects/${id.slice(0, 2).toUpperCase()}/${id.slice(2)}`,
      `objects/${id.slice(0, 2)}/${id.slice(2)}/`,
      `/objects/${id.slice(0, 2)}/${id.slice(2)}`,
      `objects/${id}`,
      `objects/./${id.slice(2)}`,
      `object-logs/${id.slice(0, 2)}/${id.slice(2)}`,
    ]) {
      expect(filePathProblem(bad), bad).not.toBeNull()
    }
    expect(filePathProblem('notes/a.txt')).toBeNull()
  })
})
