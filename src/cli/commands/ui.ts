import { DEFAULT_UI_PORT, UiServer } from '../../ui/server.js'
import { command, existingRootOf, intOption, JSON_OPTION, parseCommand, ROOT_OPTION } from '../args.js'
import { type CliIo, json, write } from '../io.js'

export const spec = command({
  usage: 'usage: noa ui [--root DIR] [--port N] [--listen ADDR --token-file FILE] [--json]',
  options: {
    ...ROOT_OPTION,
    ...JSON_OPTION,
    port: {
      type: 'string',
      value: 'N',
      description: 'TCP port (0: any free one)',
      defaultText: String(DEFAULT_UI_PORT),
    },
    listen: {
      type: 'string',
      value: 'ADDR',
      description: 'address to listen on (one that is not loopback needs a token file)',
      defaultText: '127.0.0.1',
    },
    'token-file': {
      type: 'string',
      value: 'FILE',
      description: 'the token the browser must send (first line, ≥ 16 characters, mode 0600)',
      defaultText: 'a random one, printed once',
      required: 'with a --listen that is not loopback',
      complete: 'file',
    },
  },
  positionals: [0, 0],
  details:
    'A read-only web view of the root, live: every workspace with its entries and rate, a\n' +
    "workspace's log as it grows, its snapshots, forks and merges, the tree and files of a\n" +
    'snapshot, diffs, and the agent files (transcripts/, memory/, context/ in the root, LangGraph\n' +
    'threads, Agents sessions). Prints the URL to open once, with its token (as Jupyter does):\n' +
    'every request needs it, the live stream included. Only GET is answered; nothing is written.\n' +
    'SIGTERM or SIGINT stops it.',
  examples: ['noa ui --root ./.noa', 'noa ui --root ./.noa --port 0 --json'],
  exitCodes: {
    0: 'stopped by SIGTERM or SIGINT',
    1: 'could not start (no root, port in use, bad token file, non-loopback address without a token file)',
  },
})

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values } = parseCommand(args, spec)
  const port = intOption(values.port, 'port', spec.usage, 0)
  const ui = await UiServer.start({
    root: existingRootOf(values),
    ...(port === undefined ? {} : { port }),
    ...(values.listen === undefined ? {} : { listen: values.listen }),
    ...(values['token-file'] === undefined ? {} : { tokenFile: values['token-file'] }),
  })
  let stopped!: () => void
  const done = new Promise<void>((resolve) => {
    stopped = resolve
  })
  const stop = () => {
    process.off('SIGTERM', stop)
    process.off('SIGINT', stop)
    void ui.close().then(stopped)
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
  await write(
    io.stdout,
    values.json
      ? json({ root: ui.root, url: ui.url, port: ui.port, pid: process.pid })
      : `noa ui: ${ui.root} at ${ui.url}\n`,
  )
  await done
  return 0
}
