/**
 * Input to the transcript writer and `noa transcript append` is stored as given or refused: bytes
 * that are not UTF-8 (and text that is not well-formed) are refused with where they are, never
 * rewritten to U+FFFD.
 */
import { existsSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { isNoaError, TranscriptWriter, transcriptPath } from '../../dist/src/index.js'
import { runCli, tempDir } from '../helpers/index.js'

const good = '{"role":"user","content":"hi"}\n'

describe('noa transcript append', () => {
  it('refuses bytes that are not UTF-8, naming the line and the byte, and writes nothing', () => {
    const dir = tempDir()
    const input = Buffer.concat([
      Buffer.from(`${good}{"role":"user","content":"a`),
      Buffer.from([0xe2, 0x82]),
      Buffer.from('b"}\n'),
    ])
    const r = runCli(['transcript', 'append', dir, 's'], { input })
    expect(r.status).toBe(1)
    expect(r.stderr).toBe(
      'noa transcript: stdin:2: byte 28 of the line (offset 58 of the input, 0xe2) is not UTF-8; nothing was written\n',
    )
    expect(existsSync(transcriptPath(dir, 's'))).toBe(false)
  })

  it('refuses an escape of half a surrogate pair (it has no UTF-8), and takes a whole pair', () => {
    const dir = tempDir()
    const bad = runCli(['transcript', 'append', dir, 's'], {
      input: `${good}{"role":"user","content":"x\\ud83dy"}\n`,
    })
    expect(bad.status).toBe(1)
    expect(bad.stderr).toBe(
      'noa transcript: stdin:2: \\ud83d at byte 28 of the line is half a surrogate pair, not text; nothing was written\n',
    )
    expect(existsSync(transcriptPath(dir, 's'))).toBe(false)
    const pair = runCli(['transcript', 'append', dir, 's'], {
      input: '{"role":"user","content":"\\ud83d\\ude00"}\n',
    })
    expect(pair.status).toBe(0)
  })
})

describe('TranscriptWriter', () => {
  it('refuses text that is not well-formed (what a bad byte becomes), in strict and allowUnknown modes', async () => {
    const dir = tempDir()
    for (const allowUnknown of [false, true]) {
      const w = new TranscriptWriter({ dir, sessionId: 's', allowUnknown })
      const err = await w
        .recordMessage({ role: 'user', content: [{ type: 'text', text: 'a\ud800b' }] })
        .catch((e: unknown) => e)
      expect(isNoaError(err, 'NOA_BAD_RECORD')).toBe(true)
      expect((err as Error).message).toBe(
        'message.content[0].text: is not well-formed text (half a surrogate pair, or a byte that was not UTF-8); nothing was written',
      )
      await expect(w.recordBoundary({ pre_tokens: 1, active_skills: ['\udc00'] })).rejects.toThrow(
        /^boundary\.active_skills\[0\]: is not well-formed text/,
      )
      await w.close()
    }
    expect(existsSync(transcriptPath(dir, 's'))).toBe(false)
  })
})
