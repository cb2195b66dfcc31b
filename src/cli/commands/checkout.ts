import { NoaError, rewrap } from '../../engine/errors.js'
import { SnapshotEngine } from '../../store/snapshot.js'
import { command, existingRootOf, JSON_OPTION, parseCommand, ROOT_OPTION } from '../args.js'
import { type CliIo, json, write } from '../io.js'

export const spec = command({
  usage: 'usage: noa checkout <snapshot_id|ws|ws@seq> <dir> [--force] [--root DIR] [--json]',
  options: {
    ...ROOT_OPTION,
    ...JSON_OPTION,
    force: {
      type: 'boolean',
      description: "write into a folder that is not empty (the tree's files are replaced)",
    },
  },
  positionals: [2, 2],
  complete: [[], 'dir'],
  details:
    "Writes the tree's files into dir, each checked against its hash, via temp file + rename. ws is\n" +
    "the workspace's files now, ws@seq its files after entry seq. Never writes outside dir: absolute\n" +
    'paths, .., symlinks already in dir and names that differ only by case on a case-insensitive\n' +
    'filesystem are refused with the path named, before anything is written.',
  examples: ['noa checkout agent-1 ./out', 'noa checkout agent-1@120 ./at-120'],
  exitCodes: { 1: 'an unknown ref, a folder that is not empty, a path refused, or a blob missing' },
})

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const [ref, dir] = positionals as [string, string]
  const engine = new SnapshotEngine({ root: existingRootOf(values) })
  const r = await engine.checkout(ref, dir, { force: values.force ?? false }).catch((err: unknown) => {
    // The store speaks the API's words (force: true); here the option is --force.
    if (err instanceof NoaError && err.code === 'NOA_EXISTS' && err.message.includes('force: true'))
      throw rewrap(err, err.message.replace('force: true', '--force'))
    throw err
  })
  await write(
    io.stdout,
    values.json
      ? json(r)
      : `${r.files} file${r.files === 1 ? '' : 's'}, ${r.bytes} bytes of ${r.snapshotId ?? r.ref} (tree ${r.tree}) into ${r.dir}\n`,
  )
  return 0
}
