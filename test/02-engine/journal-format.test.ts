/**
 * The commit journal's bytes, in process and in milliseconds: what a frame and a header are
 * read back as, and that every byte replay relies on is checked. A torn or stale frame ends the
 * valid prefix (null), a checksum-valid frame of contents noa never writes is a BadFrame, and a
 * header is taken only when its checksum and fields hold, the newer of two valid ones winning.
 */
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { crc32c } from '../../dist/src/engine/crc.js'
import {
  BadFrame,
  DATA_START,
  decodeFrame,
  decodeHeader,
  encodeFrame,
  encodeHeader,
  FLAG_END,
  FLAG_WRAP,
  FRAME_HEADER,
  type FramePart,
  fileRecordHeader,
  newestHeader,
  REC_DATA,
  REC_FILE,
  REC_READ_ONLY,
  RECORD_HEADER,
  recordHeader,
  SECTOR,
  setRecord,
  wrapFrame,
} from '../../dist/src/engine/journal-format.js'

const JID = 0x0badf00d

function bytesOf(frame: { pieces: Buffer[] }): Buffer {
  return Buffer.concat(frame.pieces)
}

/** Recomputes a frame's checksum after a test changed its bytes, so only the change is judged. */
function resealed(buf: Buffer): Buffer {
  const b = Buffer.from(buf)
  b.writeUInt32LE(crc32c(b.subarray(8, b.readUInt32LE(8))) >>> 0, 4)
  return b
}

const record = fc.oneof(
  fc.record({
    kind: fc.constant('data' as const),
    target: fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9._-]{0,20}$/),
    ino: fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
    offset: fc.integer({ min: 0, max: 2 ** 48 - 1 }),
    data: fc.uint8Array({ maxLength: 700 }),
  }),
  fc.record({
    kind: fc.constant('file' as const),
    target: fc.stringMatching(/^[a-z]{1,8}(\/[a-z]{1,8}){0,3}$/),
    readOnly: fc.boolean(),
    data: fc.uint8Array({ maxLength: 700 }),
  }),
)
type Rec = typeof record extends fc.Arbitrary<infer T> ? T : never

function part(r: Rec): FramePart {
  const data = Buffer.from(r.data)
  if (r.kind === 'file') return { header: fileRecordHeader(r.target, data.length, r.readOnly), data }
  return { header: setRecord(recordHeader(r.target, r.ino), r.offset, data.length), data }
}

describe('journal frames', () => {
  it('a frame reads back as the records it was made of, padded to 512 bytes, followed or not by other bytes', () => {
    fc.assert(
      fc.property(
        fc.array(record, { maxLength: 6 }),
        fc.integer({ min: 1, max: 2 ** 48 - 1 }),
        fc.uint8Array({ maxLength: 600 }),
        (recs, lsn, after) => {
          const frame = encodeFrame(JID, lsn, FLAG_END, recs.map(part))
          const buf = bytesOf(frame)
          expect(buf.length).toBe(frame.length)
          expect(frame.length % SECTOR).toBe(0)
          const content =
            FRAME_HEADER +
            recs.reduce((n, r) => n + RECORD_HEADER + Buffer.byteLength(r.target) + r.data.length, 0)
          expect(frame.length).toBe(Math.ceil(content / SECTOR) * SECTOR)
          const d = decodeFrame(Buffer.concat([buf, after]), JID, lsn)
          expect(d).not.toBeNull()
          expect(d?.lsn).toBe(lsn)
          expect(d?.flags).toBe(FLAG_END)
          expect(d?.length).toBe(frame.length)
          expect(d?.records.length).toBe(recs.length)
          recs.forEach((r, i) => {
            const got = d?.records[i]
            expect(got?.target).toBe(r.target)
            expect(Buffer.from(got?.data ?? []).equals(Buffer.from(r.data))).toBe(true)
            if (r.kind === 'data') {
              expect(got).toMatchObject({ type: REC_DATA, flags: 0, ino: r.ino, offset: r.offset })
            } else {
              expect(got).toMatchObject({
                type: REC_FILE,
                flags: r.readOnly ? REC_READ_ONLY : 0,
                ino: 0n,
                offset: 0,
              })
            }
          })
        },
      ),
      { numRuns: 200 },
    )
  })

  it('any changed byte of a frame, a cut frame, or another journal id or lsn ends the valid prefix (null)', () => {
    fc.assert(
      fc.property(
        fc.array(record, { minLength: 1, maxLength: 4 }),
        fc.nat(),
        fc.integer({ min: 1, max: 255 }),
        (recs, at, xor) => {
          const buf = bytesOf(encodeFrame(JID, 7, FLAG_END, recs.map(part)))
          const changed = Buffer.from(buf)
          const i = at % buf.length
          changed[i] = (changed[i] as number) ^ xor
          expect(decodeFrame(changed, JID, 7)).toBeNull()
          expect(decodeFrame(buf.subarray(0, buf.length - SECTOR), JID, 7)).toBeNull()
          expect(decodeFrame(buf.subarray(0, FRAME_HEADER - 1), JID, 7)).toBeNull()
          expect(decodeFrame(buf, JID + 1, 7)).toBeNull()
          expect(decodeFrame(buf, JID, 6)).toBeNull()
          expect(decodeFrame(buf, JID, 8)).toBeNull()
          expect(decodeFrame(Buffer.alloc(buf.length), JID, 7)).toBeNull()
        },
      ),
      { numRuns: 300 },
    )
  })

  it('a length that is no multiple of 512, below 512 or past the buffer ends the prefix, checksum or not', () => {
    const buf = bytesOf(
      encodeFrame(JID, 1, FLAG_END, [
        part({ kind: 'file', target: 'a/b', readOnly: false, data: new Uint8Array(600) }),
      ]),
    )
    expect(buf.length).toBe(2 * SECTOR)
    for (const length of [0, 256, SECTOR - 1, SECTOR + 1, 3 * SECTOR, 2 ** 31]) {
      const b = Buffer.from(buf)
      b.writeUInt32LE(length, 8)
      if (length >= 8 && length <= b.length) b.writeUInt32LE(crc32c(b.subarray(8, length)) >>> 0, 4)
      expect(decodeFrame(b, JID, 1), `length ${length}`).toBeNull()
    }
    expect(decodeFrame(buf, JID, 1)?.records.length).toBe(1)
  })

  it('a frame whose records fill it to the last byte is whole; a length of 0 or past the bytes there, checksum matching or not, ends the prefix', () => {
    // 32 (frame) + 32 (record) + 1 (name) + 447 (data) = 512: no padding, the record ends the frame.
    const data = Buffer.alloc(447, 0x61)
    const exact = bytesOf(
      encodeFrame(JID, 2, FLAG_END, [{ header: setRecord(recordHeader('w', 1n), 0, data.length), data }]),
    )
    expect(exact.length).toBe(SECTOR)
    expect(decodeFrame(exact, JID, 2)?.records[0]?.data.length).toBe(447)
    // Length 0, with the checksum of nothing (0).
    const zero = Buffer.from(exact)
    zero.writeUInt32LE(0, 8)
    zero.writeUInt32LE(crc32c(Buffer.alloc(0)) >>> 0, 4)
    expect(decodeFrame(zero, JID, 2)).toBeNull()
    // A length past the bytes given, with the checksum of the bytes that are there.
    const two = bytesOf(
      encodeFrame(JID, 2, FLAG_END, [
        part({ kind: 'file', target: 'a', readOnly: false, data: new Uint8Array(700) }),
      ]),
    )
    const longer = Buffer.from(two)
    longer.writeUInt32LE(two.length + SECTOR, 8)
    longer.writeUInt32LE(crc32c(longer.subarray(8)) >>> 0, 4)
    expect(decodeFrame(longer, JID, 2)).toBeNull()
  })

  it('a checksum-valid frame of contents no writer of noa makes is a BadFrame, naming what is wrong', () => {
    const data = Buffer.from('{"seq":1}\n')
    const good = bytesOf(
      encodeFrame(JID, 3, FLAG_END, [{ header: setRecord(recordHeader('w', 5n), 0, data.length), data }]),
    )
    expect(decodeFrame(good, JID, 3)?.records[0]).toMatchObject({ type: REC_DATA, target: 'w', ino: 5n })
    const rec = FRAME_HEADER
    const cases: Array<[string, (b: Buffer) => void, RegExp]> = [
      ['unknown frame flag', (b) => b.writeUInt32LE(FLAG_END | 4, 24), /unknown flags 5/],
      [
        'a wrap marker holding records',
        (b) => b.writeUInt32LE(FLAG_WRAP, 24),
        /wrap marker lsn 3 holds records/,
      ],
      ['unknown record type', (b) => b.writeUInt8(3, rec), /record 1 of frame lsn 3 has unknown type 3/],
      ['a data record with a flag', (b) => b.writeUInt8(REC_READ_ONLY, rec + 1), /unknown flags 1/],
      [
        'a whole file with an unknown flag',
        (b) => {
          b.writeUInt8(REC_FILE, rec)
          b.writeUInt8(2, rec + 1)
        },
        /unknown flags 2/,
      ],
      [
        'a whole file with an inode',
        (b) => b.writeUInt8(REC_FILE, rec),
        /whole file with an offset or inode/,
      ],
      [
        'a whole file with an offset',
        (b) => {
          b.writeUInt8(REC_FILE, rec)
          b.writeBigUInt64LE(0n, rec + 8)
          b.writeUInt8(1, rec + 16)
        },
        /whole file with an offset or inode/,
      ],
      ['an offset beyond 2^48', (b) => b.writeUInt16LE(1, rec + 22), /offset beyond 2\^48/],
      [
        'a record header past the frame',
        (b) => {
          // Record 1's data reaches byte 500: record 2's header would end past 512.
          b.writeUInt32LE(500 - (rec + RECORD_HEADER + 1), rec + 4)
          b.writeUInt32LE(2, 28)
        },
        /record 2 of frame lsn 3 runs past the end/,
      ],
      [
        'data past the frame',
        (b) => b.writeUInt32LE(SECTOR, rec + 4),
        /record 1 of frame lsn 3 runs past the end/,
      ],
      [
        'no name',
        (b) => {
          b.writeUInt16LE(0, rec + 2)
          b.writeUInt32LE(data.length + 1, rec + 4)
        },
        /names no file/,
      ],
      ['a name that is not UTF-8', (b) => b.writeUInt8(0xff, rec + RECORD_HEADER), /not UTF-8/],
    ]
    for (const [name, change, reason] of cases) {
      const b = Buffer.from(good)
      change(b)
      expect(() => decodeFrame(resealed(b), JID, 3), name).toThrow(BadFrame)
      expect(() => decodeFrame(resealed(b), JID, 3), name).toThrow(reason)
    }
  })

  it('a wrap marker is one empty sector flagged WRAP; a whole-file record keeps its read-only flag', () => {
    const wrap = bytesOf(wrapFrame(JID, 9))
    expect(wrap.length).toBe(SECTOR)
    expect(decodeFrame(wrap, JID, 9)).toEqual({ lsn: 9, flags: FLAG_WRAP, length: SECTOR, records: [] })
    const data = Buffer.from('object bytes')
    for (const readOnly of [true, false]) {
      const f = bytesOf(
        encodeFrame(JID, 1, FLAG_END, [
          { header: fileRecordHeader('objects/ab/cd', data.length, readOnly), data },
        ]),
      )
      expect(decodeFrame(f, JID, 1)?.records[0]?.flags).toBe(readOnly ? REC_READ_ONLY : 0)
    }
  })
})

describe('journal headers', () => {
  const header = {
    journalId: JID,
    size: 1 << 20,
    generation: 4,
    tailLsn: 17,
    tailOffset: DATA_START + 3 * SECTOR,
  }

  it('a header reads back as written; any changed byte of its checksummed part makes it invalid', () => {
    const buf = encodeHeader(header)
    expect(buf.length).toBe(SECTOR)
    expect(decodeHeader(buf)).toEqual(header)
    for (let i = 0; i < 64; i++) {
      const b = Buffer.from(buf)
      b[i] = (b[i] as number) ^ 0x20
      expect(decodeHeader(b), `byte ${i}`).toBeNull()
    }
    expect(decodeHeader(buf.subarray(0, 63))).toBeNull()
    expect(decodeHeader(buf.subarray(0, 10))).toBeNull() // the magic, and too short for the rest
    expect(decodeHeader(buf.subarray(0, 64))).toEqual(header) // the checksummed part is all it needs
  })

  it('a checksum-valid header with impossible fields is invalid', () => {
    const cases: Array<Partial<typeof header>> = [
      { tailLsn: 0 },
      { tailOffset: DATA_START - SECTOR },
      { tailOffset: DATA_START + 1 },
      { tailOffset: header.size },
      { tailOffset: header.size + SECTOR },
    ]
    for (const c of cases)
      expect(decodeHeader(encodeHeader({ ...header, ...c })), JSON.stringify(c)).toBeNull()
    // A 48-bit field with bits above 2^48 set, checksum recomputed.
    for (const at of [24, 32, 40, 48]) {
      const b = encodeHeader(header)
      b.writeUInt16LE(1, at + 6)
      b.writeUInt32LE(crc32c(b.subarray(12, 64)) >>> 0, 8)
      expect(decodeHeader(b), `field at ${at}`).toBeNull()
    }
    const v2 = encodeHeader(header)
    v2.writeUInt32LE(2, 12)
    v2.writeUInt32LE(crc32c(v2.subarray(12, 64)) >>> 0, 8)
    expect(decodeHeader(v2)).toBeNull()
    expect(decodeHeader(encodeHeader({ ...header, tailOffset: header.size - SECTOR }))).not.toBeNull()
    expect(
      decodeHeader(encodeHeader({ ...header, tailOffset: DATA_START, generation: 0, tailLsn: 1 })),
    ).not.toBeNull()
  })

  it('of two slots the valid one with the higher generation wins; a torn slot leaves the other', () => {
    const older = encodeHeader({ ...header, generation: 4, tailLsn: 10 })
    const newer = encodeHeader({ ...header, generation: 5, tailLsn: 20 })
    const torn = Buffer.from(newer)
    torn[40] = (torn[40] as number) ^ 1
    expect(newestHeader(older, newer)?.tailLsn).toBe(20)
    expect(newestHeader(newer, older)?.tailLsn).toBe(20)
    expect(newestHeader(older, torn)?.tailLsn).toBe(10)
    expect(newestHeader(torn, older)?.tailLsn).toBe(10)
    expect(newestHeader(torn, torn)).toBeNull()
    expect(newestHeader(older, encodeHeader({ ...header, generation: 4, tailLsn: 11 }))?.tailLsn).toBe(10)
  })
})
