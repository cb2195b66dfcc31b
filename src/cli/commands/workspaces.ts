import { scanWorkspaces } from '../../engine/logs.js'
import { command, existingRootOf, JSON_OPTION, parseCommand, ROOT_OPTION } from '../args.js'
import { type CliIo, json, write } from '../io.js'
import { reportProblems } from '../problems.js'
import { meter, percent } from '../progress.js'

export const spec = command({
  usage: 'usage: noa workspaces [--root DIR] [--json]',
  options: { ...ROOT_OPTION, ...JSON_OPTION },
  positionals: [0, 0],
  details:
    'One line per workspace: name, entries, last seq, bytes, and any torn tail. A log that\n' +
    'cannot be listed (not a regular file, unreadable, a corrupt last line) is named at the end.',
  exitCodes: { 0: 'every log was listed', 1: 'a log could not be listed (named on stderr)' },
  examples: ['noa workspaces --root ./.noa --json'],
})

/** Lists every healthy workspace; a log that cannot be listed is named at the end (exit 1). */
export async function run(args: string[], io: CliIo): Promise<number> {
  const { values } = parseCommand(args, spec)
  const shown = meter(io)
  let scan: Awaited<ReturnType<typeof scanWorkspaces>>
  try {
    scan = await scanWorkspaces(existingRootOf(values), {
      onProgress: (done, total, ws) =>
        shown.update(() => `counting entries: ${ws} (${done + 1}/${total}) ${percent(done, total)}`),
    })
  } finally {
    shown.done()
  }
  const { workspaces: list, problems } = scan
  if (values.json) {
    await write(io.stdout, json(list))
  } else {
    const width = Math.max(9, ...list.map((w) => w.workspace.length))
    let out = `${'workspace'.padEnd(width)}  ${'entries'.padStart(10)}  ${'last seq'.padStart(10)}  ${'bytes'.padStart(12)}\n`
    for (const w of list) {
      const torn = w.tornTailBytes > 0 ? `  (torn tail: ${w.tornTailBytes} bytes)` : ''
      out += `${w.workspace.padEnd(width)}  ${String(w.entries).padStart(10)}  ${String(w.lastSeq).padStart(10)}  ${String(w.bytes).padStart(12)}${torn}\n`
    }
    await write(io.stdout, out)
  }
  return reportProblems(io, 'workspaces', problems, 'not listed')
}
