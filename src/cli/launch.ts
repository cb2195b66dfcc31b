/**
 * How `noa` starts in a fresh process. The build bundles main.ts and everything it loads into
 * one CommonJS file beside it (noa.cjs, scripts/bundle-cli.mjs), with a V8 code cache made from a
 * run of `noa append` (noa.cjs.cache). Node 20 has no compile cache of its own, and ES modules
 * cannot take one: as ~50 modules, every file is resolved, read, compiled and linked, and each
 * `node:` import gets a module facade, which made a one-entry append about twice Node's own start.
 * From the bundle, a start is one read, one deserialization, and CommonJS requires of builtins.
 *
 * The command's entry is bin.cjs, which the build makes from bin.ts and this module: a start
 * then loads no ES module at all (setting up Node's ES module loader for an entry costs several
 * ms); bin.js, the same as a module, still runs. This module imports nothing (builtins come from
 * process.getBuiltinModule). Either file missing, the bundle older than the modules it was made
 * from (a `tsc` run since the build), or a cache made for another bundle or another V8: the
 * modules load as modules, or the bundle compiles without its cache.
 */
import type * as Fs from 'node:fs'
import type * as Module from 'node:module'
import type * as Vm from 'node:vm'
import type { main as Main } from './main.js'

export const BUNDLE = 'noa.cjs'
export const CODE_CACHE = 'noa.cjs.cache'
/** The last line of a bundle: the build's id, which its code cache starts with. */
export const BUILD_MARK = '//# noa-build '
/** What the bundle calls for `import()`: a vm.Script cannot import on Node 20 (without a flag). */
export const IMPORT = '__noaImport'
const ID_BYTES = 16

export interface Bundle {
  main: typeof Main
  /** What the build runs to make the code cache after a warm-up. */
  script: Vm.Script
  /** The build id the bundle ends with. */
  id: string
  /** Whether a code cache was there for this bundle and V8 took it. */
  cached: boolean
}

function builtin<T>(id: string): T {
  return process.getBuiltinModule(id) as T
}

/** The bundle in `dir` (a folder path ending in `/`), or null when the modules must be loaded instead. */
export function loadBundle(dir: string): Bundle | null {
  const fs = builtin<typeof Fs>('node:fs')
  const filename = dir + BUNDLE
  let source: string
  try {
    // A bundle made before the modules were last compiled would run older code than theirs.
    if (fs.statSync(filename).mtimeMs < fs.statSync(`${dir}main.js`).mtimeMs) return null
    source = fs.readFileSync(filename, 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
    throw err
  }
  const id = buildId(source)
  if (id === null) return null
  // V8 checks a cache's version, flags and source length, not the source itself: the id does.
  let cachedData: Buffer | undefined
  try {
    const data = fs.readFileSync(dir + CODE_CACHE)
    if (data.subarray(0, ID_BYTES).toString('hex') === id) cachedData = data.subarray(ID_BYTES)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
  }
  const vm = builtin<typeof Vm>('node:vm')
  const script = new vm.Script(
    `(function (exports, require, module, __filename, __dirname, ${IMPORT}) {${source}\n})`,
    { filename, cachedData },
  )
  const module = { exports: {} as { main?: typeof Main } }
  const { createRequire } = builtin<typeof Module>('node:module')
  const load = (specifier: string) => import(specifier)
  script.runInThisContext()(module.exports, createRequire(filename), module, filename, dir.slice(0, -1), load)
  const main = module.exports.main
  if (typeof main !== 'function') throw new Error(`${filename} does not export main`)
  return { main, script, id, cached: cachedData !== undefined && !script.cachedDataRejected }
}

/** The build id at the end of a bundle's source, or null when it has none. */
export function buildId(source: string): string | null {
  const at = source.lastIndexOf(BUILD_MARK)
  if (at < 0) return null
  const id = source.slice(at + BUILD_MARK.length).trim()
  return /^[0-9a-f]{32}$/.test(id) ? id : null
}

/** Writes the code cache of a bundle that has run (so it holds the functions that run compiled). */
export function writeCodeCache(dir: string, bundle: Bundle): void {
  const fs = builtin<typeof Fs>('node:fs')
  const data = bundle.script.createCachedData()
  fs.writeFileSync(dir + CODE_CACHE, Buffer.concat([Buffer.from(bundle.id, 'hex'), data]))
}
