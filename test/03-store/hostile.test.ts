/**
 * An object store others can write into: whatever is planted where an object, the objects/
 * folder or a shard folder should be is refused by name, never followed, never blocked on, and
 * nothing outside the root is touched.
 */
import { createHash } from 'node:crypto'
import { chmodSync, existsSync, mkdirSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { Readable } from 'node:stream'
import { describe, expect, it } from 'vitest'
import { writeFileAtomic } from '../../dist/src/engine/index.js'
import { ObjectStore } from '../../dist/src/index.js'
import { FILE_PLANTS, FOLDER_PLANTS, outsideState, refusal } from '../helpers/hostile.js'
import { runCli, tempDir } from '../helpers/index.js'
import { setup } from '../helpers/snapshot.js'

const CONTENT = 'the content of a blob'
const ID = createHash('sha256').update(CONTENT).digest('hex')

async function collect(it: AsyncIterable<Buffer>): Promise<Buffer> {
  const out: Buffer[] = []
  for await (const c of it) out.push(c)
  return Buffer.concat(out)
}

describe('an object planted by someone else', () => {
  for (const { name, plant } of FILE_PLANTS) {
    it(`${name} is refused by every read and write of that object`, async () => {
      const root = tempDir()
      const outside = tempDir()
      const store = new ObjectStore(root)
      mkdirSync(join(root, 'objects', ID.slice(0, 2)), { recursive: true })
      const file = store.pathOf(ID)
      await plant(file, outside)
      const before = outsideState(outside)
      for (const attempt of [
        () => store.getBlob(ID),
        () => collect(store.streamBlob(ID)),
        () => store.putBlob(CONTENT),
        () => store.putBlob(Readable.from([CONTENT])),
        () => store.has(ID),
      ]) {
        const err = await refusal(attempt)
        expect(err.code).toBe('NOA_NOT_REGULAR_FILE')
        expect(err.message).toContain(file)
      }
      const cli = runCli(['blob', 'get', ID, '--root', root])
      expect(cli.status).toBe(1)
      expect(cli.stderr).toContain('not a regular file')
      expect(outsideState(outside)).toEqual(before)
      // No temp file was left beside it.
      expect(readdirSync(join(root, 'objects')).filter((f) => f.startsWith('.'))).toEqual([])
    })
  }
})

describe('a folder of the object store planted by someone else', () => {
  for (const { name, plant } of FOLDER_PLANTS) {
    for (const folder of ['objects', `objects/${ID.slice(0, 2)}`]) {
      it(`${name} as ${folder.replace(ID.slice(0, 2), '<shard>')} is refused; nothing is created outside`, async () => {
        const root = tempDir()
        const outside = tempDir()
        mkdirSync(dirname(join(root, folder)), { recursive: true })
        await plant(join(root, folder), outside)
        const before = outsideState(outside)
        const store = new ObjectStore(root)
        for (const attempt of [
          () => store.putBlob(CONTENT),
          () => store.putObjects([Buffer.from(CONTENT)]),
          () => store.getBlob(ID),
          () => collect(store.streamBlob(ID)),
        ]) {
          const err = await refusal(attempt)
          expect(err.code).toBe('NOA_NOT_DIRECTORY')
          expect(err.message).toContain(join(root, folder))
        }
        expect(runCli(['blob', 'put', '-', '--root', root], { input: CONTENT }).status).toBe(1)
        expect(outsideState(outside)).toEqual(before)
      })
    }
  }

  it('a snapshot refuses a symlinked objects/ folder before anything is written through it', async () => {
    const { root, log, engine } = await setup()
    const outside = tempDir()
    await log.append('w', { op: 'write', path: 'a', blob: ID })
    symlinkSync(outside, join(root, 'objects'))
    expect((await refusal(engine.snapshot('w'))).code).toBe('NOA_NOT_DIRECTORY')
    expect(readdirSync(outside)).toEqual([])
  })
})

describe('atomic writes', () => {
  for (const { name, plant } of FILE_PLANTS) {
    it(`refuse ${name} as the target and leave it as it is`, async () => {
      const dir = tempDir()
      const outside = tempDir()
      const target = join(dir, 'state.json')
      await plant(target, outside)
      const before = outsideState(outside)
      const err = await refusal(() => writeFileAtomic(target, 'new', { base: dir }))
      expect(err.code).toBe('NOA_NOT_REGULAR_FILE')
      expect(outsideState(outside)).toEqual(before)
      expect(readdirSync(dir).filter((f) => f.endsWith('.tmp'))).toEqual([])
    })
  }

  it('refuse a target below a symlinked folder when given the base', async () => {
    const dir = tempDir()
    const outside = tempDir()
    symlinkSync(outside, join(dir, 'sub'))
    expect((await refusal(() => writeFileAtomic(join(dir, 'sub', 'f'), 'x', { base: dir }))).code).toBe(
      'NOA_NOT_DIRECTORY',
    )
    expect(readdirSync(outside)).toEqual([])
  })
})

describe('blob put and get', () => {
  it('a missing file is a named error and leaves no temp file', () => {
    const root = tempDir()
    const r = runCli(['blob', 'put', join(root, 'nonexistent'), '--root', root])
    expect(r.status).toBe(1)
    expect(r.stderr).toMatch(/blob put: no file .*nonexistent/)
    expect(existsSync(join(root, 'objects')) ? readdirSync(join(root, 'objects')) : []).toEqual([])
    const dir = runCli(['blob', 'put', root, '--root', root])
    expect(dir.status).toBe(1)
    expect(dir.stderr).toMatch(/is a directory, not a regular file/)
  })

  it('get streams a large blob byte for byte, and a damaged one yields no bytes', async () => {
    const root = tempDir()
    const big = Buffer.alloc(9 * 1024 * 1024 + 5)
    for (let i = 0; i < big.length; i += 4096) big[i] = i % 251
    const file = join(tempDir(), 'big')
    writeFileSync(file, big)
    const put = runCli(['blob', 'put', file, '--root', root])
    expect(put.status).toBe(0)
    const id = put.stdout.trim()
    const got = runCli(['blob', 'get', id, '--root', root])
    expect(got.status).toBe(0)
    expect(got.stdoutBytes.equals(big)).toBe(true)
    const store = new ObjectStore(root)
    chmodSync(store.pathOf(id), 0o644)
    big[big.length - 1] = 1
    writeFileSync(store.pathOf(id), big)
    const bad = runCli(['blob', 'get', id, '--root', root])
    expect(bad.status).toBe(1)
    expect(bad.stdoutBytes.length).toBe(0)
    expect(bad.stderr).toMatch(/is corrupt/)
  })

  it('get of a missing root is a named error', () => {
    const r = runCli(['blob', 'get', ID, '--root', join(tempDir(), 'missing')])
    expect(r.status).toBe(1)
    expect(r.stderr).toMatch(/no noa root at/)
  })
})
