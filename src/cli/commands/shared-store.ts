/**
 * `--shared-nats URL` of `noa snapshot` and `noa merge`: the workspace written is shared
 * (`noa replicate share`, src/replicate/shared.ts), so the store's entry goes through the stream,
 * in its order, after the objects it names are published there, instead of to the local log
 * (where it would make the workspace diverge).
 */
import type { AgentLog } from '../../engine/agent-log.js'
import { SharedWorkspaces } from '../../replicate/shared.js'
import { checkPrefix, DEFAULT_PREFIX } from '../../replicate/subjects.js'
import { SnapshotEngine } from '../../store/snapshot.js'
import { type OptionSpec, UsageError } from '../args.js'
import type { CliIo } from '../io.js'

export const SHARED_OPTIONS = {
  'shared-nats': {
    type: 'string',
    value: 'URL',
    description:
      'the workspace is shared (noa replicate share): write through the stream, in its order, its objects published first; URL of the servers (comma-separated)',
  },
  'shared-prefix': {
    type: 'string',
    value: 'P',
    description: 'with --shared-nats: the subject prefix of the shared workspace',
    defaultText: DEFAULT_PREFIX,
  },
} as const satisfies OptionSpec

export const SHARED_DETAILS =
  'With --shared-nats URL the workspace is a shared one (noa replicate share): the objects\n' +
  "the entry names are published to the stream first, then the entry, in the stream's order,\n" +
  "so every host's log and object store get both; the R3 stream must exist (noa replicate init)."

/** The engine to write with, and what to close after; without --shared-nats, the local log's. */
export async function storeFor(
  command: string,
  usage: string,
  io: CliIo,
  log: AgentLog,
  values: { 'shared-nats'?: string; 'shared-prefix'?: string },
  workspaces: string[],
): Promise<{ engine: SnapshotEngine; close(): Promise<void> }> {
  const nats = values['shared-nats']
  if (nats === undefined) {
    if (values['shared-prefix'] !== undefined)
      throw new UsageError('--shared-prefix goes with --shared-nats', usage)
    return { engine: new SnapshotEngine({ log }), close: async () => {} }
  }
  if (nats === '') throw new UsageError('--shared-nats needs a URL', usage)
  let prefix: string
  try {
    prefix = checkPrefix(values['shared-prefix'] ?? DEFAULT_PREFIX)
  } catch (err) {
    throw new UsageError(`--shared-prefix: ${(err as Error).message}`, usage)
  }
  const shared = await SharedWorkspaces.open({
    log,
    nats,
    prefix,
    workspaces,
    follow: false,
    onEvent: (e) => {
      if (e.type === 'retry') io.stderr.write(`noa ${command}: ${e.what} failed (${e.error}); retrying\n`)
      else if (e.type === 'warning') io.stderr.write(`noa ${command}: ${e.message}\n`)
    },
  })
  return { engine: shared.snapshotEngine(), close: () => shared.close() }
}
