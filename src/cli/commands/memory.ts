/**
 * `noa memory …`: Norma-compatible memory notes from the shell. The words of each subcommand
 * are used as they are by checks outside the test suite; keep them.
 */
import { join } from 'node:path'
import { NoaError } from '../../engine/errors.js'
import { describeInvalidUtf8, findInvalidUtf8 } from '../../gocompat/index.js'
import type { MemoryNote } from '../../memory/note.js'
import { mtimeNs } from '../../memory/scan.js'
import { DEFAULT_INJECT_LIMIT, MemoryStore } from '../../memory/store.js'
import {
  type CommandSpec,
  intOption,
  JSON_OPTION,
  type OptionSpec,
  parseCommand,
  runSubcommand,
  UsageError,
} from '../args.js'
import { type CliIo, json, readAll, write } from '../io.js'

const DIR_OPTION = { dir: { type: 'string' } } as const
const LIMIT_OPTION = { limit: { type: 'string' } } as const

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

type Sub = keyof typeof USAGE

function parse<O extends OptionSpec>(sub: Sub, args: string[], options: O, positionals: [number, number]) {
  const spec: CommandSpec<O & typeof DIR_OPTION> = {
    usage: USAGE[sub],
    options: { ...options, ...DIR_OPTION },
    positionals,
  }
  const parsed = parseCommand(args, spec)
  const dir = parsed.values.dir
  if (typeof dir !== 'string' || dir === '') throw new UsageError('--dir is required', USAGE[sub])
  return { ...parsed, store: new MemoryStore(dir) }
}

export function run(args: string[], io: CliIo): Promise<number> {
  return runSubcommand(args, io, { save, list, recall, index, inject, rm, rename }, USAGE_ALL)
}

async function save(args: string[], io: CliIo): Promise<number> {
  const { values, store } = parse(
    'save',
    args,
    { name: { type: 'string' }, description: { type: 'string' }, type: { type: 'string' } },
    [0, 0],
  )
  if (values.name === undefined) throw new UsageError('--name is required', USAGE.save)
  const body = await readAll(io.stdin)
  const bad = findInvalidUtf8(body)
  if (bad) {
    throw new NoaError(
      'NOA_BAD_ARGUMENT',
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
  const { values, store } = parse('list', args, JSON_OPTION, [0, 0])
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
  const { values, positionals, store } = parse('recall', args, { ...LIMIT_OPTION, ...JSON_OPTION }, [
    1,
    Number.POSITIVE_INFINITY,
  ])
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
  const { store } = parse('index', args, {}, [0, 0])
  await write(io.stdout, store.rebuildIndex())
  return 0
}

async function inject(args: string[], io: CliIo): Promise<number> {
  const { values, positionals, store } = parse('inject', args, LIMIT_OPTION, [1, Number.POSITIVE_INFINITY])
  const limit = intOption(values.limit, 'limit', USAGE.inject, 1) ?? DEFAULT_INJECT_LIMIT
  await write(io.stdout, store.inject(positionals.join(' '), { limit }))
  return 0
}

async function rm(args: string[], io: CliIo): Promise<number> {
  const { positionals, store } = parse('rm', args, {}, [1, 1])
  const files = store.delete(positionals[0] as string)
  await write(io.stdout, files.map((f) => `${join(store.dir, f)}\n`).join(''))
  return 0
}

async function rename(args: string[], io: CliIo): Promise<number> {
  const { positionals, store } = parse('rename', args, {}, [2, 2])
  const note = store.rename(positionals[0] as string, positionals[1] as string)
  await write(io.stdout, `${join(store.dir, note.file)}\n`)
  return 0
}

function label(n: MemoryNote): string {
  return n.type === '' ? n.name : `${n.name} [${n.type}]`
}

/** `--json` shape of a note, in the key order the issue names. */
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
