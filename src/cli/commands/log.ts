import { readWorkspaceBytes } from '../../engine/logs.js'
import { command, intOption, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf } from '../args.js'
import { type CliIo, write } from '../io.js'

export const spec = command({
  usage: 'usage: noa log <workspace> [--from SEQ] [--root DIR] [--json]',
  options: {
    ...ROOT_OPTION,
    json: {
      ...JSON_OPTION.json,
      description: 'one JSON entry per line: the stored lines are that already, so the output is the same',
    },
    from: { type: 'string', value: 'SEQ', description: 'start at this seq', defaultText: '1' },
  },
  positionals: [1, 1],
  details:
    'Prints the stored lines exactly as on disk (JSON lines with the on-disk keys: seq, op, …,\n' +
    'ts); the start is found by binary search.',
  examples: ['noa log agent-1 --from 100', 'noa log agent-1 | head -5'],
  exitCodes: { 1: 'the workspace has no log, or it cannot be read' },
})

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const from = intOption(values.from, 'from', spec.usage, 1) ?? 1
  for await (const chunk of readWorkspaceBytes(rootOf(values), positionals[0] as string, from)) {
    await write(io.stdout, chunk)
  }
  return 0
}
