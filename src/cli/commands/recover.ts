import { AgentLog } from '../../engine/agent-log.js'
import { checkWorkspace } from '../../engine/entry.js'
import { workspaceNames } from '../../engine/logs.js'
import { command, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf } from '../args.js'
import { type CliIo, json } from '../io.js'
import { describe } from './verify.js'

export const spec = command({
  usage: 'usage: noa recover [workspace…] [--root DIR] [--json]',
  options: { ...ROOT_OPTION, ...JSON_OPTION },
  positionals: [0, Number.POSITIVE_INFINITY],
  details:
    'Opens each workspace (all when none is named) in its owner: takes the lock, cuts a torn\n' +
    'last line, then verifies the whole log.',
  examples: ['noa recover agent-1'],
  exitCodes: { 0: 'every workspace is consistent', 1: 'a workspace is not consistent or cannot be opened' },
})

/** Opens each workspace in its owner (lock, cut a torn tail), then verifies it in full. */
export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const root = rootOf(values)
  for (const ws of positionals) checkWorkspace(ws)
  const names = positionals.length > 0 ? positionals : workspaceNames(root)
  const log = await AgentLog.open({ root })
  let ok = true
  try {
    for (const ws of names) {
      try {
        const opened = await log.recover(ws)
        const verified = await log.verify(ws)
        ok &&= verified.ok
        if (values.json) {
          io.stdout.write(json({ workspace: ws, ok: verified.ok, recovered: opened, verified }))
          continue
        }
        const did = opened.created
          ? 'created an empty log'
          : opened.truncatedBytes > 0
            ? `cut a torn tail of ${opened.truncatedBytes} bytes`
            : 'nothing to repair'
        const line = `${ws}: ${did}; ${verified.ok ? 'consistent, ' : 'NOT consistent: '}${describe(verified)}\n`
        ;(verified.ok ? io.stdout : io.stderr).write(line)
      } catch (err) {
        ok = false
        if (values.json) io.stdout.write(json({ workspace: ws, ok: false, error: (err as Error).message }))
        else io.stderr.write(`${ws}: ${(err as Error).message}\n`)
      }
    }
  } finally {
    await log.close()
  }
  return ok ? 0 : 1
}
