import { AgentLog } from '../../engine/agent-log.js'
import { NoaError } from '../../engine/errors.js'
import { workspaceNames } from '../../engine/logs.js'
import { parseDuration } from '../../store/gc.js'
import { type PruneResult, SnapshotEngine } from '../../store/snapshot.js'
import { command, intOption, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf, UsageError } from '../args.js'
import { type CliIo, json, write } from '../io.js'

export const spec = command({
  usage:
    'usage: noa prune --keep-last N [--keep-within DURATION] [--workspace GLOB] [--yes] [--root DIR] [--json]',
  options: {
    ...ROOT_OPTION,
    ...JSON_OPTION,
    'keep-last': {
      type: 'string',
      value: 'N',
      description: "keep each workspace's newest N snapshots",
      required: 'unless --keep-within',
    },
    'keep-within': {
      type: 'string',
      value: 'DURATION',
      description: 'keep snapshots made within this long (1h, 7d)',
    },
    workspace: {
      type: 'string',
      value: 'GLOB',
      description: 'only workspaces whose name matches (* any run, ? one character, [abc] a set)',
      defaultText: 'every workspace',
    },
    yes: { type: 'boolean', description: 'drop; without it, a dry run that prints what would go' },
  },
  positionals: [0, 0],
  details:
    'noa snapshot prune for every workspace of the root (LangGraph threads lg.* and Agents\n' +
    'sessions oa.* too: a dropped snapshot of a thread is a dropped checkpoint). A snapshot is\n' +
    'kept when either rule keeps it; the head, forks and merges always are. Each drop is\n' +
    'recorded in its log as a snapshot entry; noa gc then frees what only the dropped ones used.',
  examples: ['noa prune --keep-last 10', 'noa prune --keep-within 7d --workspace "lg.*" --yes'],
})

/** A workspace-name glob as a RegExp: names have no `/`, so `*` is any run of characters. */
export function globRegExp(glob: string): RegExp {
  let re = ''
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i] as string
    if (c === '*') re += '.*'
    else if (c === '?') re += '.'
    else if (c === '[') {
      const end = glob.indexOf(']', i + 2)
      if (end < 0) throw new Error(`--workspace ${JSON.stringify(glob)}: a "[" without its "]"`)
      const set = glob.slice(i + 1, end)
      re += `[${set.startsWith('!') ? `^${set.slice(1)}` : set}]`.replace(/\\/g, '\\\\')
      i = end
    } else re += c.replace(/[.+^${}()|\\]/g, '\\$&')
  }
  return new RegExp(`^${re}$`)
}

/** Prunes every matching workspace of the root, one after another, under each one's lock. */
export async function run(args: string[], io: CliIo): Promise<number> {
  const { values } = parseCommand(args, spec)
  const keepLast = intOption(values['keep-last'], 'keep-last', spec.usage, 1)
  let keepWithinMs: number | undefined
  let match: RegExp | undefined
  try {
    if (values['keep-within'] !== undefined)
      keepWithinMs = parseDuration(values['keep-within'], '--keep-within')
    if (values.workspace !== undefined) match = globRegExp(values.workspace)
  } catch (err) {
    throw new UsageError((err as Error).message, spec.usage)
  }
  if (keepLast === undefined && keepWithinMs === undefined) {
    throw new UsageError('--keep-last N (or --keep-within DURATION) is required', spec.usage)
  }
  const root = rootOf(values)
  const dryRun = !values.yes
  const names = workspaceNames(root).filter((ws) => match === undefined || match.test(ws))
  if (names.length === 0) {
    await write(
      io.stderr,
      `noa prune: no workspace of ${root} ${values.workspace === undefined ? 'exists' : `matches ${JSON.stringify(values.workspace)}`}\n`,
    )
    return 1
  }
  const log = dryRun ? undefined : await AgentLog.open({ root, workers: 1 })
  const engine = new SnapshotEngine(log ? { log } : { root })
  const done: Array<{ workspace: string } & Pick<PruneResult, 'snapshotId' | 'dropped' | 'kept'>> = []
  const failed: Array<{ workspace: string; code: string; message: string }> = []
  try {
    for (const workspace of names) {
      try {
        const r = await engine.prune(workspace, {
          ...(keepLast !== undefined ? { keepLast } : {}),
          ...(keepWithinMs !== undefined ? { keepWithinMs } : {}),
          dryRun,
        })
        done.push({ workspace, snapshotId: r.snapshotId, dropped: r.dropped, kept: r.kept })
        if (!values.json && r.dropped.length > 0) {
          await write(
            io.stdout,
            r.dropped.map((id) => `${workspace}\t${dryRun ? 'would drop' : 'dropped'} ${id}\n`).join(''),
          )
        }
      } catch (err) {
        if (!(err instanceof NoaError)) throw err
        failed.push({ workspace, code: err.code, message: err.message })
        if (!values.json) await write(io.stderr, `noa prune: ${workspace}: ${err.message}\n`)
      }
    }
  } finally {
    await log?.close()
  }
  const dropped = done.reduce((n, d) => n + d.dropped.length, 0)
  const kept = done.reduce((n, d) => n + d.kept.length, 0)
  if (values.json) {
    await write(io.stdout, json({ dryRun, dropped, kept, workspaces: done, failed }))
  } else {
    const touched = done.filter((d) => d.dropped.length > 0).length
    await write(
      io.stderr,
      dryRun
        ? `dry run: would drop ${dropped} snapshot${dropped === 1 ? '' : 's'} of ${touched} workspace${touched === 1 ? '' : 's'}, keep ${kept} (noa prune --yes drops them; noa gc then frees their bytes)\n`
        : `noa prune: dropped ${dropped} snapshot${dropped === 1 ? '' : 's'} of ${touched} workspace${touched === 1 ? '' : 's'}, kept ${kept}; noa gc frees what only the dropped ones used\n`,
    )
  }
  return failed.length > 0 ? 1 : 0
}
