import { SnapshotEngine } from '../../store/snapshot.js'
import { command, existingRootOf, JSON_OPTION, parseCommand, ROOT_OPTION } from '../args.js'
import { type CliIo, write } from '../io.js'
import { quoteField } from '../progress.js'

export const spec = command({
  usage: 'usage: noa tree <snapshot_id|ws|ws@seq> [--root DIR] [--json]',
  options: { ...ROOT_OPTION, ...JSON_OPTION },
  positionals: [1, 1],
  details:
    'The same refs as checkout and diff: a snapshot id, ws (its files now) or ws@seq (its files\n' +
    'after entry seq). One path<TAB>blob line per file, sorted by path (paths with control\n' +
    'characters JSON-quoted).',
  examples: ['noa tree agent-1', 'noa tree agent-1@120', 'noa tree noa_1f…'],
  exitCodes: { 1: 'an unknown ref (no such snapshot, workspace or seq), or a corrupt tree' },
})

/** One `path<TAB>blob` line per file, sorted by path (the tree's own order); --json: JSON lines. */
export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const engine = new SnapshotEngine({ root: existingRootOf(values) })
  // One ref parser for tree, checkout and diff: SnapshotEngine.resolve.
  const { tree } = await engine.resolve(positionals[0] as string)
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
