import { AgentLog } from '../../engine/agent-log.js'
import { checkWorkspace } from '../../engine/entry.js'
import { SnapshotEngine } from '../../store/snapshot.js'
import { command, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf, UsageError } from '../args.js'
import { type CliIo, json, write } from '../io.js'
import { SHARED_DETAILS, SHARED_OPTIONS, storeFor } from './shared-store.js'

export const spec = command({
  usage:
    'usage: noa fork <new_workspace> --from <snapshot_id> [-m MESSAGE] [--shared-nats URL [--shared-prefix P]] [--root DIR] [--json]',
  options: {
    ...ROOT_OPTION,
    ...JSON_OPTION,
    from: { type: 'string', value: 'SNAPSHOT_ID', description: 'the snapshot to start from', required: true },
    message: {
      type: 'string',
      short: 'm',
      description: "the fork entry's message",
      defaultText: '"fork of <workspace> at <snapshot_id>"',
    },
    ...SHARED_OPTIONS,
  },
  positionals: [1, 1],
  details: `${SHARED_DETAILS}\nThe new workspace is then a shared one, created in the stream's order on every host.`,
  examples: [
    'noa fork agent-2 --from <snapshot_id> -m "try the other fix"',
    'noa fork team-b --from <snapshot_id> --shared-nats nats://n1:4222,nats://n2:4222,nats://n3:4222',
  ],
  exitCodes: { 1: 'no such snapshot, or the new workspace exists already' },
})

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  if (values.from === undefined) throw new UsageError('--from <snapshot_id> is required', spec.usage)
  const workspace = checkWorkspace(positionals[0])
  const root = rootOf(values)
  await new SnapshotEngine({ root }).tree(values.from) // an unknown id fails before any worker starts
  const log = await AgentLog.open({ root, workers: 0 })
  let store: Awaited<ReturnType<typeof storeFor>> | null = null
  try {
    store = await storeFor('fork', spec.usage, io, log, values, [workspace])
    const r = await store.engine.fork(
      workspace,
      values.from,
      values.message === undefined ? {} : { message: values.message },
    )
    await write(
      io.stdout,
      values.json
        ? json({ workspace: r.workspace, base: r.base, fromWorkspace: r.fromWorkspace, seq: r.entry.seq })
        : `${r.workspace}\tforked from ${r.base} (${r.fromWorkspace})\n`,
    )
  } finally {
    await store?.close()
    await log.close()
  }
  return 0
}
