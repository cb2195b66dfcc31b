import { drawGraph, type HistoryNode } from '../../store/history.js'
import { SnapshotEngine } from '../../store/snapshot.js'
import { command, existingRootOf, JSON_OPTION, parseCommand, ROOT_OPTION } from '../args.js'
import { type CliIo, json, write } from '../io.js'
import { quoteField } from '../progress.js'
import { describeSkipped } from './describe.js'

export const spec = command({
  usage: 'usage: noa history <workspace> [--root DIR] [--json]',
  options: { ...ROOT_OPTION, ...JSON_OPTION },
  positionals: [1, 1],
  details:
    "The snapshot, fork and merge graph the workspace's log reaches, oldest first, drawn as\n" +
    'git log --graph draws it: parents, merge sources and base, conflicts kept, pruned snapshots.',
  examples: ['noa history main', 'noa history main --json'],
  exitCodes: { 1: 'the workspace has no log' },
})

const short = (id: string) => id.slice(0, 16)

function label(n: HistoryNode): string {
  if (n.missing) return `${short(n.snapshotId)} (record missing)`
  let text = `${short(n.snapshotId)} ${n.kind} ${n.workspace}@${n.seq} ${new Date(n.ts / 1000).toISOString()}`
  if (n.pruned) text += ' (pruned)'
  if (n.message) text += ` ${quoteField(n.message)}`
  if (n.kind === 'merge') {
    text += ` [merged ${n.parents.slice(1).map(short).join(', ')}${n.base ? `; base ${short(n.base)}` : ''}]`
    if (n.conflicts.length > 0) {
      text += ` [${n.conflicts.length} conflict${n.conflicts.length === 1 ? '' : 's'}: ${n.conflicts
        .slice(0, 3)
        .map((c) => `${quoteField(c.path)} kept ${c.winner}`)
        .join(', ')}${n.conflicts.length > 3 ? ', …' : ''}]`
    }
  }
  if (n.prunes.length > 0) text += ` [dropped ${n.prunes.length}]`
  if (n.noEffect > 0) text += ` [${n.noEffect} without effect]`
  if (n.skipped.length > 0) text += ` [skipped ${n.skipped.map(describeSkipped).join('; ')}]`
  return text
}

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const engine = new SnapshotEngine({ root: existingRootOf(values) })
  const nodes = await engine.history(positionals[0] as string)
  if (values.json) {
    await write(io.stdout, json(nodes))
    return 0
  }
  await write(
    io.stdout,
    drawGraph(nodes, label)
      .map((l) => `${l}\n`)
      .join(''),
  )
  return 0
}
