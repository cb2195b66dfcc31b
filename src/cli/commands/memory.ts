/**
 * `noa memory …`: Norma-compatible memory notes from the shell. The words of each subcommand
 * are used as they are by checks outside the test suite; keep them.
 */
import { join } from 'node:path'
import { Errors } from '../../engine/errors.js'
import { describeInvalidUtf8, findInvalidUtf8 } from '../../gocompat/index.js'
import type { MemoryNote } from '../../memory/note.js'
import { mtimeNs } from '../../memory/scan.js'
import { DEFAULT_INJECT_LIMIT, MemoryStore } from '../../memory/store.js'
import {
  type GroupSpec,
  intOption,
  JSON_OPTION,
  type OptionSpec,
  parseCommand,
  runSubcommand,
  type SubcommandSpec,
  subcommand,
  UsageError,
} from '../args.js'
import { type CliIo, json, readInput, write } from '../io.js'

const DIR_OPTION = {
  dir: {
    type: 'string',
    value: 'D',
    description: 'the folder of the memory notes',
    required: true,
    complete: 'dir',
  },
} as const satisfies OptionSpec

/** Norma's RecallMemory returns 5 notes; `--limit 0` lists every hit. */
const DEFAULT_RECALL_LIMIT = 5

const USAGE = {
  save: 'usage: noa memory save --dir D --name N [--description T] [--type user|feedback|project|reference] < body',
  list: 'usage: noa memory list --dir D [--json]',
  recall: 'usage: noa memory recall --dir D [--limit K] [--json] <query…>',
  index: 'usage: noa memory index --dir D',
  inject: 'usage: noa memory inject --dir D [--limit K] <query…>',
  rm: 'usage: noa memory rm --dir D <name>',
  rename: 'usage: noa memory rename --dir D <old name> <new name>',
}

const USAGE_ALL = `usage: noa memory <save|list|recall|index|inject|rm|rename> --dir D …\n${Object.values(
  USAGE,
)
  .map((u) => `  ${u.slice('usage: '.length)}`)
  .join('\n')}`

const QUERY = [1, Number.POSITIVE_INFINITY] as const

const SPECS = {
  save: subcommand({
    summary: 'save a note (its body on stdin), then rebuild MEMORY.md',
    usage: USAGE.save,
    options: {
      ...DIR_OPTION,
      name: {
        type: 'string',
        value: 'N',
        description: "the note's name (its file is a slug of it)",
        required: true,
      },
      description: {
        type: 'string',
        value: 'T',
        description: 'one line saying what the note is for',
        defaultText: 'empty',
      },
      type: {
        type: 'string',
        value: 'TYPE',
        description: 'user, feedback, project or reference',
        defaultText: 'none',
        complete: ['user', 'feedback', 'project', 'reference'],
      },
    },
    positionals: [0, 0],
    details: 'Prints the path of the note written.',
    examples: [
      `echo 'Run make deploy, then tag.' | noa memory save --dir mem --name 'Deploy steps' --type project`,
    ],
    exitCodes: { 1: 'a refused name, description or type, or a body that is not UTF-8' },
  }),
  list: subcommand({
    summary: 'the notes, newest first (unreadable files are reported on stderr)',
    usage: USAGE.list,
    options: { ...DIR_OPTION, ...JSON_OPTION },
    positionals: [0, 0],
    details: '--json: [{name, description, type, file, mtime}].',
    examples: ['noa memory list --dir mem --json'],
  }),
  recall: subcommand({
    summary: 'the notes relevant to a query, ranked, with their scores',
    usage: USAGE.recall,
    options: {
      ...DIR_OPTION,
      limit: {
        type: 'string',
        value: 'K',
        description: 'at most K notes; 0 lists every hit',
        defaultText: String(DEFAULT_RECALL_LIMIT),
      },
      ...JSON_OPTION,
    },
    positionals: QUERY,
    examples: ['noa memory recall --dir mem how do we deploy'],
  }),
  index: subcommand({
    summary: 'rebuild MEMORY.md by a full scan and print it',
    usage: USAGE.index,
    options: DIR_OPTION,
    positionals: [0, 0],
    examples: ['noa memory index --dir mem'],
  }),
  inject: subcommand({
    summary: 'the text auto-inject adds to a prompt for a query',
    usage: USAGE.inject,
    options: {
      ...DIR_OPTION,
      limit: {
        type: 'string',
        value: 'K',
        description: 'at most K notes',
        defaultText: String(DEFAULT_INJECT_LIMIT),
      },
    },
    positionals: QUERY,
    examples: ['noa memory inject --dir mem deploy'],
  }),
  rm: subcommand({
    summary: 'delete a note by name, then rebuild MEMORY.md',
    usage: USAGE.rm,
    options: DIR_OPTION,
    positionals: [1, 1],
    examples: ["noa memory rm --dir mem 'Deploy steps'"],
    exitCodes: { 1: 'no note has that name' },
  }),
  rename: subcommand({
    summary: 'rename a note (and move its file), then rebuild MEMORY.md',
    usage: USAGE.rename,
    options: DIR_OPTION,
    positionals: [2, 2],
    examples: ["noa memory rename --dir mem 'Deploy steps' 'Shipping'"],
    exitCodes: { 1: 'no note has the old name, or another has the new one' },
  }),
}

function parse<O extends OptionSpec & typeof DIR_OPTION>(spec: SubcommandSpec<O>, args: string[]) {
  const parsed = parseCommand(args, spec)
  const dir = parsed.values.dir
  if (typeof dir !== 'string' || dir === '') throw new UsageError('--dir is required', spec.usage)
  return { ...parsed, store: new MemoryStore(dir) }
}

export const spec: GroupSpec = {
  usage: USAGE_ALL,
  subcommands: {
    save: { spec: SPECS.save, run: save },
    list: { spec: SPECS.list, run: list },
    recall: { spec: SPECS.recall, run: recall },
    index: { spec: SPECS.index, run: index },
    inject: { spec: SPECS.inject, run: inject },
    rm: { spec: SPECS.rm, run: rm },
    rename: { spec: SPECS.rename, run: rename },
  },
}

export function run(args: string[], io: CliIo): Promise<number> {
  return runSubcommand(args, io, spec)
}

async function save(args: string[], io: CliIo): Promise<number> {
  const { values, store } = parse(SPECS.save, args)
  if (values.name === undefined) throw new UsageError('--name is required', USAGE.save)
  const body = await readInput(io)
  const bad = findInvalidUtf8(body)
  if (bad) {
    throw Errors.BAD_ARGUMENT(
      `memory body on stdin is not valid UTF-8: line ${bad.line}, ${describeInvalidUtf8(bad, 'stdin')}; nothing was written`,
      { field: 'content', line: bad.line, offset: bad.offset },
    )
  }
  const content = body.toString('utf8')
  const note = store.save({
    name: values.name,
    description: values.description ?? '',
    type: values.type ?? '',
    content,
  })
  await write(io.stdout, `${join(store.dir, note.file)}\n`)
  return 0
}

async function list(args: string[], io: CliIo): Promise<number> {
  const { values, store } = parse(SPECS.list, args)
  const { notes, skipped } = store.scanReport()
  for (const s of skipped) io.stderr.write(`noa memory: skipped ${s.file}: ${s.reason}\n`)
  if (values.json) {
    await write(io.stdout, json(notes.map(summary)))
    return 0
  }
  if (notes.length === 0) io.stderr.write(`noa memory: no memories in ${store.dir}\n`)
  await write(
    io.stdout,
    notes.map((n) => `${timeOf(n).slice(0, 19)}Z  ${n.file}  ${label(n)} — ${n.description}\n`).join(''),
  )
  return 0
}

async function recall(args: string[], io: CliIo): Promise<number> {
  const { values, positionals, store } = parse(SPECS.recall, args)
  const limit = intOption(values.limit, 'limit', USAGE.recall) ?? DEFAULT_RECALL_LIMIT
  const hits = store.recall(positionals.join(' '), limit)
  if (values.json) {
    await write(
      io.stdout,
      json(hits.map((h) => ({ score: h.score, ...summary(h.note), content: h.note.content }))),
    )
    return 0
  }
  if (hits.length === 0) io.stderr.write('noa memory: no relevant memories found\n')
  await write(
    io.stdout,
    hits
      .map(
        (h) => `${String(h.score).padStart(3)}  ${h.note.file}  ${label(h.note)} — ${h.note.description}\n`,
      )
      .join(''),
  )
  return 0
}

async function index(args: string[], io: CliIo): Promise<number> {
  const { store } = parse(SPECS.index, args)
  await write(io.stdout, store.rebuildIndex())
  return 0
}

async function inject(args: string[], io: CliIo): Promise<number> {
  const { values, positionals, store } = parse(SPECS.inject, args)
  const limit = intOption(values.limit, 'limit', USAGE.inject, 1) ?? DEFAULT_INJECT_LIMIT
  await write(io.stdout, store.inject(positionals.join(' '), { limit }))
  return 0
}

async function rm(args: string[], io: CliIo): Promise<number> {
  const { positionals, store } = parse(SPECS.rm, args)
  const files = store.delete(positionals[0] as string)
  await write(io.stdout, files.map((f) => `${join(store.dir, f)}\n`).join(''))
  return 0
}

async function rename(args: string[], io: CliIo): Promise<number> {
  const { positionals, store } = parse(SPECS.rename, args)
  const note = store.rename(positionals[0] as string, positionals[1] as string)
  await write(io.stdout, `${join(store.dir, note.file)}\n`)
  return 0
}

function label(n: MemoryNote): string {
  return n.type === '' ? n.name : `${n.name} [${n.type}]`
}

/** `--json` shape of a note; scripts read these keys, in this order. */
function summary(n: MemoryNote) {
  return { name: n.name, description: n.description, type: n.type, file: n.file, mtime: timeOf(n) }
}

/** RFC 3339 in UTC with the file system's nanoseconds, trailing zeros trimmed (Go's RFC3339Nano). */
function timeOf(n: MemoryNote): string {
  const ns = mtimeNs(n)
  if (ns === undefined) return ''
  const NS = 1_000_000_000n
  const sec = ns / NS - (ns % NS < 0n ? 1n : 0n) // floor, also before 1970
  const frac = (ns - sec * NS).toString().padStart(9, '0').replace(/0+$/, '')
  return `${new Date(Number(sec) * 1000).toISOString().slice(0, 19)}${frac === '' ? '' : `.${frac}`}Z`
}
