/**
 * Planted commit journals for the trust tests (test/02-engine/journal-trust*.test.ts): a root
 * with acknowledged entries, journals valid in every byte noa checks, and the cases that each
 * break one of the trust rules of docs/on-disk.md.
 */
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import {
  chmodSync,
  chownSync,
  closeSync,
  ftruncateSync,
  linkSync,
  mkdirSync,
  openSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs'
import { join } from 'node:path'
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
import { AgentLog } from '../../dist/src/index.js'
import { blobOf, tempDir } from './index.js'

export const JOURNAL = 'journal/4242-0badf00d-w0.jnl'
export const SIZE = 64 << 10
export const JID = 0x0badf00d

export interface Root {
  root: string
  outside: string
  /** The victim workspace's log and its bytes (three acknowledged entries). */
  aLog: string
  aBytes: Buffer
  aIno: bigint
}

export async function makeRoot(): Promise<Root> {
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
export function journalBytes(parts: FramePart[], size = SIZE): Buffer {
  const buf = Buffer.alloc(size)
  encodeHeader({ journalId: JID, size, generation: 1, tailLsn: 1, tailOffset: DATA_START }).copy(buf, 0)
  const frame = encodeFrame(JID, 1, FLAG_END, parts)
  Buffer.concat(frame.pieces).copy(buf, DATA_START)
  return buf
}

export function plant(r: Root, bytes: Buffer, mode = 0o600): string {
  mkdirSync(join(r.root, 'journal'), { recursive: true })
  const path = join(r.root, JOURNAL)
  writeFileSync(path, bytes, { mode })
  chmodSync(path, mode)
  return path
}

export function dataRecord(target: string, ino: bigint, offset: number, data: Buffer): FramePart {
  return { header: setRecord(recordHeader(target, ino), offset, data.length), data }
}

export function line(seq: number, path: string, ts: number): string {
  return `{"seq":${seq},"op":"write","path":"${path}","blob":"${blobOf(seq)}","ts":${ts}}\n`
}

export function lastTs(bytes: Buffer): number {
  const lines = bytes.toString('utf8').trim().split('\n')
  return (JSON.parse(lines[lines.length - 1] as string) as { ts: number }).ts
}

export function objectPath(data: Buffer): string {
  const sha = createHash('sha256').update(data).digest('hex')
  return `objects/${sha.slice(0, 2)}/${sha.slice(2)}`
}

export interface Case {
  name: string
  /** Plants the journal; returns the workspaces it names (refused once it is quarantined). */
  plant: (r: Root) => string[]
  /** What the reason given names (a fragment of it). */
  reason: RegExp
  /** Extra checks after the writer ran. */
  after?: (r: Root) => void
}

export const CASES: Case[] = [
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
 * More of docs/on-disk.md's rules, checked in process only (the commands go through the same replay,
 * which the cases above show end to end).
 */
export const MORE_CASES: Case[] = [
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
    name: 'a journal whose record for one log is forged and whose record for another is good',
    plant: (r) => {
      const bLog = join(r.root, 'agent-logs', 'b.log')
      const bBytes = readFileSync(bLog)
      const good = Buffer.from(line(2, 'q2', lastTs(bBytes) + 1))
      const forged = Buffer.from(r.aBytes.toString('utf8').replace('"path":"p1"', '"path":"Z1"'))
      plant(
        r,
        journalBytes([
          dataRecord('b', statSync(bLog, { bigint: true }).ino, bBytes.length, good),
          dataRecord('a', r.aIno, 0, forged.subarray(0, r.aBytes.indexOf(0x0a) + 1)),
        ]),
      )
      return ['a', 'b']
    },
    reason: /already holds/,
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
