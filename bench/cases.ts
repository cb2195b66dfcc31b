/**
 * One benchmark case per process: `node dist/bench/cases.js <case> <dir> <seconds>` prints one
 * JSON line. run.ts starts a fresh process for every trial and interleaves noa with its
 * baselines, so no case inherits another's heap, page cache state or threads.
 */
import { mkdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Bench } from 'tinybench'
import { AgentLog } from '../src/engine/agent-log.js'
import { nowMicros } from '../src/engine/clock.js'
import { type EntryInput, formatLine } from '../src/engine/entry.js'
import { loadNative } from '../src/engine/native.js'
import { ObjectStore } from '../src/store/objects.js'

export interface CaseResult {
  /** entries/s for throughput cases */
  rate?: number
  p50?: number
  p99?: number
  mean?: number
  entries?: number
  bytes?: number
  /** Wall time of a one-shot case (replay, open), milliseconds. */
  ms?: number
  /** Peak resident set of the trial's process (all its threads), MB. */
  maxRssMB?: number
}

export const BLOB = 'ab'.repeat(32)

/** About 200 bytes on disk, like the seed's average entry. */
export function entryFor(i: number): EntryInput {
  return { op: 'write', path: `src/agents/module-${i % 997}/component-${i % 31}/file-${i}.ts`, blob: BLOB }
}

function line(i: number): string {
  return formatLine(
    i + 1,
    `"op":"write","path":"src/agents/module-${i % 997}/component-${i % 31}/file-${i}.ts","blob":"${BLOB}"`,
    nowMicros(),
  )
}

/** Latency of `fn` over `seconds` (at least `iterations` calls), after `warmupMs` of warm-up. */
export async function latency(
  fn: () => unknown,
  seconds: number,
  { warmupMs = 200, iterations = 200 } = {},
): Promise<CaseResult> {
  const bench = new Bench({ time: seconds * 1000, warmupTime: warmupMs, iterations })
  bench.add('case', fn)
  await bench.run()
  const r = bench.tasks[0]?.result as unknown as { latency: { p50: number; p99: number; mean: number } }
  return { p50: r.latency.p50, p99: r.latency.p99, mean: r.latency.mean }
}

/**
 * Runs `submitters` loops for `seconds`, each awaiting its own ack; returns entries/s. Each loop
 * checks the clock itself rather than waiting for a timer: a peer whose appends complete
 * synchronously never lets the event loop reach its timers.
 */
export async function throughput(
  submitters: number,
  seconds: number,
  one: (k: number, i: number) => Promise<unknown>,
) {
  let n = 0
  // Every append's latency, for the p99 under load (checkpoints included).
  let lat = new Float64Array(1 << 16)
  const start = performance.now()
  const end = start + seconds * 1000
  await Promise.all(
    Array.from({ length: submitters }, async (_, k) => {
      for (let i = 0; ; i++) {
        const t = performance.now()
        if (t >= end) break
        await one(k, i)
        if (n === lat.length) {
          const bigger = new Float64Array(lat.length * 2)
          bigger.set(lat)
          lat = bigger
        }
        lat[n++] = performance.now() - t
      }
    }),
  )
  const sorted = lat.subarray(0, n).sort()
  const at = (q: number) => (n === 0 ? Number.NaN : (sorted[Math.min(n - 1, Math.floor(q * n))] as number))
  return { rate: n / ((performance.now() - start) / 1000), entries: n, p50: at(0.5), p99: at(0.99) }
}

async function withLog<T>(dir: string, options: object, fn: (log: AgentLog) => Promise<T>): Promise<T> {
  const log = await AgentLog.open({ root: dir, ...options })
  try {
    return await fn(log)
  } finally {
    await log.close()
  }
}

/** Opens `n` workspaces (lock, create, fsync the folder) before the clock starts. */
async function warm(log: AgentLog, names: string[]): Promise<void> {
  await Promise.all(names.map((ws) => log.append(ws, entryFor(0))))
}

export const CASES: Record<string, (dir: string, seconds: number) => Promise<CaseResult>> = {
  /** The floor: write + fdatasync of one ~200-byte line through the addon, on this thread. */
  async 'floor-serial'(dir, seconds) {
    const io = loadNative()
    const fd = io.openAppend(join(dir, 'floor.log'), true, false)
    let i = 0
    const r = await latency(() => {
      io.write(fd, Buffer.from(line(i++)))
      io.fdatasync(fd)
    }, seconds)
    io.close(fd)
    return r
  },

  async 'noa-serial'(dir, seconds) {
    return withLog(dir, {}, async (log) => {
      await log.append('serial', entryFor(0))
      let i = 0
      return latency(() => log.append('serial', entryFor(i++)), seconds)
    })
  },

  /** One writer, one fdatasync per entry: what a log without group commit gets. */
  async 'floor-1ws'(dir, seconds) {
    const io = loadNative()
    const fd = io.openAppend(join(dir, 'floor.log'), true, false)
    let n = 0
    const start = performance.now()
    while (performance.now() - start < seconds * 1000) {
      io.write(fd, Buffer.from(line(n++)))
      io.fdatasync(fd)
    }
    io.close(fd)
    return { rate: n / ((performance.now() - start) / 1000), entries: n }
  },

  /** The disk with ideal group commit: 100 lines per write + fdatasync, no threads, no messages. */
  async 'floor-batched-1ws'(dir, seconds) {
    const io = loadNative()
    const fd = io.openAppend(join(dir, 'floor.log'), true, false)
    let n = 0
    const start = performance.now()
    while (performance.now() - start < seconds * 1000) {
      let text = ''
      for (let k = 0; k < 100; k++) text += line(n++)
      io.write(fd, Buffer.from(text))
      io.fdatasync(fd)
    }
    io.close(fd)
    return { rate: n / ((performance.now() - start) / 1000), entries: n }
  },

  async 'noa-1ws-100'(dir, seconds) {
    return withLog(dir, {}, async (log) => {
      await warm(log, ['one'])
      const r = await throughput(100, seconds, (k, i) => log.append('one', entryFor(k * 1_000_000 + i)))
      const bytes = statSync(join(dir, 'agent-logs', 'one.log')).size
      return { ...r, bytes: bytes / (r.entries + 1) }
    })
  },

  /** The same with every write's blob looked up in the object store first (the blob is stored). */
  async 'noa-1ws-100-blobcheck'(dir, seconds) {
    const store = new ObjectStore(dir)
    const blob = await store.putBlob('the one blob every entry names')
    return withLog(dir, { objects: store, checkBlobs: true }, async (log) => {
      const write = (i: number): EntryInput => ({ ...(entryFor(i) as { op: 'write'; path: string }), blob })
      await log.append('one', write(0))
      return throughput(100, seconds, (k, i) => log.append('one', write(k * 1_000_000 + i)))
    })
  },

  /** The naive design: one thread, one write + fdatasync at a time, over 100 files. */
  async 'naive-100ws'(dir, seconds) {
    const io = loadNative()
    mkdirSync(join(dir, 'naive'), { recursive: true })
    const fds = Array.from({ length: 100 }, (_, k) =>
      io.openAppend(join(dir, 'naive', `w${k}.log`), true, false),
    )
    let n = 0
    const start = performance.now()
    while (performance.now() - start < seconds * 1000) {
      const fd = fds[n % fds.length] as number
      io.write(fd, Buffer.from(line(n++)))
      io.fdatasync(fd)
    }
    for (const fd of fds) io.close(fd)
    return { rate: n / ((performance.now() - start) / 1000), entries: n }
  },

  async 'noa-100ws'(dir, seconds) {
    return manyWorkspaces(dir, seconds, 100, {})
  },

  async 'noa-100ws-syncfs'(dir, seconds) {
    return manyWorkspaces(dir, seconds, 100, { durability: 'syncfs' })
  },

  async 'noa-1000ws'(dir, seconds) {
    return manyWorkspaces(dir, seconds, 1000, {})
  },
}

function manyWorkspaces(dir: string, seconds: number, n: number, options: object): Promise<CaseResult> {
  return withLog(dir, options, async (log) => {
    const names = Array.from({ length: n }, (_, k) => `agent-${k}`)
    await warm(log, names)
    return throughput(n, seconds, (k, i) => log.append(names[k] as string, entryFor(i)))
  })
}

// Only as the entry point: bench/peers imports the helpers above and has its own arguments.
const [name, dir, seconds] = process.argv.slice(2)
if (process.argv[1] === fileURLToPath(import.meta.url) && name !== undefined) {
  const run = CASES[name]
  if (!run || !dir) {
    process.stderr.write(
      `usage: node dist/bench/cases.js <${Object.keys(CASES).join('|')}> <dir> [seconds]\n`,
    )
    process.exitCode = 2
  } else {
    const result = await run(dir, Number(seconds ?? 3))
    process.stdout.write(`${JSON.stringify(result)}\n`)
  }
}
