import { AgentLog } from '../../engine/agent-log.js'
import { SnapshotEngine } from '../../store/snapshot.js'
import { command, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf } from '../args.js'
import { type CliIo, json, write } from '../io.js'
import { progress } from '../progress.js'

export const spec = command({
  usage: 'usage: noa snapshot <workspace> [-m MESSAGE] [--root DIR] [--json]',
  options: {
    ...ROOT_OPTION,
    ...JSON_OPTION,
    message: { type: 'string', short: 'm', description: "the snapshot's message", defaultText: 'empty' },
  },
  positionals: [1, 1],
  details: "Prints the snapshot's id; --json: {snapshot_id, tree, parent, seq, entries_replayed}.",
  examples: ['noa snapshot agent-1 -m "tests pass"'],
  exitCodes: { 1: 'the workspace has no log, or a blob or snapshot it needs is missing' },
})

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const workspace = positionals[0] as string
  const root = rootOf(values)
  // Read-only checks first, so a bad workspace fails before any worker starts.
  const reader = new SnapshotEngine({ root })
  await reader.head(workspace)
  const log = await AgentLog.open({ root, workers: 1 })
  const shown = progress(io, 'replaying')
  try {
    const engine = new SnapshotEngine({ log })
    const r = await engine.snapshot(workspace, {
      message: values.message ?? '',
      onProgress: shown.onProgress,
    })
    shown.done()
    await write(
      io.stdout,
      values.json
        ? json({
            snapshot_id: r.snapshot_id,
            tree: r.tree,
            parent: r.parent,
            seq: r.seq,
            entries_replayed: r.entries_replayed,
          })
        : `${r.snapshot_id}\n`,
    )
  } finally {
    shown.done()
    await log.close()
  }
  return 0
}
