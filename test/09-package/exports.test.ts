/**
 * The package's surface, pinned: for every entry of package.json `exports`, the names its built
 * module hands out (values at run time, types from its declaration file), sorted, one a line, in
 * `surface/<entry>.txt`. Adding, removing or renaming a public name shows up as a diff of that file
 * (update it with `npx vitest run test/09-package/exports.test.ts -u`).
 */
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'
import { ROOT_DIR } from '../helpers/index.js'

interface Target {
  types: string
  default: string
}

const pkg = JSON.parse(readFileSync(join(ROOT_DIR, 'package.json'), 'utf8')) as {
  exports: Record<string, Target | string>
}
const entries = Object.entries(pkg.exports).filter((e): e is [string, Target] => typeof e[1] !== 'string')

/** Exported names of each declaration file, split into values and types-only. */
function declared(files: string[]): Map<string, { values: string[]; types: string[] }> {
  const program = ts.createProgram(files, {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    noEmit: true,
    skipLibCheck: true,
  })
  const checker = program.getTypeChecker()
  const out = new Map<string, { values: string[]; types: string[] }>()
  for (const file of files) {
    const source = program.getSourceFile(file)
    const module = source && checker.getSymbolAtLocation(source)
    if (!module) throw new Error(`no declarations in ${file}`)
    const values: string[] = []
    const types: string[] = []
    for (const sym of checker.getExportsOfModule(module)) {
      const target = sym.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(sym) : sym
      const typeOnly = (sym.declarations ?? []).some(
        (d) => ts.isExportSpecifier(d) && (d.isTypeOnly || d.parent.parent.isTypeOnly),
      )
      if (!typeOnly && target.flags & ts.SymbolFlags.Value) values.push(sym.name)
      else types.push(sym.name)
    }
    out.set(file, { values: values.sort(), types: types.sort() })
  }
  return out
}

const subpath = (key: string) => (key === '.' ? 'noa' : `noa/${key.slice(2)}`)
const declarations = declared(entries.map(([, t]) => join(ROOT_DIR, t.types)))

describe('the export map', () => {
  it('lists the root, a subpath per layer and the adapters, each with types first', () => {
    expect(entries.map(([k]) => subpath(k))).toEqual([
      'noa',
      'noa/engine',
      'noa/store',
      'noa/gocompat',
      'noa/transcript',
      'noa/memory',
      'noa/context',
      'noa/replicate',
      'noa/serve',
      'noa/langgraph',
      'noa/openai-agents',
    ])
    for (const [key, target] of entries) {
      expect(Object.keys(target), key).toEqual(['types', 'default'])
      expect(target.types, key).toBe(target.default.replace(/\.js$/, '.d.ts'))
    }
  })

  it.each(entries)('%s: the names it hands out are pinned', async (key, target) => {
    const mod = (await import(pathToFileURL(join(ROOT_DIR, target.default)).href)) as object
    const runtime = Object.keys(mod).sort()
    const names = declarations.get(join(ROOT_DIR, target.types))
    if (!names) throw new Error(`no declarations for ${key}`)
    // What runs and what is declared agree: no value exported without a type, nor the reverse.
    expect(runtime).toEqual(names.values)
    const listing = [...names.values.map((n) => `value ${n}`), ...names.types.map((n) => `type ${n}`)]
    const file = key === '.' ? 'root' : key.slice(2)
    await expect(`${listing.join('\n')}\n`).toMatchFileSnapshot(`./surface/${file}.txt`)
  })

  it('the root hands out the host classes and their types only, none of the helpers', async () => {
    const root = (await import(pathToFileURL(join(ROOT_DIR, 'dist/src/index.js')).href)) as object
    expect(Object.keys(root).sort()).toEqual([
      'AgentLog',
      'NOA_ERROR_CODES',
      'NoaError',
      'ObjectStore',
      'SnapshotEngine',
      'isNoaError',
    ])
  })

  it('the imports of the README and docs/ name only what each entry hands out', () => {
    const readme = [
      'README.md',
      ...readdirSync(join(ROOT_DIR, 'docs'))
        .filter((f) => f.endsWith('.md'))
        .map((f) => `docs/${f}`),
    ]
      .map((f) => readFileSync(join(ROOT_DIR, f), 'utf8'))
      .join('\n')
    const byEntry = new Map(
      entries.map(([key, t]) => {
        const names = declarations.get(join(ROOT_DIR, t.types))
        return [subpath(key), new Set([...(names?.values ?? []), ...(names?.types ?? [])])] as const
      }),
    )
    const unknown: string[] = []
    let count = 0
    for (const m of readme.matchAll(/^import (?:type )?\{([^}]*)\}\s*from '(noa[^']*)'/gms)) {
      const names = byEntry.get(m[2] as string)
      for (const raw of (m[1] as string).split(',')) {
        const name = raw
          .replace(/\/\/.*$/gm, '')
          .trim()
          .replace(/^type /, '')
        if (name === '') continue
        count++
        if (!names?.has(name)) unknown.push(`${m[2]}: ${name}`)
      }
    }
    expect(count).toBeGreaterThan(60)
    expect(unknown).toEqual([])
  })
})
