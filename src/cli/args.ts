/**
 * Argument parsing on top of node:util parseArgs (strict: unknown options are refused, not
 * ignored). A usage error exits 2 with the command's usage line.
 */
import { type ParseArgsConfig, parseArgs } from 'node:util'
import { resolveRoot } from '../engine/logs.js'
import { type CliIo, write } from './io.js'

export class UsageError extends Error {
  override name = 'UsageError'
  constructor(
    message: string,
    readonly usage: string,
  ) {
    super(message)
  }
}

export type OptionSpec = NonNullable<ParseArgsConfig['options']>

export interface CommandSpec<O extends OptionSpec> {
  usage: string
  options: O
  /** Positional arguments: [min, max] (max Infinity for a list). */
  positionals: [number, number]
}

export const ROOT_OPTION = { root: { type: 'string' } } as const
export const JSON_OPTION = { json: { type: 'boolean' } } as const

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

export function parseCommand<O extends OptionSpec>(args: string[], spec: CommandSpec<O>): Parsed<O> {
  let parsed: Parsed<O>
  try {
    parsed = parseArgs({ args, options: spec.options, allowPositionals: true, strict: true }) as Parsed<O>
  } catch (err) {
    throw new UsageError((err as Error).message, spec.usage)
  }
  const [min, max] = spec.positionals
  const n = parsed.positionals.length
  if (n < min) throw new UsageError('missing argument', spec.usage)
  if (n > max)
    throw new UsageError(`unexpected argument ${JSON.stringify(parsed.positionals[max])}`, spec.usage)
  return parsed
}

export type Subcommand = (args: string[], io: CliIo) => Promise<number>

/** `noa <command> <sub> …`: runs the named subcommand, or prints the usage for help, or refuses. */
export async function runSubcommand(
  args: string[],
  io: CliIo,
  table: Record<string, Subcommand>,
  usage: string,
): Promise<number> {
  const [sub, ...rest] = args
  if (sub === '--help' || sub === '-h' || sub === 'help') {
    await write(io.stdout, `${usage}\n`)
    return 0
  }
  const fn = sub !== undefined && Object.hasOwn(table, sub) ? table[sub] : undefined
  if (!fn) {
    throw new UsageError(
      sub === undefined ? 'missing subcommand' : `unknown subcommand ${JSON.stringify(sub)}`,
      usage,
    )
  }
  return fn(rest, io)
}

/** `--root`, else `$NOA_ROOT`, else `./.noa`, as an absolute path. */
export function rootOf(values: { root?: unknown }): string {
  return resolveRoot(typeof values.root === 'string' ? values.root : undefined)
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
