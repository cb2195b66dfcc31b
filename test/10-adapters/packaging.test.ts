/**
 * The adapters' packaging: each is a subpath export with types, its export list is pinned, and
 * `import 'noa'` reaches neither framework (they are optional peers).
 */
import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { describe, expect, it } from 'vitest'
import { DIST, ROOT_DIR } from '../helpers/index.js'

/** Every module `entry` imports, transitively, by specifier (relative ones resolved to files). */
function importGraph(entry: string): { files: Set<string>; packages: Set<string> } {
  const files = new Set<string>()
  const packages = new Set<string>()
  const todo = [entry]
  while (todo.length > 0) {
    const file = todo.pop() as string
    if (files.has(file)) continue
    files.add(file)
    const text = readFileSync(file, 'utf8')
    for (const m of text.matchAll(
      /(?:^|\n)\s*(?:import|export)\b[^'"]*?from\s*'([^']+)'|import\('([^']+)'\)/g,
    )) {
      const spec = (m[1] ?? m[2]) as string
      if (spec.startsWith('.')) todo.push(resolve(dirname(file), spec))
      else packages.add(spec)
    }
  }
  return { files, packages }
}

describe('adapter packaging', () => {
  it("keeps both frameworks out of import 'noa'", () => {
    const { files, packages } = importGraph(join(DIST, 'index.js'))
    expect(files.size).toBeGreaterThan(20)
    const frameworks = [...packages].filter((p) => p.startsWith('@langchain/') || p.startsWith('@openai/'))
    expect(frameworks).toEqual([])
    expect([...files].some((f) => f.includes('/langgraph/') || f.includes('/openai-agents/'))).toBe(false)
  })

  it('exports noa/langgraph and noa/openai-agents with types, as the package name resolves them', () => {
    const pkg = JSON.parse(readFileSync(join(ROOT_DIR, 'package.json'), 'utf8'))
    for (const sub of ['./langgraph', './openai-agents']) {
      const e = pkg.exports[sub]
      expect(Object.keys(e)).toEqual(['types', 'default']) // types first, as resolvers require
      expect(existsSync(join(ROOT_DIR, e.types))).toBe(true)
      expect(existsSync(join(ROOT_DIR, e.default))).toBe(true)
    }
    for (const peer of ['@langchain/core', '@langchain/langgraph-checkpoint', '@openai/agents']) {
      expect(pkg.peerDependenciesMeta[peer]).toEqual({ optional: true })
      expect(pkg.dependencies[peer]).toBeUndefined()
    }
    const r = spawnSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const lg = await import('noa/langgraph'); const oa = await import('noa/openai-agents');
         console.log(JSON.stringify([Object.keys(lg).sort(), Object.keys(oa).sort()]))`,
      ],
      { cwd: ROOT_DIR, encoding: 'utf8' },
    )
    expect(r.stderr).toBe('')
    expect(JSON.parse(r.stdout)).toEqual([['NoaSaver'], ['NoaSession']])
  })
})
