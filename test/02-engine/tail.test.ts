/**
 * inspectTail, what every open of a log reads (its last complete line, and where a torn tail
 * starts): the same answer as the whole file says, whatever the lengths, from its one-read case
 * (both newlines in the last 4 KiB) to the lines it must read back for (longer than that, or no
 * newline before the window).
 */
import { closeSync, openSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { inspectTail } from '../../dist/src/engine/recovery.js'
import { tempDir } from '../helpers/index.js'

/** The answer read off the whole file. */
function expected(bytes: Buffer): { size: number; validLength: number; lastLine: string | null } {
  const last = bytes.lastIndexOf(0x0a)
  if (last < 0) return { size: bytes.length, validLength: 0, lastLine: null }
  const prev = last > 0 ? bytes.lastIndexOf(0x0a, last - 1) : -1
  return { size: bytes.length, validLength: last + 1, lastLine: bytes.toString('utf8', prev + 1, last) }
}

describe('inspectTail', () => {
  let n = 0
  const check = (dir: string, bytes: Buffer) => {
    const file = join(dir, `t${n++}.log`)
    writeFileSync(file, bytes)
    const fd = openSync(file, 'r')
    try {
      expect(inspectTail(fd)).toEqual(expected(bytes))
      expect(inspectTail(fd, bytes.length)).toEqual(expected(bytes))
    } finally {
      closeSync(fd)
    }
  }

  it('edges: empty, no newline, one line, a newline first, lines about the 4 KiB window', () => {
    const dir = tempDir()
    const line = (len: number, c = 'x') => `${c.repeat(len)}\n`
    for (const text of [
      '',
      'torn',
      '\n',
      '\n\n',
      line(10),
      `${line(10)}torn`,
      line(4095),
      line(4096),
      line(4094) + line(0),
      line(5000) + line(3),
      line(3) + line(5000),
      line(3) + line(4090) + 'x'.repeat(10),
      line(100) + line(4094),
      line(100) + line(4095),
      line(100) + line(4096),
      `\n${'y'.repeat(4095)}`,
      line(20000) + line(20000, 'z'),
    ])
      check(dir, Buffer.from(text))
  })

  it('random logs: lines of 0 to 6,000 bytes, a torn tail or not', () => {
    const dir = tempDir()
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 6000 }), { maxLength: 6 }),
        fc.integer({ min: 0, max: 5000 }),
        (lengths, torn) => {
          const text = lengths.map((l, i) => `${String.fromCharCode(97 + i).repeat(l)}\n`).join('')
          check(dir, Buffer.from(text + 't'.repeat(torn)))
        },
      ),
      { numRuns: 300 },
    )
  })
})
