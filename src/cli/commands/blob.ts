import { createReadStream } from 'node:fs'
import { ObjectStore } from '../../store/objects.js'
import { command, parseCommand, ROOT_OPTION, rootOf, UsageError } from '../args.js'
import { type CliIo, write } from '../io.js'

export const spec = command({
  usage: 'usage: noa blob put <file|-> [--root DIR]\n       noa blob get <hash> [--root DIR]',
  options: { ...ROOT_OPTION },
  positionals: [2, 2],
  complete: [['put', 'get'], 'file'],
  details:
    'put stores a file (- for stdin) and prints its SHA-256; get writes the blob to stdout,\n' +
    'checked against its hash.',
  examples: ['noa blob put notes.md', 'noa blob get <hash> > notes.md'],
  exitCodes: { 1: 'the file cannot be read, or the blob is missing or corrupt' },
})

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const [action, arg] = positionals as [string, string]
  const store = new ObjectStore(rootOf(values))
  if (action === 'put') {
    // Streamed: a large file is hashed while it is written, never held whole in memory.
    const hash = await store.putBlob(arg === '-' ? io.stdin : createReadStream(arg))
    await write(io.stdout, `${hash}\n`)
    return 0
  }
  if (action === 'get') {
    await write(io.stdout, await store.getBlob(arg))
    return 0
  }
  throw new UsageError(`unknown action ${JSON.stringify(action)} (put or get)`, spec.usage)
}
