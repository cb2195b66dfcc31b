import { verifyWorkspace, workspaceNames } from '../../engine/logs.js'
import type { VerifyReport } from '../../engine/recovery.js'
import { SnapshotEngine } from '../../store/snapshot.js'
import { type StoreProblem, verifyStore } from '../../store/verify.js'
import { command, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf } from '../args.js'
import { type CliIo, json } from '../io.js'

export const spec = command({
  usage: 'usage: noa verify [workspace…] [--objects] [--root DIR] [--json]',
  options: {
    ...ROOT_OPTION,
    ...JSON_OPTION,
    objects: {
      type: 'boolean',
      description:
        'also check that every object the logs reach is stored (missing blobs named with their seq)',
    },
  },
  positionals: [0, Number.POSITIVE_INFINITY],
  details:
    'Reads every line of each log (all workspaces when none is named) without changing it, then\n' +
    'checks that every snapshot and merge entry names a record of that workspace. One that does\n' +
    'not, which a later snapshot has recorded as without effect, is a note, not a failure.',
  examples: ['noa verify agent-1 agent-2', 'noa verify --objects'],
  exitCodes: { 0: 'every log is consistent', 1: 'a log has a problem (file:line: reason on stderr)' },
})

export function describe(r: VerifyReport): string {
  if (r.problem) return `${r.file}:${r.problem.line}: ${r.problem.reason}`
  return `${r.entries} entries, seq ${r.firstSeq}..${r.lastSeq}, ${r.bytes} bytes`
}

/**
 * The engine's line scan of each log, then the store's checks of what the log names: every
 * snapshot and merge entry names a record of this workspace (with --objects, every object it
 * reaches is stored and whole).
 */
export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const root = rootOf(values)
  const names = positionals.length > 0 ? positionals : workspaceNames(root)
  const engine = new SnapshotEngine({ root })
  let ok = true
  for (const ws of names) {
    const report = await verifyWorkspace(root, ws)
    let problems: StoreProblem[] = []
    if (report.ok) problems = await verifyStore(engine, ws, { objects: values.objects ?? false })
    const failures = problems.filter((p) => p.recordedBy === undefined)
    const notes = problems.filter((p) => p.recordedBy !== undefined)
    const good = report.ok && failures.length === 0
    ok &&= good
    if (values.json) {
      io.stdout.write(json({ workspace: ws, ...report, ok: good, store: problems }))
      continue
    }
    if (!report.ok) {
      io.stderr.write(`${ws}: ${describe(report)}\n`)
      continue
    }
    const noted = notes
      .map((p) => `  note: seq ${p.seq}: ${p.reason}; recorded as no effect by ${p.recordedBy}\n`)
      .join('')
    if (good) {
      io.stdout.write(
        `${ws}: ok, ${describe(report)}${values.objects ? ', every object it reaches stored' : ''}\n${noted}`,
      )
      continue
    }
    problems = failures
    io.stderr.write(
      `${ws}: ${describe(report)}; ${problems.length} problem${problems.length === 1 ? '' : 's'} with what it names:\n${problems
        .map(
          (p) =>
            `  ${p.seq !== undefined && !p.reason.includes(`seq ${p.seq}`) ? `seq ${p.seq}: ` : ''}${p.reason}${p.kind === 'unknown-snapshot' || p.kind === 'foreign-snapshot' ? '; the next noa snapshot records it as no effect' : ''}\n`,
        )
        .join('')}${noted}`,
    )
  }
  return ok ? 0 : 1
}
