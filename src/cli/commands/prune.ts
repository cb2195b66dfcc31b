import { AgentLog } from '../../engine/agent-log.js'
import { parseDuration } from '../../store/gc.js'
import { SnapshotEngine } from '../../store/snapshot.js'
import { command, intOption, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf, UsageError } from '../args.js'
import { type CliIo, json, write } from '../io.js'

export const spec = command({
  usage:
    'usage: noa snapshot prune <workspace> --keep-last N [--keep-within DURATION] [-m MESSAGE] [--root DIR] [--json]',
  options: {
    ...ROOT_OPTION,
    ...JSON_OPTION,
    'keep-last': {
      type: 'string',
      value: 'N',
      description: 'keep the newest N snapshots',
      required: 'unless --keep-within',
    },
    'keep-within': {
      type: 'string',
      value: 'DURATION',
      description: 'keep snapshots made within this long (1h, 7d)',
    },
    message: {
      type: 'string',
      short: 'm',
      description: "the prune snapshot's message",
      defaultText: '"prune: dropped N snapshots"',
    },
  },
  positionals: [1, 1],
  details: 'Records the drop as a snapshot entry; noa gc then frees what only the dropped snapshots held.',
  examples: ['noa snapshot prune agent-1 --keep-last 10'],
})

/** Records which snapshots are dropped (a snapshot entry listing them); gc then frees their trees. */
export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const keepLast = intOption(values['keep-last'], 'keep-last', spec.usage, 0)
  let keepWithinMs: number | undefined
  if (values['keep-within'] !== undefined) {
    try {
      keepWithinMs = parseDuration(values['keep-within'], '--keep-within')
    } catch (err) {
      throw new UsageError((err as Error).message, spec.usage)
    }
  }
  if (keepLast === undefined && keepWithinMs === undefined) {
    throw new UsageError('--keep-last N (or --keep-within DURATION) is required', spec.usage)
  }
  const workspace = positionals[0] as string
  const root = rootOf(values)
  await new SnapshotEngine({ root }).head(workspace) // an unknown workspace fails before any worker starts
  const log = await AgentLog.open({ root, workers: 1 })
  try {
    const r = await new SnapshotEngine({ log }).prune(workspace, {
      ...(keepLast !== undefined ? { keepLast } : {}),
      ...(keepWithinMs !== undefined ? { keepWithinMs } : {}),
      ...(values.message !== undefined ? { message: values.message } : {}),
    })
    if (values.json) {
      await write(
        io.stdout,
        json({ created: r.created, snapshotId: r.snapshotId, dropped: r.dropped, kept: r.kept }),
      )
    } else if (!r.created) {
      await write(io.stderr, `noa snapshot prune: nothing to drop in ${workspace} (${r.kept.length} kept)\n`)
    } else {
      await write(io.stdout, `${r.snapshotId}\n${r.dropped.map((id) => `dropped ${id}\n`).join('')}`)
      await write(
        io.stderr,
        `noa snapshot prune: dropped ${r.dropped.length}, kept ${r.kept.length}; noa gc frees what only the dropped ones used\n`,
      )
    }
  } finally {
    await log.close()
  }
  return 0
}
