import { decodeWorkspace, type NameScheme } from '../../adapters/names.js'
import { type DuResult, diskUsage } from '../../store/du.js'
import { SnapshotEngine } from '../../store/snapshot.js'
import { command, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf } from '../args.js'
import { type CliIo, json, write } from '../io.js'

export const spec = command({
  usage: 'usage: noa du [--root DIR] [--json]',
  options: { ...ROOT_OPTION, ...JSON_OPTION },
  positionals: [0, 0],
  details:
    'Bytes of every file under the root by kind (logs, checksums, objects, packs: the object\n' +
    'logs, journals, other), then per workspace (a LangGraph thread lg.*, an Agents session oa.*,\n' +
    'or a plain one): its log, its checksums, the objects only it reaches (own) and those another\n' +
    'workspace reaches too (shared), and what the tools would free: gc (unreachable objects, no\n' +
    'grace period), prune (objects only non-head snapshots reach: noa prune --keep-last 1, then\n' +
    'gc) and compact (log bytes before the head snapshot). Reads only; writes nothing.',
  examples: ['noa du', 'noa du --json'],
})

const SCHEMES: Array<[NameScheme, string]> = [
  [{ prefix: 'lg', what: 'thread id' }, 'thread'],
  [{ prefix: 'oa', what: 'session id' }, 'session'],
]

/** What a workspace holds, by its name: a LangGraph thread, an Agents session, or a plain workspace. */
function kindOf(workspace: string): { kind: string; id?: string } {
  for (const [scheme, kind] of SCHEMES) {
    const d = decodeWorkspace(scheme, workspace)
    if (d) return d.kind === 'plain' ? { kind, id: d.id } : { kind }
  }
  return { kind: 'workspace' }
}

function size(n: number): string {
  if (n < 1024) return `${n} B`
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`
  if (n < 1 << 30) return `${(n / (1 << 20)).toFixed(1)} MiB`
  return `${(n / (1 << 30)).toFixed(2)} GiB`
}

function table(rows: string[][]): string {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] as string).length))) ?? []
  return rows
    .map((r) =>
      r.map((c, i) => (i === 0 ? c.padEnd(widths[i] as number) : c.padStart(widths[i] as number))).join('  '),
    )
    .join('\n')
}

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values } = parseCommand(args, spec)
  const r: DuResult = await diskUsage(new SnapshotEngine({ root: rootOf(values) }))
  const workspaces = r.workspaces.map((w) => ({ ...w, ...kindOf(w.workspace) }))
  if (values.json) {
    await write(io.stdout, json({ ...r, workspaces }))
    return 0
  }
  const rows = [['workspace', 'log', 'checksums', 'own objects', 'shared objects', 'prunable', 'compactable']]
  for (const w of [...workspaces].sort((a, b) => b.log + b.own.bytes - (a.log + a.own.bytes))) {
    rows.push([
      w.id === undefined ? w.workspace : `${w.workspace} (${w.kind} ${JSON.stringify(w.id)})`,
      size(w.log),
      size(w.checksums),
      `${size(w.own.bytes)} (${w.own.objects})`,
      `${size(w.shared.bytes)} (${w.shared.objects})`,
      size(w.prunable),
      size(w.compactable),
    ])
  }
  const c = r.categories
  await write(
    io.stdout,
    `${table(rows)}\n\n` +
      `${r.root}: ${size(r.total)}: logs ${size(c.logs)}, checksums ${size(c.checksums)}, objects ${size(c.objects)}, packs ${size(c.packs)}, journals ${size(c.journals)}, other ${size(c.other)}\n` +
      `reachable objects: ${r.reachable.objects} (${size(r.reachable.bytes)})\n` +
      `would free: gc ${size(r.free.gc)}, prune to the heads then gc ${size(r.free.prune)}, compact behind the heads ${size(r.free.compact)}\n`,
  )
  return 0
}
