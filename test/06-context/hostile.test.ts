/**
 * A context folder others can write into: whatever is planted where state.json, the session
 * lock, an archive, a `tier<N>/` folder or the session folder should be is refused by name
 * (state.json: reported as the load error, then refused by the save), never followed or
 * written through, and the file outside is byte-identical afterwards.
 */
import { mkdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { describe, expect, it } from 'vitest'
import {
  auditSession,
  ContextSession,
  FileArchiver,
  loadState,
  ReuseArchiver,
  withSessionLock,
} from '../../dist/src/context/index.js'
import { FILE_PLANTS, FOLDER_PLANTS, outsideState, refusal } from '../helpers/hostile.js'
import { runCli, tempDir } from '../helpers/index.js'

const ARCHIVE = ['tier1', 'b1_m00001-m00002.md']

describe('a context file planted by someone else', () => {
  for (const { name, plant } of FILE_PLANTS) {
    it(`${name} as state.json is the load error, and the save refuses it`, async () => {
      const base = tempDir()
      const outside = tempDir()
      mkdirSync(join(base, 's1'))
      const file = join(base, 's1', 'state.json')
      await plant(file, outside)
      const before = outsideState(outside)
      expect(loadState(base, 's1').error?.code).toBe('NOA_NOT_REGULAR_FILE')
      const warnings: string[] = []
      const session = ContextSession.open({ baseDir: base, sessionId: 's1', onWarn: (m) => warnings.push(m) })
      expect(session.loadError?.code).toBe('NOA_NOT_REGULAR_FILE')
      expect(warnings.join('\n')).toContain(file)
      const err = await refusal(() => session.save())
      expect(err.code).toBe('NOA_NOT_REGULAR_FILE')
      expect(err.message).toContain(file)
      expect(auditSession({ baseDir: base, sessionId: 's1' }).problems).toEqual([
        expect.objectContaining({ code: 'state-unreadable' }),
      ])
      const cli = runCli(['context', 'state', base, 's1'])
      expect(cli.status).not.toBe(0)
      expect(cli.stderr).toContain('not a regular file')
      expect(outsideState(outside)).toEqual(before)
    })

    it(`${name} as the session lock is refused`, async () => {
      const base = tempDir()
      const outside = tempDir()
      mkdirSync(join(base, 's1'))
      const lock = join(base, 's1', '.noa-context.lock')
      await plant(lock, outside)
      const before = outsideState(outside)
      let ran = false
      const err = await refusal(() =>
        withSessionLock(join(base, 's1'), () => {
          ran = true
        }),
      )
      expect(err.code).toBe('NOA_NOT_REGULAR_FILE')
      expect(ran).toBe(false)
      expect(outsideState(outside)).toEqual(before)
    })

    it(`${name} as an archive is refused by the writer and by the reusing writer`, async () => {
      const base = tempDir()
      const outside = tempDir()
      const root = join(base, 's1')
      mkdirSync(join(root, ARCHIVE[0] as string), { recursive: true })
      const file = join(root, ...ARCHIVE)
      await plant(file, outside)
      const before = outsideState(outside)
      for (const archiver of [new FileArchiver(root), new ReuseArchiver(root)]) {
        const err = await refusal(() => archiver.write(1, 'b1', 'm00001', 'm00002', '---\nsummary\n'))
        expect(err.code).toBe('NOA_NOT_REGULAR_FILE')
        expect(err.message).toContain(file)
      }
      const show = runCli(['context', 'archive', file])
      expect(show.status).toBe(1)
      expect(show.stderr).toContain('not a regular file')
      expect(outsideState(outside)).toEqual(before)
    })
  }
})

describe('a context folder planted by someone else', () => {
  for (const { name, plant } of FOLDER_PLANTS) {
    it(`${name} as the session folder is refused before anything is read or written through it`, async () => {
      const base = tempDir()
      const outside = tempDir()
      await plant(join(base, 's1'), outside)
      const before = outsideState(outside)
      expect(loadState(base, 's1').error?.code).toBe('NOA_NOT_DIRECTORY')
      expect((await refusal(() => ContextSession.open({ baseDir: base, sessionId: 's1' }))).code).toBe(
        'NOA_NOT_DIRECTORY',
      )
      expect((await refusal(() => withSessionLock(join(base, 's1'), () => {}))).code).toBe(
        'NOA_NOT_DIRECTORY',
      )
      expect(
        (await refusal(() => new FileArchiver(join(base, 's1')).write(1, 'b1', 'm00001', 'm00002', 'x')))
          .code,
      ).toBe('NOA_NOT_DIRECTORY')
      expect(auditSession({ baseDir: base, sessionId: 's1' }).ok).toBe(false)
      expect(outsideState(outside)).toEqual(before)
    })

    it(`${name} as a tier folder is refused by both archivers`, async () => {
      const base = tempDir()
      const outside = tempDir()
      const root = join(base, 's1')
      mkdirSync(root)
      const tier = join(root, ARCHIVE[0] as string)
      mkdirSync(dirname(tier), { recursive: true })
      await plant(tier, outside)
      const before = outsideState(outside)
      for (const archiver of [new FileArchiver(root), new ReuseArchiver(root)]) {
        const err = await refusal(() => archiver.write(1, 'b1', 'm00001', 'm00002', 'x'))
        expect(err.code).toBe('NOA_NOT_DIRECTORY')
        expect(err.message).toContain(tier)
      }
      expect(outsideState(outside)).toEqual(before)
    })
  }
})
