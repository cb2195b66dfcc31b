/**
 * The trust rules of dead commit journals, judged by the replay itself in this process (no
 * command runs): each journal of test/helpers/journals.ts that breaks a rule is never applied,
 * is quarantined with the reason and the workspaces it names, and refuses only those; the
 * trusted side is replayed. journal-trust.test.ts shows the same journals through the commands.
 * Milliseconds a case: the tests `npm run test:mutation` runs first against these modules.
 */
import { closeSync, existsSync, openSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import {
  DATA_START,
  encodeFrame,
  encodeHeader,
  FLAG_END,
  FLAG_WRAP,
  type FramePart,
  fileRecordHeader,
  recordHeader,
  SECTOR,
  setRecord,
} from '../../dist/src/engine/journal-format.js'
import {
  quarantinedJournals,
  recoverJournals,
  refuseIfQuarantined,
} from '../../dist/src/engine/journal-recovery.js'
import { scanJournal, Untrusted } from '../../dist/src/engine/journal-trust.js'
import { listing, outsideState } from '../helpers/hostile.js'
import { tempDir } from '../helpers/index.js'
import {
  CASES,
  dataRecord,
  JID,
  JOURNAL,
  journalBytes,
  lastTs,
  line,
  MORE_CASES,
  makeRoot,
  objectPath,
  plant,
  SIZE,
} from '../helpers/journals.js'

describe('planted commit journals, checked in process', () => {
  for (const c of [...CASES, ...MORE_CASES]) {
    it(`${c.name}: nothing of it applied, quarantined with the reason and the workspaces it names`, async () => {
      const r = await makeRoot()
      const named = c.plant(r)
      const outsideBefore = outsideState(r.outside)
      const logsBefore = listing(join(r.root, 'agent-logs'))
      expect(recoverJournals(r.root)).toEqual([])
      expect(existsSync(join(r.root, JOURNAL))).toBe(false)
      const q = quarantinedJournals(r.root)
      expect(q.map((j) => j.found)).toEqual([join(r.root, JOURNAL)])
      expect(q[0]?.reason).toMatch(c.reason)
      expect(q[0]?.workspaces).toEqual(named)
      expect(listing(join(r.root, 'agent-logs'))).toEqual(logsBefore)
      expect(outsideState(r.outside)).toEqual(outsideBefore)
      for (const ws of ['a', 'b']) {
        if (named.includes(ws)) expect(() => refuseIfQuarantined(r.root, ws)).toThrow(/is refused/)
        else refuseIfQuarantined(r.root, ws)
      }
      // Checked again, it stays where it is and applies nothing.
      expect(recoverJournals(r.root)).toEqual([])
      expect(listing(join(r.root, 'agent-logs'))).toEqual(logsBefore)
    })
  }
})

describe('trusted journals, replayed in process', () => {
  it('records that continue the log are applied, a zero-filled hole a power cut left is filled, and the same record in two journals is applied once', async () => {
    const r = await makeRoot()
    const ts = lastTs(r.aBytes)
    const l4 = Buffer.from(line(4, 'p4', ts + 1))
    const l5 = Buffer.from(line(5, 'p5', ts + 2))
    // The log lost l4's pages after its size reached the disk: zeros where l4 goes.
    writeFileSync(r.aLog, Buffer.concat([r.aBytes, Buffer.alloc(l4.length)]))
    plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length, l4)]))
    const second = join(r.root, 'journal', '4242-0badf00e-w1.jnl')
    const other = Buffer.alloc(SIZE)
    encodeHeader({ journalId: JID + 1, size: SIZE, generation: 1, tailLsn: 1, tailOffset: DATA_START }).copy(
      other,
      0,
    )
    Buffer.concat(
      encodeFrame(JID + 1, 1, FLAG_END, [
        dataRecord('a', r.aIno, r.aBytes.length, l4),
        dataRecord('a', r.aIno, r.aBytes.length + l4.length, l5),
      ]).pieces,
    ).copy(other, DATA_START)
    writeFileSync(second, other, { mode: 0o600 })
    const reports = recoverJournals(r.root)
    expect(reports.map((x) => x.journal).sort()).toEqual([join(r.root, JOURNAL), second])
    expect(readFileSync(r.aLog).equals(Buffer.concat([r.aBytes, l4, l5]))).toBe(true)
    expect(quarantinedJournals(r.root)).toEqual([])
    expect(readdirSync(join(r.root, 'journal'))).toEqual([])
    expect(recoverJournals(r.root)).toEqual([])
  })
})

describe('the valid prefix of a journal (scanJournal)', () => {
  /** A journal whose header's tail is at `tail`; each frame [offset, lsn, flags, parts]. */
  function journal(size: number, tail: number, frames: Array<[number, number, number, FramePart[]]>): Buffer {
    const buf = Buffer.alloc(size)
    encodeHeader({
      journalId: JID,
      size,
      generation: 1,
      tailLsn: frames[0]?.[1] ?? 1,
      tailOffset: tail,
    }).copy(buf, 0)
    for (const [offset, lsn, flags, parts] of frames)
      Buffer.concat(encodeFrame(JID, lsn, flags, parts).pieces).copy(buf, offset)
    return buf
  }
  const rec = (ws: string, n: number): FramePart => ({
    header: setRecord(recordHeader(ws, 1n), n * 100, 10),
    data: Buffer.from(`${`${ws}-line-${n}`.padEnd(9, '.')}\n`),
  })
  function scanned(bytes: Buffer) {
    const dir = tempDir()
    const file = join(dir, 'j.jnl')
    writeFileSync(file, bytes, { mode: 0o600 })
    const fd = openSync(file, 'r')
    try {
      return scanJournal(fd)
    } finally {
      closeSync(fd)
    }
  }

  it('reads rounds from the tail on, across a round of two frames and a wrap marker, and leaves out a round whose last frame is missing', () => {
    const size = DATA_START + 8 * SECTOR
    const end = size - SECTOR // the last sector: a wrap marker there sends replay to the start
    const s = scanned(
      journal(size, DATA_START + 4 * SECTOR, [
        [DATA_START + 4 * SECTOR, 7, 0, [rec('a', 1)]], // round 1: two frames, END on the second
        [DATA_START + 5 * SECTOR, 8, FLAG_END, [rec('b', 1)]],
        [DATA_START + 6 * SECTOR, 9, FLAG_END, [rec('a', 2)]], // round 2
        [end, 10, FLAG_WRAP, []],
        [DATA_START, 11, FLAG_END, [rec('b', 2)]], // round 3, after the wrap
        [DATA_START + SECTOR, 12, 0, [rec('a', 3)]], // a round whose END frame never came
      ]),
    )
    expect(s.rounds).toBe(3)
    expect(s.records.map((r) => `${r.target}@${r.offset}`)).toEqual(['a@100', 'b@100', 'a@200', 'b@200'])
    expect(s.next).toEqual({ lsn: 12, offset: DATA_START + SECTOR })
    expect(s.header.tailLsn).toBe(7)
  })

  it('a frame of another lsn, one torn, or one past the end ends the prefix there', () => {
    const size = DATA_START + 4 * SECTOR
    const good: Array<[number, number, number, FramePart[]]> = [[DATA_START, 1, FLAG_END, [rec('a', 1)]]]
    const seconds: Array<[string, [number, number, number, FramePart[]]]> = [
      ['another lsn', [DATA_START + SECTOR, 3, FLAG_END, [rec('a', 2)]]],
      ['an earlier lsn', [DATA_START + SECTOR, 1, FLAG_END, [rec('a', 2)]]],
    ]
    for (const [name, second] of seconds) {
      const s = scanned(journal(size, DATA_START, [...good, second]))
      expect(
        s.records.map((r) => r.offset),
        name,
      ).toEqual([100])
      expect(s.next, name).toEqual({ lsn: 2, offset: DATA_START + SECTOR })
    }
    const torn = journal(size, DATA_START, [...good, [DATA_START + SECTOR, 2, FLAG_END, [rec('a', 2)]]])
    torn[DATA_START + SECTOR + 40] = (torn[DATA_START + SECTOR + 40] as number) ^ 1
    expect(scanned(torn).rounds).toBe(1)
    // A frame whose length runs past the file's end, at the last sector.
    const last = journal(size, size - SECTOR, [[size - SECTOR, 1, FLAG_END, [rec('a', 1)]]])
    last.writeUInt32LE(2 * SECTOR, size - SECTOR + 8)
    expect(scanned(last).rounds).toBe(0)
    // The last frame ends at the file's end: the next one goes at the start.
    expect(scanned(journal(size, size - SECTOR, [[size - SECTOR, 1, FLAG_END, [rec('a', 1)]]])).next).toEqual(
      {
        lsn: 2,
        offset: DATA_START,
      },
    )
  })

  it('an untrusted journal names the workspaces of its valid rounds, sorted, and no whole-file record', () => {
    const size = DATA_START + 4 * SECTOR
    const notes = Buffer.from('a file, not a workspace')
    const bad = setRecord(recordHeader('x', 1n), 0, 0)
    bad.writeUInt8(9, 0) // an unknown record type: a frame no writer of noa makes
    const bytes = journal(size, DATA_START, [
      [
        DATA_START,
        1,
        FLAG_END,
        [rec('b', 1), rec('a', 1), { header: fileRecordHeader('notes', notes.length, false), data: notes }],
      ],
      [DATA_START + SECTOR, 2, FLAG_END, [{ header: bad, data: null }]],
    ])
    const err = (() => {
      try {
        scanned(bytes)
      } catch (e) {
        return e
      }
      return null
    })()
    expect(err).toBeInstanceOf(Untrusted)
    expect((err as Untrusted).workspaces).toEqual(['a', 'b'])
    expect((err as Untrusted).reason).toMatch(/unknown type 9/)
  })
})

describe('what a trusted journal does to a log', () => {
  it('bytes the log already holds are written again as they are; the rest of the record is appended', async () => {
    const r = await makeRoot()
    const ts = lastTs(r.aBytes)
    const l4 = Buffer.from(line(4, 'p4', ts + 1))
    const l5 = Buffer.from(line(5, 'p5', ts + 1)) // the same ts as the line before: ts never went back
    // The process died after its log had l4 (and before a checkpoint): the journal holds both.
    writeFileSync(r.aLog, Buffer.concat([r.aBytes, l4]))
    plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length, Buffer.concat([l4, l5]))]))
    const [report] = recoverJournals(r.root)
    expect(report?.records).toBe(1)
    expect(readFileSync(r.aLog).equals(Buffer.concat([r.aBytes, l4, l5]))).toBe(true)
    expect(quarantinedJournals(r.root)).toEqual([])
  })

  it('the records of one log from several journals are applied in offset order, whichever journal holds which', async () => {
    const r = await makeRoot()
    const ts = lastTs(r.aBytes)
    const l4 = Buffer.from(line(4, 'p4', ts + 1))
    const l5 = Buffer.from(line(5, 'p5', ts + 2))
    // The journal read first (by name) holds the later round: an atomic batch's part, say.
    plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length + l4.length, l5)]))
    const other = Buffer.alloc(SIZE)
    encodeHeader({ journalId: JID + 1, size: SIZE, generation: 1, tailLsn: 1, tailOffset: DATA_START }).copy(
      other,
      0,
    )
    Buffer.concat(
      encodeFrame(JID + 1, 1, FLAG_END, [dataRecord('a', r.aIno, r.aBytes.length, l4)]).pieces,
    ).copy(other, DATA_START)
    writeFileSync(join(r.root, 'journal', '4242-0badf00e-w1.jnl'), other, { mode: 0o600 })
    expect(recoverJournals(r.root)).toHaveLength(2)
    expect(readFileSync(r.aLog).equals(Buffer.concat([r.aBytes, l4, l5]))).toBe(true)
    expect(quarantinedJournals(r.root)).toEqual([])
  })

  it('a whole file is put back; a record for a log replaced since, or one that is gone, is skipped and said', async () => {
    const r = await makeRoot()
    const ts = lastTs(r.aBytes)
    const object = Buffer.from('an object written beside an entry')
    const objectFile = { header: fileRecordHeader(objectPath(object), object.length, true), data: object }
    plant(
      r,
      journalBytes([
        objectFile,
        dataRecord('a', r.aIno + 1n, r.aBytes.length, Buffer.from(line(4, 'p4', ts + 1))), // another inode
        dataRecord('gone', 5n, 0, Buffer.from(line(1, 'g', 1))),
      ]),
    )
    const [report] = recoverJournals(r.root)
    expect(readFileSync(join(r.root, objectPath(object))).equals(object)).toBe(true)
    expect(readFileSync(r.aLog).equals(r.aBytes)).toBe(true)
    expect(existsSync(join(r.root, 'agent-logs', 'gone.log'))).toBe(false)
    expect(report?.skipped).toEqual([
      { file: r.aLog, reason: 'the file was replaced since the record was made' },
      { file: join(r.root, 'agent-logs', 'gone.log'), reason: 'the file no longer exists' },
    ])
    expect(quarantinedJournals(r.root)).toEqual([])
  })
})
