import { AgentLog } from '../../engine/agent-log.js'
import { SnapshotEngine, type SnapshotResult } from '../../store/snapshot.js'
import { command, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf } from '../args.js'
import { type CliIo, json, write } from '../io.js'
import { progress, quoteField } from '../progress.js'
import { describeNoEffect, describeSkipped } from './describe.js'
import { SHARED_DETAILS, SHARED_OPTIONS, storeFor } from './shared-store.js'

export const spec = command({
  usage:
    'usage: noa snapshot <workspace> [-m MESSAGE] [--allow-empty] [--strict] [--skip-damaged] [--shared-nats URL [--shared-prefix P]] [--root DIR] [--json]\n       noa snapshot prune <workspace> --keep-last N [--keep-within DURATION] [-m MESSAGE] [--root DIR] [--json]',
  options: {
    ...ROOT_OPTION,
    ...JSON_OPTION,
    message: { type: 'string', short: 'm', description: "the snapshot's message", defaultText: 'empty' },
    'allow-empty': {
      type: 'boolean',
      description: 'write a snapshot even when nothing happened since the last one',
    },
    strict: {
      type: 'boolean',
      description:
        'refuse entries that cannot apply (delete or rename of a missing path) instead of recording them',
    },
    'skip-damaged': {
      type: 'boolean',
      description:
        'leave damaged lines of the log out instead of refusing, and record exactly which (seqs, byte ranges) in the snapshot',
    },
    ...SHARED_OPTIONS,
  },
  positionals: [1, 1],
  details:
    "Prints the snapshot's id; --json: {created, snapshotId, tree, parent, seq, entriesReplayed,\n" +
    'noEffect, missingBlobs, skipped}. Entries that changed nothing and blobs not in the store are\n' +
    'listed on stderr. With nothing new since the last snapshot, prints its id and writes nothing.\n' +
    'A damaged line in the log refuses the snapshot; --skip-damaged leaves it out, lists it on\n' +
    'stderr and records it in the snapshot (noa snapshots, history and verify show it).\n' +
    'noa snapshot prune drops older snapshots, recorded in the log (gc then frees their trees):\n' +
    '--keep-last N keeps the newest N, --keep-within DURATION (1h, 7d) those made within it;\n' +
    'the head, forks, merges and earlier prunes are always kept.\n' +
    SHARED_DETAILS,
  examples: [
    'noa snapshot agent-1 -m "tests pass"',
    'noa snapshot team --shared-nats nats://n1:4222,nats://n2:4222,nats://n3:4222',
    'noa snapshot prune agent-1 --keep-last 10',
  ],
  exitCodes: {
    1: 'the workspace has no log, a snapshot it needs is missing, the log is damaged (see --skip-damaged), or (--strict) an entry cannot apply',
  },
})

export function snapshotJson(r: SnapshotResult): Record<string, unknown> {
  return {
    created: r.created,
    snapshotId: r.snapshotId,
    tree: r.tree,
    parent: r.parent,
    seq: r.seq,
    entriesReplayed: r.entriesReplayed,
    noEffect: r.noEffect,
    missingBlobs: r.missingBlobs,
    skipped: r.skipped,
  }
}

export async function run(args: string[], io: CliIo): Promise<number> {
  if (args[0] === 'prune') return (await import('./prune.js')).run(args.slice(1), io)
  const { values, positionals } = parseCommand(args, spec)
  const workspace = positionals[0] as string
  const root = rootOf(values)
  // Read-only checks first, so a bad workspace fails before any worker starts.
  const reader = new SnapshotEngine({ root })
  await reader.head(workspace)
  const log = await AgentLog.open({ root, workers: 0 })
  const shown = progress(io, 'replaying')
  try {
    const store = await storeFor('snapshot', spec.usage, io, log, values, [workspace])
    let r: SnapshotResult
    try {
      r = await store.engine.snapshot(workspace, {
        message: values.message ?? '',
        onProgress: shown.onProgress,
        allowEmpty: values['allow-empty'] ?? false,
        strict: values.strict ?? false,
        skipDamaged: values['skip-damaged'] ?? false,
      })
    } finally {
      await store.close()
    }
    shown.done()
    if (!values.json) {
      let notes = r.skipped.map((k) => `noa snapshot: ${workspace} ${describeSkipped(k)}\n`).join('')
      notes += r.noEffect.map((n) => `noa snapshot: ${workspace} ${describeNoEffect(n)}\n`).join('')
      for (const m of r.missingBlobs) {
        notes += `noa snapshot: warning: ${quoteField(m.path)} is blob ${m.blob}, not in the object store (written at seq ${m.seq ?? '?'} of ${m.workspace})\n`
      }
      if (!r.created) {
        notes += `noa snapshot: nothing new in ${workspace} since ${r.snapshotId ?? 'its start'} (seq ${r.seq}); no snapshot written (--allow-empty writes one anyway)\n`
      }
      if (notes) await write(io.stderr, notes)
    }
    await write(io.stdout, values.json ? json(snapshotJson(r)) : r.snapshotId ? `${r.snapshotId}\n` : '')
  } finally {
    shown.done()
    await log.close()
  }
  return 0
}
