import { AgentLog } from '../../engine/agent-log.js'
import { parseCounters } from '../../engine/entry.js'
import { isNoaError } from '../../engine/errors.js'
import { readWorkspaceBytes } from '../../engine/logs.js'
import { command, intOption, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf } from '../args.js'
import { type CliIo, write } from '../io.js'

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
      description: 'then print each new entry as it commits, until SIGINT or SIGTERM',
    },
  },
  positionals: [1, 1],
  details:
    'Prints the stored lines exactly as on disk (JSON lines with the on-disk keys: seq, op, …,\n' +
    'ts); the start is found by binary search. --follow goes on with every entry acknowledged\n' +
    'after that, in order, whoever appends it (through noa serve, or another process): no gap, no\n' +
    'duplicate, also across a restart of the daemon.',
  examples: ['noa log agent-1 --from 100', 'noa log agent-1 | head -5', 'noa log agent-1 --follow'],
  exitCodes: {
    0: 'done (with --follow: stopped by SIGINT or SIGTERM)',
    1: 'the workspace has no log, or it cannot be read',
  },
})

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const from = intOption(values.from, 'from', spec.usage, 1) ?? 1
  const root = rootOf(values)
  const workspace = positionals[0] as string
  let next = from
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

/** Errors after which following goes on from where it was (the daemon restarting or going away). */
const RESUMABLE = new Set(['NOA_DAEMON_LOST', 'NOA_SHUTTING_DOWN', 'NOA_DAEMON_UNAVAILABLE'])

/**
 * Follows the log from `next`: through the daemon when one serves the root (its watch delivers
 * what it acknowledged), else in this process, which follows the file others write. When the
 * daemon goes away or comes back, it opens the root again and goes on from the next seq.
 */
async function follow(root: string, workspace: string, next: number, io: CliIo): Promise<number> {
  const stop = new AbortController()
  const onSignal = () => stop.abort()
  process.once('SIGINT', onSignal)
  process.once('SIGTERM', onSignal)
  try {
    while (!stop.signal.aborted) {
      const log = await AgentLog.open({ root, workers: 0 })
      try {
        for await (const entry of log.watch(workspace, { fromSeq: next, signal: stop.signal })) {
          await write(io.stdout, `${JSON.stringify(entry)}\n`)
          next = entry.seq + 1
        }
      } catch (err) {
        if (!isNoaError(err) || !RESUMABLE.has(err.code)) throw err
        await new Promise((r) => setTimeout(r, 100))
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
