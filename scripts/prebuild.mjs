#!/usr/bin/env node
/**
 * Builds the addon from native/ and binding.gyp and stores it as this platform's prebuild,
 * prebuilds/<platform>-<arch>/noa_io.node, beside a manifest (noa_io.json) that names the
 * sources it was built from by SHA-256. A test compares those hashes with the sources in the
 * tree, so a change to native/ without a new prebuild fails `npm test`.
 *
 *   npm run build:prebuild
 *
 * The binary is stripped, and its needs are read from its ELF version references and written to
 * the manifest: the test holds them to what Node 20 itself needs (glibc 2.28, libstdc++ of GCC
 * 8), so the prebuild loads wherever Node does.
 */
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { copyFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const require = createRequire(import.meta.url)
const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex')

/** What the binary is made from: every file of native/ and binding.gyp, by content. */
export function prebuildInputs() {
  const files = [
    'binding.gyp',
    ...readdirSync(join(root, 'native'))
      .sort()
      .map((f) => `native/${f}`),
  ]
  const inputs = Object.fromEntries(files.map((f) => [f, sha256(readFileSync(join(root, f)))]))
  // The addon's C++ wrapper is compiled in, from the version installed.
  inputs['node-addon-api'] = JSON.parse(
    readFileSync(require.resolve('node-addon-api/package.json', { paths: [root] }), 'utf8'),
  ).version
  return inputs
}

/** The highest version of each ELF version namespace (GLIBC, GLIBCXX, CXXABI, GCC) the binary needs. */
function versionNeeds(file) {
  const out = execFileSync('objdump', ['-T', file], { encoding: 'utf8' })
  const needs = {}
  for (const m of out.matchAll(/\((GLIBC|GLIBCXX|CXXABI|GCC)_([0-9.]+)\)/g)) {
    const [, name, version] = m
    if (!needs[name] || compareVersions(version, needs[name]) > 0) needs[name] = version
  }
  return needs
}

function compareVersions(a, b) {
  const x = a.split('.').map(Number)
  const y = b.split('.').map(Number)
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0)
    if (d !== 0) return d
  }
  return 0
}

function main() {
  const platform = `${process.platform}-${process.arch}`
  const gyp = require.resolve('node-gyp/bin/node-gyp.js', { paths: [root] })
  execFileSync(process.execPath, [gyp, 'rebuild'], { cwd: root, stdio: 'inherit' })
  const built = join(root, 'build', 'Release', 'noa_io.node')
  const dir = join(root, 'prebuilds', platform)
  mkdirSync(dir, { recursive: true })
  const file = join(dir, 'noa_io.node')
  copyFileSync(built, file)
  if (process.platform === 'linux') execFileSync('strip', ['--strip-unneeded', file])
  const compiler = execFileSync(process.env.CXX || 'c++', ['--version'], { encoding: 'utf8' }).split('\n')[0]
  const manifest = {
    file: 'noa_io.node',
    platform: process.platform,
    arch: process.arch,
    napi: 8,
    sha256: sha256(readFileSync(file)),
    inputs: prebuildInputs(),
    needs: process.platform === 'linux' ? versionNeeds(file) : {},
    builtWith: { node: process.version, compiler },
  }
  writeFileSync(join(dir, 'noa_io.json'), `${JSON.stringify(manifest, null, 2)}\n`)
  process.stdout.write(
    `wrote ${relative(root, file)} (${readFileSync(file).length} bytes) and its manifest\n`,
  )
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main()
