/**
 * One benchmark case per process: `node dist/bench/cases.js <case> <dir> <seconds>` prints one
 * JSON line. run.ts starts a fresh process for every trial and interleaves noa with its
 * baselines, so no case inherits another's heap, page cache state or threads.
 */
import { closeSync, constants, fdatasyncSync, mkdirSync, openSync, statSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Bench } from 'tinybench'
import { AgentLog } from '../src/engine/agent-log.js'
import { nowMicros } from '../src/engine/clock.js'
import { type EntryInput, formatLine } from '../src/engine/entry.js'
import { loadNative } from '../src/engine/native.js'
import { PHASE, PHASES, phaseStamps, stamp } from '../src/engine/phases.js'
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
  /** Per-phase breakdown of a serial append (phases.ts): µs at p50 of each step, and of the whole. */
  phases?: Record<string, number>
  /** The same at p99: which step the slow appends are slow in. */
  phases99?: Record<string, number>
  /** How many appends the breakdown is over. */
  samples?: number
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

/**
 * Before the clock: `n` workspaces opened (lock, create, fsync the folder), and each worker's
 * commit journal allocated (in the background, at a worker's second commit).
 */
async function warm(log: AgentLog, names: string[]): Promise<void> {
  await Promise.all(names.map((ws) => log.append(ws, entryFor(0))))
  await Promise.all(names.map((ws) => log.append(ws, entryFor(0))))
  for (let i = 0; i < 1000; i++) {
    const status = await log.status()
    if (
      status.every(
        (s) => s.journal === null || (s.journal.state !== 'creating' && s.journal.state !== 'none'),
      )
    )
      return
    await new Promise((r) => setTimeout(r, 10))
  }
}

const JOURNAL_BYTES = 16 << 20
const FRAME = 512

/**
 * The journal's own sync, alone: a 512-byte frame written at the next offset of a file that
 * was written once at full size and fdatasynced (what a commit round does), cyclically, by one
 * of the three durable ways Linux offers.
 */
async function journalSync(
  dir: string,
  seconds: number,
  how: 'fdatasync' | 'O_DSYNC' | 'O_DIRECT',
): Promise<CaseResult> {
  const path = join(dir, 'journal.probe')
  const zero = openSync(path, 'w')
  const chunk = Buffer.alloc(1 << 20)
  for (let pos = 0; pos < JOURNAL_BYTES; pos += chunk.length) writeSync(zero, chunk, 0, chunk.length, pos)
  fdatasyncSync(zero)
  closeSync(zero)
  const flags =
    constants.O_RDWR |
    (how === 'fdatasync' ? 0 : constants.O_DSYNC) |
    (how === 'O_DIRECT' ? constants.O_DIRECT : 0)
  const fd = openSync(path, flags)
  const io = loadNative()
  const buf = how === 'O_DIRECT' ? io.alignedBuffer(FRAME, 4096) : Buffer.alloc(FRAME)
  buf.write(line(1))
  let off = 0
  try {
    return await latency(() => {
      writeSync(fd, buf, 0, FRAME, off)
      if (how === 'fdatasync') fdatasyncSync(fd)
      off = (off + FRAME) % JOURNAL_BYTES
    }, seconds)
  } finally {
    closeSync(fd)
  }
}

/**
 * Serial appends with the phase stamps on (NOA_PHASES=1, read when the owners start): for each
 * append whose every moment was stamped in order (a lone inline round), the time between each
 * moment and the one before it; the p50 and p99 of each step over the run, in µs. The steps' p50s need
 * not add up to the total's p50, nearly so on a quiet machine.
 */
async function phases(dir: string, seconds: number, options: { workers?: number }): Promise<CaseResult> {
  process.env.NOA_PHASES = '1'
  const stamps = phaseStamps() as Float64Array
  return withLog(dir, options, async (log) => {
    await warm(log, ['serial'])
    const steps: number[][] = PHASES.map(() => [])
    let i = 0
    const until = performance.now() + seconds * 1000
    while (performance.now() < until) {
      stamps.fill(0)
      stamp(PHASE.call)
      await log.append('serial', entryFor(i++))
      stamp(PHASE.resolved)
      let ordered = true
      for (let k = 1; k < PHASES.length; k++)
        if (!((stamps[k] as number) >= (stamps[k - 1] as number) && (stamps[k] as number) > 0))
          ordered = false
      if (!ordered) continue
      for (let k = 1; k < PHASES.length; k++)
        steps[k]?.push(((stamps[k] as number) - (stamps[k - 1] as number)) * 1000)
      steps[0]?.push(((stamps[PHASE.resolved] as number) - (stamps[PHASE.call] as number)) * 1000)
    }
    const at = (xs: number[], q: number) => {
      const s = [...xs].sort((a, b) => a - b)
      return s[Math.min(s.length - 1, Math.floor(s.length * q))] ?? Number.NaN
    }
    const out: Record<string, number> = { total: at(steps[0] as number[], 0.5) }
    const out99: Record<string, number> = { total: at(steps[0] as number[], 0.99) }
    for (let k = 1; k < PHASES.length; k++) {
      out[PHASES[k] as string] = at(steps[k] as number[], 0.5)
      out99[PHASES[k] as string] = at(steps[k] as number[], 0.99)
    }
    return { phases: out, phases99: out99, samples: (steps[0] as number[]).length }
  })
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
      await warm(log, ['serial'])
      let i = 0
      return latency(() => log.append('serial', entryFor(i++)), seconds)
    })
  },

  /** The owner in the caller's thread (workers: 0): no hand-off to another thread. */
  async 'noa-serial-inthread'(dir, seconds) {
    return withLog(dir, { workers: 0 }, async (log) => {
      await warm(log, ['serial'])
      let i = 0
      return latency(() => log.append('serial', entryFor(i++)), seconds)
    })
  },

  /** Where a serial append's time goes, step by step (the defaults). */
  async 'noa-phases'(dir, seconds) {
    return phases(dir, seconds, {})
  },

  /** The same with the owner on the caller's thread (workers: 0). */
  async 'noa-phases-inthread'(dir, seconds) {
    return phases(dir, seconds, { workers: 0 })
  },

  async 'journal-sync-fdatasync'(dir, seconds) {
    return journalSync(dir, seconds, 'fdatasync')
  },

  async 'journal-sync-odsync'(dir, seconds) {
    return journalSync(dir, seconds, 'O_DSYNC')
  },

  async 'journal-sync-odirect'(dir, seconds) {
    return journalSync(dir, seconds, 'O_DIRECT')
  },

  /**
   * A host that issues 1M appends without awaiting any: the backpressure bound
   * (maxPendingBytes) keeps what is queued in noa bounded; the peak RSS is the process's.
   */
  async 'noa-unawaited-1m'(dir) {
    return withLog(dir, {}, async (log) => {
      const start = performance.now()
      const all: Promise<unknown>[] = new Array(1_000_000)
      for (let i = 0; i < all.length; i++) all[i] = log.append(`w${i % 16}`, entryFor(i))
      await Promise.all(all)
      const ms = performance.now() - start
      return {
        ms,
        entries: all.length,
        rate: all.length / (ms / 1000),
        maxRssMB: process.resourceUsage().maxRSS / 1024,
      }
    })
  },

  /** What the caller alone holds for that: 1M entries and 1M promises, settled later. */
  async 'caller-1m'() {
    const resolvers: Array<() => void> = new Array(1_000_000)
    const all: Promise<void>[] = new Array(1_000_000)
    const entries: EntryInput[] = new Array(1_000_000)
    for (let i = 0; i < all.length; i++) {
      entries[i] = entryFor(i)
      all[i] = new Promise<void>((r) => {
        resolvers[i] = r
      })
    }
    for (const r of resolvers) r()
    await Promise.all(all)
    return { entries: entries.length, maxRssMB: process.resourceUsage().maxRSS / 1024 }
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

  async 'noa-100ws-fdatasync'(dir, seconds) {
    return manyWorkspaces(dir, seconds, 100, { durability: 'fdatasync' })
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
