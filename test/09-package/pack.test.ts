/**
 * The package as a user gets it: `npm pack`, then `npm install <tarball>` into an empty project
 * with install scripts disabled, and `import { AgentLog } from 'noa'` appends and reads with the
 * prebuilt addon (nothing compiled, no build/ folder). An install with scripts enabled prints no
 * "install scripts" warning, since the package has none. The tarball carries its LICENSE, and
 * every source map in it points at sources it also carries. Each subpath of the export map
 * resolves from the installed package, at run time and for the type checker.
 */
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ROOT_DIR } from '../helpers/index.js'

/** The environment without the variables of the `npm test` running us (npm_config_*, …). */
function cleanEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.toLowerCase().startsWith('npm_')))
}

function npm(args: string[], cwd: string): Promise<{ status: number; stdout: string; stderr: string }> {
  return new Promise((done, fail) => {
    const child = spawn('npm', args, { cwd, env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => {
      stdout += d
    })
    child.stderr.on('data', (d) => {
      stderr += d
    })
    child.on('error', fail)
    child.on('close', (code) => done({ status: code ?? -1, stdout, stderr }))
  })
}

function app(dir: string): string {
  mkdirSync(dir, { recursive: true })
  writeFileSync(
    join(dir, 'package.json'),
    '{"name":"app","version":"1.0.0","private":true,"type":"module"}\n',
  )
  return dir
}

const USE = `
import { AgentLog } from 'noa'
import { loadNative, nativePath, readWorkspace } from 'noa/engine'
const root = process.argv[2]
const log = await AgentLog.open({ root })
const ack = await log.append('agent-1', { op: 'delete', path: 'src/old.ts' })
await log.close()
const entries = []
for await (const e of readWorkspace(root, 'agent-1')) entries.push(e)
loadNative()
console.log(JSON.stringify({ ack, entries, native: nativePath() }))
`

let base: string
let tarball: string
let files: string[]
let quiet: { status: number; stdout: string; stderr: string }
let plain: { status: number; stdout: string; stderr: string }

beforeAll(async () => {
  base = mkdtempSync(join(tmpdir(), 'noa-pack-'))
  // The tree as built by `npm test`; prepack would build it again.
  const packed = await npm(['pack', '--ignore-scripts', '--json', '--pack-destination', base], ROOT_DIR)
  expect(packed.status, packed.stderr).toBe(0)
  const [info] = JSON.parse(packed.stdout) as Array<{ filename: string; files: Array<{ path: string }> }>
  if (!info) throw new Error('npm pack reported no package')
  tarball = join(base, info.filename)
  files = info.files.map((f) => f.path)
  // Both installs at once: scripts disabled (what the package must work with), and enabled.
  ;[quiet, plain] = await Promise.all([
    npm(
      ['install', '--ignore-scripts', '--no-audit', '--no-fund', '--prefer-offline', tarball],
      app(join(base, 'quiet')),
    ),
    npm(['install', '--no-audit', '--no-fund', '--prefer-offline', tarball], app(join(base, 'plain'))),
  ])
}, 240_000)

afterAll(() => {
  if (base) rmSync(base, { recursive: true, force: true })
})

describe('the packed package', () => {
  it('holds the prebuild, its manifest, the LICENSE, and no build folder', () => {
    expect(files).toContain('prebuilds/linux-x64/noa_io.node')
    expect(files).toContain('prebuilds/linux-x64/noa_io.json')
    expect(files).toContain('LICENSE')
    expect(files).toContain('dist/src/index.js')
    expect(files.filter((f) => f.startsWith('build/'))).toEqual([])
    const pkg = JSON.parse(readFileSync(join(ROOT_DIR, 'package.json'), 'utf8'))
    expect(readFileSync(join(ROOT_DIR, 'LICENSE'), 'utf8')).toMatch(/^MIT License/)
    expect(pkg.license).toBe('MIT')
  })

  it('holds every file the README links to, so its links work from the installed package', () => {
    const readme = readFileSync(join(ROOT_DIR, 'README.md'), 'utf8')
    const linked = [...readme.matchAll(/\]\(((?:docs|bench)\/[^)#\s]+)/g)].map((m) => m[1] as string)
    expect(linked.filter((l) => l.startsWith('docs/')).length).toBeGreaterThan(3)
    expect(linked.filter((l) => !files.includes(l))).toEqual([])
  })

  it('installs with scripts disabled; AgentLog appends and reads through the prebuilt addon', () => {
    expect(quiet.status, quiet.stderr).toBe(0)
    const dir = join(base, 'quiet')
    const pkgDir = join(dir, 'node_modules', 'noa')
    expect(existsSync(join(pkgDir, 'build'))).toBe(false)
    writeFileSync(join(dir, 'use.mjs'), USE)
    const r = spawnSync(process.execPath, ['use.mjs', join(dir, 'root')], { cwd: dir, encoding: 'utf8' })
    expect(r.stderr).toBe('')
    const out = JSON.parse(r.stdout)
    expect(out.ack.seq).toBe(1)
    expect(out.entries).toEqual([{ seq: 1, op: 'delete', path: 'src/old.ts', ts: out.ack.ts }])
    expect(out.native).toBe(join(pkgDir, 'prebuilds', 'linux-x64', 'noa_io.node'))
    // The command too, from node_modules/.bin.
    const log = spawnSync(
      join(dir, 'node_modules', '.bin', 'noa'),
      ['log', 'agent-1', '--root', join(dir, 'root')],
      {
        encoding: 'utf8',
      },
    )
    expect(log.stdout).toBe(`${JSON.stringify(out.entries[0])}\n`)
  })

  it('every subpath of the export map imports from the installed package, with its types', () => {
    const dir = join(base, 'quiet')
    const pkg = JSON.parse(readFileSync(join(dir, 'node_modules', 'noa', 'package.json'), 'utf8')) as {
      exports: Record<string, unknown>
    }
    // The adapters need their optional peers installed; test/10-adapters covers them.
    const subpaths = Object.keys(pkg.exports)
      .filter((k) => k !== './package.json')
      .map((k) => (k === '.' ? 'noa' : `noa/${k.slice(2)}`))
      .filter((s) => s !== 'noa/langgraph' && s !== 'noa/openai-agents')
    expect(subpaths).toContain('noa/transcript')
    const script = subpaths
      .map((s, i) => `import * as m${i} from '${s}'\nconsole.log('${s}', Object.keys(m${i}).length)`)
      .join('\n')
    writeFileSync(join(dir, 'subpaths.mjs'), script)
    const r = spawnSync(process.execPath, ['subpaths.mjs'], { cwd: dir, encoding: 'utf8' })
    expect(r.stderr).toBe('')
    const counts = new Map(
      r.stdout
        .trim()
        .split('\n')
        .map((l) => l.split(' ') as [string, string]),
    )
    expect([...counts.keys()]).toEqual(subpaths)
    for (const [s, n] of counts) expect(Number(n), s).toBeGreaterThan(0)
    // The declarations resolve through the same map (a type error if a `types` target is missing).
    writeFileSync(
      join(dir, 'types.ts'),
      `${subpaths.map((s, i) => `import type * as t${i} from '${s}'`).join('\n')}\n` +
        `import type { AgentLog, EntryInput } from 'noa'\n` +
        `import type { TranscriptWriter } from 'noa/transcript'\n` +
        `export type Used = [AgentLog, EntryInput, TranscriptWriter, ${subpaths.map((_, i) => `typeof t${i}`).join(', ')}]\n`,
    )
    const tsc = spawnSync(
      process.execPath,
      [
        join(ROOT_DIR, 'node_modules', 'typescript', 'bin', 'tsc'),
        '--noEmit',
        '--strict',
        '--skipLibCheck',
        '--module',
        'nodenext',
        '--moduleResolution',
        'nodenext',
        '--types',
        'node',
        '--typeRoots',
        join(ROOT_DIR, 'node_modules', '@types'),
        'types.ts',
      ],
      { cwd: dir, encoding: 'utf8' },
    )
    expect(`${tsc.stdout}${tsc.stderr}`).toBe('')
    expect(tsc.status).toBe(0)
  })

  it('declares no install-time script, so npm has none to warn about or run', () => {
    expect(plain.status, plain.stderr).toBe(0)
    expect(`${plain.stdout}${plain.stderr}`).not.toMatch(/install.?scripts|allowScripts|node-gyp|gyp info/i)
    const pkg = JSON.parse(readFileSync(join(base, 'plain', 'node_modules', 'noa', 'package.json'), 'utf8'))
    for (const s of ['preinstall', 'install', 'postinstall', 'prepare'])
      expect(pkg.scripts?.[s], s).toBeUndefined()
    // With binding.gyp in the package, npm would run `node-gyp rebuild` unless told not to.
    expect(pkg.gypfile).toBe(false)
    expect(existsSync(join(base, 'plain', 'node_modules', 'noa', 'build'))).toBe(false)
  })

  it('ships no source map whose sources it does not ship', () => {
    const pkgDir = join(base, 'quiet', 'node_modules', 'noa')
    const maps = files.filter((f) => f.endsWith('.map'))
    expect(maps.length).toBeGreaterThan(50)
    const missing: string[] = []
    for (const f of maps) {
      const map = JSON.parse(readFileSync(join(pkgDir, f), 'utf8')) as {
        sources: string[]
        sourceRoot?: string
      }
      for (const s of map.sources) {
        const source = resolve(dirname(join(pkgDir, f)), map.sourceRoot ?? '', s)
        if (!existsSync(source)) missing.push(`${f} → ${s}`)
      }
    }
    expect(missing).toEqual([])
  })

  it('without a usable addon, the error lists every path tried and how to build one', () => {
    const dir = join(base, 'quiet')
    const pkgDir = join(dir, 'node_modules', 'noa')
    renameSync(join(pkgDir, 'prebuilds'), join(pkgDir, 'prebuilds.away'))
    try {
      const r = spawnSync(
        process.execPath,
        ['--input-type=module', '-e', `import { loadNative } from 'noa/engine'; loadNative()`],
        { cwd: dir, encoding: 'utf8' },
      )
      expect(r.status).not.toBe(0)
      for (const p of [
        join(pkgDir, 'build', 'Release', 'noa_io.node'),
        join(pkgDir, 'build', 'Debug', 'noa_io.node'),
        join(pkgDir, 'prebuilds', 'linux-x64', 'noa_io.node'),
      ]) {
        expect(r.stderr).toContain(`${p} (not found)`)
      }
      expect(r.stderr).toContain('no prebuild for linux-x64 ships with noa')
      expect(r.stderr).toContain(`Build it from source in ${pkgDir}: \`npx node-gyp rebuild\``)
    } finally {
      renameSync(join(pkgDir, 'prebuilds.away'), join(pkgDir, 'prebuilds'))
    }
  })
})
