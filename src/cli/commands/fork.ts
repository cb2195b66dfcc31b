import { AgentLog } from '../../engine/agent-log.js'
import { checkWorkspace } from '../../engine/entry.js'
import { SnapshotEngine } from '../../store/snapshot.js'
import { command, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf, UsageError } from '../args.js'
import { type CliIo, json, write } from '../io.js'

export const spec = command({
  usage: 'usage: noa fork <new_workspace> --from <snapshot_id> [-m MESSAGE] [--root DIR] [--json]',
  options: {
    ...ROOT_OPTION,
    ...JSON_OPTION,
    from: { type: 'string', value: 'SNAPSHOT_ID', description: 'the snapshot to start from', required: true },
    message: {
      type: 'string',
      short: 'm',
      description: "the fork entry's message",
      defaultText: '"fork of <workspace> at <snapshot_id>"',
    },
  },
  positionals: [1, 1],
  examples: ['noa fork agent-2 --from <snapshot_id> -m "try the other fix"'],
  exitCodes: { 1: 'no such snapshot, or the new workspace exists already' },
})

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  if (values.from === undefined) throw new UsageError('--from <snapshot_id> is required', spec.usage)
  const workspace = checkWorkspace(positionals[0])
  const root = rootOf(values)
  await new SnapshotEngine({ root }).tree(values.from) // an unknown id fails before any worker starts
  const log = await AgentLog.open({ root, workers: 0 })
  try {
    const r = await new SnapshotEngine({ log }).fork(
      workspace,
      values.from,
      values.message === undefined ? {} : { message: values.message },
    )
    await write(
      io.stdout,
      values.json
        ? json({ workspace: r.workspace, base: r.base, fromWorkspace: r.fromWorkspace, seq: r.entry.seq })
        : `${r.workspace}\tforked from ${r.base} (${r.fromWorkspace})\n`,
    )
  } finally {
    await log.close()
  }
  return 0
}
