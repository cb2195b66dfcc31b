import { createReadStream, statSync } from 'node:fs'
import { ObjectStore } from '../../store/objects.js'
import { command, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf, UsageError } from '../args.js'
import { type CliIo, json, write } from '../io.js'

export const spec = command({
  usage: 'usage: noa blob put <file|-> [--root DIR] [--json]\n       noa blob get <hash> [--root DIR]',
  options: { ...ROOT_OPTION, json: { ...JSON_OPTION.json, description: 'put: print {"blob","bytes"}' } },
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
    const bytes = statSync(store.pathOf(hash)).size
    await write(io.stdout, values.json ? json({ blob: hash, bytes }) : `${hash}\n`)
    return 0
  }
  if (action === 'get') {
    if (values.json) throw new UsageError('blob get prints the bytes; --json is for put', spec.usage)
    await write(io.stdout, await store.getBlob(arg))
    return 0
  }
  throw new UsageError(`unknown action ${JSON.stringify(action)} (put or get)`, spec.usage)
}
