import { existsSync } from 'node:fs'
import { AgentLog } from '../../engine/agent-log.js'
import { checkWorkspace, parseCounters } from '../../engine/entry.js'
import { isNoaError } from '../../engine/errors.js'
import { existingLog, readWorkspaceBytes } from '../../engine/logs.js'
import {
  command,
  existingRootOf,
  intOption,
  JSON_OPTION,
  parseCommand,
  ROOT_OPTION,
  rootOf,
} from '../args.js'
import { type CliIo, write } from '../io.js'
import { checkLayout } from '../roots.js'

export const spec = command({
  usage: 'usage: noa log <workspace> [--from SEQ] [--follow] [--root DIR] [--json]',
  options: {
    ...ROOT_OPTION,
    json: {
      ...JSON_OPTION.json,
      description: 'one JSON entry per line: the stored lines are that already, so the output is the same',
    },
    from: { type: 'string', value: 'SEQ', description: 'start at this seq', defaultText: '1' },
    follow: {
      type: 'boolean',
      short: 'f',
      description:
        'then print each new entry as it commits, until SIGINT or SIGTERM (a workspace not there yet is waited for)',
    },
  },
  positionals: [1, 1],
  details:
    'Prints the stored lines exactly as on disk (JSON lines with the on-disk keys: seq, op, …,\n' +
    'ts); the start is found by binary search. --follow goes on with every entry acknowledged\n' +
    'after that, in order, whoever appends it (through noa serve, or another process): no gap, no\n' +
    'duplicate, also across a restart of the daemon. Like tail -F, --follow on a workspace (or a\n' +
    'root) that does not exist yet waits for it, says so once on stderr, and prints from its first\n' +
    'entry.',
  examples: ['noa log agent-1 --from 100', 'noa log agent-1 | head -5', 'noa log agent-1 --follow'],
  exitCodes: {
    0: 'done (with --follow: stopped by SIGINT or SIGTERM)',
    1: 'the workspace has no log, or it cannot be read',
  },
})

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const from = intOption(values.from, 'from', spec.usage, 1) ?? 1
  const workspace = checkWorkspace(positionals[0])
  let next = from
  if (values.follow) {
    const root = rootOf(values)
    checkLayout(root) // a folder that is not a root is a mistake, not something to wait for
    if (!hasLog(root, workspace)) return follow(root, workspace, next, io, true)
  }
  const root = existingRootOf(values)
  for await (const chunk of readWorkspaceBytes(root, workspace, from)) {
    await write(io.stdout, chunk)
    next = lastSeqOf(chunk) + 1
  }
  if (!values.follow) return 0
  return follow(root, workspace, next, io)
}

/** The seq of the last line of a chunk of whole lines. */
function lastSeqOf(chunk: Buffer): number {
  const end = chunk.length - 1 // the final newline
  const start = chunk.lastIndexOf(0x0a, end - 1) + 1
  return parseCounters(chunk.toString('utf8', start, end)).seq
}

/** Whether the workspace has a log yet (a missing root: not yet either). */
function hasLog(root: string, workspace: string): boolean {
  if (!existsSync(root)) return false
  try {
    existingLog(root, workspace)
    return true
  } catch (err) {
    if (isNoaError(err) && err.code === 'NOA_NOT_FOUND') return false
    throw err
  }
}

/** Errors after which following goes on from where it was (the daemon restarting or going away). */
const RESUMABLE = new Set(['NOA_DAEMON_LOST', 'NOA_SHUTTING_DOWN', 'NOA_DAEMON_UNAVAILABLE'])

/**
 * Follows the log from `next`: through the daemon when one serves the root (its watch delivers
 * what it acknowledged), else in this process, which follows the file others write. When the
 * daemon goes away or comes back, it opens the root again and goes on from the next seq.
 */
async function follow(
  root: string,
  workspace: string,
  next: number,
  io: CliIo,
  absent = false,
): Promise<number> {
  const stop = new AbortController()
  const onSignal = () => stop.abort()
  process.once('SIGINT', onSignal)
  process.once('SIGTERM', onSignal)
  try {
    if (absent) {
      await write(
        io.stderr,
        `noa log: workspace ${workspace} has no log in ${root} yet; waiting for it (Ctrl-C to stop)\n`,
      )
      // Polled: the folder to watch may not exist yet either, and fs.watch misses a folder made later.
      while (!stop.signal.aborted && !hasLog(root, workspace)) await sleep(100, stop.signal)
    }
    while (!stop.signal.aborted) {
      const log = await AgentLog.open({ root, workers: 0 })
      try {
        for await (const entry of log.watch(workspace, { fromSeq: next, signal: stop.signal })) {
          await write(io.stdout, `${JSON.stringify(entry)}\n`)
          next = entry.seq + 1
        }
      } catch (err) {
        if (!isNoaError(err) || !RESUMABLE.has(err.code)) throw err
        await sleep(100, stop.signal)
      } finally {
        await log.close()
      }
    }
    return 0
  } finally {
    process.removeListener('SIGINT', onSignal)
    process.removeListener('SIGTERM', onSignal)
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer)
      signal.removeEventListener('abort', done)
      resolve()
    }
    const timer = setTimeout(done, ms)
    signal.addEventListener('abort', done)
  })
}
