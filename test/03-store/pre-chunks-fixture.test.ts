/**
 * A root written before chunked objects (test/fixtures/pre-chunks, made by make.mjs beside it
 * with the code of that time): its large blobs are whole files. Every read of it gives what that
 * code wrote, verify and gc keep it whole, and storing the same bytes again now neither breaks
 * nor duplicates what is there.
 */
import { createHash } from 'node:crypto'
import { cpSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { ObjectStore, SnapshotEngine } from '../../dist/src/index.js'
import { CHUNK_THRESHOLD } from '../../dist/src/store/chunks.js'
import { verifyStore } from '../../dist/src/store/verify.js'
import { ROOT_DIR, runCli, tempDir } from '../helpers/index.js'

const FIXTURE = join(ROOT_DIR, 'test', 'fixtures', 'pre-chunks')
const expected = JSON.parse(readFileSync(join(FIXTURE, 'expected.json'), 'utf8')) as {
  files: Record<string, { blob: string; sha256: string; size: number }>
  snapshot: string
}

function copyRoot(): string {
  const root = join(tempDir(), 'root')
  cpSync(join(FIXTURE, 'root'), root, { recursive: true })
  return root
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex')

describe('a root written before chunked objects', () => {
  it('holds its large blobs whole, and reads every one back as written', async () => {
    const root = copyRoot()
    const store = new ObjectStore(root)
    const large = Object.values(expected.files).filter((f) => f.size > CHUNK_THRESHOLD)
    expect(large.length).toBe(3)
    for (const [path, f] of Object.entries(expected.files)) {
      expect(statSync(store.pathOf(f.blob)).size, path).toBe(f.size)
      expect(store.chunksOf(f.blob), path).toBe(null)
      const bytes = await store.getBlob(f.blob)
      expect(sha(bytes), path).toBe(f.sha256)
      const parts: Buffer[] = []
      for await (const p of store.streamBlob(f.blob)) parts.push(p)
      expect(sha(Buffer.concat(parts)), path).toBe(f.sha256)
    }
    const dir = join(tempDir(), 'co')
    const co = runCli(['checkout', expected.snapshot, dir, '--root', root])
    expect(co.stderr).toBe('')
    for (const [path, f] of Object.entries(expected.files)) {
      expect(sha(readFileSync(join(dir, path))), path).toBe(f.sha256)
    }
  })

  it('verifies clean with its objects, and gc removes none of them', async () => {
    const root = copyRoot()
    const cli = runCli(['verify', '--objects', '--root', root])
    expect(cli.stderr).toBe('')
    expect(cli.status).toBe(0)
    const engine = new SnapshotEngine({ root })
    expect(await verifyStore(engine, 'docs', { objects: true })).toEqual([])
    const gc = await engine.gc({ graceMs: 0, dryRun: false })
    expect({ removed: gc.removed, missing: gc.missing, logObjectsRemoved: gc.logObjectsRemoved }).toEqual({
      removed: 0,
      missing: 0,
      logObjectsRemoved: 0,
    })
  })

  it('keeps a whole blob whole when the same bytes are stored again now (it is not rewritten)', async () => {
    const root = copyRoot()
    const store = new ObjectStore(root)
    const f = expected.files['random.bin'] as { blob: string; sha256: string; size: number }
    const bytes = await store.getBlob(f.blob)
    const before = statSync(store.pathOf(f.blob))
    expect(await store.putBlob(bytes)).toBe(f.blob)
    const after = statSync(store.pathOf(f.blob))
    expect(after.ino).toBe(before.ino)
    expect(after.size).toBe(f.size)
    expect(sha(await store.getBlob(f.blob))).toBe(f.sha256)
    // A larger blob sharing its bytes is stored in chunks beside it.
    const grown = Buffer.concat([bytes, Buffer.from('one more line\n')])
    const id = await store.putBlob(grown)
    expect(store.chunksOf(id)?.size).toBe(grown.length)
    expect((await store.getBlob(id)).equals(grown)).toBe(true)
  })
})
