import { statSync } from 'node:fs'
import { type FileHandle, open } from 'node:fs/promises'
import { Errors } from '../../engine/errors.js'
import { checkRoot, kindOf, nameTooLong, notRegularFile } from '../../engine/files.js'
import { ObjectStore } from '../../store/objects.js'
import { command, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf, UsageError } from '../args.js'
import { type CliIo, json, write } from '../io.js'
import { checkLayout } from '../roots.js'

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

/**
 * The file to put, opened before anything is written to the store, so a missing one is a named
 * error and leaves no temp file. It is the user's own path, outside the root: symlinks are
 * followed and a pipe (`<(cmd)`) is read, as `cat` would.
 */
async function openInput(path: string): Promise<FileHandle> {
  let handle: FileHandle
  try {
    handle = await open(path, 'r')
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOENT') throw Errors.NOT_FOUND(`blob put: no file ${path}`, { file: path })
    if (code === 'ENAMETOOLONG') throw nameTooLong(path)
    throw err
  }
  const st = await handle.stat()
  if (st.isDirectory()) {
    await handle.close()
    throw notRegularFile(path, kindOf(st), 'blob')
  }
  return handle
}

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const [action, arg] = positionals as [string, string]
  const root = rootOf(values)
  if (action === 'put') {
    checkRoot(root, false)
    const store = new ObjectStore(root)
    // Streamed: a large file is hashed while it is written, never held whole in memory.
    let hash: string
    if (arg === '-') hash = await store.putBlob(io.stdin)
    else {
      const handle = await openInput(arg)
      try {
        hash = await store.putBlob(handle.createReadStream({ autoClose: false }))
      } finally {
        await handle.close()
      }
    }
    const bytes = statSync(store.pathOf(hash)).size
    await write(io.stdout, values.json ? json({ blob: hash, bytes }) : `${hash}\n`)
    return 0
  }
  if (action === 'get') {
    if (values.json) throw new UsageError('blob get prints the bytes; --json is for put', spec.usage)
    checkRoot(root, true)
    checkLayout(root)
    // Streamed too: a chunk at a time, after the whole blob was checked against its hash.
    for await (const chunk of new ObjectStore(root).streamBlob(arg)) await write(io.stdout, chunk)
    return 0
  }
  throw new UsageError(`unknown action ${JSON.stringify(action)} (put or get)`, spec.usage)
}
