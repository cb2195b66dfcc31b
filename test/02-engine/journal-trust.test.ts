/**
 * A journal planted in a root (a shared folder, say) is never replayed blindly: each journal below
 * is one noa's writer cannot have made, or one made by someone else. For each: nothing outside
 * the root changes, no acknowledged byte changes, the commands that only read write nothing (a
 * listing of the root with sizes, modes, mtimes and hashes is the same before and after) and
 * `verify` fails naming the journal; the next writer moves it aside to journal/quarantine/ with a
 * note, names it on stderr, refuses the workspaces it names (NOA_JOURNAL) and goes on with every
 * other workspace; `recover` fails naming it. Huge and sparse journals are refused in bounded
 * time and memory.
 */
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import {
  chmodSync,
  chownSync,
  closeSync,
  existsSync,
  ftruncateSync,
  linkSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { readEntries } from '../../dist/src/engine/index.js'
import {
  DATA_START,
  encodeFrame,
  encodeHeader,
  FLAG_END,
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
import { AgentLog } from '../../dist/src/index.js'
import { listing, outsideState } from '../helpers/hostile.js'
import { blobOf, CLI, runCli, tempDir } from '../helpers/index.js'
import { isRoot, nodeAsOtherUser } from '../helpers/users.js'

const JOURNAL = 'journal/4242-0badf00d-w0.jnl'
const SIZE = 64 << 10
const JID = 0x0badf00d

interface Root {
  root: string
  outside: string
  /** The victim workspace's log and its bytes (three acknowledged entries). */
  aLog: string
  aBytes: Buffer
  aIno: bigint
}

async function makeRoot(): Promise<Root> {
  const root = tempDir()
  const outside = tempDir()
  writeFileSync(join(outside, 'target.txt'), 'outside the root: must never change\n')
  const log = await AgentLog.open({ root, workers: 0 })
  try {
    for (let i = 1; i <= 3; i++) await log.append('a', { op: 'write', path: `p${i}`, blob: blobOf(i) })
    await log.append('b', { op: 'write', path: 'q', blob: blobOf(9) })
  } finally {
    await log.close()
  }
  const aLog = join(root, 'agent-logs', 'a.log')
  return { root, outside, aLog, aBytes: readFileSync(aLog), aIno: statSync(aLog, { bigint: true }).ino }
}

/** A journal of one round holding `parts`, valid in every byte noa checks (header, CRC, lsn). */
function journalBytes(parts: FramePart[], size = SIZE): Buffer {
  const buf = Buffer.alloc(size)
  encodeHeader({ journalId: JID, size, generation: 1, tailLsn: 1, tailOffset: DATA_START }).copy(buf, 0)
  const frame = encodeFrame(JID, 1, FLAG_END, parts)
  Buffer.concat(frame.pieces).copy(buf, DATA_START)
  return buf
}

function plant(r: Root, bytes: Buffer, mode = 0o600): string {
  mkdirSync(join(r.root, 'journal'), { recursive: true })
  const path = join(r.root, JOURNAL)
  writeFileSync(path, bytes, { mode })
  chmodSync(path, mode)
  return path
}

function dataRecord(target: string, ino: bigint, offset: number, data: Buffer): FramePart {
  return { header: setRecord(recordHeader(target, ino), offset, data.length), data }
}

function line(seq: number, path: string, ts: number): string {
  return `{"seq":${seq},"op":"write","path":"${path}","blob":"${blobOf(seq)}","ts":${ts}}\n`
}

function lastTs(bytes: Buffer): number {
  const lines = bytes.toString('utf8').trim().split('\n')
  return (JSON.parse(lines[lines.length - 1] as string) as { ts: number }).ts
}

function objectPath(data: Buffer): string {
  const sha = createHash('sha256').update(data).digest('hex')
  return `objects/${sha.slice(0, 2)}/${sha.slice(2)}`
}

interface Case {
  name: string
  /** Plants the journal; returns the workspaces it names (refused once it is quarantined). */
  plant: (r: Root) => string[]
  /** What the reason given names (a fragment of it). */
  reason: RegExp
  /** Extra checks after the writer ran. */
  after?: (r: Root) => void
}

const CASES: Case[] = [
  {
    name: 'a record whose target is an absolute path outside the root',
    plant: (r) => {
      const target = join(r.outside, 'target.txt')
      plant(
        r,
        journalBytes([dataRecord(target, statSync(target, { bigint: true }).ino, 0, Buffer.from('PWNED'))]),
      )
      return []
    },
    reason: /not a workspace name/,
  },
  {
    name: 'a record whose target climbs out with ..',
    plant: (r) => {
      plant(r, journalBytes([dataRecord('../../x', 0n, 0, Buffer.from('PWNED'))]))
      return []
    },
    reason: /not a workspace name/,
  },
  {
    name: 'a whole-file record climbing out with ..',
    plant: (r) => {
      const data = Buffer.from('PWNED')
      plant(r, journalBytes([{ header: fileRecordHeader('../outside/x', data.length, false), data }]))
      return []
    },
    reason: /normalized path/,
  },
  {
    name: 'a record over acknowledged bytes (offset 0 rewritten)',
    plant: (r) => {
      const forged = Buffer.from(r.aBytes.toString('utf8').replace('"path":"p1"', '"path":"Z1"'))
      plant(r, journalBytes([dataRecord('a', r.aIno, 0, forged.subarray(0, r.aBytes.indexOf(0x0a) + 1))]))
      return ['a']
    },
    reason: /already holds/,
  },
  {
    name: 'a plausible forged entry at the end, in a journal owned by another user',
    plant: (r) => {
      const data = Buffer.from(line(4, 'forged', lastTs(r.aBytes) + 1))
      const path = plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length, data)]))
      chownSync(path, 4242, 4242)
      return ['a']
    },
    reason: /owned by uid 4242/,
  },
  {
    name: 'a plausible forged entry at the end, in a journal others can write (0666)',
    plant: (r) => {
      const data = Buffer.from(line(4, 'forged', lastTs(r.aBytes) + 1))
      plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length, data)]), 0o666)
      return ['a']
    },
    reason: /writable by/,
  },
  {
    name: 'an entry that does not follow the log (seq skips ahead)',
    plant: (r) => {
      const data = Buffer.from(line(9, 'skip', lastTs(r.aBytes) + 1))
      plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length, data)]))
      return ['a']
    },
    reason: /seq 9/,
  },
  {
    name: 'a whole-file record naming a file the engine never writes (a workspace log)',
    plant: (r) => {
      const data = Buffer.from(line(1, 'x', 1))
      plant(r, journalBytes([{ header: fileRecordHeader('agent-logs/a.log', data.length, false), data }]))
      return []
    },
    reason: /agent-logs/,
  },
  {
    name: 'a record beyond the log end',
    plant: (r) => {
      const data = Buffer.from(line(4, 'far', lastTs(r.aBytes) + 1))
      plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length + 4096, data)]))
      return ['a']
    },
    reason: /beyond the log's end/,
  },
  {
    name: 'garbage (no valid header)',
    plant: (r) => {
      plant(r, Buffer.alloc(SIZE, 0x5a))
      return []
    },
    reason: /no valid header/,
  },
  {
    name: 'a valid frame holding an unknown record type',
    plant: (r) => {
      const header = setRecord(recordHeader('a', r.aIno), r.aBytes.length, 0)
      header.writeUInt8(9, 0)
      plant(r, journalBytes([{ header, data: null }]))
      return []
    },
    reason: /unknown type 9/,
  },
  {
    name: 'a 3 GiB sparse journal',
    plant: (r) => {
      mkdirSync(join(r.root, 'journal'), { recursive: true })
      const fd = openSync(join(r.root, JOURNAL), 'w', 0o600)
      writeSync(
        fd,
        encodeHeader({
          journalId: JID,
          size: 3 * 2 ** 30,
          generation: 1,
          tailLsn: 1,
          tailOffset: DATA_START,
        }),
      )
      ftruncateSync(fd, 3 * 2 ** 30)
      closeSync(fd)
      return []
    },
    reason: /larger than any journal/,
  },
]

/**
 * More of the README's rules, checked in process only (the commands go through the same replay,
 * which the cases above show end to end).
 */
const MORE_CASES: Case[] = [
  {
    name: 'a symlink to a valid journal',
    plant: (r) => {
      const elsewhere = join(r.outside, 'valid.jnl')
      const data = Buffer.from(line(4, 'p4', lastTs(r.aBytes) + 1))
      writeFileSync(elsewhere, journalBytes([dataRecord('a', r.aIno, r.aBytes.length, data)]), {
        mode: 0o600,
      })
      mkdirSync(join(r.root, 'journal'), { recursive: true })
      symlinkSync(elsewhere, join(r.root, JOURNAL))
      return []
    },
    reason: /not a regular file \(a symlink\)/,
  },
  {
    name: 'a FIFO',
    plant: (r) => {
      mkdirSync(join(r.root, 'journal'), { recursive: true })
      execFileSync('mkfifo', [join(r.root, JOURNAL)])
      return []
    },
    reason: /not a regular file \(not a file\)/,
  },
  {
    name: 'a valid journal with a second hard link',
    plant: (r) => {
      const data = Buffer.from(line(4, 'p4', lastTs(r.aBytes) + 1))
      const path = plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length, data)]))
      linkSync(path, join(r.root, 'journal', 'second-name'))
      return ['a']
    },
    reason: /2 hard links/,
  },
  {
    name: 'a valid journal writable by its group (0620)',
    plant: (r) => {
      const data = Buffer.from(line(4, 'p4', lastTs(r.aBytes) + 1))
      plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length, data)]), 0o620)
      return ['a']
    },
    reason: /writable by its group \(mode 0620\)/,
  },
  {
    name: 'a journal longer than its header says',
    plant: (r) => {
      const data = Buffer.from(line(4, 'p4', lastTs(r.aBytes) + 1))
      const bytes = journalBytes([dataRecord('a', r.aIno, r.aBytes.length, data)])
      plant(r, Buffer.concat([bytes, Buffer.alloc(SECTOR)]))
      return []
    },
    reason: new RegExp(`header says ${SIZE} bytes, but the file has ${SIZE + SECTOR}`),
  },
  {
    name: 'a file too short for a header',
    plant: (r) => {
      plant(r, Buffer.alloc(DATA_START - 1))
      return []
    },
    reason: /too short to hold a header/,
  },
  {
    name: 'a record that starts inside a line',
    plant: (r) => {
      const data = Buffer.from(line(4, 'p4', lastTs(r.aBytes) + 1))
      plant(
        r,
        journalBytes([
          dataRecord('a', r.aIno, r.aBytes.length - 1, Buffer.concat([Buffer.from('\n'), data])),
        ]),
      )
      return ['a']
    },
    reason: /does not start at the start of a line/,
  },
  {
    name: 'a record that does not end with a whole line',
    plant: (r) => {
      const data = Buffer.from(line(4, 'p4', lastTs(r.aBytes) + 1).trimEnd())
      plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length, data)]))
      return ['a']
    },
    reason: /does not end with a whole line/,
  },
  {
    name: 'an entry whose ts goes back',
    plant: (r) => {
      const data = Buffer.from(line(4, 'p4', lastTs(r.aBytes) - 1))
      plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length, data)]))
      return ['a']
    },
    reason: /ts never goes back/,
  },
  {
    name: 'a line that is not an entry (an unknown op)',
    plant: (r) => {
      const data = Buffer.from(`{"seq":4,"op":"chmod","path":"p","ts":${lastTs(r.aBytes) + 1}}\n`)
      plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length, data)]))
      return ['a']
    },
    reason: /holds a line \(1\) that is not an entry/,
  },
  {
    name: 'two records over the same bytes that differ',
    plant: (r) => {
      const ts = lastTs(r.aBytes) + 1
      plant(
        r,
        journalBytes([
          dataRecord('a', r.aIno, r.aBytes.length, Buffer.from(line(4, 'p4', ts))),
          dataRecord('a', r.aIno, r.aBytes.length, Buffer.from(line(4, 'q4', ts))),
        ]),
      )
      return ['a']
    },
    reason: /overlaps the record before it/,
  },
  {
    name: 'the second entry of a record does not follow the first',
    plant: (r) => {
      const ts = lastTs(r.aBytes) + 1
      plant(
        r,
        journalBytes([
          dataRecord('a', r.aIno, r.aBytes.length, Buffer.from(line(4, 'p4', ts) + line(4, 'p5', ts))),
        ]),
      )
      return ['a']
    },
    reason: /holds seq 4 \(line 2\) after seq 4/,
  },
]

function cli(r: Root, args: string[], input = '') {
  return runCli([...args, '--root', r.root], { input })
}

function entryLine(path: string): string {
  return `${JSON.stringify({ op: 'write', path, blob: blobOf(7) })}\n`
}

describe('planted commit journals, checked in process', () => {
  // The journals below, judged by the replay itself in this process (no command runs): the fast
  // proof of each rule, which the commands' tests below then show end to end.
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

describe('planted commit journals', () => {
  for (const c of CASES) {
    it(`${c.name}: never replayed, quarantined and named, only its workspaces refused`, async () => {
      const r = await makeRoot()
      const named = c.plant(r)
      const outsideBefore = outsideState(r.outside)
      const before = listing(r.root)

      // Commands that only read write nothing, and verify fails naming the journal.
      for (const args of [['workspaces'], ['log', 'a'], ['log', 'b'], ['history', 'a'], ['snapshots', 'a']]) {
        const out = cli(r, args)
        expect(out.stderr, args.join(' ')).not.toContain('PWNED')
      }
      const verify = cli(r, ['verify'])
      expect(verify.status, verify.stdout).toBe(1)
      expect(verify.stderr).toContain(JOURNAL.split('/')[1])
      expect(verify.stderr).toMatch(c.reason)
      expect(listing(r.root), 'a command that only reads changed the root').toEqual(before)

      // The next writer: an unrelated workspace appends; the journal is moved aside and named.
      const b = cli(r, ['append', 'b', '--no-blob-check'], entryLine('q2'))
      expect(b.status, b.stderr).toBe(0)
      expect(b.stderr).toContain('NOA_JOURNAL_QUARANTINED')
      expect(existsSync(join(r.root, JOURNAL))).toBe(false)
      const quarantined = join(r.root, 'journal', 'quarantine', JOURNAL.split('/')[1] as string)
      expect(existsSync(quarantined)).toBe(true)
      const note = JSON.parse(readFileSync(`${quarantined}.json`, 'utf8')) as {
        reason: string
        workspaces: string[]
      }
      expect(note.reason).toMatch(c.reason)
      expect(note.workspaces).toEqual(named)

      // The workspaces it names are refused, by name; the others go on.
      const a = cli(r, ['append', 'a', '--no-blob-check'], entryLine('p4'))
      if (named.includes('a')) {
        expect(a.status).toBe(1)
        expect(a.stderr).toContain('workspace a is refused')
        expect(a.stderr).toContain(quarantined)
        const recover = cli(r, ['recover', 'a'])
        expect(recover.status).toBe(1)
        expect(recover.stderr).toContain(quarantined)
      } else {
        expect(a.status, a.stderr).toBe(0)
      }
      const recover = cli(r, ['recover'])
      expect(recover.status).toBe(1)
      expect(recover.stderr).toContain(quarantined)

      // No acknowledged byte changed; nothing outside the root did.
      expect(readFileSync(r.aLog).subarray(0, r.aBytes.length).equals(r.aBytes)).toBe(true)
      const aEntries = []
      for await (const e of readEntries(r.aLog)) aEntries.push(e)
      expect(aEntries.map((e) => (e as { path: string }).path)).toEqual(
        named.includes('a') ? ['p1', 'p2', 'p3'] : ['p1', 'p2', 'p3', 'p4'],
      )
      expect(outsideState(r.outside)).toEqual(outsideBefore)
      expect(existsSync(join(r.root, 'memory'))).toBe(false)
      c.after?.(r)

      // Removing the quarantined journal and its note releases the workspace.
      rmSync(quarantined)
      rmSync(`${quarantined}.json`)
      const again = cli(r, ['append', 'a', '--no-blob-check'], entryLine('p5'))
      expect(again.status, again.stderr).toBe(0)
      expect(cli(r, ['verify']).status).toBe(0)
    })
  }

  it('a whole-file record with other bytes under a stored object never replaces it', async () => {
    // An object whose bytes do not hash to its name is an encoded one (a tree stored as a delta,
    // named by what it decodes to): a replay writes it only where nothing is stored yet.
    const r = await makeRoot()
    const good = Buffer.from('a stored object')
    const stored = objectPath(good)
    mkdirSync(join(r.root, stored, '..'), { recursive: true })
    writeFileSync(join(r.root, stored), good, { mode: 0o444 })
    const missing = objectPath(Buffer.from('a tree, named by what it decodes to'))
    const evil = Buffer.from('other bytes')
    plant(
      r,
      journalBytes([
        { header: fileRecordHeader(stored, evil.length, true), data: evil },
        { header: fileRecordHeader(missing, evil.length, true), data: evil },
      ]),
    )
    const before = listing(r.root)
    expect(cli(r, ['verify']).status).toBe(0)
    expect(listing(r.root)).toEqual(before)
    const recover = cli(r, ['recover'])
    expect(recover.status, recover.stderr).toBe(0)
    expect(existsSync(join(r.root, JOURNAL))).toBe(false)
    expect(readFileSync(join(r.root, stored), 'utf8')).toBe('a stored object')
    expect(readFileSync(join(r.root, missing), 'utf8')).toBe('other bytes')
  })

  it('a status() of an AgentLog names the quarantined journal and what it refuses', async () => {
    const r = await makeRoot()
    plant(r, journalBytes([dataRecord('a', r.aIno, 0, Buffer.from(line(1, 'Z', 1)))]))
    const log = await AgentLog.open({ root: r.root, workers: 1 })
    try {
      await log.append('b', { op: 'write', path: 'q3', blob: blobOf(3) })
      const err = await log.append('a', { op: 'write', path: 'p4', blob: blobOf(4) }).catch((e) => e)
      expect(err.code).toBe('NOA_JOURNAL')
      expect(err.details.workspace).toBe('a')
      const [s] = await log.status()
      expect(s?.quarantined.map((q) => q.workspaces)).toEqual([['a']])
      expect(s?.quarantined[0]?.reason).toMatch(/already holds/)
    } finally {
      await log.close()
    }
    expect(readdirSync(join(r.root, 'journal', 'quarantine')).sort()).toEqual([
      '4242-0badf00d-w0.jnl',
      '4242-0badf00d-w0.jnl.json',
    ])
  })

  it('a journal whose trusted records continue the log is still replayed in full', async () => {
    // The legitimate case side by side: the same shape of journal, made as noa's writer makes
    // it, is replayed by the next writer (and read through by a reader before that).
    const r = await makeRoot()
    const ts = lastTs(r.aBytes)
    const data = Buffer.from(line(4, 'p4', ts + 1) + line(5, 'p5', ts + 2))
    const object = Buffer.from('an object written beside p4, only in the journal')
    const objectFile = { header: fileRecordHeader(objectPath(object), object.length, true), data: object }
    plant(r, journalBytes([objectFile, dataRecord('a', r.aIno, r.aBytes.length, data)]))
    const before = listing(r.root)
    const sha = createHash('sha256').update(object).digest('hex')
    const blob = cli(r, ['blob', 'get', sha])
    expect(blob.status, blob.stderr).toBe(0)
    expect(blob.stdout).toBe(object.toString())
    const log = cli(r, ['log', 'a'])
    expect(log.status, log.stderr).toBe(0)
    expect(
      log.stdout
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as { path: string }).path),
    ).toEqual(['p1', 'p2', 'p3', 'p4', 'p5'])
    expect(cli(r, ['verify']).status).toBe(0)
    expect(listing(r.root)).toEqual(before)
    const recover = cli(r, ['recover'])
    expect(recover.status, recover.stderr).toBe(0)
    expect(existsSync(join(r.root, JOURNAL))).toBe(false)
    expect(readFileSync(r.aLog).equals(Buffer.concat([r.aBytes, data]))).toBe(true)
    expect(readFileSync(join(r.root, objectPath(object))).equals(object)).toBe(true)
  })

  it.runIf(isRoot())(
    "another user's journal in a shared root: quarantined by this user, replayed in full by its owner's noa recover",
    async () => {
      const r = await makeRoot()
      const ts = lastTs(r.aBytes)
      const data = Buffer.from(line(4, 'p4', ts + 1))
      const path = plant(r, journalBytes([dataRecord('a', r.aIno, r.aBytes.length, data)]))
      chownSync(path, 4242, 4242)
      const b = cli(r, ['append', 'b', '--no-blob-check'], entryLine('q2'))
      expect(b.status, b.stderr).toBe(0)
      expect(b.stderr).toContain('owned by uid 4242')
      // The root is the group's: its owner (uid 4242) recovers it.
      execFileSync('chmod', ['-R', 'a+rwX', r.root])
      chmodSync(join(r.root, 'journal', 'quarantine', '4242-0badf00d-w0.jnl'), 0o600) // as its owner made it
      const asOwner = nodeAsOtherUser([CLI, 'recover', '--root', r.root])
      expect(asOwner.status, asOwner.stderr).toBe(0)
      expect(readFileSync(r.aLog).equals(Buffer.concat([r.aBytes, data]))).toBe(true)
      expect(existsSync(join(r.root, 'journal', 'quarantine', '4242-0badf00d-w0.jnl'))).toBe(false)
      expect(cli(r, ['verify']).status).toBe(0)
    },
  )
})
