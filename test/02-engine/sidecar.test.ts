/**
 * The checksum sidecar: a CRC32C per ~64 KiB block of a log, written by the owner off the ack
 * path, so verify names a damaged block (a flipped byte that is still valid JSON) by byte
 * range and seq range.
 */
import {
  closeSync,
  copyFileSync,
  existsSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { crc32c, crc32cSmall } from '../../dist/src/engine/crc.js'
import { verifyWorkspace } from '../../dist/src/engine/index.js'
import { seekSeq, sidecarSeek } from '../../dist/src/engine/reader.js'
import { encodeSumHeader, encodeSumRecord, readSidecar, sidecarPath } from '../../dist/src/engine/sidecar.js'
import { AgentLog, type EntryInput } from '../../dist/src/index.js'
import { blobOf, runCli, tempDir } from '../helpers/index.js'

function write(i: number): EntryInput {
  return { op: 'write', path: `src/f${i}.ts`, blob: blobOf(i) }
}

async function filled(root: string, n: number): Promise<void> {
  const log = await AgentLog.open({ root, workers: 1 })
  try {
    for (let i = 0; i < n; i += 500) {
      await log.appendMany(
        'w',
        Array.from({ length: Math.min(500, n - i) }, (_, k) => write(i + k)),
      )
    }
  } finally {
    await log.close()
  }
}

describe('checksum sidecar', () => {
  it('a new workspace makes one file: its sidecar comes with its first record (a full block, or the close)', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 0 })
    const sum = sidecarPath(root, 'w')
    try {
      await log.append('w', write(1))
      expect(existsSync(join(root, 'agent-logs', 'w.log'))).toBe(true)
      expect(existsSync(sum)).toBe(false)
      // A sidecar a removed log of the same name left is started over when the first record comes.
      writeFileSync(sum, 'stale bytes of another log')
      await log.appendMany(
        'w',
        Array.from({ length: 800 }, (_, k) => write(k + 2)),
      )
      expect(
        readSidecar(sum, statSync(join(root, 'agent-logs', 'w.log'), { bigint: true }).ino, 1 << 30)?.blocks
          .length,
      ).toBeGreaterThan(0)
    } finally {
      await log.close()
    }
    const report = await verifyWorkspace(root, 'w')
    expect(report.ok).toBe(true)
    expect(report.checksummedBytes).toBe(statSync(join(root, 'agent-logs', 'w.log')).size)
  })

  it('reads its records with a JS CRC32C that agrees with the native one', () => {
    const native = (
      createRequire(import.meta.url)('@node-rs/crc32') as {
        crc32c: (data: Uint8Array, initial?: number) => number
      }
    ).crc32c
    const bytes = Buffer.from(Array.from({ length: 300 }, (_, i) => (i * 131 + 7) & 0xff))
    for (let n = 0; n <= 64; n++)
      expect(crc32cSmall(bytes, n, n + 28)).toBe(native(bytes.subarray(n, n + 28)) >>> 0)
    expect(crc32cSmall(Buffer.from('123456789'), 0, 9)).toBe(0xe3069283) // the CRC-32C check value
    // crc32c sums a process's first 64 KiB with the table and the rest natively, continuing either way.
    const big = Buffer.from(Array.from({ length: 70_000 }, (_, i) => (i * 7919 + 3) & 0xff))
    for (const [from, to] of [
      [0, 0],
      [0, 1],
      [5, 4095],
      [0, 65_536],
      [0, 4096],
      [100, 70_000],
    ] as const) {
      const part = big.subarray(from, to)
      expect(crc32c(part)).toBe(native(part) >>> 0)
      const seed = native(big.subarray(0, 77)) >>> 0
      expect(crc32c(part, seed)).toBe(native(part, seed) >>> 0)
      // a run summed in a small piece then a large one (an owner's block) is the whole run's CRC
      expect(crc32c(big.subarray(to), crc32c(big.subarray(0, to)))).toBe(native(big) >>> 0)
    }
  })

  it('covers the whole log after a clean close, block by block', async () => {
    const root = tempDir()
    await filled(root, 3000) // ~290 KB: four full blocks and a partial one
    const file = join(root, 'agent-logs', 'w.log')
    const st = statSync(file, { bigint: true })
    const sidecar = readSidecar(sidecarPath(root, 'w'), st.ino, Number(st.size))
    expect(sidecar).not.toBeNull()
    const blocks = sidecar?.blocks ?? []
    expect(blocks.length).toBeGreaterThanOrEqual(4)
    expect(blocks.reduce((n, b) => n + b.length, 0)).toBe(Number(st.size))
    expect(blocks.reduce((n, b) => n + b.entries, 0)).toBe(3000)
    expect(blocks[0]?.firstSeq).toBe(1)
    const report = await verifyWorkspace(root, 'w')
    expect(report.ok).toBe(true)
    expect(report.checksummedBytes).toBe(Number(st.size))
  })

  it('names a flipped byte that is still valid JSON by byte range and seq range', async () => {
    const root = tempDir()
    await filled(root, 3000)
    const file = join(root, 'agent-logs', 'w.log')
    const text = readFileSync(file, 'latin1')
    const at = text.indexOf('"src/f2000.ts"') + 7 // the 2 of f2000 → 3: a valid path, another file
    writeFileSync(file, `${text.slice(0, at)}3${text.slice(at + 1)}`, 'latin1')
    const report = await verifyWorkspace(root, 'w')
    expect(report.ok).toBe(false)
    expect(report.damaged?.length).toBe(1)
    const d = report.damaged?.[0] as { offset: number; length: number; firstSeq: number; lastSeq: number }
    expect(d.offset).toBeLessThanOrEqual(at)
    expect(d.offset + d.length).toBeGreaterThan(at)
    expect(d.firstSeq).toBeLessThanOrEqual(2001)
    expect(d.lastSeq).toBeGreaterThanOrEqual(2001)
    expect(report.problem?.reason).toMatch(
      /^damaged block: bytes \d+-\d+, seqs \d+-\d+ do not match their checksum$/,
    )
  })

  it('a log without a sidecar, or replaced since, is verified by its lines alone', async () => {
    const root = tempDir()
    await filled(root, 1000)
    rmSync(sidecarPath(root, 'w'))
    expect((await verifyWorkspace(root, 'w')).ok).toBe(true)
    await filled(root, 1000) // the sidecar starts again at the log's end: the first part is not covered
    const covered = (await verifyWorkspace(root, 'w')).checksummedBytes ?? 0
    const size = statSync(join(root, 'agent-logs', 'w.log')).size
    expect(covered).toBeGreaterThan(0)
    expect(covered).toBeLessThan(size)
    // Another file put in the log's place: the sidecar names the old inode and is not used.
    const file = join(root, 'agent-logs', 'w.log')
    copyFileSync(file, `${file}.copy`)
    renameSync(`${file}.copy`, file)
    const report = await verifyWorkspace(root, 'w')
    expect(report.ok).toBe(true)
    expect(report.checksummedBytes ?? 0).toBe(0)
    expect(existsSync(sidecarPath(root, 'w'))).toBe(true)
  })

  /** Byte offset of each seq's line (seqs 1…n, one per line), and the file's size. */
  function lineStarts(file: string): { at: number[]; size: number } {
    const bytes = readFileSync(file)
    const at = [0, 0] // at[seq]
    for (let i = 0; i < bytes.length - 1; i++) if (bytes[i] === 0x0a) at.push(i + 1)
    return { at, size: bytes.length }
  }

  /** What the sidecar alone says of `seq` (null: not used). */
  function hint(file: string, seq: number): { at?: number; after?: number } | null {
    const fd = openSync(file, 'r')
    try {
      return sidecarSeek(fd, file, statSync(file).size, seq)
    } finally {
      closeSync(fd)
    }
  }

  it('gives --from SEQ a direct seek: the block that holds it, right at the edges of every block', async () => {
    const root = tempDir()
    await filled(root, 3000)
    const file = join(root, 'agent-logs', 'w.log')
    const st = statSync(file, { bigint: true })
    const blocks = readSidecar(sidecarPath(root, 'w'), st.ino, Number(st.size))?.blocks ?? []
    expect(blocks.length).toBeGreaterThanOrEqual(4)
    const { at, size } = lineStarts(file)
    for (const b of blocks) {
      const last = b.firstSeq + b.entries - 1
      expect(hint(file, b.firstSeq)).toEqual({ at: b.offset })
      expect(at[b.firstSeq]).toBe(b.offset)
      expect(hint(file, last)).toEqual({ at: at[last] })
      for (const seq of [b.firstSeq - 1, b.firstSeq, b.firstSeq + 1, last, last + 1]) {
        if (seq >= 1) expect(seekSeq(file, seq), `seq ${seq}`).toBe(at[seq] ?? size)
      }
    }
    const edge = blocks[1] as (typeof blocks)[number]
    const cli = runCli(['log', 'w', '--from', String(edge.firstSeq), '--root', root])
    expect(cli.status).toBe(0)
    expect(cli.stdout.startsWith(`{"seq":${edge.firstSeq},`)).toBe(true)
    expect(cli.stdout.length).toBe(size - edge.offset)
    // Past the last block recorded (a tail the sidecar has not covered yet): a search after it.
    expect(hint(file, 3001)).toEqual({ after: size })
    expect(seekSeq(file, 3001)).toBe(size)
    await filled(root, 100) // seqs 3001…3100, in a block not recorded until it fills or the log closes
    const more = lineStarts(file)
    expect(seekSeq(file, 3050)).toBe(more.at[3050])
  })

  it('a reader that keeps the sidecar decoded reads only records appended since, and all of it once it was rewritten', async () => {
    const root = tempDir()
    await filled(root, 3000)
    const file = join(root, 'agent-logs', 'w.log')
    const sum = sidecarPath(root, 'w')
    const st = () => statSync(file, { bigint: true })
    const whole = () => readSidecar(sum, st().ino, Number(st().size))
    const kept = () => readSidecar(sum, st().ino, Number(st().size), true)
    const first = whole()
    expect(kept()).toEqual(first)
    expect(kept()).toEqual(first)
    // The owner appends records for the blocks it commits.
    const log = await AgentLog.open({ root, workers: 1 })
    await log.appendMany(
      'w',
      Array.from({ length: 2000 }, (_, i) => write(3000 + i)),
    )
    await log.close()
    const grown = whole()
    expect(grown?.blocks.length).toBeGreaterThan(first?.blocks.length as number)
    expect(kept()).toEqual(grown)
    // Rewritten: its last record another one (a bad CRC), then more appended: read whole again.
    const good = readFileSync(sum)
    const bad = Buffer.from(good)
    bad[bad.length - 5] = (bad[bad.length - 5] as number) ^ 0x01
    writeFileSync(sum, Buffer.concat([bad, good.subarray(32, 64)]))
    expect(kept()).toEqual(whole())
    expect(kept()?.blocks.length).toBe((grown?.blocks.length as number) - 1)
    // Cut to its header and grown again with only the first record.
    writeFileSync(sum, good.subarray(0, 32))
    expect(kept()?.blocks).toEqual([])
    writeFileSync(sum, good.subarray(0, 64))
    expect(kept()).toEqual(whole())
    expect(kept()?.blocks.length).toBe(1)
    // Another file under the name (another inode), and the log cut short: read whole.
    rmSync(sum)
    writeFileSync(sum, good)
    expect(kept()).toEqual(whole())
    const text = readFileSync(file)
    writeFileSync(file, text.subarray(0, (first?.blocks[1]?.offset as number) + 10))
    expect(kept()).toEqual(whole())
    expect(kept()?.blocks.length).toBe(1)
  })

  it('ignores a stale, foreign or damaged sidecar, and the seek is still right', async () => {
    const root = tempDir()
    await filled(root, 3000)
    const file = join(root, 'agent-logs', 'w.log')
    const sum = sidecarPath(root, 'w')
    const { at } = lineStarts(file)
    const ino = statSync(file, { bigint: true }).ino
    const good = readFileSync(sum)
    const checkAll = () => {
      for (const seq of [1, 2, 500, 1234, 2001, 2999, 3000])
        expect(seekSeq(file, seq), `seq ${seq}`).toBe(at[seq])
    }
    // Records that name the wrong bytes (well-formed, this log's inode): their CRC does not match.
    writeFileSync(
      sum,
      Buffer.concat([
        encodeSumHeader(ino),
        encodeSumRecord({ offset: 0, firstSeq: 1, length: 50_000, entries: 1500, crc: 1 }),
        encodeSumRecord({ offset: 50_000, firstSeq: 1501, length: 50_000, entries: 1500, crc: 2 }),
      ]),
    )
    expect(hint(file, 1234)).toBeNull()
    expect(hint(file, 2001)).toBeNull()
    checkAll()
    // Another log's sidecar (another inode).
    writeFileSync(sum, Buffer.concat([encodeSumHeader(ino + 1n), good.subarray(32)]))
    expect(hint(file, 1234)).toBeNull()
    checkAll()
    // Garbage.
    writeFileSync(sum, Buffer.from('not a sidecar at all, not even close to 32 bytes long'))
    expect(hint(file, 1234)).toBeNull()
    checkAll()
    // The right sidecar, but the block holding the seq was damaged since: not a seek target.
    writeFileSync(sum, good)
    const text = readFileSync(file, 'latin1')
    const flip = text.indexOf('"src/f2000.ts"') + 7
    writeFileSync(file, `${text.slice(0, flip)}3${text.slice(flip + 1)}`, 'latin1')
    expect(hint(file, 2001)).toBeNull()
    expect(hint(file, 5)).toEqual({ at: at[5] }) // other blocks still serve
    checkAll()
    // The log cut short since (same inode): blocks past its end are not used.
    writeFileSync(file, text.slice(0, at[1501]), 'latin1')
    expect(hint(file, 2001)?.at).toBeUndefined() // past the blocks left: a search of what follows them
    expect(seekSeq(file, 1500)).toBe(at[1500])
    expect(seekSeq(file, 2001)).toBe(at[1501])
  })
})
