/**
 * `noa replicate share <workspace…>`: shared workspaces from the shell (src/replicate/shared.ts).
 * Catches the local logs of the named workspaces up to the stream and exits, or keeps following
 * them (`--follow`), or appends the entries read from stdin to one of them (`--append`), in the
 * stream's order, printing each entry's seq and ts once the stream's majority and the local log
 * hold it.
 */
import { AgentLog } from '../../engine/agent-log.js'
import { type EntryInput, encodeBody } from '../../engine/entry.js'
import { Errors } from '../../engine/errors.js'
import { SharedWorkspaces } from '../../replicate/shared.js'
import { checkPrefix, DEFAULT_PREFIX } from '../../replicate/subjects.js'
import { intOption, type OptionSpec, parseCommand, rootOf, type SubcommandSpec, UsageError } from '../args.js'
import { type CliIo, invalidUtf8, jsonLines, readInput, write } from '../io.js'

export const SHARE_USAGE =
  'usage: noa replicate share <workspace…> --nats URL [--root DIR] [--prefix P] [--stream NAME] [--follow | --append [--if-last-seq N]] [--json]'

export function shareSpec<C extends OptionSpec>(common: C): SubcommandSpec {
  return {
    summary: 'catch up, follow, or append to workspaces shared by several hosts, ordered by the stream',
    usage: SHARE_USAGE,
    options: {
      ...common,
      follow: { type: 'boolean', description: "keep applying other hosts' entries until SIGINT or SIGTERM" },
      append: {
        type: 'boolean',
        description: "append the JSONL entries on stdin to the (one) workspace, in the stream's order",
      },
      'if-last-seq': {
        type: 'string',
        value: 'N',
        description: "with --append: only if the workspace's last seq, in the stream's order, is N",
      },
    },
    positionals: [1, 64],
    details:
      'A shared workspace is written from several hosts: each append is published to the stream\n' +
      "expecting the subject's last message, and a host that was behind catches up and goes after\n" +
      "what it missed. Every host's log holds the stream's order, byte for byte. The stream must be\n" +
      'R3 (noa replicate init --replicas 3 on a cluster). Without --follow or --append, the local\n' +
      'logs are caught up and the command exits. --append prints {"seq":N,"ts":T} per entry.',
    examples: [
      'noa replicate share team --nats nats://n1:4222,nats://n2:4222 --follow',
      `echo '{"op":"delete","path":"old.ts"}' | noa replicate share team --append --nats nats://n1:4222`,
    ],
    exitCodes: {
      1: 'the stream is missing, unusable or not R3, a name cannot be a subject, the local log has entries the stream has not (NOA_REPLICA_DIVERGED), --if-last-seq N no longer holds, or other hosts kept appending first',
    },
  }
}

export async function share(args: string[], io: CliIo, spec: SubcommandSpec): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const v = values as {
    root?: string
    json?: boolean
    nats?: string
    prefix?: string
    stream?: string
    follow?: boolean
    append?: boolean
    'if-last-seq'?: string
  }
  const nats = v.nats ?? (io.env.NOA_NATS_URL || undefined)
  if (nats === undefined) throw new UsageError('--nats URL is required (or set NOA_NATS_URL)', SHARE_USAGE)
  let prefix: string
  try {
    prefix = checkPrefix(v.prefix ?? DEFAULT_PREFIX)
  } catch (err) {
    throw new UsageError(`--prefix: ${(err as Error).message}`, SHARE_USAGE)
  }
  if (v.follow && v.append) throw new UsageError('--follow and --append do not go together', SHARE_USAGE)
  if (v.append && positionals.length !== 1)
    throw new UsageError('--append takes exactly one workspace', SHARE_USAGE)
  const ifLastSeq = intOption(v['if-last-seq'], 'if-last-seq', SHARE_USAGE, 0)
  if (ifLastSeq !== undefined && !v.append)
    throw new UsageError('--if-last-seq goes with --append', SHARE_USAGE)
  const entries = v.append ? await readEntries(io) : []
  const log = await AgentLog.open({ root: rootOf(v), workers: 0 })
  try {
    const shared = await SharedWorkspaces.open({
      log,
      nats,
      prefix,
      stream: v.stream,
      workspaces: positionals,
      follow: v.follow ?? false,
      onEvent: (e) => {
        if (e.type === 'retry')
          io.stderr.write(`noa replicate share: ${e.what} failed (${e.error}); retrying\n`)
        else if (e.type === 'warning') io.stderr.write(`noa replicate share: ${e.message}\n`)
      },
    })
    try {
      if (v.append) {
        const acks = await shared.appendMany(
          positionals[0] as string,
          entries,
          ifLastSeq === undefined ? undefined : { ifLastSeq },
        )
        await write(io.stdout, acks.map((a) => `{"seq":${a.seq},"ts":${a.ts}}\n`).join(''))
        return 0
      }
      if (v.follow) {
        io.stderr.write(
          `noa replicate share: following ${positionals.join(', ')} on stream ${shared.stream}\n`,
        )
        await new Promise<void>((resolve) => {
          process.once('SIGINT', resolve)
          process.once('SIGTERM', resolve)
        })
      }
      const report = positionals.map((ws) => ({ workspace: ws, lastSeq: shared.lastSeq(ws) }))
      if (v.json) await write(io.stdout, `${JSON.stringify({ stream: shared.stream, workspaces: report })}\n`)
      else await write(io.stdout, report.map((r) => `${r.workspace}: seq ${r.lastSeq}\n`).join(''))
      return 0
    } finally {
      await shared.close()
    }
  } finally {
    await log.close()
  }
}

/** The JSONL entries on stdin, each checked before anything is sent. */
async function readEntries(io: CliIo): Promise<EntryInput[]> {
  const bytes = await readInput(io)
  const refuse = (line: number, reason: string) =>
    Errors.BAD_ENTRY(`stdin:${line}: ${reason}; nothing was written`, { line })
  const bad = invalidUtf8(bytes)
  if (bad) throw refuse(bad.line, `invalid UTF-8 at byte offset ${bad.offset} of stdin`)
  const entries: EntryInput[] = []
  for (const { line, value } of jsonLines(bytes.toString('utf8'), refuse)) {
    try {
      encodeBody(value)
    } catch (err) {
      throw refuse(line, (err as Error).message)
    }
    entries.push(value as EntryInput)
  }
  return entries
}
