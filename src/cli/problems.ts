/**
 * How whole-root commands (workspaces, verify, recover) end: every file they could not use is
 * named on stderr after the rest of the output, and the exit code is 1. A file in `agent-logs/`
 * whose name is not `<workspace>.log` is no workspace's: it is named too ("ignored"), but does
 * not fail the command, as git and PostgreSQL leave unknown files in their folders alone.
 */
import type { LogProblem } from '../engine/logs.js'
import { type CliIo, write } from './io.js'

export async function reportProblems(
  io: CliIo,
  command: string,
  problems: readonly LogProblem[],
  consequence: string,
): Promise<number> {
  const failed = problems.filter((p) => p.code !== 'NOA_BAD_WORKSPACE')
  const stray = problems.filter((p) => p.code === 'NOA_BAD_WORKSPACE')
  let out = ''
  for (const p of stray) out += `noa ${command}: ignored: ${p.message}\n`
  if (failed.length > 0) {
    out += `noa ${command}: ${failed.length} file${failed.length === 1 ? '' : 's'} ${consequence}:\n`
    for (const p of failed) out += `  ${p.message.includes(p.file) ? p.message : `${p.file}: ${p.message}`}\n`
  }
  if (out) await write(io.stderr, out)
  return failed.length > 0 ? 1 : 0
}
