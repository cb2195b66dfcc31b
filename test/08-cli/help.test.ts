import { spawnSync } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import type { CommandSpec, OptionDef } from '../../dist/src/cli/args.js'
import { allSpecs, BUILTINS, COMMANDS } from '../../dist/src/cli/main.js'
import { DIST, ROOT_DIR, runCli, runMain, tempDir } from '../helpers/index.js'

/** Every command path and its spec, enumerated from the command table: a new command is covered. */
async function everySpec(): Promise<Array<{ path: string[]; spec: CommandSpec }>> {
  const out: Array<{ path: string[]; spec: CommandSpec }> = []
  for (const [name, { spec }] of Object.entries(await allSpecs())) {
    if ('subcommands' in spec)
      for (const [sub, s] of Object.entries(spec.subcommands)) out.push({ path: [name, sub], spec: s.spec })
    else out.push({ path: [name], spec })
  }
  for (const [name, spec] of Object.entries(BUILTINS)) out.push({ path: [name], spec })
  return out
}

function optionLines(help: string): string[] {
  const section = help.split('\n\n').find((p) => p.startsWith('options:')) ?? ''
  return section.split('\n').slice(1)
}

describe('help', () => {
  it('every command and subcommand answers --help, -h and noa help with its usage, options, example and exit codes', async () => {
    const specs = await everySpec()
    expect(specs.length).toBeGreaterThan(30)
    for (const { path, spec } of specs) {
      const asks = [
        [...path, '--help'],
        [...path, '-h'],
        ['help', ...path],
      ]
      if (path.length === 2) asks.push([path[0] as string, 'help', path[1] as string])
      const answers = await Promise.all(asks.map((args) => runMain(args)))
      answers.forEach((r, i) => {
        const what = (asks[i] as string[]).join(' ')
        expect([r.status, r.stderr], what).toEqual([0, ''])
        expect(r.stdout, what).toBe(answers[0]?.stdout)
      })
      const help = answers[0]?.stdout as string
      const what = path.join(' ')
      expect(help.startsWith(`usage: noa ${path[0]}`), what).toBe(true)
      expect(help.startsWith(`${spec.usage}\n`), what).toBe(true)
      const lines = optionLines(help)
      const options = Object.entries(spec.options) as Array<[string, OptionDef]>
      expect(lines.length, what).toBe(options.length + 1) // and -h, --help
      for (const [name, def] of options) {
        const line = lines.find((l) => l.includes(`--${name}${def.type === 'string' ? ' ' : ''}`))
        expect(line, `${what} --${name}`).toContain(def.description)
        if (def.defaultText !== undefined)
          expect(line, `${what} --${name}`).toContain(`default: ${def.defaultText}`)
        if (def.short) expect(line, `${what} --${name}`).toContain(`-${def.short}, --${name}`)
      }
      expect(lines.at(-1)).toMatch(/^ {2}-h, --help +print this help/)
      expect(spec.examples.length, what).toBeGreaterThan(0)
      for (const e of spec.examples) expect(e, what).toContain(`noa ${what}`)
      expect(help, what).toMatch(/\n\nexamples?:\n {2}.*noa /)
      expect(help, what).toMatch(/\n\nexit codes:\n {2}0 {2}.+\n {2}1 {2}.+\n {2}2 {2}usage error/)
    }
  })

  it('a subcommand has its own summary and exit codes beyond 0/1/2', async () => {
    const state = await runMain(['context', 'state', '--help'])
    expect(state.stdout).toContain('\n  3  state.json is unusable')
    const verify = await runMain(['help', 'verify'])
    expect(verify.stdout).toContain('\n  1  a log has a problem')
  })

  it('a group lists its subcommands with their summaries', async () => {
    for (const [name, { spec }] of Object.entries(await allSpecs())) {
      if (!('subcommands' in spec)) continue
      for (const ask of [
        [name, '--help'],
        [name, '-h'],
        [name, 'help'],
        ['help', name],
      ]) {
        const r = await runMain(ask)
        expect([r.status, r.stderr], ask.join(' ')).toEqual([0, ''])
        expect(r.stdout.startsWith(`${spec.usage}\n`), ask.join(' ')).toBe(true)
        for (const [sub, { spec: s }] of Object.entries(spec.subcommands))
          expect(r.stdout).toMatch(
            new RegExp(`\\n {2}${sub} +${s.summary.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\n`),
          )
      }
    }
  })

  it('noa --help groups the commands: log, store, agent files, replication', async () => {
    const r = await runMain(['--help'])
    expect(r.status).toBe(0)
    const sections = r.stdout.split('\n\n')
    for (const group of ['log', 'store', 'agent files', 'replication']) {
      const section = sections.find((s) => s.startsWith(`${group}:\n`))
      const listed = (section ?? '')
        .split('\n')
        .slice(1)
        .map((l) => l.trim().split(/\s+/)[0])
      const expected = Object.entries(COMMANDS)
        .filter(([, c]) => c.group === group)
        .map(([n]) => n)
      expect(listed, group).toEqual(expected)
    }
    expect((await runMain(['help'])).stdout).toBe(r.stdout)
    expect((await runMain(['-h'])).stdout).toBe(r.stdout)
    // No command at all is a usage error: the same text on stderr, exit 2.
    expect(await runMain([])).toEqual({ status: 2, stdout: '', stderr: r.stdout })
  })

  it('help comes before everything else a command checks, and -- ends it', async () => {
    // Missing arguments and required options do not matter when help is asked for.
    expect((await runMain(['fork', '--help'])).status).toBe(0)
    expect((await runMain(['memory', 'save', '--name', 'x', '-h'])).status).toBe(0)
    // After --, -h is a positional: here a query word, so recall runs (and needs --dir).
    const r = await runMain(['memory', 'recall', '--', '-h'])
    expect(r.status).toBe(2)
    expect(r.stderr).toBe(
      `noa memory: --dir is required\nusage: noa memory recall --dir D [--limit K] [--json] <query…>\n`,
    )
  })

  it('the built command prints help on stdout with exit 0', () => {
    const r = runCli(['append', '--help'])
    expect(r.status).toBe(0)
    expect(r.stdout).toMatch(/^usage: noa append <workspace>/)
    expect(r.stderr).toBe('')
  })
})

describe('did you mean', () => {
  it('a mistyped command or subcommand names the close ones; exit 2 with the usage', async () => {
    const cases: Array<[string[], string]> = [
      [
        ['snapshto'],
        'noa: unknown command "snapshto" (did you mean snapshot or snapshots?)\nusage: noa <command>',
      ],
      [['apend'], 'noa: unknown command "apend" (did you mean append?)\n'],
      [['memory', 'sav'], 'noa memory: unknown subcommand "sav" (did you mean save?)\nusage: noa memory'],
      [['transcript', 'shwo'], 'noa transcript: unknown subcommand "shwo" (did you mean show?)\n'],
      [['replicate', 'pul', '--nats', 'x'], 'noa replicate: unknown subcommand "pul" (did you mean pull?)\n'],
      [['help', 'memroy'], 'noa: unknown command "memroy" (did you mean memory?)\n'],
      [['help', 'context', 'stat'], 'noa context: unknown subcommand "stat" (did you mean state?)\n'],
      [
        ['--verison'],
        'noa: unknown option --verison (did you mean --version?); valid options: --help, -h, --version\n',
      ],
    ]
    for (const [args, start] of cases) {
      const r = await runMain(args)
      expect([r.status, r.stdout], args.join(' ')).toEqual([2, ''])
      expect(r.stderr.startsWith(start), `${args.join(' ')}: ${r.stderr}`).toBe(true)
    }
  })

  it('a name close to nothing gets no suggestion', async () => {
    const r = await runMain(['frobnicate'])
    expect(r.stderr.split('\n')[0]).toBe('noa: unknown command "frobnicate"')
    expect((await runMain(['memory', 'zzz'])).stderr.split('\n')[0]).toBe(
      'noa memory: unknown subcommand "zzz"',
    )
  })
})

describe('unknown options', () => {
  it("name the command's valid options (and the close one)", async () => {
    const r = await runMain(['verify', '--jsn'])
    expect(r.status).toBe(2)
    expect(r.stderr).toBe(
      "noa verify: unknown option --jsn (did you mean --json?); valid options: --root, --json, --objects, --help; an argument starting with '-' goes after '--'\n" +
        'usage: noa verify [workspace…] [--objects] [--root DIR] [--json]\n',
    )
    const short = await runMain(['snapshot', 'w', '-x'])
    expect(short.stderr.split('\n')[0]).toBe(
      "noa snapshot: unknown option -x; valid options: --root, --json, --message, --allow-empty, --strict, --skip-damaged, --shared-nats, --shared-prefix, --help; an argument starting with '-' goes after '--'",
    )
    const sub = await runMain(['memory', 'list', '--dir', 'd', '--limit', '3'])
    expect(sub.stderr.split('\n')[0]).toBe(
      'noa memory: unknown option --limit; valid options: --dir, --json, --help',
    )
  })

  it('an option without its value is named in the same style', async () => {
    const r = await runMain(['log', 'w', '--root'])
    expect(r.stderr).toBe(
      "noa log: option --root needs a value (DIR); a value starting with '-' is written --root=-…\nusage: noa log <workspace> [--from SEQ] [--follow] [--root DIR] [--json]\n",
    )
    const shortValue = await runMain(['snapshot', 'w', '-m'])
    expect(shortValue.stderr.split('\n')[0]).toBe(
      "noa snapshot: option -m, --message needs a value (MESSAGE); a value starting with '-' is written --message=-…",
    )
  })
})

describe('--version', () => {
  it("prints the package's version", async () => {
    const { version } = JSON.parse(readFileSync(join(ROOT_DIR, 'package.json'), 'utf8'))
    expect(await runMain(['--version'])).toEqual({ status: 0, stdout: `noa ${version}\n`, stderr: '' })
    expect(runCli(['--version']).stdout).toBe(`noa ${version}\n`)
  })
})

describe('completion', () => {
  /** What the bash script completes for the words (the last one being typed). */
  function bashComplete(script: string, words: string[], cwd: string): string[] {
    const file = join(tempDir(), 'noa.bash')
    writeFileSync(file, script)
    const quoted = words.map((w) => `'${w.replaceAll("'", `'\\''`)}'`).join(' ')
    const r = spawnSync(
      'bash',
      [
        '--norc',
        '-c',
        `source "$1"; COMP_WORDS=(${quoted}); COMP_CWORD=${words.length - 1}; _noa; printf '%s\\n' "\${COMPREPLY[@]}"`,
        'bash',
        file,
      ],
      { cwd, encoding: 'utf8' },
    )
    expect(r.stderr).toBe('')
    return r.stdout.split('\n').filter((l) => l !== '')
  }

  it('bash: commands, subcommands, options and their values, from the specs', async () => {
    const r = await runMain(['completion', 'bash'])
    expect(r.status).toBe(0)
    const script = r.stdout
    const cwd = tempDir()
    writeFileSync(join(cwd, 'notes.md'), '')
    const names = [...Object.keys(COMMANDS), 'help', 'completion', '--help', '-h', '--version']
    expect(bashComplete(script, ['noa', ''], cwd).sort()).toEqual(names.sort())
    expect(bashComplete(script, ['noa', 'snap'], cwd)).toEqual(['snapshot', 'snapshots'])
    expect(bashComplete(script, ['noa', 'memory', 're'], cwd)).toEqual(['recall', 'rename'])
    expect(bashComplete(script, ['noa', 'memory', 'save', '--t'], cwd)).toEqual(['--type'])
    expect(bashComplete(script, ['noa', 'memory', 'save', '--type', ''], cwd)).toEqual([
      'user',
      'feedback',
      'project',
      'reference',
    ])
    expect(bashComplete(script, ['noa', 'merge', 'a', 'b', '--on-conflict', '=', 'f'], cwd)).toEqual(['fail'])
    expect(bashComplete(script, ['noa', 'blob', ''], cwd)).toEqual(['put', 'get'])
    expect(bashComplete(script, ['noa', 'blob', 'put', 'no'], cwd)).toEqual(['notes.md'])
    expect(bashComplete(script, ['noa', 'blob', 'put', 'notes.md', ''], cwd)).toEqual([]) // two positionals at most
    expect(bashComplete(script, ['noa', 'help', 'mem'], cwd)).toEqual(['memory'])
    expect(bashComplete(script, ['noa', 'help', 'context', 'a'], cwd)).toEqual(['archive', 'audit'])
    expect(bashComplete(script, ['noa', 'completion', ''], cwd)).toEqual(['bash', 'zsh'])
    // Every option of every spec completes after its command.
    for (const { path, spec } of await everySpec()) {
      if (path[0] === 'help' || path[0] === 'completion') continue
      const offered = bashComplete(script, ['noa', ...path, '-'], cwd)
      for (const [name, def] of Object.entries(spec.options) as Array<[string, OptionDef]>) {
        expect(offered, path.join(' ')).toContain(`--${name}`)
        if (def.short) expect(offered, path.join(' ')).toContain(`-${def.short}`)
      }
      expect(offered).toContain('--help')
    }
  })

  it('zsh: a #compdef script with an _arguments arm for every command and subcommand', async () => {
    const r = await runMain(['completion', 'zsh'])
    expect(r.status).toBe(0)
    expect(r.stdout.startsWith('#compdef noa\n')).toBe(true)
    for (const { path, spec } of await everySpec()) {
      if (path[0] === 'help' || path[0] === 'completion') continue
      const arm = r.stdout.split(`\n    '${path.join(' ')}')\n      _arguments`)[1]?.split('\n      ;;')[0]
      expect(arm, path.join(' ')).toBeDefined()
      for (const name of Object.keys(spec.options))
        expect(arm, `${path.join(' ')} --${name}`).toContain(`--${name}`)
    }
    expect(r.stdout).toContain("'--on-conflict=[")
    const zsh = spawnSync('zsh', ['-n'], { input: r.stdout, encoding: 'utf8' })
    if (zsh.error === undefined) expect([zsh.status, zsh.stderr]).toEqual([0, ''])
  })

  it('refuses another shell', async () => {
    const r = await runMain(['completion', 'fish'])
    expect([r.status, r.stderr]).toEqual([
      2,
      'noa completion: unknown shell "fish" (bash or zsh)\nusage: noa completion bash|zsh\n',
    ])
  })
})

describe('npm start', () => {
  it('--help prints the demo usage instead of a stack trace; a bad option is a usage error', () => {
    const demo = join(DIST, 'demo.js')
    const help = spawnSync(process.execPath, [demo, '--help'], { encoding: 'utf8' })
    expect([help.status, help.stderr]).toEqual([0, ''])
    expect(help.stdout).toMatch(/^usage: npm start -- \[--agents N\] \[--seconds S\] \[--keep\]\n/)
    const bad = spawnSync(process.execPath, [demo, '--bogus'], { encoding: 'utf8' })
    expect(bad.status).toBe(2)
    expect(bad.stderr).toMatch(/^noa demo: Unknown option '--bogus'\nusage: npm start/)
    expect(bad.stderr).not.toMatch(/\n +at /)
  })
})
