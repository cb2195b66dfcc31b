import { getPriority, setPriority } from 'node:os'
import type { ReplicationEvent, ReplicationProgress } from '../../replicate/events.js'
import { promote, resync } from '../../replicate/failover.js'
import { replicatePull } from '../../replicate/mirror.js'
import { replicatePush } from '../../replicate/publisher.js'
import { replicationStatus } from '../../replicate/status.js'
import { initStream } from '../../replicate/stream.js'
import { checkPrefix, DEFAULT_PREFIX } from '../../replicate/subjects.js'
import {
  existingRootOf,
  type GroupSpec,
  intOption,
  JSON_OPTION,
  type OptionSpec,
  parseCommand,
  ROOT_OPTION,
  rootOf,
  runSubcommand,
  subcommand,
  UsageError,
} from '../args.js'
import { type CliIo, json, write } from '../io.js'
import { clearProgress, count, meter, percent, rate } from '../progress.js'
import { SHARE_USAGE, share, shareSpec } from './replicate-share.js'

const USAGE = `usage: noa replicate push   --nats URL [--root DIR] [--prefix P] [--stream NAME] [--follow [--nice N]] [--json]
       noa replicate pull   --nats URL [--root DIR] [--prefix P] [--stream NAME] [--follow [--nice N]] [--json]
       noa replicate status [--nats URL] [--root DIR] [--prefix P] [--stream NAME] [--json]
       noa replicate init   --nats URL [--prefix P] [--stream NAME] [--replicas N] [--json]
       noa replicate promote <ws…> --nats URL [--root DIR] [--prefix P] [--stream NAME] [--writer ID] [--json]
       noa replicate resync  <ws…> --nats URL [--root DIR] [--prefix P] [--stream NAME] [--json]
       ${SHARE_USAGE.slice('usage: '.length)}
--nats defaults to $NOA_NATS_URL; --prefix to noa; the stream is the one capturing <prefix>.>;
--nice: CPU priority of a push or pull (default 10 with --follow, so local appends come first)`

const COMMON = {
  ...ROOT_OPTION,
  ...JSON_OPTION,
  nats: {
    type: 'string',
    value: 'URL',
    description: 'the NATS server (nats://host:port, or several separated by commas)',
    defaultText: '$NOA_NATS_URL',
  },
  prefix: {
    type: 'string',
    value: 'P',
    description: 'the subject prefix: entries go to <prefix>.…',
    defaultText: DEFAULT_PREFIX,
  },
  stream: {
    type: 'string',
    value: 'NAME',
    description: 'the JetStream stream',
    defaultText: 'the one capturing <prefix>.>',
  },
} as const satisfies OptionSpec

/**
 * A follower competes for the CPU with the agents whose appends it replicates; at nice 10 the
 * scheduler gives it about a tenth of a busy machine, so local durability comes first and the
 * lag (visible in `status`) absorbs the difference. Threads started later (the libuv pool, the
 * mirror's owner workers) inherit the priority.
 */
const DEFAULT_NICE = 10

const FOLLOW = {
  follow: { type: 'boolean', description: 'keep going until SIGINT or SIGTERM (the checkpoint is saved)' },
  nice: {
    type: 'string',
    value: 'N',
    description: 'lower the CPU priority by N, so local appends come first',
    defaultText: `${DEFAULT_NICE} with --follow, else 0`,
  },
} as const satisfies OptionSpec

const SPECS = {
  push: subcommand({
    summary: 'publish the local workspace logs and their objects to the stream, from the last checkpoint',
    usage: USAGE,
    options: { ...COMMON, ...FOLLOW },
    positionals: [0, 0],
    examples: ['noa replicate push --nats nats://127.0.0.1:4222 --follow'],
    exitCodes: {
      1: 'the server cannot be reached, the stream refuses the entries, or a log could not be published (the healthy ones were; each bad file is named)',
    },
  }),
  pull: subcommand({
    summary: 'mirror the stream into local workspace logs and objects',
    usage: USAGE,
    options: { ...COMMON, ...FOLLOW },
    positionals: [0, 0],
    examples: ['noa replicate pull --nats nats://127.0.0.1:4222 --root ./mirror'],
    exitCodes: { 1: 'the server cannot be reached, or a mirrored log disagrees with the stream' },
  }),
  status: subcommand({
    summary: "each workspace's local and replicated seq and lag (from the server with --nats)",
    usage: USAGE,
    options: COMMON,
    positionals: [0, 0],
    examples: ['noa replicate status --nats nats://127.0.0.1:4222'],
    exitCodes: {
      1: 'a log could not be read (each is named; the others are shown), or a workspace diverged (NOA_REPLICA_DIVERGED: another writer took it over)',
    },
  }),
  init: subcommand({
    summary: 'create the stream, or fix its settings, for replicating <prefix>.>',
    usage: USAGE,
    options: {
      ...COMMON,
      replicas: {
        type: 'string',
        value: 'N',
        description: 'copies of the stream in a cluster (more than 1 is refused on a single server)',
        defaultText: '1 for a new stream; an existing one keeps its own',
      },
    },
    positionals: [0, 0],
    examples: ['noa replicate init --nats nats://127.0.0.1:4222 --replicas 3'],
    exitCodes: {
      1: 'the server cannot be reached, the stream cannot be fixed in place, or --replicas N > 1 on a server that is not in a cluster',
    },
  }),
  promote: subcommand({
    summary:
      'take over writing workspaces on this mirror: check it has all the stream has, then fence the old writer',
    usage: USAGE,
    options: {
      ...COMMON,
      writer: {
        type: 'string',
        value: 'ID',
        description: 'the writer id the fence names (letters, digits, _ . -)',
        defaultText: 'this host name',
      },
    },
    positionals: [1, 100_000],
    examples: ['noa replicate promote main feat-7 --nats nats://127.0.0.1:4222 --root /srv/mirror'],
    exitCodes: {
      1: 'the mirror is behind on a workspace (run pull first), its log differs from the stream, or the old writer published meanwhile: nothing was fenced for it',
    },
  }),
  resync: subcommand({
    summary:
      "bring a fenced writer back to the stream's history: its divergent entries are kept aside, its log made the stream's",
    usage: USAGE,
    options: COMMON,
    positionals: [1, 100_000],
    examples: ['noa replicate resync main --nats nats://127.0.0.1:4222 --root /srv/noa'],
    exitCodes: {
      1: 'a workspace did not diverge (no other writer fenced it, or its log holds nothing after the fence), or another process writes it: nothing was changed',
    },
  }),
}

type Sub = keyof typeof SPECS

const SHARE = shareSpec(COMMON)

export const spec: GroupSpec = {
  usage: USAGE,
  subcommands: {
    push: { spec: SPECS.push, run: (args, io) => replicate('push', args, io) },
    pull: { spec: SPECS.pull, run: (args, io) => replicate('pull', args, io) },
    status: { spec: SPECS.status, run: (args, io) => replicate('status', args, io) },
    init: { spec: SPECS.init, run: (args, io) => replicate('init', args, io) },
    promote: { spec: SPECS.promote, run: (args, io) => replicate('promote', args, io) },
    resync: { spec: SPECS.resync, run: (args, io) => replicate('resync', args, io) },
    share: { spec: SHARE, run: (args, io) => share(args, io, SHARE) },
  },
}

export function run(args: string[], io: CliIo): Promise<number> {
  return runSubcommand(args, io, spec)
}

async function replicate(name: Sub, rest: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(rest, SPECS[name])
  const v = values as {
    writer?: string
    root?: string
    json?: boolean
    nats?: string
    prefix?: string
    stream?: string
    follow?: boolean
    replicas?: string
    nice?: string
  }
  const nats = v.nats ?? (io.env.NOA_NATS_URL || undefined)
  let prefix: string
  try {
    prefix = checkPrefix(v.prefix ?? DEFAULT_PREFIX)
  } catch (err) {
    throw new UsageError(`--prefix: ${(err as Error).message}`, USAGE)
  }
  if (nats === undefined && name !== 'status') {
    throw new UsageError('--nats URL is required (or set NOA_NATS_URL)', USAGE)
  }
  const shown = meter(io)
  const started = performance.now()
  const onProgress = (p: ReplicationProgress) => shown.update(() => describeProgress(name, p, started))
  const onEvent = (e: ReplicationEvent) => {
    clearProgress(io)
    io.stderr.write(`noa replicate ${name}: ${describeEvent(e)}\n`)
  }
  switch (name) {
    case 'push':
    case 'pull':
      lowerPriority(intOption(v.nice, 'nice', USAGE, 0) ?? (v.follow ? DEFAULT_NICE : 0), io)
      return follow(v.follow ?? false, async (signal) => {
        const options = {
          nats: nats as string,
          // A push only reads the root: a mistyped one is refused before the server is asked.
          root: name === 'push' ? existingRootOf(v) : rootOf(v),
          prefix,
          stream: v.stream,
          follow: v.follow ?? false,
          signal,
          onEvent,
          onProgress,
        }
        if (name === 'push') {
          const r = await replicatePush(options).finally(() => shown.done())
          if (v.json) await write(io.stdout, json(r))
          else {
            await write(
              io.stdout,
              `pushed ${count(r.entries, 'entry', 'entries')} from ${count(r.workspaces.length, 'workspace')} and ${count(r.objects, 'object')} to stream ${r.stream} (${prefix}.>) in ${(r.durationMs / 1000).toFixed(1)} s\n${r.workspaces
                .map((w) => `  ${w.workspace}: seq ${w.from}..${w.to}\n`)
                .join('')}${r.skipped.map((s) => `  ${s.workspace}: skipped, ${s.reason}\n`).join('')}`,
            )
          }
          // The healthy workspaces were pushed whole; what could not be is listed last, exit 1.
          // A fenced workspace says so by its code (another writer took it over: resync, not repair).
          const failed = r.failed.map((f) =>
            f.code === 'NOA_REPLICA_DIVERGED' ? { ...f, message: `${f.code}: ${f.message}` } : f,
          )
          return reportFailures(io, `replicate push`, failed, 'not published')
        } else {
          const r = await replicatePull(options).finally(() => shown.done())
          if (v.json) await write(io.stdout, json(r))
          else {
            await write(
              io.stdout,
              `pulled ${count(r.entries, 'entry', 'entries')} into ${count(r.workspaces.length, 'workspace')} and ${count(r.objects, 'object')} from stream ${r.stream} (${prefix}.>) up to stream seq ${r.streamSeq} in ${(r.durationMs / 1000).toFixed(1)} s${r.skipped > 0 ? `; ${count(r.skipped, 'entry was', 'entries were')} here already` : ''}\n${r.workspaces
                .map((w) => `  ${w.workspace}: seq ${w.from}..${w.to}\n`)
                .join('')}`,
            )
          }
        }
        return 0
      })
    case 'status': {
      const r = await replicationStatus({ root: rootOf(v), prefix, stream: v.stream, nats })
      if (v.json) {
        await write(io.stdout, json(r))
        const failed = await reportFailures(io, 'replicate status', r.failed, 'its position is unknown')
        return r.workspaces.some((w) => w.diverged) ? 1 : failed
      }
      const rows = r.workspaces.map((w) => [
        w.workspace,
        String(w.local.seq),
        w.stream === null ? '?' : String(w.stream.seq),
        w.replicable ? w.direction : 'not replicable',
        w.lagEntries === null ? '?' : String(w.lagEntries),
        w.lagSeconds === null ? '?' : w.lagSeconds.toFixed(3),
      ])
      const head = ['workspace', 'local seq', 'stream seq', 'direction', 'lag entries', 'lag seconds']
      const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] as string).length)))
      const fmt = (cells: string[]) =>
        `${cells.map((c, i) => (i === 0 ? c.padEnd(widths[i] as number) : c.padStart(widths[i] as number))).join('  ')}\n`
      const source =
        r.source === 'server'
          ? `stream ${r.stream} (${prefix}.>), read from the server`
          : `the push checkpoint${r.push ? ` saved ${r.push.savedAt}` : ' (none: nothing pushed yet)'}; give --nats for the server's view`
      await write(io.stdout, `${source}\n${fmt(head)}${rows.map(fmt).join('')}`)
      const diverged = r.workspaces.filter((w) => w.diverged)
      if (diverged.length > 0) {
        await write(
          io.stderr,
          diverged
            .map((w) => `noa replicate status: NOA_REPLICA_DIVERGED: ${w.diverged?.message}\n`)
            .join(''),
        )
      }
      const failed = await reportFailures(io, 'replicate status', r.failed, 'its position is unknown')
      return diverged.length > 0 ? 1 : failed
    }
    case 'promote': {
      const r = await promote({
        nats: nats as string,
        root: existingRootOf(v),
        prefix,
        stream: v.stream,
        workspaces: positionals,
        writer: v.writer,
      })
      if (v.json) await write(io.stdout, json(r))
      else {
        await write(
          io.stdout,
          r.workspaces
            .map((w) =>
              w.already
                ? `${w.workspace}: written here already (writer ${w.writer}, fence at stream seq ${w.fenceStreamSeq})\n`
                : `${w.workspace}: promoted, writer ${w.writer}; fence at stream seq ${w.fenceStreamSeq} after seq ${w.after}\n`,
            )
            .join(''),
        )
      }
      return 0
    }
    case 'resync': {
      const r = await resync({
        nats: nats as string,
        root: existingRootOf(v),
        prefix,
        stream: v.stream,
        workspaces: positionals,
      })
      if (v.json) await write(io.stdout, json(r))
      else {
        await write(
          io.stdout,
          r.workspaces
            .map(
              (w) =>
                `${w.workspace}: ${count(w.kept.seqs.length, 'entry', 'entries')} the stream did not have kept in ${w.kept.file}; log cut after seq ${w.common}, ${count(w.applied, 'entry', 'entries')} of the stream applied (now at seq ${w.last})\n`,
            )
            .join(''),
        )
      }
      return 0
    }
    case 'init': {
      const replicas = intOption(v.replicas, 'replicas', USAGE, 1)
      const r = await initStream({ nats: nats as string, prefix, stream: v.stream, replicas })
      if (v.json) await write(io.stdout, json(r))
      else if (r.created) await write(io.stdout, `created stream ${r.stream} for ${prefix}.>\n`)
      else if (r.changed.length > 0) {
        await write(io.stdout, `updated stream ${r.stream}: ${r.changed.join(', ')}\n`)
      } else await write(io.stdout, `stream ${r.stream} is ready for ${prefix}.>\n`)
      return 0
    }
  }
}

/** Lists on stderr the files a whole-root command could not handle; 1 when there are any. */
async function reportFailures(
  io: CliIo,
  what: string,
  failed: ReadonlyArray<{ file: string; message: string }>,
  consequence: string,
): Promise<number> {
  if (failed.length === 0) return 0
  await write(
    io.stderr,
    `noa ${what}: ${failed.length} file${failed.length === 1 ? '' : 's'} could not be used (${consequence}):\n${failed
      .map((f) => `  ${f.file}: ${f.message}\n`)
      .join('')}`,
  )
  return 1
}

function lowerPriority(nice: number, io: CliIo): void {
  if (nice === 0) return
  try {
    setPriority(Math.min(19, getPriority() + nice))
  } catch (err) {
    io.stderr.write(
      `noa replicate: cannot lower the CPU priority (${(err as Error).message}); running as is\n`,
    )
  }
}

/** Runs `task`; with `--follow`, until SIGINT or SIGTERM, which stop it cleanly (checkpoint saved). */
async function follow(on: boolean, task: (signal: AbortSignal) => Promise<number>): Promise<number> {
  const stop = new AbortController()
  const onSignal = () => stop.abort()
  if (on) {
    process.once('SIGINT', onSignal)
    process.once('SIGTERM', onSignal)
  }
  try {
    return await task(stop.signal)
  } finally {
    process.removeListener('SIGINT', onSignal)
    process.removeListener('SIGTERM', onSignal)
  }
}

function describeProgress(name: Sub, p: ReplicationProgress, started: number): string {
  const verb = name === 'push' ? 'pushed' : 'pulled'
  const upTo =
    p.lastStreamSeq !== undefined && p.streamSeq !== undefined
      ? `, stream seq ${p.streamSeq}/${p.lastStreamSeq} ${percent(p.streamSeq, p.lastStreamSeq)}`
      : ''
  return `${verb} ${count(p.entries, 'entry', 'entries')} (${rate(p.entries, started)}/s) and ${count(p.objects, 'object')}${upTo}`
}

function describeEvent(e: ReplicationEvent): string {
  switch (e.type) {
    case 'retry':
      return `${e.what} failed (${e.error}); retrying in ${e.delayMs} ms`
    case 'connection':
      return `${e.status}${e.detail ? ` ${e.detail}` : ''}`
    case 'skipped':
      return `workspace ${e.workspace} skipped: ${e.reason}`
    case 'warning':
    case 'following':
      return e.message
  }
}
