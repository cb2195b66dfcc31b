import { checkRoot } from '../../engine/files.js'
import { SnapshotEngine } from '../../store/snapshot.js'
import { command, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf } from '../args.js'
import { type CliIo, write } from '../io.js'
import { quoteField } from '../progress.js'

export const spec = command({
  usage: 'usage: noa tree <snapshot_id> [--root DIR] [--json]',
  options: { ...ROOT_OPTION, ...JSON_OPTION },
  positionals: [1, 1],
  details: 'One path<TAB>blob line per file, sorted by path (paths with control characters JSON-quoted).',
  examples: ['noa tree <snapshot_id>'],
  exitCodes: { 1: 'no such snapshot, or its tree is corrupt' },
})

/** One `path<TAB>blob` line per file, sorted by path (the tree's own order); --json: JSON lines. */
export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const root = rootOf(values)
  checkRoot(root, true)
  const engine = new SnapshotEngine({ root })
  const tree = await engine.tree(positionals[0] as string)
  let out = ''
  for (const [path, blob] of tree.entries()) {
    out += values.json ? `${JSON.stringify({ path, blob })}\n` : `${quoteField(path)}\t${blob}\n`
    if (out.length >= 1 << 16) {
      await write(io.stdout, out)
      out = ''
    }
  }
  if (out) await write(io.stdout, out)
  return 0
}
