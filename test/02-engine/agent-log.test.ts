import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  truncateSync,
  writeFileSync,
} from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { listWorkspaces, readEntries } from '../../dist/src/engine/index.js'
import { AgentLog, type Entry, type EntryInput, isNoaError } from '../../dist/src/index.js'
import { BLOB, blobOf, tempDir } from '../helpers/index.js'

const OPEN_TRACE = new URL('../fixtures/open-trace-io.mjs', import.meta.url).href

function write(i: number, path = `src/f${i}.ts`): EntryInput {
  return { op: 'write', path, blob: blobOf(i) }
}

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = []
  for await (const x of it) out.push(x)
  return out
}

async function withLog<T>(
  options: Parameters<typeof AgentLog.open>[0],
  fn: (log: AgentLog) => Promise<T>,
): Promise<T> {
  const log = await AgentLog.open(options)
  try {
    return await fn(log)
  } finally {
    await log.close()
  }
}

function lines(file: string): string[] {
  return readFileSync(file, 'utf8').split('\n').slice(0, -1)
}

describe('AgentLog append', () => {
  it('workspaces created together share one fsync of the log folder, each durable in it before its ack', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 0 })
    try {
      const acks = await Promise.all(Array.from({ length: 200 }, (_, i) => log.append(`new-${i}`, write(i))))
      expect(acks.every((a) => a.seq === 1)).toBe(true)
      const [s] = await log.status()
      expect(s?.dirSyncs).toBeGreaterThan(0)
      expect(s?.dirSyncs).toBeLessThanOrEqual(5)
      expect(readdirSync(join(root, 'agent-logs')).length).toBe(200)
    } finally {
      await log.close()
    }
  })

  it('a burst of new workspaces opens each log once, creating it, with no failed look first', async () => {
    const root = tempDir()
    const trace = join(tempDir(), 'opens')
    // An empty log another process made and never wrote: taken as new, its seq starts at 1.
    mkdirSync(join(root, 'agent-logs'), { recursive: true })
    writeFileSync(join(root, 'agent-logs', 'new-0.log'), '')
    const log = await AgentLog.open({ root, workers: 1, ioModule: OPEN_TRACE, ioOptions: { trace } })
    try {
      const acks = await Promise.all(Array.from({ length: 100 }, (_, i) => log.append(`new-${i}`, write(i))))
      expect(acks.every((a) => a.seq === 1)).toBe(true)
      expect((await log.append('new-0', write(100))).seq).toBe(2)
    } finally {
      await log.close()
    }
    const opens = readFileSync(trace, 'utf8')
      .split('\n')
      .filter((l) => l.endsWith('.log'))
    expect(opens.filter((l) => !l.startsWith('create ok '))).toEqual([])
    expect(opens.length).toBe(100)
    expect(readdirSync(join(root, 'agent-logs')).length).toBe(100)
  })

  it('assigns seq 1, 2, 3 and strictly increasing ts, writes the seed line shape', async () => {
    const root = tempDir()
    await withLog({ root, workers: 2 }, async (log) => {
      const a = await log.append('default', { op: 'write', path: 'src/main.rs', blob: BLOB })
      const many = await log.appendMany('default', [
        { op: 'delete', path: 'src/old.rs' },
        { op: 'rename', from: 'src/foo.rs', to: 'src/bar.rs' },
      ])
      expect(a.seq).toBe(1)
      expect(many.map((m) => m.seq)).toEqual([2, 3])
      expect(many[0]?.ts).toBeGreaterThan(a.ts)
      expect(many[1]?.ts).toBeGreaterThan(many[0]?.ts as number)
      const file = join(root, 'agent-logs', 'default.log')
      expect(lines(file)).toEqual([
        `{"seq":1,"op":"write","path":"src/main.rs","blob":"${BLOB}","ts":${a.ts}}`,
        `{"seq":2,"op":"delete","path":"src/old.rs","ts":${many[0]?.ts}}`,
        `{"seq":3,"op":"rename","from":"src/foo.rs","to":"src/bar.rs","ts":${many[1]?.ts}}`,
      ])
      expect(statSync(file).mode & 0o777).toBe(0o644)
      // ts is wall-clock microseconds
      expect(Math.abs(a.ts / 1000 - Date.now())).toBeLessThan(60_000)
    })
  })

  it('two logs with the owner on this thread (workers: 0) each get their own commits back', async () => {
    // The addon has one completion handler per thread: each owner's jobs must still reach it.
    const roots = [tempDir(), tempDir()]
    const logs = await Promise.all(roots.map((root) => AgentLog.open({ root, workers: 0 })))
    try {
      for (let i = 0; i < 10; i++) {
        const acks = await Promise.all(
          logs.flatMap((log) =>
            Array.from({ length: 4 }, (_, k) =>
              log.append(
                `w${k}`,
                { op: 'write', path: `f${i}`, blob: blobOf(i) },
                {
                  files: [{ path: `d${k}/f${i}`, data: Buffer.from(`${i}`) }],
                },
              ),
            ),
          ),
        )
        expect(acks.map((a) => a.seq)).toEqual(Array.from({ length: 8 }, () => i + 1))
      }
    } finally {
      await Promise.all(logs.map((log) => log.close()))
    }
    for (const root of roots) {
      expect((await collect(readEntries(join(root, 'agent-logs', 'w3.log')))).map((e) => e.seq)).toEqual(
        Array.from({ length: 10 }, (_, i) => i + 1),
      )
      expect(readFileSync(join(root, 'd3', 'f9'), 'utf8')).toBe('9')
    }
  })

  it('continues seq and ts after the log is closed and reopened', async () => {
    const root = tempDir()
    const first = await withLog({ root }, (log) => log.appendMany('w', [write(1), write(2), write(3)]))
    // A clock that stepped back must not make ts go back: plant a last ts far in the future.
    const file = join(root, 'agent-logs', 'w.log')
    const future = (first[2]?.ts as number) + 3_600_000_000
    writeFileSync(file, `${readFileSync(file, 'utf8')}{"seq":4,"op":"delete","path":"x","ts":${future}}\n`)
    const next = await withLog({ root }, (log) => log.appendMany('w', [write(5), write(6)]))
    expect(next.map((a) => a.seq)).toEqual([5, 6])
    expect(next[0]?.ts).toBe(future + 1)
    expect(next[1]?.ts).toBe(future + 2)
  })

  it('takes every entry exactly once from many appenders over many workspaces', async () => {
    const root = tempDir()
    const workspaces = 24
    const submitters = 4
    const perSubmitter = 40
    await withLog({ root, workers: 2 }, async (log) => {
      const acks = new Map<string, number[]>()
      await Promise.all(
        Array.from({ length: workspaces * submitters }, async (_, k) => {
          const ws = `ws-${k % workspaces}`
          const s = Math.floor(k / workspaces)
          for (let i = 0; i < perSubmitter; i++) {
            const path = `s${s}/e${i}`
            const ack =
              i % 7 === 0
                ? (await log.appendMany(ws, [write(i, path), { op: 'delete', path }]))[0]
                : await log.append(ws, write(i, path))
            const list = acks.get(ws) ?? []
            list.push(ack?.seq as number)
            acks.set(ws, list)
          }
        }),
      )
      for (let w = 0; w < workspaces; w++) {
        const ws = `ws-${w}`
        const entries = await collect(log.read(ws))
        const expected = submitters * perSubmitter + submitters * Math.ceil(perSubmitter / 7)
        expect(entries.length).toBe(expected)
        entries.forEach((e, i) => {
          expect(e.seq).toBe(i + 1)
          if (i > 0) expect(e.ts).toBeGreaterThan((entries[i - 1] as Entry).ts)
        })
        const writes = entries.filter((e) => e.op === 'write').map((e) => (e as { path: string }).path)
        expect(new Set(writes).size).toBe(writes.length) // each submitted write exactly once
        expect(writes.length).toBe(submitters * perSubmitter)
        for (const seq of acks.get(ws) ?? []) expect(entries[seq - 1]?.op).toBe('write')
      }
    })
  })

  it('validates a whole batch before writing any of it', async () => {
    const root = tempDir()
    await withLog({ root }, async (log) => {
      await log.append('w', write(1))
      const err = await log
        .appendMany('w', [write(2), { op: 'delete', path: '../etc' } as EntryInput, write(3)])
        .catch((e) => e)
      expect(isNoaError(err, 'NOA_BAD_ENTRY')).toBe(true)
      expect(err.message).toBe('entry 2: path: has a \'..\' segment in "../etc"')
      const bad = await log.append('w', { op: 'write', path: 'a' } as EntryInput).catch((e) => e)
      expect(bad.code).toBe('NOA_BAD_ENTRY')
      expect((await collect(log.read('w'))).length).toBe(1)
      expect(await log.appendMany('w', [])).toEqual([])
    })
  })

  it('refuses bad workspace names with no file created anywhere', async () => {
    const root = tempDir()
    await withLog({ root }, async (log) => {
      for (const name of ['../x', 'a/b', '.', '..', '', 'x'.repeat(200), '/abs', 'a\\b']) {
        const err = await log.append(name, write(1)).catch((e) => e)
        expect(err.code).toBe('NOA_BAD_WORKSPACE')
        expect(err.message).toContain('workspace name')
      }
    })
    expect(readdirSync(root)).toEqual([])
    expect(existsSync(join(root, '..', 'x.log'))).toBe(false)
  })

  it('refuses misspelled and invalid options', async () => {
    await expect(AgentLog.open({ root: tempDir(), worker: 2 } as never)).rejects.toThrow(
      /unknown option worker/,
    )
    await expect(AgentLog.open({ root: tempDir(), workers: -1 })).rejects.toThrow(
      /option workers must be an integer/,
    )
    await expect(AgentLog.open({ root: tempDir(), workers: 1.5 })).rejects.toThrow(
      /option workers must be an integer/,
    )
    await expect(AgentLog.open({ durability: 'none' as never })).rejects.toThrow(/option durability/)
  })

  it('rejects appends after close', async () => {
    const log = await AgentLog.open({ root: tempDir() })
    await log.close()
    await expect(log.append('w', write(1))).rejects.toMatchObject({ code: 'NOA_CLOSED' })
  })

  it('drains queued appends on close', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root })
    const pending = Array.from({ length: 200 }, (_, i) => log.append(`w${i % 3}`, write(i)))
    await log.close()
    expect((await Promise.all(pending)).length).toBe(200)
    let n = 0
    for (const w of ['w0', 'w1', 'w2']) n += lines(join(root, 'agent-logs', `${w}.log`)).length
    expect(n).toBe(200)
  })

  it('works with more workspaces than open files, reopening evicted ones', async () => {
    const root = tempDir()
    await withLog({ root, workers: 2, maxOpenFiles: 4 }, async (log) => {
      for (let round = 0; round < 3; round++) {
        await Promise.all(Array.from({ length: 20 }, (_, w) => log.append(`w${w}`, write(round))))
      }
      const status = await log.status()
      for (const s of status) expect(s.open).toBeLessThanOrEqual(2)
    })
    for (let w = 0; w < 20; w++) {
      const entries = await collect(readEntries(join(root, 'agent-logs', `w${w}.log`)))
      expect(entries.map((e) => e.seq)).toEqual([1, 2, 3])
    }
  })

  it('keeps workspaces opened without an append within the bound too, closing idle ones', async () => {
    const root = tempDir()
    // One worker's own bound (no lone lane: its owner would hold one of the two).
    await withLog({ root, workers: 1, maxOpenFiles: 2, loneInThread: false }, async (log) => {
      for (const w of ['a', 'b', 'c', 'd']) await log.openWorkspace(w)
      const [status] = await log.status()
      expect(status?.workspaces).toEqual(['c', 'd'])
      await log.append('a', write(1)) // reopened, and still within the bound
      expect((await log.status())[0]?.workspaces.sort()).toEqual(['a', 'd'])
    })
  })

  it('serves thousands of workspaces through a small fd cache', async () => {
    const root = tempDir()
    const n = 2000
    await withLog({ root, workers: 2, maxOpenFiles: 64 }, async (log) => {
      for (let round = 1; round <= 2; round++) {
        const acks = await Promise.all(
          Array.from({ length: n }, (_, w) => log.append(`ws-${w}`, write(round))),
        )
        expect(acks.every((a) => a.seq === round)).toBe(true)
      }
      for (const s of await log.status()) expect(s.open).toBeLessThanOrEqual(32)
    })
    const list = await listWorkspaces(root)
    expect(list.length).toBe(n)
    expect(list.every((w) => w.entries === 2 && w.lastSeq === 2)).toBe(true)
  })

  it('commits in fdatasync mode too', async () => {
    const root = tempDir()
    await withLog({ root, durability: 'fdatasync' }, async (log) => {
      const acks = await Promise.all(Array.from({ length: 50 }, (_, i) => log.append(`w${i % 5}`, write(i))))
      expect(acks.length).toBe(50)
      expect((await log.verify('w0')).entries).toBe(10)
      expect(existsSync(join(root, 'journal'))).toBe(false)
    })
  })

  it("refuses the retired 'syncfs' durability by name, saying what replaced it", async () => {
    const root = tempDir()
    await expect(AgentLog.open({ root, durability: 'syncfs' as 'journal' })).rejects.toMatchObject({
      code: 'NOA_BAD_OPTION',
      message: expect.stringMatching(/'syncfs' was retired.*journal/),
    })
  })
})

describe('AgentLog read path', () => {
  it('streams from a seq found by binary search', async () => {
    const root = tempDir()
    await withLog({ root }, async (log) => {
      const entries: EntryInput[] = Array.from({ length: 5000 }, (_, i) => write(i))
      await log.appendMany('big', entries)
      for (const from of [1, 2, 777, 4999, 5000]) {
        const got = await collect(log.read('big', { fromSeq: from }))
        expect(got.length).toBe(5001 - from)
        expect(got[0]?.seq).toBe(from)
      }
      expect(await collect(log.read('big', { fromSeq: 5001 }))).toEqual([])
      const bytes = Buffer.concat(await collect(log.readBytes('big', 4999)))
      expect(bytes.toString().split('\n').length).toBe(3)
    })
  })

  it('returns only complete lines while an owner appends', async () => {
    const root = tempDir()
    await withLog({ root }, async (log) => {
      await log.append('live', write(0))
      let stop = false
      const writer = (async () => {
        let i = 1
        while (!stop) await log.append('live', write(i++))
      })()
      for (let k = 0; k < 20; k++) {
        const got = await collect(log.read('live'))
        expect(got.map((e) => e.seq)).toEqual(got.map((_, i) => i + 1))
      }
      stop = true
      await writer
    })
  })

  it('reports a workspace without a log as not found', async () => {
    const root = tempDir()
    await withLog({ root }, async (log) => {
      await expect(collect(log.read('nope'))).rejects.toMatchObject({ code: 'NOA_NOT_FOUND' })
      await expect(log.verify('nope')).rejects.toMatchObject({ code: 'NOA_NOT_FOUND' })
    })
  })
})

describe('recovery', () => {
  it('cuts a torn tail at every byte offset of the last line and continues the seq', async () => {
    const root = tempDir()
    const file = join(root, 'agent-logs', 'torn.log')
    await withLog({ root }, (log) => log.appendMany('torn', [write(1), write(2), write(3)]))
    const full = readFileSync(file)
    const lastStart = full.lastIndexOf(0x0a, full.length - 2) + 1
    const log = await AgentLog.open({ root, workers: 1 })
    try {
      for (let cut = lastStart; cut < full.length; cut += 7) {
        await log.release('torn')
        writeFileSync(file, full.subarray(0, cut))
        const report = await log.recover('torn')
        expect(report.truncatedBytes).toBe(cut - lastStart)
        expect(report.lastSeq).toBe(2)
        expect(statSync(file).size).toBe(lastStart)
        expect((await log.verify('torn')).ok).toBe(true)
        const ack = await log.append('torn', write(9))
        expect(ack.seq).toBe(3)
        await log.release('torn')
        truncateSync(file, lastStart)
      }
    } finally {
      await log.close()
    }
  })

  it('cuts a torn first line down to an empty log', async () => {
    const root = tempDir()
    const file = join(root, 'agent-logs', 'w.log')
    await withLog({ root }, (log) => log.append('w', write(1)))
    writeFileSync(file, '{"seq":1,"op":"wri')
    await withLog({ root }, async (log) => {
      const report = await log.recover('w')
      expect(report).toMatchObject({ truncatedBytes: 18, lastSeq: 0, size: 0 })
      expect((await log.append('w', write(1))).seq).toBe(1)
    })
  })

  it('never cuts a bad complete line: that is corruption, reported with file:line', async () => {
    const root = tempDir()
    const file = join(root, 'agent-logs', 'c.log')
    await withLog({ root }, (log) => log.appendMany('c', [write(1), write(2)]))
    const good = readFileSync(file, 'utf8')
    writeFileSync(file, `${good}{"seq":3,"op":"write","path":"x"\n`)
    await withLog({ root }, async (log) => {
      const err = await log.append('c', write(3)).catch((e) => e)
      expect(err.code).toBe('NOA_CORRUPT_LOG')
      expect(err.message).toContain(`${file}:3:`)
      expect(err.message).toContain('not a torn write')
    })
    expect(readFileSync(file, 'utf8')).toBe(`${good}{"seq":3,"op":"write","path":"x"\n`)
  })

  it('verify reports the first problem as file:line', async () => {
    const root = tempDir()
    const file = join(root, 'agent-logs', 'v.log')
    await withLog({ root }, (log) => log.appendMany('v', [write(1), write(2), write(3)]))
    const ls = lines(file)
    const check = async (content: string, line: number, reason: RegExp) => {
      writeFileSync(file, content)
      const r = await withLog({ root }, (log) => log.verify('v'))
      expect(r.ok).toBe(false)
      expect(r.problem?.line).toBe(line)
      expect(r.problem?.reason).toMatch(reason)
    }
    await check(`${ls[0]}\nnot json\n${ls[2]}\n`, 2, /not JSON/)
    await check(`${ls[0]}\n${ls[0]}\n`, 2, /seq 1 does not increase/)
    await check(`${ls[0]}\n${ls[2]?.replace(/"ts":\d+/, '"ts":1')}\n`, 2, /ts 1 goes back/)
    await check(`${ls[0]}\n\n${ls[1]}\n`, 2, /empty line/)
    await check(`${ls[0]}\n${ls[1]?.replace('"write"', '"copy"')}\n`, 2, /op: must be one of/)
    await check(`${ls[0]}\n${ls[1]?.slice(0, 20)}`, 2, /partial last line \(20 bytes/)
    writeFileSync(file, `${ls.join('\n')}\n`)
    const ok = await withLog({ root }, (log) => log.verify('v'))
    expect(ok).toMatchObject({ ok: true, entries: 3, firstSeq: 1, lastSeq: 3 })
  })
})

describe('raw file appends (the transcript path)', () => {
  it('appends durably, repairs a torn tail first and locks the file', async () => {
    const dir = tempDir()
    const file = join(dir, 'sessions', 'abc.jsonl')
    await withLog({ root: dir }, async (log) => {
      await log.appendToFile(file, '{"a":1}\n')
      await log.appendToFile(file, '{"a":2}\n')
    })
    writeFileSync(file, `${readFileSync(file, 'utf8')}{"a":`)
    await withLog({ root: dir }, async (log) => {
      await log.appendToFile(file, '{"a":3}\n')
      expect(readFileSync(file, 'utf8')).toBe('{"a":1}\n{"a":2}\n{"a":3}\n')
      await withLog({ root: dir }, async (other) => {
        await expect(other.appendToFile(file, 'x\n')).rejects.toMatchObject({ code: 'NOA_WORKSPACE_LOCKED' })
      })
      await expect(log.appendToFile('relative/path', 'x')).rejects.toMatchObject({ code: 'NOA_BAD_ARGUMENT' })
      // released, the file can be taken by another process (here: another AgentLog)
      expect(await log.releaseFile(file)).toBe(true)
      await withLog({ root: dir }, (other) => other.appendToFile(file, '{"a":4}\n'))
      expect(readFileSync(file, 'utf8')).toBe('{"a":1}\n{"a":2}\n{"a":3}\n{"a":4}\n')
    })
  })
})

describe('replicated appends', () => {
  it('copies lines verbatim, keeping seq and ts, and refuses gaps and overlaps', async () => {
    const root = tempDir()
    await withLog({ root }, async (log) => {
      await log.appendMany(
        'src',
        Array.from({ length: 50 }, (_, i) => write(i)),
      )
      await log.append('src', { op: 'rename', from: 'f1', to: 'g1' })
      const source = readFileSync(join(root, 'agent-logs', 'src.log'), 'utf8')
      const ls = source.split('\n').slice(0, -1)
      const acks = await log.appendReplicated('copy', ls.slice(0, 20))
      expect(acks[0]).toEqual({ seq: 1, ts: JSON.parse(ls[0] as string).ts })
      await log.appendReplicated(
        'copy',
        ls.slice(20, 40).map((l) => `${l}\n`),
      )
      const gap = await log.appendReplicated('copy', ls.slice(41)).catch((e) => e)
      expect(gap.code).toBe('NOA_REPLICA_GAP')
      expect(gap.message).toMatch(/copied lines start at seq 42 .* the log is at seq 40/)
      const overlap = await log.appendReplicated('copy', ls.slice(39)).catch((e) => e)
      expect(overlap.code).toBe('NOA_REPLICA_GAP')
      const unordered = await log.appendReplicated('copy', [ls[41], ls[40]] as string[]).catch((e) => e)
      expect(unordered.message).toMatch(/line 2: seq 41 .* does not follow seq 42/)
      const bad = await log.appendReplicated('copy', ['{"seq":41,"op":"nope","ts":1}']).catch((e) => e)
      expect(bad.code).toBe('NOA_BAD_ENTRY')
      await log.appendReplicated('copy', ls.slice(40))
      expect(readFileSync(join(root, 'agent-logs', 'copy.log'), 'utf8')).toBe(source)
      // a local append after the copy continues from the copied seq and ts
      const next = await log.append('copy', write(99))
      expect(next.seq).toBe(52)
    })
  })
})
