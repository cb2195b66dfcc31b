/**
 * The `noa` command. `main(argv)` is importable and returns the exit code; only bin.ts runs it.
 * Exit codes: 0 done, 1 refused or failed (the message says what and why), 2 usage error.
 */
import { isNoaError } from '../engine/errors.js'
import { UsageError } from './args.js'
import { type CliIo, processIo } from './io.js'

export type CommandModule = { run(args: string[], io: CliIo): Promise<number> }

/** Each command lives in its own module, loaded only when used. */
const COMMANDS: Record<string, { summary: string; load: () => Promise<CommandModule> }> = {
  append: {
    summary: 'append JSONL entries from stdin to a workspace, durably',
    load: () => import('./commands/append.js'),
  },
  context: {
    summary: 'Noa context compression: state.json, tiered archives, compress, view, rebuild, audit',
    load: () => import('./commands/context.js'),
  },
  log: { summary: 'print a workspace log as stored', load: () => import('./commands/log.js') },
  memory: {
    summary: 'save, list, recall and inject Norma-compatible memory notes',
    load: () => import('./commands/memory.js'),
  },
  replicate: {
    summary: 'push, pull or inspect workspace logs replicated through NATS JetStream',
    load: () => import('./commands/replicate.js'),
  },
  recover: { summary: 'cut torn tails and check workspaces', load: () => import('./commands/recover.js') },
  transcript: {
    summary: 'show, resume, append to and account for session transcripts (Norma JSONL)',
    load: () => import('./commands/transcript.js'),
  },
  verify: { summary: 'full scan of workspace logs', load: () => import('./commands/verify.js') },
  workspaces: {
    summary: 'list workspaces with entry counts and last seq',
    load: () => import('./commands/workspaces.js'),
  },
  blob: {
    summary: 'put a file into the object store, or get a blob out',
    load: () => import('./commands/blob.js'),
  },
  snapshot: {
    summary: "snapshot a workspace's files (replays the entries since its last snapshot); prune old ones",
    load: () => import('./commands/snapshot.js'),
  },
  snapshots: {
    summary: "a workspace's snapshots, newest first",
    load: () => import('./commands/snapshots.js'),
  },
  tree: {
    summary: "a snapshot's files: path and blob, sorted by path",
    load: () => import('./commands/tree.js'),
  },
  fork: { summary: 'start a new workspace from a snapshot', load: () => import('./commands/fork.js') },
  merge: {
    summary: 'merge source workspaces into a target as one snapshot',
    load: () => import('./commands/merge.js'),
  },
  checkout: {
    summary: "write a snapshot's files (or ws, ws@seq) into a folder",
    load: () => import('./commands/checkout.js'),
  },
  diff: {
    summary: 'paths added, removed and changed between two snapshots (or ws, ws@seq)',
    load: () => import('./commands/diff.js'),
  },
  history: {
    summary: "a workspace's snapshot, fork and merge graph, oldest first",
    load: () => import('./commands/history.js'),
  },
  gc: {
    summary: 'remove objects no log reaches (a dry run without --yes)',
    load: () => import('./commands/gc.js'),
  },
}

export function usage(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((c) => c.length))
  const lines = Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`)
  return `usage: noa <command> [options]\n\ncommands:\n${lines.join('\n')}\n\nCommands on workspaces take --root DIR (default $NOA_ROOT or ./.noa); data commands take --json.\n`
}

export async function main(argv: string[], io: CliIo = processIo()): Promise<number> {
  const [name, ...rest] = argv
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    io[name === undefined ? 'stderr' : 'stdout'].write(usage())
    return name === undefined ? 2 : 0
  }
  const command = COMMANDS[name]
  if (!command) {
    io.stderr.write(`noa: unknown command ${JSON.stringify(name)}\n${usage()}`)
    return 2
  }
  try {
    const mod = await command.load()
    return await mod.run(rest, io)
  } catch (err) {
    if (err instanceof UsageError) {
      io.stderr.write(`noa ${name}: ${err.message}\n${err.usage}\n`)
      return 2
    }
    if (
      isNoaError(err) ||
      (err instanceof Error && typeof (err as NodeJS.ErrnoException).code === 'string')
    ) {
      io.stderr.write(`noa ${name}: ${err.message}\n`)
      return 1
    }
    throw err
  }
}
