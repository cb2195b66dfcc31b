/**
 * Snapshot and merge entries are the store's records: appended by anyone else they are refused
 * unless they name this workspace's records, verify reports those that do not, and replay gives
 * them no effect, so a workspace that holds one goes on.
 */
import { appendFileSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { AgentLog, type EntryInput, formatLine, ObjectStore, SnapshotEngine } from '../../dist/src/index.js'
import { blobOf, runCli, tempDir } from '../helpers/index.js'
import { files, refusal, setup } from '../helpers/snapshot.js'

const w = (path: string, n: number): EntryInput => ({ op: 'write', path, blob: blobOf(n) })
const ZERO = `noa_${'0'.repeat(64)}`

async function withObjects(root: string) {
  const log = await AgentLog.open({ root, workers: 1, objects: new ObjectStore(root) })
  onTestFinished(() => log.close().then(() => undefined))
  return log
}

describe('appending records by hand', () => {
  it('is refused without objects: only the store writes snapshot and merge entries', async () => {
    const { log, engine } = await setup()
    await log.append('ws', w('a', 1))
    const s = await engine.snapshot('ws')
    for (const e of [
      { op: 'snapshot', snapshot_id: s.snapshotId, message: '' },
      { op: 'merge', from_workspace: 'x', from_snapshot: s.snapshotId },
    ] as EntryInput[]) {
      const err = await refusal(log.append('ws', e))
      expect(err.code).toBe('NOA_BAD_ENTRY')
      expect(err.message).toMatch(/entries are written by the store \(SnapshotEngine snapshot, fork, merge\)/)
      expect((await refusal(log.appendMany('ws', [w('b', 2), e]))).message).toMatch(/^entry 2: /)
    }
    expect((await log.verify('ws')).lastSeq).toBe(2) // nothing was written
  })

  it("with objects, lets through only what names this workspace's records", async () => {
    const checked = await withObjects(tempDir())
    const log = checked
    const engine = new SnapshotEngine({ log })
    await log.append('main', w('a', 1))
    const main1 = await engine.snapshot('main')
    await log.append('other', w('o', 9))
    const other = await engine.snapshot('other')
    await log.append('main', w('b', 2))
    const main2 = await engine.snapshot('main')
    const snap = (id: string, parent?: string): EntryInput =>
      parent
        ? { op: 'snapshot', snapshot_id: id, parent, message: '' }
        : { op: 'snapshot', snapshot_id: id, message: '' }
    const refusals: Array<[EntryInput, RegExp]> = [
      [snap(ZERO), /snapshot_id noa_0{64} names no snapshot record/],
      [snap('noa_z7x9'), /names no snapshot record/],
      [snap(other.snapshotId as string), /is a snapshot of workspace other, not of main \(copying a log\?/],
      [snap(main2.snapshotId as string), /parent \(none\) is not the parent of/],
      [
        { op: 'merge', from_workspace: 'other', from_snapshot: other.snapshotId as string },
        /a merge entry without it is refused/,
      ],
    ]
    for (const [e, message] of refusals) {
      const err = await refusal(checked.append('main', e))
      expect(err.code).toBe('NOA_BAD_ENTRY')
      expect(err.message).toMatch(message)
    }
    // A merge entry with a snapshot that does not list it.
    const pair = await refusal(
      checked.appendMany('main', [
        { op: 'merge', from_workspace: 'other', from_snapshot: other.snapshotId as string },
        snap(main2.snapshotId as string, main1.snapshotId as string),
      ]),
    )
    expect(pair.message).toMatch(/^entry 1: merge of noa_\w+ is not followed by a merge snapshot of main/)
    // This workspace's own snapshot, again: it becomes the head (its tree + the entries after it).
    await checked.append('main', snap(main1.snapshotId as string))
    await checked.append('main', w('c', 3))
    const after = await engine.snapshot('main')
    expect(after.parent).toBe(main1.snapshotId)
    expect(await files(engine, after.snapshotId as string)).toEqual({
      a: blobOf(1),
      b: blobOf(2),
      c: blobOf(3),
    })
    // Another workspace's snapshot as the first entry of a new log: a fork.
    await checked.append('copy', snap(other.snapshotId as string))
    expect((await engine.head('copy'))?.record.id).toBe(other.snapshotId)
  })

  it('noa append refuses forged records naming the line, and noa log A | noa append B says why', () => {
    const root = tempDir()
    const cli = (args: string[], input = '') => runCli([...args, '--root', root], { input })
    cli(['append', 'A', '--no-blob-check'], `${JSON.stringify(w('a', 1))}\n`)
    const id = cli(['snapshot', 'A']).stdout.trim()
    const forged = cli(
      ['append', 'A'],
      `${JSON.stringify({ op: 'delete', path: 'x' })}\n${JSON.stringify({ op: 'snapshot', snapshot_id: ZERO, message: '' })}\n`,
    )
    expect(forged.status).toBe(1)
    expect(forged.stderr).toBe(
      `noa append: stdin:2: snapshot_id ${ZERO} names no snapshot record in ${join(root, 'objects')}; nothing was written\n`,
    )
    const copied = cli(['append', 'B'], cli(['log', 'A']).stdout)
    expect(copied.status).toBe(1)
    expect(copied.stderr).toBe(
      'noa append: stdin:1: seq: is assigned by the workspace owner; leave it out (a line of noa log keeps its seq and ts; to start a workspace from another one, use noa fork); nothing was written\n',
    )
    const stripped = cli(['log', 'A'])
      .stdout.trimEnd()
      .split('\n')
      .map((l) => {
        const { seq: _s, ts: _t, ...rest } = JSON.parse(l)
        return JSON.stringify(rest)
      })
      .join('\n')
    const again = cli(['append', 'B', '--no-blob-check'], stripped)
    expect(again.status).toBe(1)
    expect(again.stderr).toBe(
      `noa append: stdin:2: snapshot_id ${id} is a snapshot of workspace A, not of B (copying a log? a fork is made with noa fork or SnapshotEngine.fork); nothing was written\n`,
    )
    expect(cli(['log', 'B']).status).toBe(1) // B was never created
    expect(cli(['fork', 'B', '--from', id]).status).toBe(0)
  })
})

describe('records written into a log by hand', () => {
  it('are flagged by verify, given no effect by replay, and the workspace goes on', async () => {
    const { root, log, engine } = await setup()
    await log.append('main', w('a', 1))
    await engine.snapshot('main')
    await log.append('other', w('o', 9))
    const other = await engine.snapshot('other')
    await log.close()
    const file = join(root, 'agent-logs', 'main.log')
    const lines = readFileSync(file, 'utf8').trimEnd().split('\n')
    const last = JSON.parse(lines.at(-1) as string)
    let seq = last.seq
    let ts = last.ts
    const add = (body: string) => appendFileSync(file, formatLine(++seq, body, ++ts))
    add(`"op":"snapshot","snapshot_id":"${ZERO}","message":"forged"`)
    add(`"op":"write","path":"b","blob":"${blobOf(2)}"`)
    add(`"op":"snapshot","snapshot_id":"${other.snapshotId}","message":"someone else's"`)
    add(`"op":"merge","from_workspace":"other","from_snapshot":"${other.snapshotId}"`)
    const v = runCli(['verify', 'main', '--root', root])
    expect(v.status).toBe(1)
    expect(v.stderr).toContain(`seq 3: snapshot_id ${ZERO} names no snapshot record`)
    expect(v.stderr).toContain(
      `seq 5: snapshot_id ${other.snapshotId} is a snapshot of workspace other, not of main`,
    )
    expect(v.stderr).toContain(
      `seq 6: merge of ${other.snapshotId} (from other) is not followed by a merge snapshot`,
    )
    const json = JSON.parse(runCli(['verify', 'main', '--json', '--root', root]).stdout)
    expect(json.store.map((p: { seq: number; kind: string }) => [p.seq, p.kind])).toEqual([
      [3, 'unknown-snapshot'],
      [5, 'foreign-snapshot'],
      [6, 'bad-merge'],
    ])
    // Before, these wedged the workspace (or made it take other's tree); now they change nothing.
    const reader = new SnapshotEngine({ root })
    expect((await reader.listSnapshots('main')).length).toBe(1)
    const s = runCli(['snapshot', 'main', '--json', '--root', root])
    expect(s.status).toBe(0)
    const out = JSON.parse(s.stdout)
    expect(out.noEffect).toEqual([
      { seq: 3, reason: 'unknown-snapshot', snapshotId: ZERO },
      { seq: 5, reason: 'foreign-snapshot', snapshotId: other.snapshotId },
    ])
    expect(await files(reader, out.snapshotId)).toEqual({ a: blobOf(1), b: blobOf(2) })
    const noted = runCli(['verify', 'main', '--root', root])
    expect(noted.stderr).toContain(`seq 3: snapshot_id ${ZERO} names no snapshot record`)
    expect(noted.stderr).toContain(`recorded as no effect by ${out.snapshotId}`)
    expect(noted.stderr).toContain('not followed by a merge snapshot') // merge entries are never recorded
    // Strict keeps the old refusal.
    writeFileSync(file, readFileSync(file)) // untouched
    const strict = runCli(['merge', 'main', 'other', '--strict', '--root', root])
    expect(strict.status).toBe(0) // the forged entries are before main's new head now
    expect(runCli(['snapshots', 'main', '--root', root]).status).toBe(0)
  })
})
