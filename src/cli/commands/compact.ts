import { decodeWorkspace } from '../../adapters/names.js'
import { AgentLog, type CompactResult } from '../../engine/agent-log.js'
import { checkWorkspace } from '../../engine/entry.js'
import { ObjectStore } from '../../store/objects.js'
import { command, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf, UsageError } from '../args.js'
import { type CliIo, json, write } from '../io.js'

export const spec = command({
  usage:
    'usage: noa compact <workspace> [--before SNAPSHOT|SEQ] [--archive DIR] [--archive-format gzip|brotli] [--root DIR] [--json]',
  options: {
    ...ROOT_OPTION,
    ...JSON_OPTION,
    before: {
      type: 'string',
      value: 'SNAPSHOT|SEQ',
      description: 'compact up to this snapshot, or up to the newest snapshot covering only seqs before SEQ',
      defaultText: 'the newest snapshot',
    },
    archive: {
      type: 'string',
      value: 'DIR',
      description: "keep the replaced lines, compressed, in this folder (outside the root's own folders)",
      complete: 'dir',
    },
    'archive-format': {
      type: 'string',
      value: 'FORMAT',
      description: 'how the archive is compressed: gzip (.log.gz) or brotli (.log.br)',
      defaultText: 'gzip',
      complete: ['gzip', 'brotli'],
    },
  },
  positionals: [1, 1],
  details:
    "Replaces the entries of a workspace's log up to what a snapshot of it covers by one base\n" +
    'record naming that snapshot; every later line stays byte for byte, seqs included. The new\n' +
    'log is written beside the old one and renamed over it, so a crash leaves one or the other.\n' +
    'Reading from a seq the base replaced is then refused by name (NOA_COMPACTED); snapshots,\n' +
    'replays and checkouts start from the base snapshot. Refused, with nothing changed: a\n' +
    'workspace another process is appending to, a --before no snapshot covers, an --archive\n' +
    "folder inside the root's own folders. --json: {workspace, compacted, baseSeq, snapshotId,\n" +
    'bytesBefore, bytesAfter, archive}. See docs/compaction.md.',
  examples: [
    'noa snapshot agent-1 && noa compact agent-1',
    'noa compact agent-1 --before 900001 --archive /backup/noa',
  ],
  exitCodes: {
    1: 'nothing covers the seqs asked for, the workspace is being appended to elsewhere, or a file could not be written',
  },
})

/** LangGraph threads' workspaces (langgraph/saver.ts THREADS; the CLI does not load the adapter). */
const THREADS = { prefix: 'lg', what: 'thread id' }

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const workspace = checkWorkspace(positionals[0])
  if (decodeWorkspace(THREADS, workspace) !== null) {
    // NoaSaver lists a thread's checkpoints from the write entries of its whole log (layout.ts):
    // behind a base, every checkpoint before it would vanish from list() and getTuple().
    throw new UsageError(
      `workspace ${workspace} holds a LangGraph thread, whose saver reads its checkpoints from the whole log: compacting it would hide them; bound a thread with NoaSaver's retention (keepLast, keepWithinMs) and noa gc instead`,
      spec.usage,
    )
  }
  const root = rootOf(values)
  let before: string | number | undefined = values.before
  if (before !== undefined && !before.startsWith('noa_')) {
    if (!/^[1-9][0-9]{0,15}$/.test(before)) {
      throw new UsageError(
        `--before must be a snapshot id (noa_…) or a seq (an integer >= 1), got ${JSON.stringify(before)}`,
        spec.usage,
      )
    }
    before = Number(before)
  }
  const format = values['archive-format']
  if (format !== undefined && format !== 'gzip' && format !== 'brotli') {
    throw new UsageError(`--archive-format must be gzip or brotli, got ${JSON.stringify(format)}`, spec.usage)
  }
  if (format !== undefined && values.archive === undefined)
    throw new UsageError('--archive-format needs --archive DIR', spec.usage)
  const log = await AgentLog.open({ root, workers: 0, objects: new ObjectStore(root) })
  let r: CompactResult
  try {
    r = await log.compact(workspace, {
      ...(before === undefined ? {} : { before }),
      ...(values.archive === undefined ? {} : { archive: values.archive }),
      ...(format === undefined ? {} : { archiveFormat: format }),
    })
  } finally {
    await log.close()
  }
  if (values.json) {
    await write(io.stdout, json({ ...r }))
    return 0
  }
  const saved = r.bytesBefore - r.bytesAfter
  let text = r.compacted
    ? `${workspace}: compacted up to seq ${r.baseSeq} (snapshot ${r.snapshotId}): ${r.bytesBefore} → ${r.bytesAfter} bytes (${saved} freed)\n`
    : `${workspace}: already starts at seq ${r.baseSeq} (snapshot ${r.snapshotId}); nothing changed\n`
  if (r.archive)
    text += `${workspace}: the replaced lines are in ${r.archive.path} (${r.archive.bytes} bytes, ${r.archive.format})\n`
  await write(io.stdout, text)
  return 0
}
