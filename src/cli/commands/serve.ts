// Loaded for its effect: the daemon's AgentLog takes the option replicate (--replicate-nats).
import '../../replicate/acks.js'
import { Daemon } from '../../serve/daemon.js'
import { DEFAULT_LIMITS, type Limits } from '../../serve/protocol.js'
import { DEFAULT_UI_PORT, UiServer } from '../../ui/server.js'
import { command, intOption, JSON_OPTION, parseCommand, ROOT_OPTION, rootOf, UsageError } from '../args.js'
import { type CliIo, json, write } from '../io.js'

const LIMIT_FLAGS = {
  'max-entry-bytes': ['maxEntryBytes', 'largest entry (or appendToFile data, or replicated line), in bytes'],
  'max-line-bytes': ['maxLineBytes', 'longest request line, in bytes'],
  'max-connections': ['maxConnections', 'connections at once'],
  'max-in-flight': ['maxInFlight', 'requests in flight per connection before it is read no further'],
  'max-streams': ['maxStreams', 'reads and watches open per connection'],
  'max-pending-bytes': ['maxPendingBytes', 'request bytes in flight, all connections together'],
  'max-buffered-bytes': [
    'maxBufferedBytes',
    'what the daemon holds for its clients (unread answers, unfinished requests, stream readers); past it: NOA_BUSY',
  ],
  'slow-consumer-ms': [
    'slowConsumerMs',
    'a client that takes none of its answers for this long is disconnected (NOA_SLOW_CONSUMER)',
  ],
  'hello-timeout-ms': [
    'helloTimeoutMs',
    'a new connection that sends no hello (over TCP: its token) for this long is closed',
  ],
} as const satisfies Record<string, readonly [keyof Limits, string]>

function limitOption(flag: keyof typeof LIMIT_FLAGS) {
  const [key, description] = LIMIT_FLAGS[flag]
  return { type: 'string', value: 'N', description, defaultText: String(DEFAULT_LIMITS[key]) } as const
}

export const spec = command({
  usage:
    'usage: noa serve [--root DIR] [--listen [HOST:]PORT --token-file FILE] [--workers N] [--ui [--ui-port N]] [--replicate-nats URL [--durability replicated|local] [--prefix P] [--stream NAME]] [--max-… N] [--json]',
  options: {
    ...ROOT_OPTION,
    ...JSON_OPTION,
    listen: {
      type: 'string',
      value: '[HOST:]PORT',
      description: 'also listen on TCP (HOST defaults to 127.0.0.1); needs --token-file',
    },
    'token-file': {
      type: 'string',
      value: 'FILE',
      description: 'the secret TCP clients send in hello (first line, ≥ 16 characters, mode 0600)',
      required: 'with --listen',
      complete: 'file',
    },
    workers: {
      type: 'string',
      value: 'N',
      description:
        "owner worker threads, a dead one respawned (0: the owner on the daemon's thread, rounds on the addon's threads; fastest, but a fault in it ends the daemon)",
      defaultText: '0',
    },
    ui: {
      type: 'boolean',
      description:
        "also serve noa ui's read-only web view on 127.0.0.1 (its URL, with the token, is printed)",
    },
    'ui-port': {
      type: 'string',
      value: 'N',
      description: "the web view's port (0: any free one)",
      defaultText: String(DEFAULT_UI_PORT),
    },
    'replicate-nats': {
      type: 'string',
      value: 'URL',
      description:
        'publish every append to the JetStream stream of these servers (comma-separated): replicated acks',
    },
    durability: {
      type: 'string',
      value: 'LEVEL',
      description:
        "with --replicate-nats: 'replicated' answers an append once the stream acknowledged it, 'local' once it is on this disk",
      defaultText: 'replicated',
    },
    prefix: {
      type: 'string',
      value: 'P',
      description: 'with --replicate-nats: subject prefix (workspace ws goes to <prefix>.<ws>)',
      defaultText: 'noa',
    },
    stream: {
      type: 'string',
      value: 'NAME',
      description: 'with --replicate-nats: the stream (default: the one capturing <prefix>.>)',
    },
    'max-entry-bytes': limitOption('max-entry-bytes'),
    'max-line-bytes': limitOption('max-line-bytes'),
    'max-connections': limitOption('max-connections'),
    'max-in-flight': limitOption('max-in-flight'),
    'max-streams': limitOption('max-streams'),
    'max-pending-bytes': limitOption('max-pending-bytes'),
    'max-buffered-bytes': limitOption('max-buffered-bytes'),
    'slow-consumer-ms': limitOption('slow-consumer-ms'),
    'hello-timeout-ms': limitOption('hello-timeout-ms'),
  },
  positionals: [0, 0],
  details:
    'Owns the root for every process on this machine: it listens on <root>/noa.sock (mode 0600),\n' +
    'and AgentLog.open and every noa command on the root then talk to it instead of opening the\n' +
    'logs themselves. One daemon per root. Prints one line once it listens (--json: an object\n' +
    'with root, socket, tcp and pid). SIGTERM or SIGINT: refuses new requests, lets every append\n' +
    'already taken commit and be answered, then exits 0; a second one ends it at once. Its memory\n' +
    'is bounded whatever clients do: a stream its client does not read holds no buffer, what it\n' +
    'does hold for clients stays within --max-buffered-bytes, and a client that reads none of its\n' +
    'answers is disconnected. With --replicate-nats every append is also published to the\n' +
    'JetStream stream (noa replicate init makes it), and answered once the stream acknowledged it\n' +
    '(--durability local: once on this disk, published right after); see docs/replication.md.',
  examples: [
    'noa serve --root ./.noa &',
    'noa serve --root ./.noa --replicate-nats nats://n1:4222,nats://n2:4222,nats://n3:4222 &',
    'noa serve --root ./.noa --listen 127.0.0.1:7411 --token-file ~/.config/noa/token',
  ],
  exitCodes: {
    0: 'stopped by SIGTERM or SIGINT after draining',
    1: 'could not start (root already served, bad token file, address in use, …)',
  },
})

export async function run(args: string[], io: CliIo): Promise<number> {
  const { values } = parseCommand(args, spec)
  const limits: Partial<Limits> = {}
  for (const [flag, [key]] of Object.entries(LIMIT_FLAGS)) {
    const n = intOption(values[flag as keyof typeof LIMIT_FLAGS], flag, spec.usage, 1)
    if (n !== undefined) limits[key] = n
  }
  const workers = intOption(values.workers, 'workers', spec.usage, 0)
  const uiPort = intOption(values['ui-port'], 'ui-port', spec.usage, 0)
  if (uiPort !== undefined && !values.ui) throw new UsageError('--ui-port goes with --ui', spec.usage)
  const nats = values['replicate-nats']
  if (nats === undefined) {
    for (const flag of ['durability', 'prefix', 'stream'] as const) {
      if (values[flag] !== undefined) throw new UsageError(`--${flag} goes with --replicate-nats`, spec.usage)
    }
  }
  const durability = values.durability ?? 'replicated'
  if (durability !== 'replicated' && durability !== 'local') {
    throw new UsageError(
      `--durability must be replicated or local, got ${JSON.stringify(durability)}`,
      spec.usage,
    )
  }
  const replicate =
    nats === undefined
      ? undefined
      : {
          nats,
          durability: durability as 'replicated' | 'local',
          ...(values.prefix === undefined ? {} : { prefix: values.prefix }),
          ...(values.stream === undefined ? {} : { stream: values.stream }),
        }
  const daemon = await Daemon.start({
    root: rootOf(values),
    ...(values.listen === undefined ? {} : { listen: values.listen }),
    ...(values['token-file'] === undefined ? {} : { tokenFile: values['token-file'] }),
    limits,
    log: { ...(workers === undefined ? {} : { workers }), ...(replicate ? { replicate } : {}) },
  })
  let ui: UiServer | null = null
  if (values.ui) {
    try {
      // Beside the daemon, the live tail is its AgentLog's watch: it wakes at each commit.
      ui = await UiServer.start({
        root: daemon.root,
        ...(uiPort === undefined ? {} : { port: uiPort }),
        watch: (ws, o) => daemon.log.watch(ws, o),
        poisoned: async () => (await daemon.log.status()).flatMap((s) => s.poisoned),
      })
    } catch (err) {
      await daemon.drain()
      throw err
    }
  }
  // The first SIGTERM or SIGINT drains. Both handlers go with it, so a second signal of either
  // kind has its default action and ends the process at once: what was acknowledged is durable,
  // what was in flight is lost to its clients as with a SIGKILL.
  const stop = () => {
    process.off('SIGTERM', stop)
    process.off('SIGINT', stop)
    void ui?.close()
    void daemon.drain()
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
  const tcp = daemon.tcp ? `${daemon.tcp.host}:${daemon.tcp.port}` : null
  await write(
    io.stdout,
    values.json
      ? json({
          root: daemon.root,
          socket: daemon.socketPath,
          tcp,
          pid: process.pid,
          ...(ui ? { ui: ui.url } : {}),
        })
      : `noa serve: serving ${daemon.root} on ${daemon.socketPath}${tcp ? ` and tcp ${tcp}` : ''} (pid ${process.pid})\n${ui ? `noa serve: web view at ${ui.url}\n` : ''}`,
  )
  await daemon.done
  await ui?.close()
  process.off('SIGTERM', stop)
  process.off('SIGINT', stop)
  return 0
}
