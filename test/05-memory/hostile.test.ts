/**
 * A memory folder others can write into: a note, MEMORY.md or `.memory.lock` planted as a
 * symlink (to a file outside, or dangling), a FIFO, a socket or a folder is never followed,
 * never written through and never blocked on; it is refused (or, for a note, skipped and
 * reported) by name, and the file outside is byte-identical afterwards.
 */
import { rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { MemoryStore } from '../../dist/src/memory/index.js'
import { FILE_PLANTS, outsideState, refusal } from '../helpers/hostile.js'
import { runCli, tempDir } from '../helpers/index.js'

describe('a memory file planted by someone else', () => {
  for (const { name, plant } of FILE_PLANTS) {
    it(`${name} as a note is skipped with its reason; a save of that name goes to another file`, async () => {
      const dir = tempDir()
      const outside = tempDir()
      const store = new MemoryStore(dir)
      store.save({ name: 'Other', content: 'kept' })
      await plant(join(dir, 'planted.md'), outside)
      const before = outsideState(outside)
      const { notes, skipped } = store.scanReport()
      expect(notes.map((n) => n.file)).toEqual(['other.md'])
      // A folder is a subfolder to Norma's scan, skipped without a word; anything else is named.
      expect(skipped).toEqual(
        name === 'a folder'
          ? []
          : [expect.objectContaining({ file: 'planted.md', code: 'NOA_NOT_REGULAR_FILE' })],
      )
      const saved = store.save({ name: 'planted', content: 'mine' })
      expect(saved.file).not.toBe('planted.md')
      expect(store.read('planted')?.content).toContain('mine')
      expect(outsideState(outside)).toEqual(before)
    })

    for (const file of ['MEMORY.md', '.memory.lock']) {
      it(`${name} as ${file} is refused by every write, and nothing is written`, async () => {
        const dir = tempDir()
        const outside = tempDir()
        const store = new MemoryStore(dir)
        store.save({ name: 'Other', content: 'kept' })
        const path = join(dir, file)
        rmSync(path, { force: true })
        await plant(path, outside)
        const before = outsideState(outside)
        for (const attempt of [
          () => store.save({ name: 'New', content: 'x' }),
          () => store.delete('Other'),
          () => store.rename('Other', 'Renamed'),
          () => store.rebuildIndex(),
        ]) {
          const err = await refusal(attempt)
          expect(err.code).toBe('NOA_NOT_REGULAR_FILE')
          expect(err.message).toContain(path)
        }
        expect(store.scan().map((n) => n.name)).toEqual(['Other'])
        // Reading the index never follows or waits on it either: it is rendered from a scan.
        if (file === 'MEMORY.md') expect(store.index()).toContain('other.md')
        const cli = runCli(['memory', 'save', '--dir', dir, '--name', 'CLI note'], { input: 'body' })
        expect(cli.status).toBe(1)
        expect(outsideState(outside)).toEqual(before)
      })
    }
  }

  it('a memory folder that is a file is refused by name', async () => {
    const base = tempDir()
    const dir = join(base, 'memory')
    writeFileSync(dir, 'not a folder')
    const store = new MemoryStore(dir)
    expect((await refusal(() => store.scan())).code).toBe('NOA_NOT_DIRECTORY')
    expect((await refusal(() => store.save({ name: 'x', content: 'y' }))).code).toBe('NOA_NOT_DIRECTORY')
  })
})
