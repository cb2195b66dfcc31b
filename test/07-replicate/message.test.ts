/** The message contract of a workspace subject (src/replicate/message.ts): entries and fences. */
import { describe, expect, it } from 'vitest'
import { isNoaError } from '../../src/engine/errors.js'
import { decodeMessage, encodeEntries, encodeFence } from '../../src/replicate/message.js'

const line = (seq: number, ts: number) =>
  Buffer.from(`{"seq":${seq},"type":"note","text":"x${seq}","ts":${ts}}`)
const hdr = (h: Record<string, string>) => ({ get: (n: string) => h[n] ?? '' })

describe('workspace messages', () => {
  it('carries one entry as its bare line and several joined, named by the last seq', () => {
    const one = encodeEntries('w', [line(4, 10)])
    expect(one.data.toString()).toBe(line(4, 10).toString())
    expect(one.headers).toEqual({ 'Nats-Msg-Id': 'w:4' })
    const three = encodeEntries('w', [line(5, 11), line(6, 12), line(7, 12_000)])
    expect(three.headers).toEqual({ 'Nats-Msg-Id': 'w:7', 'Noa-First-Seq': '5' })
    const d = decodeMessage('w', 9, three.data, hdr(three.headers))
    expect(d).toMatchObject({ kind: 'entries', first: 5, last: 7, lastTs: 12_000 })
    expect(d.kind === 'entries' && d.lines.map(String)).toEqual(
      [5, 6, 7].map((s, i) => String(line(s, [11, 12, 12_000][i] as number))),
    )
    expect(decodeMessage('w', 1, one.data, hdr(one.headers))).toMatchObject({ first: 4, last: 4 })
  })

  it('refuses lines that are not consecutive, ts that do not rise, and ids or headers that do not match', () => {
    expect(() => encodeEntries('w', [line(1, 1), line(3, 2)])).toThrow(/not 2 consecutive/)
    const gap = Buffer.from(`${line(1, 1)}\n${line(3, 2)}`)
    const expectRefused = (data: Buffer, h: Record<string, string>, why: RegExp) => {
      try {
        decodeMessage('w', 42, data, hdr(h))
        throw new Error('accepted')
      } catch (err) {
        expect(isNoaError(err, 'NOA_REPLICATION')).toBe(true)
        expect((err as Error).message).toMatch(/stream seq 42 \(workspace w\)/)
        expect((err as Error).message).toMatch(why)
      }
    }
    expectRefused(gap, { 'Nats-Msg-Id': 'w:3', 'Noa-First-Seq': '1' }, /does not follow/)
    expectRefused(
      Buffer.from(`${line(1, 5)}\n${line(2, 5)}`),
      { 'Nats-Msg-Id': 'w:2', 'Noa-First-Seq': '1' },
      /does not follow/,
    )
    expectRefused(line(2, 5), { 'Nats-Msg-Id': 'w:3' }, /does not name w:2/)
    expectRefused(line(2, 5), { 'Nats-Msg-Id': 'other:2' }, /does not name w:2/)
    expectRefused(Buffer.from(`${line(1, 1)}\n${line(2, 2)}`), { 'Nats-Msg-Id': 'w:2' }, /Noa-First-Seq/)
    expectRefused(Buffer.from('not json'), { 'Nats-Msg-Id': 'w:1' }, /not a log line/)
  })

  it('makes and reads a fence, and refuses one that names another workspace or has a body', () => {
    const f = encodeFence('w', 12, 'host-b')
    expect(f.headers).toEqual({ 'Nats-Msg-Id': 'w:fence:12:host-b', 'Noa-Fence': 'host-b' })
    expect(decodeMessage('w', 3, f.data, hdr(f.headers))).toEqual({
      kind: 'fence',
      writer: 'host-b',
      after: 12,
    })
    expect(() => decodeMessage('v', 3, f.data, hdr(f.headers))).toThrow(/fence/)
    expect(() => decodeMessage('w', 3, Buffer.from('x'), hdr(f.headers))).toThrow(/fence/)
    expect(() => encodeFence('w', 1, 'a b')).toThrow(/writer id/)
  })
})
