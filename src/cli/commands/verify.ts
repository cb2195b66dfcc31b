import { verifyWorkspace, workspaceNames } from '../../engine/logs.js'
import type { VerifyReport } from '../../engine/recovery.js'
import { command, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf } from '../args.js'
import { type CliIo, json } from '../io.js'

export const spec = command({
  usage: 'usage: noa verify [workspace…] [--root DIR] [--json]',
  options: { ...ROOT_OPTION, ...JSON_OPTION },
  positionals: [0, Number.POSITIVE_INFINITY],
  details: 'Reads every line of each log (all workspaces when none is named) without changing it.',
  examples: ['noa verify agent-1 agent-2'],
  exitCodes: { 0: 'every log is consistent', 1: 'a log has a problem (file:line: reason on stderr)' },
})

export function describe(r: VerifyReport): string {
  if (r.problem) return `${r.file}:${r.problem.line}: ${r.problem.reason}`
  return `${r.entries} entries, seq ${r.firstSeq}..${r.lastSeq}, ${r.bytes} bytes`
}

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const root = rootOf(values)
  const names = positionals.length > 0 ? positionals : workspaceNames(root)
  let ok = true
  for (const ws of names) {
    const report = await verifyWorkspace(root, ws)
    ok &&= report.ok
    if (values.json) io.stdout.write(json({ workspace: ws, ...report }))
    else (report.ok ? io.stdout : io.stderr).write(`${ws}: ${report.ok ? 'ok, ' : ''}${describe(report)}\n`)
  }
  return ok ? 0 : 1
}
