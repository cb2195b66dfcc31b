/**
 * More of the trust rules of dead commit journals, in process (no command runs), each pinning
 * a mutant of journal-trust.ts or journal-recovery.ts that journal-trust-checks.test.ts let
 * survive (docs/mutation.md): what a journal that cannot be read, a 1 GiB journal, a log that is
 * no longer a file, a record one byte in, overlapping and conflicting records, and a journal that
 * cannot be moved aside each do to a root, by what is applied, what is quarantined with which
 * reason, and the bytes on disk. Milliseconds a case.
 */
import { execFileSync, spawnSync } from 'node:child_process'
import {
  chmodSync,
  chownSync,
  closeSync,
  existsSync,
  ftruncateSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  statSync,
  symlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import {
  DATA_START,
  encodeFrame,
  encodeHeader,
  FLAG_END,
  type FramePart,
  fileRecordHeader,
  MAX_JOURNAL_SIZE,
} from '../../dist/src/engine/journal-format.js'
import {
  checkJournals,
  quarantinedJournals,
  recoverJournals,
  retryQuarantined,
} from '../../dist/src/engine/journal-recovery.js'
import { outsideState } from '../helpers/hostile.js'
import {
  CASES,
  dataRecord,
  JID,
  JOURNAL,
  journalBytes,
  lastTs,
  line,
  makeRoot,
  objectPath,
  plant,
  type Root,
  SIZE,
} from '../helpers/journals.js'
import { isRoot, OTHER_UID } from '../helpers/users.js'

/** A second dead journal, read after JOURNAL (by name), of one round holding `parts`. */
const SECOND = 'journal/4242-0badf00e-w1.jnl'

function plantSecond(r: Root, parts: FramePart[]): string {
  const bytes = Buffer.alloc(SIZE)
  encodeHeader({ journalId: JID + 1, size: SIZE, generation: 1, tailLsn: 1, tailOffset: DATA_START }).copy(
    bytes,
    0,
  )
  Buffer.concat(encodeFrame(JID + 1, 1, FLAG_END, parts).pieces).copy(bytes, DATA_START)
  const path = join(r.root, SECOND)
  writeFileSync(path, bytes, { mode: 0o600 })
  return path
}

/**
 * recoverJournals(root) as OTHER_UID (run as root: the modules load, then the effective uid
 * drops, and comes back before exit so that a mutation run's coverage can be written), or in
 * this process when it is not root. What it returned, or the code of what it threw.
 */
function recoverAsOtherUser(root: string): { reports?: unknown[]; error?: string } {
  if (!isRoot()) {
    try {
      return { reports: recoverJournals(root) }
    } catch (err) {
      return { error: (err as NodeJS.ErrnoException).code ?? String(err) }
    }
  }
  const recovery = new URL('../../dist/src/engine/journal-recovery.js', import.meta.url).href
  const native = new URL('../../dist/src/engine/native.js', import.meta.url).href
  const script = `
    import { recoverJournals } from ${JSON.stringify(recovery)}
    import { loadNative } from ${JSON.stringify(native)}
    const [uid, root] = process.argv.slice(1)
    loadNative()
    process.setegid(Number(uid))
    process.seteuid(Number(uid))
    let out
    try {
      out = { reports: recoverJournals(root) }
    } catch (err) {
      out = { error: err.code ?? String(err) }
    }
    process.seteuid(0)
    process.setegid(0)
    process.stdout.write(JSON.stringify(out) + '\\n')
  `
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', script, String(OTHER_UID), root], {
    encoding: 'utf8',
  })
  if (child.status !== 0) throw new Error(`the child as uid ${OTHER_UID} failed: ${child.stderr}`)
  return JSON.parse(child.stdout) as { reports?: unknown[]; error?: string }
}

/** The descriptors of this process open on a file below `dir`. */
function openBelow(dir: string): string[] {
  const out: string[] = []
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      const target = readlinkSync(`/proc/self/fd/${fd}`)
      if (target.startsWith(`${dir}/`)) out.push(target)
    } catch {
      // closed since the listing
    }
  }
  return out
}

describe('the journal file itself', () => {
  it('a journal that cannot be opened (no descriptor: EACCES) is untrusted as it is, never read', async () => {
    const r = await makeRoot()
    const path = plant(
      r,
      journalBytes([dataRecord('a', r.aIno, r.aBytes.length, Buffer.from(line(4, 'p4', 1e15)))]),
    )
    // What findDeadJournals reports for a journal this user cannot open: its stats, no descriptor.
    const check = checkJournals(r.root, [{ path, fd: -1, temp: false, stats: lstatSync(path) }])
    expect([...check.untrusted.keys()]).toEqual([0])
    expect(check.untrusted.get(0)?.reason).toBe('it cannot be opened')
    expect(check.untrusted.get(0)?.workspaces).toEqual([])
    expect(check.logs).toEqual([])
    expect(check.scans).toEqual([null])
  })

  it('a journal of exactly the largest size noa writes (1 GiB, sparse) is trusted and replayed', async () => {
    const r = await makeRoot()
    const l4 = Buffer.from(line(4, 'p4', lastTs(r.aBytes) + 1))
    mkdirSync(join(r.root, 'journal'), { recursive: true })
    const path = join(r.root, JOURNAL)
    const fd = openSync(path, 'w', 0o600)
    try {
      writeSync(
        fd,
        encodeHeader({
          journalId: JID,
          size: MAX_JOURNAL_SIZE,
          generation: 1,
          tailLsn: 1,
          tailOffset: DATA_START,
        }),
        0,
        undefined,
        0,
      )
      writeSync(
        fd,
        Buffer.concat(encodeFrame(JID, 1, FLAG_END, [dataRecord('a', r.aIno, r.aBytes.length, l4)]).pieces),
        0,
        undefined,
        DATA_START,
      )
      ftruncateSync(fd, MAX_JOURNAL_SIZE)
    } finally {
      closeSync(fd)
    }
    const reports = recoverJournals(r.root)
    expect(reports).toHaveLength(1)
    expect(reports[0]).toMatchObject({ journal: path, rounds: 1, records: 1, files: [r.aLog], skipped: [] })
    expect(readFileSync(r.aLog).equals(Buffer.concat([r.aBytes, l4]))).toBe(true)
    expect(quarantinedJournals(r.root)).toEqual([])
    expect(existsSync(path)).toBe(false)
  })

  it('a quarantined journal larger than any noa writes is not given back to replay', async () => {
    const r = await makeRoot()
    const huge = CASES.find((c) => c.name === 'a 3 GiB sparse journal')
    huge?.plant(r)
    expect(recoverJournals(r.root)).toEqual([])
    const [q] = quarantinedJournals(r.root)
    expect(q?.reason).toMatch(/larger than any journal noa writes/)
    // Owned by this user and writable by no one else, but not a journal noa's writer makes.
    expect(retryQuarantined(r.root)).toEqual([])
    expect(existsSync(q?.journal as string)).toBe(true)
    expect(existsSync(join(r.root, JOURNAL))).toBe(false)
    expect(quarantinedJournals(r.root).map((x) => x.journal)).toEqual([q?.journal])
  })

  it('a leftover allocation (.jnl.tmp) is removed, never read as a journal nor quarantined', async () => {
    const r = await makeRoot()
    mkdirSync(join(r.root, 'journal'), { recursive: true })
    const temp = join(r.root, 'journal', '4242-0badf00d-w0.jnl.tmp')
    writeFileSync(temp, Buffer.alloc(SIZE), { mode: 0o600 }) // died before its header was written
    expect(recoverJournals(r.root)).toEqual([])
    expect(existsSync(temp)).toBe(false)
    expect(quarantinedJournals(r.root)).toEqual([])
    expect(readdirSync(join(r.root, 'journal'))).toEqual([])
    expect(readFileSync(r.aLog).equals(r.aBytes)).toBe(true)
  })

  it('a leftover allocation this user cannot trust as a file (a symlink, one others can write) is left where it is', async () => {
    const r = await makeRoot()
    mkdirSync(join(r.root, 'journal'), { recursive: true })
    const link = join(r.root, 'journal', '4242-0badf00d-w0.jnl.tmp')
    symlinkSync(join(r.outside, 'target.txt'), link)
    const shared = join(r.root, 'journal', '4242-0badf00e-w1.jnl.tmp')
    writeFileSync(shared, Buffer.alloc(SIZE))
    chmodSync(shared, 0o666)
    const outsideBefore = outsideState(r.outside)
    expect(recoverJournals(r.root)).toEqual([])
    expect(lstatSync(link).isSymbolicLink()).toBe(true)
    expect(lstatSync(shared).mode & 0o777).toBe(0o666)
    expect(outsideState(r.outside)).toEqual(outsideBefore)
    expect(quarantinedJournals(r.root)).toEqual([])
  })
})

describe('what a record may do to its log', () => {
  it('a trusted replay skips nothing, and closes every log it read', async () => {
    const r = await makeRoot()
    const l4 = Buffer.from(line(4, 'p4', lastTs(r.aBytes) + 1))
    plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length, l4)]))
    const [report, ...rest] = recoverJournals(r.root)
    expect(rest).toEqual([])
    expect(report).toMatchObject({ records: 1, bytes: l4.length, files: [r.aLog], skipped: [] })
    expect(openBelow(r.root)).toEqual([])
    expect(readFileSync(r.aLog).equals(Buffer.concat([r.aBytes, l4]))).toBe(true)
  })

  it('a log that cannot be opened for another reason (EACCES) stops the replay: its records are not dropped, the journal is kept', async () => {
    const r = await makeRoot()
    const l4 = Buffer.from(line(4, 'p4', lastTs(r.aBytes) + 1))
    const path = plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length, l4)]))
    if (isRoot()) {
      // The root and the journal are the other user's; the log is root's alone.
      execFileSync('chown', ['-R', `${OTHER_UID}:${OTHER_UID}`, r.root])
      chownSync(r.aLog, 0, 0)
    }
    chmodSync(r.aLog, isRoot() ? 0o600 : 0o200)
    expect(recoverAsOtherUser(r.root)).toEqual({ error: 'EACCES' })
    expect(existsSync(path)).toBe(true)
    expect(readdirSync(join(r.root, 'journal'))).toEqual([JOURNAL.split('/')[1]])
    chmodSync(r.aLog, 0o600)
    expect(readFileSync(r.aLog).equals(r.aBytes)).toBe(true)
  })

  it('a log whose every record names another inode is left alone: not written, not synced, only said', async () => {
    const r = await makeRoot()
    const l4 = Buffer.from(line(4, 'p4', lastTs(r.aBytes) + 1))
    plant(r, journalBytes([dataRecord('a', r.aIno + 1n, r.aBytes.length, l4)]))
    const [report] = recoverJournals(r.root)
    expect(report).toMatchObject({
      records: 0,
      bytes: 0,
      files: [],
      skipped: [{ file: r.aLog, reason: 'the file was replaced since the record was made' }],
    })
    expect(readFileSync(r.aLog).equals(r.aBytes)).toBe(true)
  })

  it('a log that is now a symlink is skipped with the reason, and what it points to is untouched', async () => {
    const r = await makeRoot()
    const l4 = Buffer.from(line(4, 'p4', lastTs(r.aBytes) + 1))
    plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length, l4)]))
    renameSync(r.aLog, join(r.outside, 'a.log'))
    symlinkSync(join(r.outside, 'a.log'), r.aLog)
    const outsideBefore = outsideState(r.outside)
    const [report] = recoverJournals(r.root)
    expect(report?.records).toBe(0)
    expect(report?.skipped).toHaveLength(1)
    expect(report?.skipped[0]?.file).toBe(r.aLog)
    expect(report?.skipped[0]?.reason).toMatch(/is a symlink, not a regular file/)
    expect(outsideState(r.outside)).toEqual(outsideBefore)
    expect(readFileSync(join(r.outside, 'a.log')).equals(r.aBytes)).toBe(true)
  })

  it('a log whose folder is now a file is skipped with the reason, and that file is untouched', async () => {
    const r = await makeRoot()
    const l4 = Buffer.from(line(4, 'p4', lastTs(r.aBytes) + 1))
    plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length, l4)]))
    const logs = join(r.root, 'agent-logs')
    renameSync(logs, join(r.outside, 'agent-logs'))
    writeFileSync(logs, 'not a folder\n')
    const [report] = recoverJournals(r.root)
    expect(report?.records).toBe(0)
    expect(report?.skipped).toHaveLength(1)
    expect(report?.skipped[0]?.file).toBe(r.aLog)
    expect(report?.skipped[0]?.reason).toMatch(/agent-logs is a file, not a folder/)
    expect(readFileSync(logs, 'utf8')).toBe('not a folder\n')
    expect(readFileSync(join(r.outside, 'agent-logs', 'a.log')).equals(r.aBytes)).toBe(true)
  })

  it('a record one byte into an empty log is refused: nothing is written before its first byte', async () => {
    const r = await makeRoot()
    const cLog = join(r.root, 'agent-logs', 'c.log')
    writeFileSync(cLog, '')
    const c1 = Buffer.from(line(1, 'c1', 1))
    plant(r, journalBytes([dataRecord('c', statSync(cLog, { bigint: true }).ino, 1, c1)]))
    expect(recoverJournals(r.root)).toEqual([])
    const [q] = quarantinedJournals(r.root)
    expect(q?.reason).toBe(`a record for ${cLog} at byte 1 starts beyond the log's end (0 bytes)`)
    expect(q?.workspaces).toEqual(['c'])
    expect(readFileSync(cLog).length).toBe(0)
  })

  it('a record that starts inside the one before it is refused, even with the same bytes, naming the bytes it overlaps', async () => {
    const r = await makeRoot()
    const L = r.aBytes.length
    const l4 = Buffer.from(line(4, 'p4', lastTs(r.aBytes) + 1))
    plant(r, journalBytes([dataRecord('a', r.aIno, L, l4), dataRecord('a', r.aIno, L + 1, l4)]))
    expect(recoverJournals(r.root)).toEqual([])
    const [q] = quarantinedJournals(r.root)
    expect(q?.reason).toBe(
      `a record for ${r.aLog} at byte ${L + 1} overlaps the record before it (bytes ${L}-${L + l4.length - 1})`,
    )
    expect(readFileSync(r.aLog).equals(r.aBytes)).toBe(true)
  })

  it('a record that would change an acknowledged byte names that byte of the log', async () => {
    const r = await makeRoot()
    const second = r.aBytes.indexOf(0x0a) + 1 // where the log's second entry starts
    const entry = r.aBytes.subarray(second, r.aBytes.indexOf(0x0a, second) + 1).toString('utf8')
    const forged = Buffer.from(entry.replace('"path":"p2"', '"path":"Z2"'))
    const at = entry.indexOf('"path":"p2"') + '"path":"'.length // the first byte it changes
    expect(at).toBeGreaterThan(0)
    plant(r, journalBytes([dataRecord('a', r.aIno, second, forged)]))
    expect(recoverJournals(r.root)).toEqual([])
    const [q] = quarantinedJournals(r.root)
    expect(q?.reason).toBe(
      `a record for ${r.aLog} at byte ${second} would change byte ${second + at} of the log, which it already holds (an acknowledged entry)`,
    )
    expect(readFileSync(r.aLog).equals(r.aBytes)).toBe(true)
  })
})

describe('the records of every dead journal, checked together', () => {
  it('one replay covers every trusted journal: the first report says what it did and skipped, once', async () => {
    const r = await makeRoot()
    const bLog = join(r.root, 'agent-logs', 'b.log')
    const bBytes = readFileSync(bLog)
    const l4 = Buffer.from(line(4, 'p4', lastTs(r.aBytes) + 1))
    const first = plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length, l4)]))
    const q2 = Buffer.from(line(2, 'q2', lastTs(bBytes) + 1))
    const second = plantSecond(r, [
      dataRecord('b', statSync(bLog, { bigint: true }).ino + 1n, bBytes.length, q2),
    ])
    const reports = recoverJournals(r.root)
    expect(reports).toEqual([
      {
        journal: first,
        rounds: 1,
        records: 1,
        bytes: l4.length,
        files: [r.aLog],
        skipped: [{ file: bLog, reason: 'the file was replaced since the record was made' }],
      },
      { journal: second, rounds: 1, records: 0, bytes: 0, files: [], skipped: [] },
    ])
    expect(readdirSync(join(r.root, 'journal'))).toEqual([])
  })

  it('of two journals whose records for the same bytes differ, the one read first is applied and the other quarantined', async () => {
    const r = await makeRoot()
    const L = r.aBytes.length
    const ts = lastTs(r.aBytes) + 1
    const mine = Buffer.from(line(4, 'p4', ts))
    const theirs = Buffer.from(line(4, 'x4', ts))
    const first = plant(r, journalBytes([dataRecord('a', r.aIno, L, mine)]))
    const second = plantSecond(r, [dataRecord('a', r.aIno, L, theirs)])
    const reports = recoverJournals(r.root)
    expect(reports.map((x) => x.journal)).toEqual([first])
    expect(readFileSync(r.aLog).equals(Buffer.concat([r.aBytes, mine]))).toBe(true)
    const q = quarantinedJournals(r.root)
    expect(q.map((x) => x.found)).toEqual([second])
    expect(q[0]?.reason).toMatch(/overlaps the record before it/)
  })

  it('which of two conflicting journals is quarantined does not depend on the order of the records in them (logs are checked by name)', async () => {
    // Each journal alone continues both logs; together, in log a the second journal's record
    // starts inside the first's, and in log b the first's starts inside the second's. Log a
    // comes first by name, so the second journal is refused, however either orders its records.
    for (const bFirst of [false, true]) {
      const r = await makeRoot()
      const bLog = join(r.root, 'agent-logs', 'b.log')
      const bIno = statSync(bLog, { bigint: true }).ino
      const ta = lastTs(r.aBytes)
      const l4 = Buffer.from(line(4, 'p4', ta + 1))
      const l5 = Buffer.from(line(5, 'p5', ta + 2))
      const l5x = Buffer.from(line(5, 'x5', ta + 2))
      writeFileSync(r.aLog, Buffer.concat([r.aBytes, l4]))
      const bBytes = readFileSync(bLog)
      const tb = lastTs(bBytes)
      const m2 = Buffer.from(line(2, 'q2', tb + 1))
      const m3 = Buffer.from(line(3, 'q3', tb + 2))
      const m3x = Buffer.from(line(3, 'x3', tb + 2))
      writeFileSync(bLog, Buffer.concat([bBytes, m2]))
      const La = r.aBytes.length
      const Lb = bBytes.length
      const firstA = dataRecord('a', r.aIno, La, Buffer.concat([l4, l5]))
      const firstB = dataRecord('b', bIno, Lb + m2.length, m3x)
      const first = plant(r, journalBytes(bFirst ? [firstB, firstA] : [firstA, firstB]))
      const second = plantSecond(r, [
        dataRecord('a', r.aIno, La + l4.length, l5x),
        dataRecord('b', bIno, Lb, Buffer.concat([m2, m3])),
      ])
      const reports = recoverJournals(r.root)
      expect(
        reports.map((x) => x.journal),
        `b first: ${bFirst}`,
      ).toEqual([first])
      const q = quarantinedJournals(r.root)
      expect(q.map((x) => x.found)).toEqual([second])
      expect(q[0]?.workspaces).toEqual(['a', 'b'])
      expect(readFileSync(r.aLog).equals(Buffer.concat([r.aBytes, l4, l5]))).toBe(true)
      expect(readFileSync(bLog).equals(Buffer.concat([bBytes, m2, m3x]))).toBe(true)
    }
  })

  it('a journal refused for one of its records names the workspaces it writes, never the whole files it holds', async () => {
    const r = await makeRoot()
    const object = Buffer.from('an object written beside an entry')
    const forged = Buffer.from(r.aBytes.toString('utf8').replace('"path":"p1"', '"path":"Z1"'))
    plant(
      r,
      journalBytes([
        { header: fileRecordHeader(objectPath(object), object.length, true), data: object },
        dataRecord('a', r.aIno, 0, forged.subarray(0, r.aBytes.indexOf(0x0a) + 1)),
      ]),
    )
    expect(recoverJournals(r.root)).toEqual([])
    const [q] = quarantinedJournals(r.root)
    expect(q?.reason).toMatch(/already holds/)
    expect(q?.workspaces).toEqual(['a'])
    expect(existsSync(join(r.root, objectPath(object)))).toBe(false)
    expect(readFileSync(r.aLog).equals(r.aBytes)).toBe(true)
  })

  it('a journal that cannot be moved aside is judged once per process: the same verdict, even once the log would let it pass', async () => {
    const r = await makeRoot()
    const ts = lastTs(r.aBytes)
    const l4 = Buffer.from(line(4, 'p4', ts + 1))
    const l5 = Buffer.from(line(5, 'p5', ts + 2))
    const path = plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length + l4.length, l5)]))
    // Where the quarantine folder goes, a file: the journal stays where it is.
    writeFileSync(join(r.root, 'journal', 'quarantine'), '')
    expect(recoverJournals(r.root)).toEqual([])
    expect(existsSync(path)).toBe(true)
    const [q] = quarantinedJournals(r.root)
    expect(q).toMatchObject({ journal: path, found: path, workspaces: ['a'] })
    expect(q?.reason).toMatch(/starts beyond the log's end/)
    // The log now ends where the record starts (l4 written straight to it): checked afresh the
    // record would follow it, but the journal was judged already and is not replayed.
    writeFileSync(r.aLog, Buffer.concat([r.aBytes, l4]))
    expect(recoverJournals(r.root)).toEqual([])
    expect(existsSync(path)).toBe(true)
    expect(readFileSync(r.aLog).equals(Buffer.concat([r.aBytes, l4]))).toBe(true)
    expect(quarantinedJournals(r.root).map((x) => x.reason)).toEqual([q?.reason])
  })
})
