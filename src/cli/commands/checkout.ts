import { SnapshotEngine } from '../../store/snapshot.js'
import { JSON_OPTION, parseCommand, ROOT_OPTION, rootOf } from '../args.js'
import { type CliIo, json, write } from '../io.js'

const spec = {
  usage: 'usage: noa checkout <snapshot_id|ws|ws@seq> <dir> [--force] [--root DIR] [--json]',
  options: { ...ROOT_OPTION, ...JSON_OPTION, force: { type: 'boolean' } },
  positionals: [2, 2] as [number, number],
} as const

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, { ...spec, positionals: [2, 2] })
  const [ref, dir] = positionals as [string, string]
  const engine = new SnapshotEngine({ root: rootOf(values) })
  const r = await engine.checkout(ref, dir, { force: values.force ?? false })
  await write(
    io.stdout,
    values.json
      ? json(r)
      : `${r.files} file${r.files === 1 ? '' : 's'}, ${r.bytes} bytes of ${r.snapshotId ?? r.ref} (tree ${r.tree}) into ${r.dir}\n`,
  )
  return 0
}
