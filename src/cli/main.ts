/**
 * The `noa` command. `main(argv)` is importable and returns the exit code; only bin.ts runs it.
 * Exit codes: 0 done, 1 refused or failed (the message says what and why), 2 usage error.
 * `--help`, `-h` and `noa help …` are answered here from each command's exported spec, before
 * the command runs, so every command and subcommand has them. A command whose stdout (or
 * stderr) reader goes away ends quietly with 0, as git does.
 */
import { existsSync, readFileSync } from 'node:fs'
import { basename, dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { isNoaError } from '../engine/errors.js'
// Every command's AgentLog.open talks to the daemon serving its root, when one does.
import '../serve/forward.js'
import {
  type AnySpec,
  isGroup,
  parseCommand,
  type SubcommandSpec,
  subcommand,
  UsageError,
  unknownName,
  wantsHelp,
} from './args.js'
import { type CompletionEntry, completionScript } from './completion.js'
import { commandHelp, groupHelp, topHelp } from './help.js'
import { type CliIo, isClosedPipeError, processIo, watchPipes, write } from './io.js'
import { clearProgress } from './progress.js'
import { didYouMean } from './suggest.js'

export type CommandModule = { spec: AnySpec; run(args: string[], io: CliIo): Promise<number> }

/** The groups `noa --help` lists its commands under, in this order. */
export type CommandGroup = 'log' | 'store' | 'agent files' | 'replication' | 'many processes'

export interface CommandEntry {
  group: CommandGroup
  summary: string
  load: () => Promise<CommandModule>
}

/**
 * Each command lives in its own module, loaded only when used, which exports `spec` (made with
 * `command()`, or a `GroupSpec` of `subcommand()`s) and `run`. Help, completion and "did you
 * mean" read the specs, so a row here and the module are all a new command needs. Listed in
 * help in this order.
 */
export const COMMANDS: Readonly<Record<string, CommandEntry>> = {
  append: {
    group: 'log',
    summary: 'append JSONL entries from stdin to a workspace, durably',
    load: () => import('./commands/append.js'),
  },
  log: { group: 'log', summary: 'print a workspace log as stored', load: () => import('./commands/log.js') },
  workspaces: {
    group: 'log',
    summary: 'list workspaces with entry counts and last seq',
    load: () => import('./commands/workspaces.js'),
  },
  verify: {
    group: 'log',
    summary: 'full scan of workspace logs',
    load: () => import('./commands/verify.js'),
  },
  recover: {
    group: 'log',
    summary: 'cut torn tails and check workspaces',
    load: () => import('./commands/recover.js'),
  },
  compact: {
    group: 'store',
    summary: "replace a workspace log's prefix by a base record naming the snapshot that covers it",
    load: () => import('./commands/compact.js'),
  },
  blob: {
    group: 'store',
    summary: 'put a file into the object store, or get a blob out',
    load: () => import('./commands/blob.js'),
  },
  snapshot: {
    group: 'store',
    summary: "snapshot a workspace's files (replays the entries since its last snapshot); prune old ones",
    load: () => import('./commands/snapshot.js'),
  },
  snapshots: {
    group: 'store',
    summary: "a workspace's snapshots, newest first",
    load: () => import('./commands/snapshots.js'),
  },
  tree: {
    group: 'store',
    summary: "a snapshot's files (or ws, ws@seq): path and blob, sorted by path",
    load: () => import('./commands/tree.js'),
  },
  fork: {
    group: 'store',
    summary: 'start a new workspace from a snapshot',
    load: () => import('./commands/fork.js'),
  },
  merge: {
    group: 'store',
    summary: 'merge source workspaces into a target as one snapshot',
    load: () => import('./commands/merge.js'),
  },
  checkout: {
    group: 'store',
    summary: "write a snapshot's files (or ws, ws@seq) into a folder",
    load: () => import('./commands/checkout.js'),
  },
  diff: {
    group: 'store',
    summary: 'paths added, removed and changed between two snapshots (or ws, ws@seq)',
    load: () => import('./commands/diff.js'),
  },
  history: {
    group: 'store',
    summary: "a workspace's snapshot, fork and merge graph, oldest first",
    load: () => import('./commands/history.js'),
  },
  gc: {
    group: 'store',
    summary: 'remove objects no log reaches (a dry run without --yes)',
    load: () => import('./commands/gc.js'),
  },
  prune: {
    group: 'store',
    summary: "drop every workspace's older snapshots by a retention policy (a dry run without --yes)",
    load: () => import('./commands/prune-root.js'),
  },
  du: {
    group: 'store',
    summary: 'bytes on disk per workspace and thread, and what gc, prune and compact would free',
    load: () => import('./commands/du.js'),
  },
  transcript: {
    group: 'agent files',
    summary: 'show, resume, append to and account for session transcripts (Norma JSONL)',
    load: () => import('./commands/transcript.js'),
  },
  memory: {
    group: 'agent files',
    summary: 'save, list, recall and inject Norma-compatible memory notes',
    load: () => import('./commands/memory.js'),
  },
  context: {
    group: 'agent files',
    summary: 'Noa context compression: state.json, tiered archives, compress, view, rebuild, audit',
    load: () => import('./commands/context.js'),
  },
  replicate: {
    group: 'replication',
    summary: 'push, pull or inspect workspace logs replicated through NATS JetStream',
    load: () => import('./commands/replicate.js'),
  },
  serve: {
    group: 'many processes',
    summary: 'own a root for every process on this machine (unix socket, optional TCP with a token)',
    load: () => import('./commands/serve.js'),
  },
  ui: {
    group: 'many processes',
    summary: 'a read-only web view of a root, live (token-protected, 127.0.0.1 by default)',
    load: () => import('./commands/ui.js'),
  },
}

/** The commands main answers itself (they need the command table). */
export const BUILTINS = {
  help: subcommand({
    summary: 'help on noa, a command or a subcommand (the same as adding --help)',
    usage: 'usage: noa help [command [subcommand]]',
    options: {},
    positionals: [0, 2],
    examples: ['noa help memory recall'],
  }),
  completion: subcommand({
    summary: 'print a bash or zsh completion script, generated from the command specs',
    usage: 'usage: noa completion bash|zsh',
    options: {},
    positionals: [1, 1],
    complete: [['bash', 'zsh']],
    details:
      'bash: add `source <(noa completion bash)` to ~/.bashrc.\n' +
      'zsh: add `source <(noa completion zsh)` to ~/.zshrc (after compinit), or save the script as _noa on $fpath.',
    examples: ['noa completion bash > ~/.local/share/bash-completion/completions/noa'],
  }),
} satisfies Record<string, SubcommandSpec>

export function usage(): string {
  return topHelp({
    ...COMMANDS,
    ...Object.fromEntries(
      Object.entries(BUILTINS).map(([name, spec]) => [
        name,
        { group: 'the noa command', summary: spec.summary },
      ]),
    ),
  })
}

/** The package's version, from the package.json above this module (in src/ or dist/src/). */
export function version(): string {
  let dir = dirname(fileURLToPath(import.meta.url))
  for (let i = 0; i < 4; i++, dir = dirname(dir)) {
    const file = join(dir, 'package.json')
    if (!existsSync(file)) continue
    const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: string; version?: string }
    if (pkg.name === 'noa' && typeof pkg.version === 'string') return pkg.version
  }
  return 'unknown'
}

const TOP_OPTIONS = ['--help', '-h', '--version']

export async function main(argv: string[], io: CliIo = processIo()): Promise<number> {
  const name = argv[0] ?? ''
  const pipes = watchPipes(io)
  try {
    const code = await dispatch(argv, io)
    // An unawaited write's error is emitted after the write returned: let it come.
    await new Promise((resolve) => setImmediate(resolve))
    const failed = pipes.failed()
    if (failed && !pipes.closed()) {
      io.stderr.write(`noa ${name}: cannot write the output: ${failed.message}\n`)
      return 1
    }
    return code
  } catch (err) {
    clearProgress(io)
    if (isClosedPipeError(err)) {
      // The write's callback fails before the stream emits its 'error': let that come first.
      await new Promise((resolve) => setImmediate(resolve))
      // The reader went away (`noa log w | head -1`): what it wanted, it has. git ends the same way.
      if (pipes.closed()) return 0
    }
    if (err instanceof UsageError) {
      io.stderr.write(`noa ${name}: ${err.message}\n${err.usage}\n`)
      return 2
    }
    if (
      isNoaError(err) ||
      (err instanceof Error && typeof (err as NodeJS.ErrnoException).code === 'string')
    ) {
      io.stderr.write(`noa ${name}: ${err.message}${lockHint(err, name)}\n`)
      return 1
    }
    throw err
  } finally {
    pipes.dispose()
  }
}

async function dispatch(argv: string[], io: CliIo): Promise<number> {
  const [name, ...rest] = argv
  if (name === undefined || name === '--help' || name === '-h') {
    await write(io[name === undefined ? 'stderr' : 'stdout'], usage())
    return name === undefined ? 2 : 0
  }
  if (name === '--version') {
    await write(io.stdout, `noa ${version()}\n`)
    return 0
  }
  if (name === 'help') return await help(rest, io)
  if (name === 'completion') return await completion(rest, io)
  const command = Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined
  if (!command) {
    const message = name.startsWith('-')
      ? `unknown option ${name}${suggestion(name, TOP_OPTIONS)}; valid options: ${TOP_OPTIONS.join(', ')}`
      : unknownName('command', name, [...Object.keys(COMMANDS), ...Object.keys(BUILTINS)])
    // One line of usage, not the whole help: the suggestion stays in sight.
    await write(io.stderr, `noa: ${message}\n${SHORT_USAGE}\n`)
    return 2
  }
  const mod = await command.load()
  const text = helpText(name, mod.spec, command.summary, rest)
  if (text !== undefined) {
    await write(io.stdout, text)
    return 0
  }
  return await mod.run(rest, io)
}

const SHORT_USAGE = "usage: noa <command> [options] ('noa --help' lists the commands)"

/**
 * A second writer without a daemon is told the two ways out: `noa serve`, through which many
 * processes share a root, and (for append) waiting for the lock.
 */
function lockHint(err: Error, name: string): string {
  if (!isNoaError(err) || err.code !== 'NOA_WORKSPACE_LOCKED') return ''
  const file = typeof err.details.file === 'string' ? err.details.file : ''
  const root = basename(dirname(file)) === 'agent-logs' ? dirname(dirname(file)) : 'DIR'
  const wait =
    name === 'append' && !err.message.includes('(--wait)')
      ? ', or pass --wait [DURATION] to wait for the lock'
      : ''
  return `. noa serve --root ${root} lets many processes share the root (they write through it)${wait}`
}

function suggestion(word: string, known: readonly string[]): string {
  const close = didYouMean(word, known)
  return close.length > 0 ? ` (did you mean ${close.join(' or ')}?)` : ''
}

/**
 * The help `args` ask for, or undefined when they ask for none: `--help`/`-h` anywhere before
 * `--`, or a group's `help [subcommand]`. An unknown subcommand is left to the command's own
 * refusal (with its "did you mean").
 */
function helpText(name: string, spec: AnySpec, summary: string, args: string[]): string | undefined {
  if (!isGroup(spec)) return wantsHelp(args) ? commandHelp(spec, summary) : undefined
  const [first, ...rest] = args
  if (first === undefined) return undefined
  if (first === '--help' || first === '-h' || first === 'help') {
    const sub = first === 'help' ? rest[0] : undefined
    if (sub === undefined || sub === '--help' || sub === '-h') return groupHelp(name, spec, summary)
    if (!Object.hasOwn(spec.subcommands, sub))
      throw new UsageError(unknownName('subcommand', sub, Object.keys(spec.subcommands)), spec.usage)
    const entry = spec.subcommands[sub]
    return entry ? commandHelp(entry.spec, entry.spec.summary) : undefined
  }
  const entry = Object.hasOwn(spec.subcommands, first) ? spec.subcommands[first] : undefined
  return entry && wantsHelp(rest) ? commandHelp(entry.spec, entry.spec.summary) : undefined
}

/** `noa help <command> [subcommand]` is `noa <command> [subcommand] --help`. */
async function help(args: string[], io: CliIo): Promise<number> {
  if (wantsHelp(args)) {
    await write(io.stdout, commandHelp(BUILTINS.help, BUILTINS.help.summary))
    return 0
  }
  const { positionals } = parseCommand(args, BUILTINS.help)
  if (positionals.length === 0) {
    await write(io.stdout, usage())
    return 0
  }
  const [target, sub] = positionals as [string, string | undefined]
  if (target === 'completion') return main(['completion', '--help'], io)
  if (target === 'help') return main(['help', '--help'], io)
  const args2 = sub === undefined ? [target, '--help'] : [target, 'help', sub]
  const command = Object.hasOwn(COMMANDS, target) ? COMMANDS[target] : undefined
  if (command && sub !== undefined && !isGroup((await command.load()).spec)) {
    throw new UsageError(`${target} has no subcommands`, BUILTINS.help.usage)
  }
  return main(args2, io)
}

/** Every command's spec, for completion (loads every command module). */
export async function allSpecs(): Promise<Record<string, CompletionEntry>> {
  const loaded = await Promise.all(
    Object.entries(COMMANDS).map(async ([name, c]) => [
      name,
      { summary: c.summary, spec: (await c.load()).spec },
    ]),
  )
  return Object.fromEntries(loaded)
}

async function completion(args: string[], io: CliIo): Promise<number> {
  if (wantsHelp(args)) {
    await write(io.stdout, commandHelp(BUILTINS.completion, BUILTINS.completion.summary))
    return 0
  }
  const { positionals } = parseCommand(args, BUILTINS.completion)
  const shell = positionals[0] as string
  if (shell !== 'bash' && shell !== 'zsh') {
    throw new UsageError(`unknown shell ${JSON.stringify(shell)} (bash or zsh)`, BUILTINS.completion.usage)
  }
  await write(io.stdout, completionScript(shell, await allSpecs()))
  return 0
}
