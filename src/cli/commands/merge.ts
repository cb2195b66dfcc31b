import { AgentLog } from '../../engine/agent-log.js'
import { isNoaError } from '../../engine/errors.js'
import { existingLog } from '../../engine/logs.js'
import type { MergeConflict } from '../../store/merge.js'
import { SnapshotEngine } from '../../store/snapshot.js'
import { command, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf, UsageError } from '../args.js'
import { type CliIo, json, write } from '../io.js'
import { progress, quoteField } from '../progress.js'

export const spec = command({
  usage:
    'usage: noa merge <target_workspace> <source_workspace>… [--on-conflict lww|fail] [-m MESSAGE] [--root DIR] [--json]',
  options: {
    ...ROOT_OPTION,
    ...JSON_OPTION,
    'on-conflict': {
      type: 'string',
      value: 'lww|fail',
      description: 'a path changed on both sides: lww keeps the last write, fail writes nothing',
      defaultText: 'lww',
      complete: ['lww', 'fail'],
    },
    message: {
      type: 'string',
      short: 'm',
      description: "the merge snapshot's message",
      defaultText: '"merge <sources> into <target>"',
    },
  },
  positionals: [2, Number.POSITIVE_INFINITY],
  details: "Prints the merged snapshot's id, then any conflicts (kept side and every side's entry).",
  examples: ['noa merge main agent-1 agent-2 --on-conflict fail'],
  exitCodes: { 1: 'an unknown workspace, or conflicts with --on-conflict fail (listed on stdout)' },
})

function describe(c: MergeConflict): string {
  const sides = c.sides.map(
    (s) =>
      `  ${s.workspace}\t${s.op}\t${s.blob ?? '-'}\tts ${s.ts}\tseq ${s.seq}${s.log ? ` (log ${s.log})` : ''}\n`,
  )
  return `conflict ${quoteField(c.path)} (kept ${c.winner})\n${sides.join('')}`
}

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const policy = values['on-conflict'] ?? 'lww'
  if (policy !== 'lww' && policy !== 'fail') {
    throw new UsageError(`--on-conflict must be lww or fail, got ${JSON.stringify(policy)}`, spec.usage)
  }
  const [target, ...sources] = positionals as [string, ...string[]]
  const root = rootOf(values)
  for (const ws of positionals) existingLog(root, ws) // unknown workspaces fail before any worker starts
  const log = await AgentLog.open({ root, workers: 1 })
  const shown = progress(io, 'merging')
  try {
    const engine = new SnapshotEngine({ log })
    const options = { onConflict: policy, onProgress: shown.onProgress } as const
    const r = await engine
      .merge(
        target,
        sources,
        values.message === undefined ? options : { ...options, message: values.message },
      )
      .catch(async (err: unknown) => {
        shown.done()
        if (isNoaError(err, 'NOA_CONFLICT') && Array.isArray(err.details.conflicts)) {
          const conflicts = err.details.conflicts as MergeConflict[]
          await write(
            io.stdout,
            values.json
              ? json({ snapshot_id: null, base: err.details.base ?? null, conflicts })
              : conflicts.map(describe).join(''),
          )
        }
        throw err
      })
    shown.done()
    await write(
      io.stdout,
      values.json
        ? json({ snapshot_id: r.snapshot_id, base: r.base, conflicts: r.conflicts })
        : `${r.snapshot_id}\n${r.conflicts.map(describe).join('')}`,
    )
  } finally {
    shown.done()
    await log.close()
  }
  return 0
}
