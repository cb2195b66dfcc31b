/**
 * The checksum sidecar: a CRC32C per ~64 KiB block of a log, written by the owner off the ack
 * path, so verify names a damaged block (a flipped byte that is still valid JSON) by byte
 * range and seq range.
 */
import { copyFileSync, existsSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { readSidecar, sidecarPath } from '../../dist/src/engine/sidecar.js'
import { AgentLog, type EntryInput, verifyWorkspace } from '../../dist/src/index.js'
import { blobOf, tempDir } from '../helpers/index.js'

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
})
