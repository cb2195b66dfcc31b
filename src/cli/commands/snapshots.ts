import { SnapshotEngine } from '../../store/snapshot.js'
import { command, existingRootOf, JSON_OPTION, parseCommand, ROOT_OPTION } from '../args.js'
import { type CliIo, json, write } from '../io.js'
import { quoteField } from '../progress.js'
import { describeSkipped } from './describe.js'

export const spec = command({
  usage: 'usage: noa snapshots <workspace> [--root DIR] [--json]',
  options: { ...ROOT_OPTION, ...JSON_OPTION },
  positionals: [1, 1],
  details:
    'One line per snapshot entry, newest first: id, kind (snapshot|fork|merge), seq, time, message;\n' +
    'under a snapshot that left damaged lines of the log out (--skip-damaged), one line for each.',
  examples: ['noa snapshots agent-1 --json'],
  exitCodes: { 1: 'the workspace has no log, or a snapshot it names is missing' },
})

/**
 * The workspace's snapshot entries, newest first, under a header: id, kind, the last seq the
 * snapshot covers (`seq` in --json), the seq of its entry (`entry.seq`), time, message.
 */
export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const root = existingRootOf(values)
  const engine = new SnapshotEngine({ root })
  const list = await engine.listSnapshots(positionals[0] as string)
  if (values.json) {
    await write(io.stdout, json(list))
    return 0
  }
  const lines = list.map(
    (s) =>
      `${s.snapshotId}\t${s.kind}${s.pruned ? ' (pruned)' : ''}\t${s.seq}\t${s.entry.seq}\t${new Date(s.ts / 1000).toISOString()}\t${quoteField(s.message)}\n${s.skipped.map((k) => `  skipped ${describeSkipped(k)}\n`).join('')}`,
  )
  await write(io.stdout, `snapshot\tkind\tseq\tentry\ttime\tmessage\n${lines.join('')}`)
  return 0
}
