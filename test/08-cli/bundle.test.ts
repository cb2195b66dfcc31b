/**
 * The `noa` command runs from the bundle the build makes (dist/src/cli/noa.cjs) with its V8 code
 * cache: the same answers as the modules it is made from, and the modules themselves whenever
 * the bundle is missing or older than they are.
 */
import { spawnSync } from 'node:child_process'
import { readFileSync, utimesSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import {
  BUILD_MARK,
  BUNDLE,
  buildId,
  CODE_CACHE,
  loadBundle,
  writeCodeCache,
} from '../../dist/src/cli/launch.js'
import { blobOf, CLI, DIST, ROOT_DIR, runCli, runMainIo, tempDir } from '../helpers/index.js'

const CLI_DIR = `${join(DIST, 'cli')}/`

/** Acks and log lines with their ts (a clock reading) replaced. */
const noTs = (s: string) => s.replace(/"ts":\d+/g, '"ts":T')

describe('the bundled noa command', () => {
  it('is what the command runs after the build, and its code cache is taken', () => {
    const pkg = JSON.parse(readFileSync(join(ROOT_DIR, 'package.json'), 'utf8')) as { bin: { noa: string } }
    expect(join(ROOT_DIR, pkg.bin.noa)).toBe(CLI)
    // A CommonJS entry: nothing of it is an ES module (no module loader set up at start).
    expect(readFileSync(CLI, 'utf8')).toMatch(/^#!\/usr\/bin\/env node\n/)
    expect(readFileSync(CLI, 'utf8')).not.toMatch(/\bimport\.meta\b|^import /m)
    const r = spawnSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const { loadBundle } = await import(${JSON.stringify(join(CLI_DIR, 'launch.js'))})
         const b = loadBundle(${JSON.stringify(CLI_DIR)})
         console.log(JSON.stringify({ bundled: b !== null, cached: b?.cached }))`,
      ],
      { encoding: 'utf8' },
    )
    expect(r.stderr).toBe('')
    expect(JSON.parse(r.stdout)).toEqual({ bundled: true, cached: true })
    expect(buildId(readFileSync(join(CLI_DIR, BUNDLE), 'utf8'))).toMatch(/^[0-9a-f]{32}$/)
  })

  it('answers as the modules do: acks, a second process, refusals, usage errors', async () => {
    const bundled = tempDir()
    const modules = tempDir()
    const entry = `${JSON.stringify({ op: 'write', path: 'a', blob: blobOf(1) })}\n`
    const cases: { args: (root: string) => string[]; input?: string }[] = [
      { args: (root) => ['append', 'w', '--root', root, '--no-blob-check'], input: entry },
      // a second process appends after the first one's entry
      { args: (root) => ['append', 'w', '--root', root, '--no-blob-check'], input: entry },
      { args: (root) => ['append', 'w', '--root', root], input: entry }, // blob not stored
      { args: (root) => ['append', 'w', '--root', root], input: '{"op":"bogus"}\n' },
      { args: (root) => ['append', 'w', '--root', root], input: '{"op":"delete"\n' },
      { args: (root) => ['append', 'w', '--root', root, '--if-last-seq', '1'], input: entry },
      { args: (root) => ['append', '--root', root], input: entry },
      { args: (root) => ['append', 'w', '--root', root, '--nope'] },
      { args: (root) => ['log', 'w', '--root', root] },
      { args: (root) => ['recover', '--root', root] },
      { args: () => ['nope'] },
      { args: () => ['--version'] },
      { args: () => ['append', '--help'] },
    ]
    for (const c of cases) {
      const viaBundle = runCli(c.args(bundled), { input: c.input ?? '' })
      const viaModules = await runMainIo(c.args(modules), { input: c.input ?? '' })
      const shown = (r: { status: number; stdout: string; stderr: string }, root: string) => ({
        status: r.status,
        stdout: noTs(r.stdout).replaceAll(root, 'ROOT'),
        stderr: r.stderr.replaceAll(root, 'ROOT'),
      })
      expect(shown(viaBundle, bundled), c.args('ROOT').join(' ')).toEqual(shown(viaModules, modules))
    }
    // Both ways wrote the same log: two entries, the refused lines nothing.
    const log = runCli(['log', 'w', '--root', bundled]).stdout.trim().split('\n')
    expect(log.map((l) => (JSON.parse(l) as { seq: number }).seq)).toEqual([1, 2])
  })

  it('runs the same as bin.js, the entry as an ES module (node dist/src/cli/bin.js)', () => {
    const root = tempDir()
    const entry = `${JSON.stringify({ op: 'write', path: 'a', blob: blobOf(1) })}\n`
    const esm = (args: string[], input = '') =>
      spawnSync(process.execPath, [join(CLI_DIR, 'bin.js'), ...args], { input, encoding: 'utf8' })
    const a = esm(['append', 'w', '--root', root, '--no-blob-check'], entry)
    expect([a.status, noTs(a.stdout), a.stderr]).toEqual([0, '{"seq":1,"ts":T}\n', ''])
    const b = runCli(['append', 'w', '--root', root, '--no-blob-check'], { input: entry })
    expect([b.status, noTs(b.stdout), b.stderr]).toEqual([0, '{"seq":2,"ts":T}\n', ''])
    const bad = esm(['append', 'w', '--root', root], '{"op":"bogus"}\n')
    expect([bad.status, bad.stderr]).toEqual([
      1,
      runCli(['append', 'w', '--root', root], { input: '{"op":"bogus"}\n' }).stderr,
    ])
  })
})

describe('loadBundle', () => {
  /** A folder with a main.js and a bundle made after it (ending in the build's mark). */
  function folder(body: string, id = 'ab'.repeat(16)): string {
    const dir = `${tempDir()}/`
    writeFileSync(`${dir}main.js`, '')
    utimesSync(`${dir}main.js`, new Date(1000), new Date(1000))
    writeFileSync(`${dir}${BUNDLE}`, `${body}\n${BUILD_MARK}${id}`)
    return dir
  }

  it('runs a bundle, with its code cache once written, and not with another build’s', async () => {
    const dir = folder('module.exports.main = async (argv) => argv.length + 40')
    const first = loadBundle(dir)
    expect(first?.cached).toBe(false)
    expect(await first?.main(['a', 'b'])).toBe(42)
    if (first) writeCodeCache(dir, first)
    const second = loadBundle(dir)
    expect(second?.cached).toBe(true)
    expect(await second?.main([])).toBe(40)
    // Another build of the same length: V8 alone would take the cache; the build id refuses it.
    writeFileSync(
      `${dir}${BUNDLE}`,
      `module.exports.main = async (argv) => argv.length + 50\n${BUILD_MARK}${'cd'.repeat(16)}`,
    )
    const other = loadBundle(dir)
    expect(other?.cached).toBe(false)
    expect(await other?.main([])).toBe(50)
  })

  it('imports through the launcher (a vm.Script cannot on Node 20)', async () => {
    const dir = folder(
      'module.exports.main = async () => (await __noaImport("node:path")).posix.join("a", "b").length',
    )
    expect(await loadBundle(dir)?.main([])).toBe(3)
  })

  it('leaves the modules to load when the bundle is missing, older than them, or unmarked', () => {
    const dir = folder('module.exports.main = async () => 0')
    expect(loadBundle(dir)).not.toBeNull()
    utimesSync(`${dir}main.js`, new Date(), new Date()) // `tsc` ran since the build
    utimesSync(`${dir}${BUNDLE}`, new Date(1000), new Date(1000))
    expect(loadBundle(dir)).toBeNull()
    const unmarked = folder('module.exports.main = async () => 0', 'not-an-id')
    expect(loadBundle(unmarked)).toBeNull()
    expect(loadBundle(`${tempDir()}/`)).toBeNull()
    writeFileSync(`${dir}${CODE_CACHE}`, 'x') // a cache alone is no bundle
    expect(loadBundle(dir)).toBeNull()
  })
})
