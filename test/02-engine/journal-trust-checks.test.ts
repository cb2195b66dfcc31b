/**
 * The trust rules of dead commit journals, judged by the replay itself in this process (no
 * command runs): each journal of test/helpers/journals.ts that breaks a rule is never applied,
 * is quarantined with the reason and the workspaces it names, and refuses only those; the
 * trusted side is replayed. journal-trust.test.ts shows the same journals through the commands.
 * Milliseconds a case: the tests `npm run test:mutation` runs first against these modules.
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { DATA_START, encodeFrame, encodeHeader, FLAG_END } from '../../dist/src/engine/journal-format.js'
import {
  quarantinedJournals,
  recoverJournals,
  refuseIfQuarantined,
} from '../../dist/src/engine/journal-recovery.js'
import { listing, outsideState } from '../helpers/hostile.js'
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
