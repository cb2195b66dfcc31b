import { readWorkspaceBytes } from '../../engine/logs.js'
import { intOption, parseCommand, ROOT_OPTION, rootOf } from '../args.js'
import { type CliIo, write } from '../io.js'

const spec = {
  usage: 'usage: noa log <workspace> [--from SEQ] [--root DIR]',
  options: { ...ROOT_OPTION, from: { type: 'string' } },
  positionals: [1, 1] as [number, number],
} as const

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, { ...spec, positionals: [1, 1] })
  const from = intOption(values.from, 'from', spec.usage, 1) ?? 1
  for await (const chunk of readWorkspaceBytes(rootOf(values), positionals[0] as string, from)) {
    await write(io.stdout, chunk)
  }
  return 0
}
