/** Help text, generated from the command specs (args.ts) so it cannot drift from what is parsed. */
import {
  type CommandSpec,
  EXIT_CODES,
  type GroupSpec,
  HELP_OPTION,
  type OptionDef,
  optionFlags,
} from './args.js'

function table(rows: ReadonlyArray<readonly [string, string]>, indent = '  '): string {
  const width = Math.max(0, ...rows.map(([left]) => left.length))
  return rows.map(([left, right]) => `${indent}${left.padEnd(width)}  ${right}`.trimEnd()).join('\n')
}

function optionLeft(name: string, def: OptionDef, aligned: boolean): string {
  const flags = optionFlags(name, def)
  const value = def.type === 'string' ? ` ${def.value ?? name.toUpperCase()}` : ''
  return `${aligned && !def.short ? '    ' : ''}${flags}${value}`
}

function optionRight(def: OptionDef): string {
  const notes: string[] = []
  if (def.required) notes.push(def.required === true ? 'required' : `required ${def.required}`)
  if (def.defaultText !== undefined) notes.push(`default: ${def.defaultText}`)
  if (def.multiple) notes.push('repeatable')
  return notes.length > 0 ? `${def.description} (${notes.join('; ')})` : def.description
}

/** `noa <command> --help`: usage, what it does, options with defaults, examples, exit codes. */
export function commandHelp(spec: CommandSpec, summary: string | undefined): string {
  const options = Object.entries({ ...spec.options, ...HELP_OPTION }) as Array<[string, OptionDef]>
  const aligned = options.some(([, def]) => def.short !== undefined)
  const parts = [spec.usage]
  if (summary) parts.push(summary)
  parts.push(
    `options:\n${table(options.map(([name, def]) => [optionLeft(name, def, aligned), optionRight(def)]))}`,
  )
  if (spec.details) parts.push(spec.details)
  parts.push(
    `${spec.examples.length > 1 ? 'examples' : 'example'}:\n${spec.examples.map((e) => `  ${e}`).join('\n')}`,
  )
  const codes = { ...EXIT_CODES, ...spec.exitCodes }
  parts.push(
    `exit codes:\n${table(
      Object.keys(codes)
        .map(Number)
        .sort((a, b) => a - b)
        .map((code) => [String(code), codes[code] as string]),
    )}`,
  )
  return `${parts.join('\n\n')}\n`
}

/** `noa <group> --help`: the usage, each subcommand with its summary, where to read more. */
export function groupHelp(name: string, group: GroupSpec, summary: string | undefined): string {
  const parts = [group.usage]
  if (summary) parts.push(summary)
  parts.push(
    `subcommands:\n${table(Object.entries(group.subcommands).map(([sub, { spec }]) => [sub, spec.summary]))}`,
  )
  if (group.details) parts.push(group.details)
  parts.push(
    `'noa ${name} <subcommand> --help' (or 'noa help ${name} <subcommand>') gives its options, example and exit codes.`,
  )
  return `${parts.join('\n\n')}\n`
}

export interface ListedCommand {
  group: string
  summary: string
}

/** `noa --help`: the commands by group, in table order. */
export function topHelp(commands: Readonly<Record<string, ListedCommand>>): string {
  const groups = new Map<string, Array<[string, string]>>()
  for (const [name, c] of Object.entries(commands)) {
    const rows = groups.get(c.group) ?? []
    rows.push([name, c.summary])
    groups.set(c.group, rows)
  }
  const width = Math.max(...Object.keys(commands).map((n) => n.length))
  const sections = [...groups].map(
    ([group, rows]) => `${group}:\n${table(rows.map(([n, s]) => [n.padEnd(width), s]))}`,
  )
  const codes = table(Object.entries(EXIT_CODES).map(([code, text]) => [code, text]))
  return `usage: noa <command> [options]
       noa <command> --help | noa help <command> [subcommand]
       noa --version

${sections.join('\n\n')}

Commands on workspaces take --root DIR (default $NOA_ROOT, else ./.noa); data commands take --json.

exit codes:
${codes}
`
}
