import { fileDiff } from '../../store/diff.js'
import { SnapshotEngine } from '../../store/snapshot.js'
import { command, existingRootOf, JSON_OPTION, parseCommand, ROOT_OPTION } from '../args.js'
import { type CliIo, json, write } from '../io.js'
import { quoteField } from '../progress.js'

export const spec = command({
  usage: 'usage: noa diff <a> <b> [--stat] [--patch] [--root DIR] [--json]',
  options: {
    ...ROOT_OPTION,
    ...JSON_OPTION,
    stat: { type: 'boolean', description: 'lines inserted and deleted per path, and a summary' },
    patch: { type: 'boolean', description: 'a unified diff of text blobs (binary ones reported as such)' },
  },
  positionals: [2, 2],
  details: 'a and b: snapshot ids, ws (its files now) or ws@seq. One A|D|M<TAB>path line per change.',
  examples: ['noa diff agent-1@10 agent-1 --stat', 'noa diff noa_1f… agent-1 --patch'],
})

const LETTER = { added: 'A', removed: 'D', changed: 'M' } as const

/** `A|D|M<TAB>path` per change (git's --name-status); --stat adds line counts; --patch the text. */
export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const engine = new SnapshotEngine({ root: existingRootOf(values) })
  const r = await engine.diff(positionals[0] as string, positionals[1] as string)
  const detailed = values.stat || values.patch
  const files = detailed ? await Promise.all(r.changes.map((c) => fileDiff(engine.store, c))) : []
  if (values.json) {
    const changes = r.changes.map((c, i) => {
      const f = files[i]
      if (!f) return c
      const extra: Record<string, unknown> = {
        binary: f.binary,
        insertions: f.insertions,
        deletions: f.deletions,
      }
      if (f.missing.length > 0) extra.missing = f.missing
      if (values.patch) extra.patch = f.patch
      return { ...c, ...extra }
    })
    await write(io.stdout, json({ ...r, changes }))
    return 0
  }
  let out = ''
  if (values.patch) {
    for (const f of files) out += f.patch
  } else if (values.stat) {
    const width = Math.max(0, ...files.map((f) => quoteField(f.path).length))
    for (const f of files) {
      const what =
        f.missing.length > 0
          ? 'blob missing'
          : f.binary
            ? 'Bin'
            : `${f.insertions + f.deletions} ${'+'.repeat(Math.min(f.insertions, 40))}${'-'.repeat(Math.min(f.deletions, 40))}`
      out += ` ${quoteField(f.path).padEnd(width)} | ${what}\n`
    }
    const ins = files.reduce((n, f) => n + f.insertions, 0)
    const del = files.reduce((n, f) => n + f.deletions, 0)
    out += ` ${files.length} file${files.length === 1 ? '' : 's'} changed (${r.added} added, ${r.removed} removed, ${r.changed} changed), ${ins} insertion${ins === 1 ? '' : 's'}(+), ${del} deletion${del === 1 ? '' : 's'}(-)\n`
  } else {
    for (const c of r.changes) out += `${LETTER[c.status]}\t${quoteField(c.path)}\n`
  }
  await write(io.stdout, out)
  return 0
}
