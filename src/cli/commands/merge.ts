import { AgentLog } from '../../engine/agent-log.js'
import { isNoaError } from '../../engine/errors.js'
import { existingLog } from '../../engine/logs.js'
import type { MergeConflict } from '../../store/merge.js'
import { command, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf, UsageError } from '../args.js'
import { type CliIo, json, write } from '../io.js'
import { progress, quoteField } from '../progress.js'
import { describeNoEffect } from './describe.js'
import { SHARED_DETAILS, SHARED_OPTIONS, storeFor } from './shared-store.js'

export const spec = command({
  usage:
    'usage: noa merge <target_workspace> <source_workspace>… [--on-conflict lww|fail] [-m MESSAGE] [--strict] [--shared-nats URL [--shared-prefix P]] [--root DIR] [--json]',
  options: {
    ...ROOT_OPTION,
    ...JSON_OPTION,
    'on-conflict': {
      type: 'string',
      value: 'lww|fail',
      description: 'a path changed on both sides: lww keeps the last write, fail writes nothing',
      defaultText: 'lww',
      complete: ['lww', 'fail'],
    },
    message: {
      type: 'string',
      short: 'm',
      description: "the merge snapshot's message",
      defaultText: '"merge <sources> into <target>"',
    },
    strict: {
      type: 'boolean',
      description: 'refuse entries that cannot apply instead of recording them as without effect',
    },
    ...SHARED_OPTIONS,
  },
  positionals: [2, Number.POSITIVE_INFINITY],
  details:
    "Prints the merged snapshot's id, then any conflicts (kept side and every side's entry).\n" +
    'When the sources bring nothing new, says "already up to date", prints the head and writes nothing.\n' +
    `${SHARED_DETAILS}\nOnly the target is shared; the sources are this root's workspaces.`,
  examples: [
    'noa merge main agent-1 agent-2 --on-conflict fail',
    'noa merge team agent-1 --shared-nats nats://n1:4222,nats://n2:4222,nats://n3:4222',
  ],
  exitCodes: { 1: 'an unknown workspace, or conflicts with --on-conflict fail (listed on stdout)' },
})

function describe(c: MergeConflict): string {
  const sides = c.sides.map(
    (s) =>
      `  ${s.workspace}\t${s.op}\t${s.blob ?? '-'}\tts ${s.ts}\tseq ${s.seq}${s.log ? ` (log ${s.log})` : ''}\n`,
  )
  return `conflict ${quoteField(c.path)} (kept ${c.winner})\n${sides.join('')}`
}

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const policy = values['on-conflict'] ?? 'lww'
  if (policy !== 'lww' && policy !== 'fail') {
    throw new UsageError(`--on-conflict must be lww or fail, got ${JSON.stringify(policy)}`, spec.usage)
  }
  const [target, ...sources] = positionals as [string, ...string[]]
  const root = rootOf(values)
  for (const ws of positionals) existingLog(root, ws) // unknown workspaces fail before any worker starts
  const log = await AgentLog.open({ root, workers: 0 })
  const shown = progress(io, 'merging')
  let store: Awaited<ReturnType<typeof storeFor>> | null = null
  try {
    store = await storeFor('merge', spec.usage, io, log, values, [target])
    const engine = store.engine
    const options = {
      onConflict: policy,
      onProgress: shown.onProgress,
      strict: values.strict ?? false,
    } as const
    const r = await engine
      .merge(
        target,
        sources,
        values.message === undefined ? options : { ...options, message: values.message },
      )
      .catch(async (err: unknown) => {
        shown.done()
        if (isNoaError(err, 'NOA_CONFLICT') && Array.isArray(err.details.conflicts)) {
          const conflicts = err.details.conflicts as MergeConflict[]
          await write(
            io.stdout,
            values.json
              ? json({ created: false, snapshotId: null, base: err.details.base ?? null, conflicts })
              : conflicts.map(describe).join(''),
          )
        }
        throw err
      })
    shown.done()
    if (!values.json) {
      let notes = r.noEffect.map((n) => `noa merge: ${target} ${describeNoEffect(n)}\n`).join('')
      if (!r.created)
        notes += `noa merge: already up to date: ${sources.join(', ')} bring nothing new into ${target}\n`
      if (notes) await write(io.stderr, notes)
    }
    await write(
      io.stdout,
      values.json
        ? json({
            created: r.created,
            snapshotId: r.snapshotId,
            base: r.base,
            conflicts: r.conflicts,
            sources: r.sources,
            entriesReplayed: r.entriesReplayed,
            noEffect: r.noEffect,
          })
        : `${r.snapshotId ?? ''}${r.snapshotId ? '\n' : ''}${r.conflicts.map(describe).join('')}`,
    )
  } finally {
    shown.done()
    await store?.close()
    await log.close()
  }
  return 0
}
