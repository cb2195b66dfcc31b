#!/usr/bin/env node
/**
 * Part of `npm run build`, after tsc: bundles the `noa` command (dist/src/cli/main.js and all it
 * loads) into dist/src/cli/noa.cjs with esbuild, then makes its V8 code cache,
 * dist/src/cli/noa.cjs.cache, from a warm-up run of `noa append` in this process, and makes
 * bin.js with launch.js into dist/src/cli/bin.cjs, the command's CommonJS entry (package.json
 * "bin"), which loads them (see src/cli/launch.ts). The library's own modules are not bundled.
 *
 * The bundle sits in dist/src/cli/, where the modules' `new URL('../x/y.js', import.meta.url)`
 * resolve as they do from their own folders; the build checks that each one names a file there,
 * and that no dynamic import of a module of ours was left to load a second copy of it.
 */
import { randomBytes } from 'node:crypto'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { PassThrough, Writable } from 'node:stream'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { build } from 'esbuild'

const root = fileURLToPath(new URL('..', import.meta.url))
const cliDir = join(root, 'dist', 'src', 'cli')
const launch = await import(pathToFileURL(join(cliDir, 'launch.js')).href)
const outfile = join(cliDir, launch.BUNDLE)
const META_URL = '__noaImportMetaUrl'

await build({
  entryPoints: [join(cliDir, 'main.js')],
  outfile,
  bundle: true,
  format: 'cjs',
  platform: 'node',
  target: 'node20',
  // Dependencies stay packages, required from node_modules as the modules import them.
  packages: 'external',
  define: { 'import.meta.url': META_URL },
  banner: { js: `var ${META_URL} = require('node:url').pathToFileURL(__filename).href;` },
  footer: { js: `${launch.BUILD_MARK}${randomBytes(16).toString('hex')}` },
  // Less to read and to check against the cache at each start; names stay (errors, stacks).
  minifyWhitespace: true,
  minifySyntax: true,
  logLevel: 'warning',
})

let source = readFileSync(outfile, 'utf8')
const problems = []
for (const m of source.matchAll(new RegExp(`new URL\\(("[^"]*")\\s*,\\s*${META_URL}\\)`, 'g'))) {
  const target = resolve(cliDir, JSON.parse(m[1]))
  if (!existsSync(target)) problems.push(`new URL(${m[1]}) names ${target}, which is not there`)
}
// A script compiled with a code cache (vm.Script) cannot import() on Node 20 without a flag, so
// each import() goes through one the launcher (launch.ts, in bin.cjs) passes in, from this same
// folder, so a package resolves as it would from the bundle. Only a package by name, or a user's ioModule (a URL),
// may be imported at run time: a module of ours left to a runtime import() would be a second copy.
source = source.replace(/\bimport\(([^)]*)\)/g, (all, arg) => {
  if (/^"[^".][^"]*"$/.test(arg) || arg === 'ioModule') return `${launch.IMPORT}(${arg})`
  problems.push(`import(${arg}) is left to run time`)
  return all
})
if (problems.length) {
  rmSync(outfile, { force: true })
  throw new Error(`bundle-cli: ${outfile} would not run as the modules do:\n  ${problems.join('\n  ')}`)
}
writeFileSync(outfile, source)

// The entry: bin.js and launch.js as CommonJS; main.js stays the modules' (the fallback).
await build({
  entryPoints: [join(cliDir, 'bin.js')],
  outfile: join(cliDir, 'bin.cjs'),
  bundle: true,
  format: 'cjs',
  platform: 'node',
  target: 'node20',
  external: ['./main.js'],
  define: { 'import.meta.url': META_URL },
  banner: { js: `var ${META_URL} = require('node:url').pathToFileURL(__filename).href;` },
  logLevel: 'warning',
})

// The code cache holds the functions compiled by the time it is made: those of an append.
const bundle = launch.loadBundle(`${cliDir}/`)
const dir = mkdtempSync(join(tmpdir(), 'noa-bundle-'))
try {
  const out = []
  const sink = () =>
    new Writable({
      write(chunk, _encoding, done) {
        out.push(String(chunk))
        done()
      },
    })
  const stdin = new PassThrough()
  stdin.end(`{"op":"write","path":"a","blob":"${'ab'.repeat(32)}"}\n`)
  const io = { stdin, stdout: sink(), stderr: sink(), env: {}, isTTY: false }
  const code = await bundle.main(['append', 'w', '--root', dir, '--no-blob-check'], io)
  if (code !== 0) throw new Error(`bundle-cli: the warm-up append failed (${code}): ${out.join('')}`)
  launch.writeCodeCache(`${cliDir}/`, bundle)
} finally {
  rmSync(dir, { recursive: true, force: true })
}
