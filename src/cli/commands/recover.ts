import { AgentLog } from '../../engine/agent-log.js'
import { checkWorkspace } from '../../engine/entry.js'
import { retryQuarantined } from '../../engine/journal-recovery.js'
import { type LogProblem, problemOf, scanLogDir } from '../../engine/logs.js'
import { command, existingRootOf, JSON_OPTION, parseCommand, ROOT_OPTION } from '../args.js'
import { type CliIo, isClosedPipeError, json, write } from '../io.js'
import { reportProblems } from '../problems.js'
import { meter, percent } from '../progress.js'
import { describe, journalProblems, safeLogPath } from './verify.js'

export const spec = command({
  usage: 'usage: noa recover [workspace…] [--root DIR] [--json]',
  options: { ...ROOT_OPTION, ...JSON_OPTION },
  positionals: [0, Number.POSITIVE_INFINITY],
  details:
    'Opens each workspace (all when none is named) in its owner: takes the lock, cuts a torn\n' +
    'last line, then verifies the whole log. One that fails does not stop the others; every\n' +
    'failure, and every entry of agent-logs/ that is not a regular log, is named at the end.',
  examples: ['noa recover agent-1'],
  exitCodes: {
    0: 'every workspace is consistent',
    1: 'a workspace is not consistent or cannot be opened, or a commit journal is not trusted',
  },
})

/**
 * Opens each workspace in its owner (lock, cut a torn tail), then verifies it in full. One that
 * fails does not stop the others; every failure is named again at the end (exit 1).
 */
export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const root = existingRootOf(values)
  for (const ws of positionals) checkWorkspace(ws)
  const scan = positionals.length > 0 ? { workspaces: positionals, problems: [] } : scanLogDir(root)
  const problems: LogProblem[] = []
  for (const p of scan.problems) {
    problems.push(p)
    if (values.json && p.code !== 'NOA_BAD_WORKSPACE') {
      await write(io.stdout, json({ file: p.file, ok: false, code: p.code, error: p.message }))
    }
  }
  // Quarantined journals this user may trust as files (left by this user's process, moved
  // aside by another user's) are checked again, record by record, by the replay below.
  retryQuarantined(root)
  const log = await AgentLog.open({ root, workers: 0 })
  const shown = meter(io)
  const n = scan.workspaces.length
  try {
    for (const [i, ws] of scan.workspaces.entries()) {
      const at = `${ws} (${i + 1}/${n})`
      shown.update(() => `recovering ${at}`)
      try {
        const opened = await log.recover(ws)
        const verified = await log.verify(ws, {
          onProgress: (bytes, size) =>
            shown.update(() => `recovering ${at}: verified ${percent(bytes, size)}`),
        })
        shown.done()
        if (!verified.ok)
          problems.push({ file: verified.file, code: 'NOA_CORRUPT_LOG', message: describe(verified) })
        if (values.json) {
          await write(io.stdout, json({ workspace: ws, ok: verified.ok, recovered: opened, verified }))
          continue
        }
        const did = opened.created
          ? 'created an empty log'
          : opened.truncatedBytes > 0
            ? `cut a torn tail of ${opened.truncatedBytes} bytes`
            : 'nothing to repair'
        const line = `${ws}: ${did}; ${verified.ok ? 'consistent, ' : 'NOT consistent: '}${describe(verified)}\n`
        await write(verified.ok ? io.stdout : io.stderr, line)
      } catch (err) {
        shown.done()
        // The reader of the output has gone: that ends the command (quietly), it is no log's problem.
        if (isClosedPipeError(err)) throw err
        const p = problemOf(err, safeLogPath(root, ws))
        problems.push(p)
        if (values.json)
          await write(
            io.stdout,
            json({ workspace: ws, ok: false, file: p.file, code: p.code, error: p.message }),
          )
        else await write(io.stderr, `${ws}: ${p.message}\n`)
      }
    }
  } finally {
    await log.close()
  }
  problems.push(...journalProblems(root))
  return reportProblems(io, 'recover', problems, 'could not be recovered')
}
