/**
 * A damaged line in the middle of a log refuses every snapshot of that workspace; a snapshot
 * with skipDamaged (`noa snapshot --skip-damaged`) leaves it out, records exactly what it left
 * out (seqs where they can be known, byte ranges always), and the workspace goes on from there.
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { sidecarPath } from '../../dist/src/engine/sidecar.js'
import { AgentLog, type EntryInput, SnapshotEngine } from '../../dist/src/index.js'
import { blobOf, runCli } from '../helpers/index.js'
import { files, refusal, setup } from '../helpers/snapshot.js'

const w = (path: string, n: number): EntryInput => ({ op: 'write', path, blob: blobOf(n) })

/** Replaces the log's line of `seq` (1-based, one per line) with `edit(line)`; returns its byte range. */
function damageLine(
  root: string,
  seq: number,
  edit: (line: string) => string,
): { offset: number; length: number } {
  const file = join(root, 'agent-logs', 'ws.log')
  const lines = readFileSync(file, 'utf8').split('\n')
  const offset = Buffer.byteLength(lines.slice(0, seq - 1).join('\n')) + (seq > 1 ? 1 : 0)
  const line = lines[seq - 1] as string
  const edited = edit(line)
  expect(Buffer.byteLength(edited)).toBe(Buffer.byteLength(line)) // same size: only the line changes
  lines[seq - 1] = edited
  writeFileSync(file, lines.join('\n'))
  return { offset, length: Buffer.byteLength(line) + 1 }
}

describe('snapshot skipDamaged', () => {
  it('refuses a damaged log naming the damage and the way past it, then skips and records exactly what it left out', async () => {
    const { root, log } = await setup()
    await log.appendMany('ws', [w('a', 1), w('b', 2), w('c', 3), w('d', 4), w('e', 5), w('f', 6)])
    // seq 3: its seq unreadable (the seqs around it force it); seq 5: valid JSON, a field broken.
    const three = damageLine(root, 3, (l) => l.replace('{"seq":3,', '{"se#":3,'))
    const five = damageLine(root, 5, (l) => l.replace('"op":"write"', '"op":"wrote"'))
    await log.close()
    rmSync(sidecarPath(root, 'ws')) // a log without checksums (another tool's): its lines alone tell
    const reopened = await AgentLog.open({ root, workers: 1 })
    try {
      const eng = new SnapshotEngine({ log: reopened })
      const err = await refusal(eng.snapshot('ws'))
      expect(err.code).toBe('NOA_CORRUPT_LOG')
      expect(err.message).toContain(`line at byte ${three.offset}`)
      expect(err.message).toContain('noa snapshot ws --skip-damaged')
      expect(await eng.head('ws')).toBeNull() // nothing written

      const s = await eng.snapshot('ws', { skipDamaged: true, message: 'past the damage' })
      expect(s.created).toBe(true)
      expect(s.seq).toBe(6)
      const want = [
        { offset: three.offset, length: three.length, firstSeq: 3, lastSeq: 3, reason: 'corrupt-line' },
        { offset: five.offset, length: five.length, firstSeq: 5, lastSeq: 5, reason: 'corrupt-line' },
      ]
      expect(s.skipped).toEqual(want)
      expect(await files(eng, s.snapshotId as string)).toEqual({
        a: blobOf(1),
        b: blobOf(2),
        d: blobOf(4),
        f: blobOf(6),
      })
      // Kept in the record, read back by a fresh engine, listed by snapshots and history.
      const fresh = new SnapshotEngine({ root })
      expect((await fresh.getSnapshot(s.snapshotId as string)).skipped).toEqual(want)
      expect((await fresh.listSnapshots('ws'))[0]?.skipped).toEqual(want)
      expect((await fresh.history('ws'))[0]?.skipped).toEqual(want)
      // The tree is rebuilt with the same parts left out (as after prune + gc).
      expect(Object.fromEntries((await fresh.tree(s.snapshotId as string)).entries())).toEqual(
        await files(eng, s.snapshotId as string),
      )

      // The workspace goes on: later snapshots, without the flag, start after the damage.
      await reopened.appendMany('ws', [w('g', 7)])
      const next = await eng.snapshot('ws')
      expect(next.created).toBe(true)
      expect(next.parent).toBe(s.snapshotId)
      expect(next.skipped).toEqual([])
      expect((await files(eng, next.snapshotId as string)).g).toBe(blobOf(7))
      // Nothing new: a second skipping snapshot does not record the same damage again.
      expect((await eng.snapshot('ws', { skipDamaged: true })).created).toBe(false)
    } finally {
      await reopened.close()
    }
  })

  it('names a damaged line by its bytes alone when its seq cannot be known', async () => {
    const { root, log, engine } = await setup()
    await log.appendMany('ws', [w('a', 1), w('b', 2), w('c', 3), w('d', 4)])
    // Two damaged lines between seq 1 and seq 4: two slots for two lines, so both are forced.
    const two = damageLine(root, 2, (l) => `${'x'.repeat(l.length)}`)
    const three = damageLine(root, 3, (l) => l.replace('"blob":"', '"blob":0'))
    const s = await engine.snapshot('ws', { skipDamaged: true })
    expect(s.skipped).toEqual([
      { offset: two.offset, length: two.length, firstSeq: 2, lastSeq: 2, reason: 'corrupt-line' },
      { offset: three.offset, length: three.length, firstSeq: 3, lastSeq: 3, reason: 'corrupt-line' },
    ])
    await log.appendMany('ws', [w('e', 5)])
    const tail = damageLine(root, 6, (l) => 'y'.repeat(l.length)) // the last line, nothing after it
    const t = await engine.snapshot('ws', { skipDamaged: true })
    expect(t.skipped).toEqual([{ offset: tail.offset, length: tail.length, reason: 'corrupt-line' }])
  })

  it('through the CLI: the refusal suggests the flag; snapshots, history and verify show what was left out', async () => {
    const { root, log } = await setup()
    await log.appendMany('ws', [w('a', 1), w('b', 2), w('c', 3)])
    await log.close()
    rmSync(sidecarPath(root, 'ws'))
    const d = damageLine(root, 2, (l) => l.replace('{"seq":2,', '{"seq";2,'))
    const refused = runCli(['snapshot', 'ws', '--root', root])
    expect(refused.status).toBe(1)
    expect(refused.stderr).toContain(`line at byte ${d.offset}`)
    expect(refused.stderr).toContain('--skip-damaged')
    const line = `seq 2 (bytes ${d.offset}-${d.offset + d.length}): damaged line, left out`
    const made = runCli(['snapshot', 'ws', '--skip-damaged', '--root', root])
    expect(made.status).toBe(0)
    expect(made.stderr.split('\n')[0]).toBe(`noa snapshot: ws ${line}`) // then the blobs never stored
    const id = made.stdout.trim()
    const r = JSON.parse(runCli(['snapshots', 'ws', '--json', '--root', root]).stdout)[0] as {
      snapshotId: string
      skipped: unknown[]
    }
    expect(r.snapshotId).toBe(id)
    expect(r.skipped).toEqual([
      { offset: d.offset, length: d.length, firstSeq: 2, lastSeq: 2, reason: 'corrupt-line' },
    ])
    const listed = runCli(['snapshots', 'ws', '--root', root])
    expect(listed.stdout).toContain(`${r.snapshotId}\tsnapshot\t3\t4\t`)
    expect(listed.stdout).toContain(`  skipped ${line}`)
    expect(runCli(['history', 'ws', '--root', root]).stdout).toContain(`[skipped ${line}]`)
    const verified = runCli(['verify', 'ws', '--root', root])
    expect(verified.status).toBe(1) // the damage is still in the log
    expect(verified.stderr).toContain(`note: snapshot ${r.snapshotId} skipped ${line}`)
    const json = JSON.parse(runCli(['verify', 'ws', '--json', '--root', root]).stdout) as {
      skipped: unknown[]
    }
    expect(json.skipped).toContainEqual({ snapshot: r.snapshotId, ...(r.skipped[0] as object) })
  })

  it('refuses a block that does not match its checksum, and skipping leaves the whole block out, by its seqs', async () => {
    const { root, log } = await setup()
    for (let i = 0; i < 3000; i += 500) {
      await log.appendMany(
        'ws',
        Array.from({ length: 500 }, (_, k) => w(`src/f${i + k}.ts`, i + k)),
      )
    }
    await log.close() // the sidecar now covers every block
    const file = join(root, 'agent-logs', 'ws.log')
    const text = readFileSync(file, 'latin1')
    const at = text.indexOf('"src/f2000.ts"') + 7 // f2000 → f3000: still a valid entry
    writeFileSync(file, `${text.slice(0, at)}3${text.slice(at + 1)}`, 'latin1')
    const reopened = await AgentLog.open({ root, workers: 1 })
    try {
      const engine = new SnapshotEngine({ log: reopened })
      const err = await refusal(engine.snapshot('ws'))
      expect(err.code).toBe('NOA_CORRUPT_LOG')
      expect(err.message).toMatch(
        /^workspace ws: damaged block: bytes \d+-\d+, seqs \d+-\d+ do not match their checksum; .*--skip-damaged/,
      )
      const { offset, length, firstSeq, lastSeq } = err.details as {
        offset: number
        length: number
        firstSeq: number
        lastSeq: number
      }
      expect(offset).toBeLessThanOrEqual(at)
      expect(offset + length).toBeGreaterThan(at)
      expect(firstSeq).toBeLessThanOrEqual(2001)
      expect(lastSeq).toBeGreaterThanOrEqual(2001)
      // A full replay says the same.
      expect((await refusal(engine.replay('ws', { fromScratch: true }))).message).toContain('damaged block')

      const s = await engine.snapshot('ws', { skipDamaged: true })
      expect(s.skipped).toEqual([{ offset, length, firstSeq, lastSeq, reason: 'damaged-block' }])
      const tree = await engine.tree(s.snapshotId as string)
      expect(tree.size).toBe(3000 - (lastSeq - firstSeq + 1))
      expect(tree.get('src/f3000.ts')).toBeUndefined() // the flipped entry is not taken in
      expect(tree.get(`src/f${firstSeq - 2}.ts`)).toBe(blobOf(firstSeq - 2))
      expect(tree.get(`src/f${firstSeq - 1}.ts`)).toBeUndefined()
      expect(tree.get(`src/f${lastSeq - 1}.ts`)).toBeUndefined()
      expect(tree.get(`src/f${lastSeq}.ts`)).toBe(blobOf(lastSeq))
      await reopened.appendMany('ws', [w('late', 1)])
      expect((await engine.snapshot('ws')).created).toBe(true) // starts after the damage
    } finally {
      await reopened.close()
    }
  })
})
