import { DEFAULT_GRACE_MS, type GcItem, parseDuration } from '../../store/gc.js'
import { SnapshotEngine } from '../../store/snapshot.js'
import { command, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf, UsageError } from '../args.js'
import { type CliIo, json, write } from '../io.js'
import { count } from '../progress.js'

export const spec = command({
  usage: 'usage: noa gc [--yes] [--grace DURATION] [--root DIR] [--json]',
  options: {
    ...ROOT_OPTION,
    ...JSON_OPTION,
    yes: { type: 'boolean', description: 'remove; without it, a dry run that prints what would go' },
    grace: {
      type: 'string',
      value: 'DURATION',
      description: 'keep anything modified more recently than this (30m, 1h, 2d)',
      defaultText: '1h',
    },
  },
  positionals: [0, 0],
  details:
    'Marks every object a workspace log reaches (snapshots, their trees and blobs, the blobs of\n' +
    'writes not yet snapshotted), then removes unmarked objects and temp files left by interrupted\n' +
    'writers that are older than the grace period. Safe beside live writers; killed, it leaves a\n' +
    'consistent store.',
  examples: ['noa gc', 'noa gc --yes --grace 2h'],
})

function size(n: number): string {
  if (n < 1024) return `${n} B`
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`
  if (n < 1 << 30) return `${(n / (1 << 20)).toFixed(1)} MiB`
  return `${(n / (1 << 30)).toFixed(2)} GiB`
}

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values } = parseCommand(args, spec)
  let graceMs = DEFAULT_GRACE_MS
  if (values.grace !== undefined) {
    try {
      graceMs = parseDuration(values.grace, '--grace')
    } catch (err) {
      throw new UsageError((err as Error).message, spec.usage)
    }
  }
  const dryRun = !values.yes
  const engine = new SnapshotEngine({ root: rootOf(values) })
  const listed: GcItem[] = []
  let out = ''
  const flush = async () => {
    if (out) await write(io.stdout, out)
    out = ''
  }
  let drawn = false
  const r = await engine.gc({
    dryRun,
    graceMs,
    onRemove: (item) => {
      if (values.json) listed.push(item)
      else
        out += `${dryRun ? 'would remove' : 'removed'} ${item.kind === 'temp' ? 'temp file ' : ''}${item.name} (${item.bytes} bytes)\n`
    },
    onProgress: (p) => {
      if (!io.isTTY) return
      drawn = true
      io.stderr.write(
        `\r\x1b[Kgc: ${p.phase === 'mark' ? `marking: ${count(p.workspaces, 'log')}, ${count(p.marked, 'object')} reachable` : `sweeping: ${p.dirs}/256 folders, ${p.removed} ${dryRun ? 'to remove' : 'removed'}`}`,
      )
    },
  })
  if (drawn) io.stderr.write('\r\x1b[K')
  if (values.json) {
    await write(io.stdout, json({ ...r, items: listed }))
    return 0
  }
  await flush()
  const freed = r.removedBytes + r.tempBytes
  await write(
    io.stdout,
    `${dryRun ? 'dry run: would free' : 'freed'} ${size(freed)}: ${r.removed} unreachable object${r.removed === 1 ? '' : 's'} and ${r.temps} temp file${r.temps === 1 ? '' : 's'}; kept ${r.reachable} reachable and ${r.young} younger than the grace period, of ${count(r.objects, 'object')}${dryRun ? ' (noa gc --yes removes them)' : ''}\n`,
  )
  if (r.logs > 0) {
    await write(
      io.stdout,
      `object logs: ${dryRun ? 'would free' : 'freed'} ${size(r.logBytes)} (${r.logObjectsRemoved} unreachable object${r.logObjectsRemoved === 1 ? '' : 's'}): ${r.logsRemoved} of ${r.logs} ${dryRun ? 'to remove' : 'removed'}, ${r.logsRewritten} ${dryRun ? 'to write' : 'written'} again with only their reachable objects; kept ${r.logsKept} (a live writer's, written within the grace period, or all reachable)\n`,
    )
  }
  if (r.missing > 0) {
    await write(
      io.stderr,
      `noa gc: ${r.missing} reachable object${r.missing === 1 ? ' is' : 's are'} missing: noa verify --objects names them\n`,
    )
  }
  return 0
}
