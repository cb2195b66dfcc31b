import { existsSync, readdirSync } from 'node:fs'
import { AgentLog } from '../../engine/agent-log.js'
import { checkWorkspace, type EntryInput, encodeBody } from '../../engine/entry.js'
import { Errors, NoaError, rewrap } from '../../engine/errors.js'
import { checkRoot } from '../../engine/files.js'
import { parseDuration } from '../../store/gc.js'
import { ObjectStore } from '../../store/objects.js'
import { command, intOption, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf, UsageError } from '../args.js'
import { type CliIo, invalidUtf8, isClosedPipeError, jsonLines, readInput, write } from '../io.js'
import { meter, percent, rate } from '../progress.js'
import { hasLayout } from '../roots.js'

/** What `--wait` alone waits for the workspace's lock. */
const DEFAULT_WAIT = '30s'
const DURATION_RE = /^\d+(?:\.\d+)?(?:ms|s|m|h|d|w)?$/

export const spec = command({
  usage:
    'usage: noa append <workspace> [--no-blob-check] [--if-last-seq N] [--wait [DURATION]] [--root DIR] < entries.jsonl',
  options: {
    ...ROOT_OPTION,
    'if-last-seq': {
      type: 'string',
      value: 'N',
      description:
        "append only if the workspace's last seq is N (0: empty); else exit 1, naming the current one",
    },
    json: { ...JSON_OPTION.json, description: 'accepted for symmetry: the acks are JSON lines already' },
    wait: {
      type: 'string',
      value: '[DURATION]',
      description: `when another process holds the workspace's lock, wait up to DURATION (500ms, 30s, 5m) for it instead of failing; --wait alone waits ${DEFAULT_WAIT}`,
    },
    'no-blob-check': {
      type: 'boolean',
      description: 'append writes whose blob is not in the object store yet (a host that uploads later)',
    },
  },
  positionals: [1, 1],
  details:
    'stdin: one entry per line, without seq and ts: {"op":"write","path":P,"blob":HASH},\n' +
    '{"op":"delete","path":P} or {"op":"rename","from":P,"to":Q}. Every line is checked before\n' +
    "anything is written: each write's blob must be stored (noa blob put) unless --no-blob-check,\n" +
    "and snapshot and merge entries must name this workspace's records. Each appended entry\n" +
    'prints {"seq":N,"ts":T} once it is durable.\n' +
    '--if-last-seq N (compare-and-append): the entries go in only right after seq N; if another\n' +
    'writer got there first, nothing is written and the error names the current last seq. After\n' +
    'an ack that was lost, run it again with the same N: it either commits or says it already did.\n' +
    'Without noa serve, one process at a time writes a workspace: another append fails with\n' +
    '"locked by process N", or with --wait waits for the lock (bounded by DURATION). noa serve on\n' +
    'the root lets many processes append at once. An append to a root that does not exist yet\n' +
    'creates it, and says so on stderr.',
  examples: [
    `echo '{"op":"delete","path":"src/old.ts"}' | noa append agent-1`,
    `echo '{"op":"delete","path":"src/old.ts"}' | noa append agent-1 --if-last-seq 41`,
    `echo '{"op":"delete","path":"src/old.ts"}' | noa append agent-1 --wait 10s`,
  ],
  exitCodes: {
    1: 'an invalid line or invalid UTF-8, a blob not stored or a forged record (stdin:<line>: <reason>; nothing written), a refused append, --if-last-seq N when the last seq is not N (nothing written), or the workspace locked by another process (past --wait)',
  },
})

/** Entries per appendMany: large inputs go out in several commits instead of one huge buffer. */
const CHUNK = 10_000

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(withWaitValue(args), spec)
  const workspace = checkWorkspace(positionals[0])
  let ifLastSeq = intOption(values['if-last-seq'], 'if-last-seq', spec.usage, 0)
  const waitMs = waitOption(values.wait)
  const root = rootOf(values)
  // A user who typed the command alone would otherwise see it wait without a word.
  if (io.stdinIsTTY) {
    await write(
      io.stderr,
      `noa append: reading JSONL entries for ${workspace} from stdin until Ctrl-D (one per line, e.g. {"op":"delete","path":"src/old.ts"}; noa append --help for the format)\n`,
    )
  }
  const bytes = await readInput(io)
  // Validate everything before anything is written.
  const refuse = (line: number, reason: string, details: { offset?: number } = {}) =>
    Errors.BAD_ENTRY(`stdin:${line}: ${reason}; nothing was written`, { line, ...details })
  // Decoding would turn each bad sequence into U+FFFD, so two different byte paths could be
  // stored as one: refused instead.
  const bad = invalidUtf8(bytes)
  if (bad) {
    throw refuse(
      bad.line,
      `invalid UTF-8 at byte offset ${bad.offset} of stdin (byte ${bad.column} of the line)`,
      { offset: bad.offset },
    )
  }
  const text = bytes.toString('utf8')
  const entries: EntryInput[] = []
  const lines: number[] = []
  for (const { line, value } of jsonLines(text, refuse)) {
    try {
      encodeBody(value)
    } catch (err) {
      const copied =
        typeof value === 'object' && value !== null && 'seq' in value
          ? ' (a line of noa log keeps its seq and ts; to start a workspace from another one, use noa fork)'
          : ''
      throw refuse(line, `${(err as Error).message}${copied}`)
    }
    entries.push(value as EntryInput)
    lines.push(line)
  }
  checkRoot(root, false) // a root that is a file is named as such, before the store is asked
  // A folder made here, or one that held other things and nothing of noa's (`--root .`): said once.
  const created = !existsSync(root) || (!hasLayout(root) && readdirSync(root).length > 0)
  const store = new ObjectStore(root)
  const where = (i: number) => `stdin:${lines[i]}`
  const withLine = (err: unknown): never => {
    if (err instanceof NoaError) {
      throw rewrap(err, `${err.message}; nothing was written`)
    }
    throw err
  }
  // Each write's blob must be stored, unless the host uploads blobs later.
  const checkBlobs = !values['no-blob-check']
  try {
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i] as EntryInput
      if (checkBlobs && e.op === 'write' && !store.hasBlob(e.blob)) {
        throw Errors.MISSING_BLOB(
          `${where(i)}: blob ${e.blob} (for ${JSON.stringify(e.path)}) is not in the object store; store it first with noa blob put, or pass --no-blob-check`,
          { blob: e.blob, path: e.path, line: lines[i] },
        )
      }
    }
    store.checkRecords(workspace, entries, where)
  } catch (err) {
    withLine(err)
  }
  const log = await AgentLog.open({ root, objects: store, workers: 0 })
  const deadline = performance.now() + (waitMs ?? 0)
  let told = false
  /** appendMany, again while another process holds the lock and --wait's time is not up. */
  const append = async (batch: EntryInput[], ifLast: number | undefined) => {
    for (;;) {
      try {
        return await log.appendMany(
          workspace,
          batch,
          ifLast === undefined ? undefined : { ifLastSeq: ifLast },
        )
      } catch (err) {
        if (!(err instanceof NoaError && err.code === 'NOA_WORKSPACE_LOCKED') || waitMs === undefined)
          throw err
        if (performance.now() >= deadline) {
          throw rewrap(err, `${err.message}; waited ${values.wait} for it (--wait)`)
        }
        if (!told) {
          told = true
          await write(io.stderr, `noa append: ${err.message}; waiting up to ${values.wait} for it\n`)
        }
        await new Promise((r) => setTimeout(r, Math.min(50, Math.max(1, deadline - performance.now()))))
      }
    }
  }
  const shown = meter(io)
  const started = performance.now()
  // Once the reader of the acks has gone (`| head -1`), the rest is still appended: stopping
  // there would leave the input half written, with nothing to say so.
  let printing = true
  try {
    for (let i = 0; i < entries.length; ) {
      // A run of merge entries goes out with the snapshot entry after it (they are checked together).
      let end = Math.min(i + CHUNK, entries.length)
      while (end < entries.length && entries[end - 1]?.op === 'merge') end++
      // Each chunk expects the last seq the previous one got: the input goes in as one run.
      const acks = await append(entries.slice(i, end), ifLastSeq)
      if (i === 0 && created) await write(io.stderr, `noa append: created a new noa root at ${root}\n`)
      if (ifLastSeq !== undefined) ifLastSeq = (acks[acks.length - 1]?.seq ?? ifLastSeq) as number
      i = end
      const done = i
      shown.update(
        () =>
          `appending to ${workspace}: ${done}/${entries.length} entries durable ${percent(done, entries.length)} (${rate(done, started)}/s)`,
      )
      if (!printing) continue
      try {
        await write(io.stdout, acks.map((a) => `{"seq":${a.seq},"ts":${a.ts}}\n`).join(''))
      } catch (err) {
        if (!isClosedPipeError(err)) throw err
        printing = false
      }
    }
  } finally {
    shown.done()
    await log.close()
  }
  return 0
}

/**
 * `--wait` takes an optional value, which parseArgs cannot express: `--wait 10s` (a duration
 * next) becomes `--wait=10s`, a bare `--wait` becomes `--wait=DEFAULT_WAIT`.
 */
function withWaitValue(args: string[]): string[] {
  const out: string[] = []
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string
    if (a === '--') {
      out.push(...args.slice(i))
      break
    }
    if (a !== '--wait') {
      out.push(a)
      continue
    }
    const next = args[i + 1]
    if (next !== undefined && DURATION_RE.test(next)) {
      out.push(`--wait=${next}`)
      i++
    } else out.push(`--wait=${DEFAULT_WAIT}`)
  }
  return out
}

function waitOption(value: string | undefined): number | undefined {
  if (value === undefined) return undefined
  try {
    return parseDuration(value, '--wait')
  } catch (err) {
    throw new UsageError((err as Error).message, spec.usage)
  }
}
