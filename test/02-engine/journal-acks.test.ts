/**
 * "An append resolves only once the fdatasync that covers it has returned", checked on every
 * acknowledgement of a run in the default mode (the commit journal), through the recording io
 * layer (test/fixtures/recording-io.mjs), which numbers every file operation in the order it
 * completed: each ack is stamped with the count of operations completed when it arrived, so
 * every operation it depends on has a lower number. For each acknowledged entry: its line was
 * written to its `.log` before the ack (readers and replication see only what is acknowledged),
 * and a sync that covers it returned before the ack: the fdatasync of the journal after the
 * pwrite of the frame holding it, or (a commit made straight to the file, before the journal is
 * allocated) the fdatasync of the log after that write.
 */
import { rmSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { AgentLog } from '../../dist/src/index.js'
import { BLOB, readTrace, recording, scratchRoot, workloadDirs } from '../helpers/crash-explorer.js'

type Op = ReturnType<typeof readTrace>[number]

const has = (op: Op, text: string) => op.data !== undefined && Buffer.from(op.data, 'base64').includes(text)

describe('acknowledgements in journal mode', () => {
  // With the lone lane (the default with a worker) the serial appends are committed on this
  // thread and the group commits on the worker: each workspace moves, and each owner's first
  // commits go straight to the files while its journal is allocated.
  for (const [workers, lone] of [
    [0, false],
    [1, false],
    [1, true],
  ] as const) {
    it(`every append is acknowledged after its .log write and after the sync that covers it (workers: ${workers}${lone ? ', lone lane' : ''})`, async () => {
      const base = scratchRoot()
      try {
        const { root, traceDir } = workloadDirs(base, 0)
        const rec = recording(traceDir)
        const log = await AgentLog.open({
          root,
          workers,
          ...(workers > 0 ? { loneInThread: lone } : {}),
          journalSize: 256 << 10,
          ioModule: rec.ioModule,
          // With a worker, each .log write starts 2 ms late: an ack posted before its log write
          // would reach this thread first. (On this thread the ack waits for the owner's turn anyway.)
          ioOptions: { ...rec.ioOptions, slowLogWriteMs: workers === 0 ? 0 : 2 },
        })
        const wss = ['a', 'b', 'c', 'd']
        const paths = new Map<string, string>() // path → workspace
        let k = 0
        const append = async (ws: string) => {
          const path = `ack/${k++}/${'x'.repeat(200)}`
          paths.set(path, ws)
          rec.stamp(ws, (await log.append(ws, { op: 'write', path, blob: BLOB })).seq, path)
        }
        try {
          for (let i = 0; i < 4; i++) await append(wss[i % 4] as string)
          for (let i = 0; i < 500 && !(await log.status()).every((s) => s.journal?.state === 'ready'); i++) {
            await new Promise((r) => setTimeout(r, 10)) // a bound on the wait for the allocation, not a synchronisation
          }
          for (let i = 0; i < 20; i++) await append(wss[i % 4] as string) // one round each
          for (let round = 0; round < 5; round++) {
            await Promise.all(Array.from({ length: 40 }, (_, i) => append(wss[i % 4] as string))) // group commits
          }
          const batch = {
            a: [{ op: 'write' as const, path: `ack/atomic-a/${'x'.repeat(200)}`, blob: BLOB }],
            c: [{ op: 'write' as const, path: `ack/atomic-c/${'x'.repeat(200)}`, blob: BLOB }],
          }
          const acks = await log.appendAtomic(batch)
          for (const [ws, list] of Object.entries(acks)) {
            const path = batch[ws as 'a' | 'c'][0]?.path as string
            paths.set(path, ws)
            rec.stamp(ws, list[0]?.seq as number, path)
          }
        } finally {
          await log.close()
        }
        const ops = readTrace(traceDir)
        let viaJournal = 0
        expect(rec.acks.length).toBe(paths.size)
        for (const ack of rec.acks) {
          const what = `${ack.ws} seq ${ack.seq} (acknowledged after op ${ack.c})`
          const logWrite = ops.find(
            (o) => o.op === 'write' && o.path?.endsWith(`/agent-logs/${ack.ws}.log`) && has(o, ack.path),
          )
          expect(logWrite, `${what}: its line was never written to its log`).toBeDefined()
          expect(logWrite?.i ?? Infinity, `${what}: its line reached the log after the ack`).toBeLessThan(
            ack.c,
          )
          // The recorder names a descriptor by the path it was opened with: a journal's is its temp name.
          const framed = ops.find(
            (o) => o.op === 'pwrite' && /\.jnl(\.tmp)?$/.test(o.path ?? '') && has(o, ack.path),
          )
          const synced = framed
            ? ops.find((o) => o.op === 'fdatasync' && o.path === framed.path && o.i > framed.i)
            : ops.find((o) => o.op === 'fdatasync' && o.path === logWrite?.path && o.i > (logWrite?.i ?? 0))
          expect(synced, `${what}: no fdatasync covers it`).toBeDefined()
          expect(
            synced?.i ?? Infinity,
            `${what}: acknowledged before the fdatasync that covers it`,
          ).toBeLessThan(ack.c)
          if (framed) viaJournal++
        }
        // The run went through the journal (all but the first commits, made before it was ready).
        expect(viaJournal).toBeGreaterThan(lone ? paths.size / 2 : paths.size - 8)
      } finally {
        rmSync(base, { recursive: true, force: true })
      }
    })
  }
})
