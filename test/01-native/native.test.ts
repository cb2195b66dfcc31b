import { spawnSync } from 'node:child_process'
import { readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { loadNative } from '../../dist/src/index.js'
import { DIST, tempDir } from '../helpers/index.js'

describe('the addon', () => {
  const io = loadNative()

  it('opens O_APPEND|O_CREAT 0644, writes buffers and arrays, truncates, syncs', () => {
    const dir = tempDir()
    const file = join(dir, 'a.log')
    const fd = io.openAppend(file, true, true)
    try {
      expect(io.write(fd, Buffer.from('one\n'))).toBe(4)
      expect(io.write(fd, [Buffer.from('tw'), Buffer.from(''), Buffer.from('o\n')])).toBe(4)
      io.fdatasync(fd)
      expect(readFileSync(file, 'utf8')).toBe('one\ntwo\n')
      io.ftruncate(fd, 4)
      io.write(fd, Buffer.from('three\n')) // O_APPEND: lands at the new end
      expect(readFileSync(file, 'utf8')).toBe('one\nthree\n')
      io.fsyncDir(dir)
      io.syncfs(fd)
      expect(statSync(file).mode & 0o777).toBe(0o644)
    } finally {
      io.close(fd)
    }
  })

  it('writes large arrays of buffers completely', () => {
    const file = join(tempDir(), 'big.log')
    const fd = io.openAppend(file, true, false)
    const parts = Array.from({ length: 3000 }, (_, i) => Buffer.from(`${i}\n`))
    const total = parts.reduce((n, b) => n + b.length, 0)
    expect(io.write(fd, parts)).toBe(total)
    io.close(fd)
    expect(readFileSync(file, 'utf8')).toBe(parts.map(String).join(''))
  })

  it('reports system errors with code, errno, syscall and path', () => {
    const missing = join(tempDir(), 'no', 'such', 'dir', 'x.log')
    try {
      io.openAppend(missing, true, false)
      expect.unreachable()
    } catch (err) {
      expect(err).toMatchObject({ code: 'ENOENT', errno: -2, syscall: 'open', path: missing })
      expect((err as Error).message).toBe(`ENOENT: no such file or directory, open '${missing}'`)
    }
    expect(() => io.fdatasync(987654)).toThrow(
      expect.objectContaining({ code: 'EBADF', syscall: 'fdatasync' }),
    )
    expect(() => io.fsyncDir(missing)).toThrow(expect.objectContaining({ code: 'ENOENT', path: missing }))
    expect(() => io.write('x' as unknown as number, Buffer.alloc(1))).toThrow(/fd must be a number/)
  })

  it('refuses a second exclusive lock on the same file', () => {
    const file = join(tempDir(), 'l.log')
    const fd = io.openAppend(file, true, true)
    try {
      expect(() => io.openAppend(file, false, true)).toThrow(
        expect.objectContaining({ code: 'EAGAIN', syscall: 'flock' }),
      )
    } finally {
      io.close(fd)
    }
    io.close(io.openAppend(file, false, true)) // free again once the holder closed
  })

  it('runs pool commits and reports each completion', async () => {
    const file = join(tempDir(), 'p.log')
    const fds = Array.from({ length: 8 }, () => io.openAppend(file, true, false))
    const done = new Map<number, Error | null>()
    await new Promise<void>((resolve) => {
      io.setCompletionHandler((id, err) => {
        done.set(id, err)
        if (done.size === 9) resolve()
      })
      fds.forEach((fd, i) => {
        io.commit(i, fd, Buffer.from(`line ${i}\n`), 1)
      })
      io.commit(99, 987654, Buffer.from('x'), 1)
    })
    for (let i = 0; i < 8; i++) expect(done.get(i)).toBeNull()
    expect(done.get(99)).toMatchObject({ code: 'EBADF', syscall: 'write' })
    expect(readFileSync(file, 'utf8').split('\n').length).toBe(9)
    for (const fd of fds) io.close(fd)
    expect(io.poolStats().pending).toBe(0)
  })

  it('fails to load with a message listing every path it tried', () => {
    const r = spawnSync(
      process.execPath,
      ['-e', `import(${JSON.stringify(join(DIST, 'index.js'))}).then(m => m.loadNative())`],
      {
        env: { ...process.env, NOA_NATIVE_PATH: '/nonexistent/noa_io.node' },
        encoding: 'utf8',
      },
    )
    expect(r.status).not.toBe(0)
    expect(r.stderr).toContain("noa's native addon could not be loaded")
    expect(r.stderr).toContain('/nonexistent/noa_io.node (not found)')
  })
})
