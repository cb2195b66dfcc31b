/**
 * Argument parsing on top of node:util parseArgs (strict: unknown options are refused, not
 * ignored). A usage error exits 2 with the command's usage line.
 *
 * Every command declares a `CommandSpec` (a group of subcommands a `GroupSpec`): its options with
 * their descriptions, defaults and value names, its positionals, examples and exit codes. Help,
 * shell completion and "did you mean" are generated from these specs, so a declared option is
 * documented, completed and suggested without further work.
 */
import { parseArgs } from 'node:util'
import { checkRoot } from '../engine/files.js'
import { resolveRoot } from '../engine/logs.js'
import { type CliIo, write } from './io.js'
import { checkLayout } from './roots.js'
import { didYouMean } from './suggest.js'

export class UsageError extends Error {
  override name = 'UsageError'
  constructor(
    message: string,
    readonly usage: string,
  ) {
    super(message)
  }
}

/** What the shell offers for a value: fixed words, file names, or directory names. */
export type Completion = readonly string[] | 'file' | 'dir'

export interface OptionDef {
  type: 'string' | 'boolean'
  short?: string
  multiple?: boolean
  /** One line for help and for zsh completion. */
  description: string
  /** The value's name in help (`--root DIR`); string options only. */
  value?: string
  /**
   * The default as help shows it. Shown only: parseArgs never sees it, so an omitted option
   * stays undefined and the command applies its default (which may depend on other options).
   */
  defaultText?: string
  /**
   * Shown as "(required)", or "(required <text>)" for a condition ('unless --call'); the command
   * itself refuses the missing option.
   */
  required?: true | string
  /** What the shell completes as this option's value. */
  complete?: Completion
}

export type OptionSpec = Record<string, OptionDef>

export interface CommandSpec<O extends OptionSpec = OptionSpec> {
  /**
   * One line saying what the command does. A top-level command's summary lives in the command
   * table (main.ts), so listing the commands loads none of them; a subcommand's lives here.
   */
  summary?: string
  /** The usage line(s), printed first in help and after every usage error. */
  usage: string
  options: O
  /** Positional arguments: [min, max] (max Infinity for a list). */
  positionals: readonly [number, number]
  /** What the shell completes for each positional; the last one repeats for a list. */
  complete?: readonly Completion[]
  /** Paragraphs printed after the options (stdin format, rules the option list cannot say). */
  details?: string
  /** Full command lines, at least one. */
  examples: readonly [string, ...string[]]
  /** Exit codes beyond (or instead of the wording of) the shared 0/1/2. */
  exitCodes?: Readonly<Record<number, string>>
}

export interface SubcommandSpec<O extends OptionSpec = OptionSpec> extends CommandSpec<O> {
  summary: string
}

export type Subcommand = (args: string[], io: CliIo) => Promise<number>

export interface GroupSpec {
  /** The group's usage (every subcommand's line), printed for a missing or unknown subcommand. */
  usage: string
  details?: string
  // biome-ignore lint/suspicious/noExplicitAny: each subcommand has its own option types
  subcommands: Readonly<Record<string, { spec: SubcommandSpec<any>; run: Subcommand }>>
}

export type AnySpec = CommandSpec | GroupSpec

export function isGroup(spec: AnySpec): spec is GroupSpec {
  return 'subcommands' in spec
}

/** Declares a command; `const` keeps the option literals, so parsed values are typed. */
export function command<const O extends OptionSpec>(spec: CommandSpec<O>): CommandSpec<O> {
  return spec
}

export function subcommand<const O extends OptionSpec>(spec: SubcommandSpec<O>): SubcommandSpec<O> {
  return spec
}

/** The exit codes every command shares (main.ts maps errors to them). */
export const EXIT_CODES: Readonly<Record<number, string>> = {
  0: 'done',
  1: 'refused or failed (the message on stderr says what and why)',
  2: 'usage error (the usage is printed on stderr)',
}

export const ROOT_OPTION = {
  root: {
    type: 'string',
    value: 'DIR',
    description: 'the noa root holding agent-logs/ and objects/',
    defaultText: '$NOA_ROOT, else ./.noa',
    complete: 'dir',
  },
} as const satisfies OptionSpec

export const JSON_OPTION = {
  json: { type: 'boolean', description: 'print JSON instead of text' },
} as const satisfies OptionSpec

/** Answered by main.ts before a command runs; listed in help, completion and suggestions. */
export const HELP_OPTION = {
  help: { type: 'boolean', short: 'h', description: 'print this help and exit' },
} as const satisfies OptionSpec

type ValueOf<T> = T extends { type: 'string'; multiple: true }
  ? string[]
  : T extends { type: 'string' }
    ? string
    : T extends { type: 'boolean'; multiple: true }
      ? boolean[]
      : boolean

export interface Parsed<O extends OptionSpec> {
  values: { [K in keyof O]?: ValueOf<O[K]> }
  positionals: string[]
}

/** `--name`, `-s, --name`: how an option is written in help and in messages. */
export function optionFlags(name: string, def: OptionDef): string {
  return def.short ? `-${def.short}, --${name}` : `--${name}`
}

type ParseOptions = Record<string, { type: 'string' | 'boolean'; short?: string; multiple?: boolean }>

export function parseCommand<O extends OptionSpec>(args: string[], spec: CommandSpec<O>): Parsed<O> {
  const options: ParseOptions = {}
  for (const [name, def] of Object.entries(spec.options)) {
    options[name] = { type: def.type }
    if (def.short !== undefined) options[name].short = def.short
    if (def.multiple !== undefined) options[name].multiple = def.multiple
  }
  refuseUnknownOption(args, spec, options)
  let parsed: Parsed<O>
  try {
    parsed = parseArgs({ args, options, allowPositionals: true, strict: true }) as Parsed<O>
  } catch (err) {
    throw new UsageError(missingValue(err, spec) ?? (err as Error).message, spec.usage)
  }
  const [min, max] = spec.positionals
  const n = parsed.positionals.length
  if (n < min) throw new UsageError('missing argument', spec.usage)
  if (n > max)
    throw new UsageError(`unexpected argument ${JSON.stringify(parsed.positionals[max])}`, spec.usage)
  return parsed
}

/** An unknown option is named with the command's valid ones (parseArgs' own message names none). */
function refuseUnknownOption(args: string[], spec: CommandSpec, options: ParseOptions) {
  const { tokens } = parseArgs({ args, options, allowPositionals: true, strict: false, tokens: true })
  for (const t of tokens ?? []) {
    // A known short option's token carries its long name; an unknown one's, its letter.
    if (t.kind !== 'option' || Object.hasOwn(options, t.name)) continue
    const valid = Object.keys({ ...spec.options, ...HELP_OPTION }).map((name) => `--${name}`)
    const close = didYouMean(t.rawName, valid)
    let message = `unknown option ${t.rawName}`
    if (close.length > 0) message += ` (did you mean ${close.join(' or ')}?)`
    message += `; valid options: ${valid.join(', ')}`
    if (spec.positionals[1] > 0) message += `; an argument starting with '-' goes after '--'`
    throw new UsageError(message, spec.usage)
  }
}

/**
 * parseArgs' "Option '-m, --message <value>' argument missing" (or "is ambiguous", when the next
 * word starts with '-') in the words of every other usage error: the option, what it needs, how
 * to give a value that starts with '-'.
 */
function missingValue(err: unknown, spec: CommandSpec): string | undefined {
  if ((err as NodeJS.ErrnoException).code !== 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') return undefined
  const flag = /^Option '(-[^ ',]+)/.exec((err as Error).message)?.[1]
  const entry = Object.entries(spec.options).find(
    ([name, def]) => flag === `--${name}` || (def.short !== undefined && flag === `-${def.short}`),
  )
  if (!entry) return undefined
  const [name, def] = entry
  return `option ${optionFlags(name, def)} needs a value (${def.value ?? name.toUpperCase()}); a value starting with '-' is written --${name}=-…`
}

/** Whether the words before any `--` ask for help. */
export function wantsHelp(args: readonly string[]): boolean {
  for (const a of args) {
    if (a === '--') return false
    if (a === '--help' || a === '-h') return true
  }
  return false
}

/** `unknown subcommand "x"`, with the close names when there are some. */
export function unknownName(kind: string, name: string, known: readonly string[]): string {
  const close = didYouMean(name, known)
  return `unknown ${kind} ${JSON.stringify(name)}${close.length > 0 ? ` (did you mean ${close.join(' or ')}?)` : ''}`
}

/** `noa <command> <sub> …`: runs the named subcommand, or prints the usage for help, or refuses. */
export async function runSubcommand(args: string[], io: CliIo, group: GroupSpec): Promise<number> {
  const [sub, ...rest] = args
  if (sub === '--help' || sub === '-h' || sub === 'help') {
    await write(io.stdout, `${group.usage}\n`)
    return 0
  }
  const entry =
    sub !== undefined && Object.hasOwn(group.subcommands, sub) ? group.subcommands[sub] : undefined
  if (!entry) {
    throw new UsageError(
      sub === undefined
        ? 'missing subcommand'
        : unknownName('subcommand', sub, Object.keys(group.subcommands)),
      group.usage,
    )
  }
  return entry.run(rest, io)
}

/** `--root`, else `$NOA_ROOT`, else `./.noa`, as an absolute path. */
export function rootOf(values: { root?: unknown }): string {
  return resolveRoot(typeof values.root === 'string' ? values.root : undefined)
}

/**
 * The root of a command that only reads: a missing or mistyped one is refused ("no noa root at
 * PATH", exit 1) before anything is looked up in it, never taken as an empty root; so is a
 * folder that holds other things and nothing of noa's (naming the nearest root).
 */
export function existingRootOf(values: { root?: unknown }): string {
  const root = rootOf(values)
  checkRoot(root, true)
  checkLayout(root)
  return root
}

/** A non-negative integer option, or a usage error naming it. */
export function intOption(value: unknown, name: string, usage: string, min = 0): number | undefined {
  if (value === undefined) return undefined
  const n = Number(value)
  if (typeof value !== 'string' || !/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < min) {
    throw new UsageError(`--${name} must be an integer >= ${min}, got ${JSON.stringify(value)}`, usage)
  }
  return n
}
