import { listWorkspaces } from '../../engine/logs.js'
import { command, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf } from '../args.js'
import { type CliIo, json } from '../io.js'

export const spec = command({
  usage: 'usage: noa workspaces [--root DIR] [--json]',
  options: { ...ROOT_OPTION, ...JSON_OPTION },
  positionals: [0, 0],
  details: 'One line per workspace: name, entries, last seq, bytes, and any torn tail.',
  examples: ['noa workspaces --root /var/lib/noa --json'],
})

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values } = parseCommand(args, spec)
  const list = await listWorkspaces(rootOf(values))
  if (values.json) {
    io.stdout.write(json(list))
    return 0
  }
  const width = Math.max(9, ...list.map((w) => w.workspace.length))
  io.stdout.write(
    `${'workspace'.padEnd(width)}  ${'entries'.padStart(10)}  ${'last seq'.padStart(10)}  ${'bytes'.padStart(12)}\n`,
  )
  for (const w of list) {
    const torn = w.tornTailBytes > 0 ? `  (torn tail: ${w.tornTailBytes} bytes)` : ''
    io.stdout.write(
      `${w.workspace.padEnd(width)}  ${String(w.entries).padStart(10)}  ${String(w.lastSeq).padStart(10)}  ${String(w.bytes).padStart(12)}${torn}\n`,
    )
  }
  return 0
}
