/**
 * Memory input is stored as given or refused: a body that is not UTF-8 is refused with its line
 * and byte; a note file holding such bytes (written by hand, or by Norma) keeps them through the
 * index and a rename, as Norma's Go strings keep them.
 */
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { MemoryStore } from '../../dist/src/index.js'
import { runCli, tempDir } from '../helpers/index.js'

describe('memory input bytes', () => {
  it('noa memory save refuses a body that is not UTF-8, naming the line and the byte', () => {
    const dir = join(tempDir(), 'mem')
    const body = Buffer.concat([
      Buffer.from('first line\nsecond '),
      Buffer.from([0xf0, 0x9f, 0x98]),
      Buffer.from(' end\n'),
    ])
    const r = runCli(['memory', 'save', '--dir', dir, '--name', 'n'], { input: body })
    expect(r.status).toBe(1)
    expect(r.stderr).toBe(
      'noa memory: memory body on stdin is not valid UTF-8: line 2, byte 8 of the line (offset 18 of stdin, 0xf0) is not UTF-8; nothing was written\n',
    )
  })

  it('a note holding bytes that are not UTF-8 keeps them in the index and through a rename', () => {
    const dir = tempDir()
    const bad = Buffer.from([0xe2, 0x82])
    writeFileSync(
      join(dir, 'x.md'),
      Buffer.concat([
        Buffer.from('---\nname: Caf'),
        bad,
        Buffer.from('\ndescription: d\n---\n\nbody '),
        bad,
        Buffer.from('\n'),
      ]),
    )
    const store = new MemoryStore(dir)
    store.rebuildIndex()
    expect(readFileSync(join(dir, 'MEMORY.md'))).toEqual(
      Buffer.concat([Buffer.from('# Memory\n\n- [Caf'), bad, Buffer.from('](x.md) — d\n')]),
    )
    const [note] = store.scan()
    store.rename(note?.name as string, 'Renamed')
    expect(readFileSync(join(dir, 'renamed.md'))).toEqual(
      Buffer.concat([
        Buffer.from('---\nname: Renamed\ndescription: d\n---\n\nbody '),
        bad,
        Buffer.from('\n'),
      ]),
    )
  })
})
