/**
 * The Node versions noa names, against what its installed packages declare (package-lock.json):
 * - to use noa: package.json's engines.node (>= 20.17); every runtime dependency admits it;
 * - to develop it (npm install with the dev dependencies): Node >= 20.19, as vitest's vite 8
 *   needs; there, npm warns EBADENGINE for openai alone (every openai 7.x declares Node >= 22,
 *   and @openai/agents >= 0.20, which the Agents adapter is built against, needs openai ^7.2, so
 *   no version pins it away). The warning is harmless: the adapter's tests pass on Node 20.
 *   Node >= 22.13 installs without any warning.
 * A dependency bumped to one that wants a newer Node fails here, naming it.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { ROOT_DIR } from '../helpers/index.js'

type Version = [number, number, number]

/** `20`, `20.x`, `6.*`, `18.17`, `20.17.0` → the lowest version and how many parts were given. */
function parse(text: string): { v: Version; given: number } {
  const parts = text.replace(/^v/, '').split('.')
  const nums: number[] = []
  for (const p of parts) {
    if (p === 'x' || p === '*' || p === '') break
    nums.push(Number(p))
  }
  return { v: [nums[0] ?? 0, nums[1] ?? 0, nums[2] ?? 0], given: nums.length }
}

function cmp(a: Version, b: Version): number {
  return a[0] - b[0] || a[1] - b[1] || a[2] - b[2]
}

/** The upper bound (exclusive) of an X-range or caret range: the next of the last given part. */
function bump(v: Version, at: number): Version {
  return [at === 0 ? v[0] + 1 : v[0], at === 1 ? v[1] + 1 : at === 0 ? 0 : v[1], at === 2 ? v[2] + 1 : 0]
}

/** npm's range grammar as package engines use it: `||` of space-separated comparators. */
function satisfies(version: string, range: string): boolean {
  const v = parse(version).v
  return range.split('||').some((set) => {
    const words = set
      .trim()
      .replace(/(>=|<=|>|<|=|\^|~)\s+/g, '$1')
      .split(/\s+/)
    return words.every((w) => {
      const [, op = '', rest = ''] = /^(>=|<=|>|<|=|\^|~)?(.*)$/.exec(w) ?? []
      if (rest === '*' || rest === '') return true
      const { v: b, given } = parse(rest)
      const c = cmp(v, b)
      if (op === '>=') return c >= 0
      if (op === '>') return c > 0
      if (op === '<=') return c <= 0
      if (op === '<') return c < 0
      let upper: Version
      if (op === '^') upper = bump(b, b[0] > 0 ? 0 : b[1] > 0 ? 1 : 2)
      else if (op === '~') upper = bump(b, given >= 2 ? 1 : 0)
      else if (given === 0)
        return true // `x`
      else if (given === 3) return c === 0
      else upper = bump(b, given - 1) // `20`, `6.*`: that major (or minor)
      return c >= 0 && cmp(v, upper) < 0
    })
  })
}

const pkg = JSON.parse(readFileSync(join(ROOT_DIR, 'package.json'), 'utf8')) as { engines: { node: string } }
const lock = JSON.parse(readFileSync(join(ROOT_DIR, 'package-lock.json'), 'utf8')) as {
  packages: Record<string, { version?: string; dev?: boolean; engines?: { node?: string } | string[] }>
}

/** Each installed package (name@version) whose declared Node range does not admit `node`. */
function refusing(node: string, which: (entry: { dev?: boolean }) => boolean): string[] {
  const out: string[] = []
  for (const [path, entry] of Object.entries(lock.packages)) {
    const range = !Array.isArray(entry.engines) ? entry.engines?.node : undefined
    if (!path || !range || !which(entry)) continue
    if (!satisfies(node, range))
      out.push(`${path.replace(/^.*node_modules\//, '')}@${entry.version} (${range})`)
  }
  return out
}

describe('Node versions', () => {
  it('reads ranges as npm does', () => {
    expect(satisfies('20.17.0', '>=20.17')).toBe(true)
    expect(satisfies('20.16.9', '>=20.17')).toBe(false)
    expect(satisfies('20.18.0', '^20.19.0 || >=22.12.0')).toBe(false)
    expect(satisfies('20.19.0', '^20.19.0 || >=22.12.0')).toBe(true)
    expect(satisfies('21.0.0', '^20.19.0 || >=22.12.0')).toBe(false)
    expect(satisfies('20.17.0', '18 || 20 || >=22')).toBe(true)
    expect(satisfies('21.1.0', '18 || 20 || >=22')).toBe(false)
    expect(satisfies('20.0.0', '>= 18.x')).toBe(true)
    expect(satisfies('20.0.0', '>=0.6.11 <=0.7.0 || >=0.7.3')).toBe(true)
    expect(satisfies('20.0.0', '6.* || 8.* || >= 10.*')).toBe(true)
    expect(satisfies('9.1.0', '6.* || 8.* || >= 10.*')).toBe(false)
  })

  it("every runtime dependency admits the Node that package.json's engines names", () => {
    const min = pkg.engines.node.replace(/^>=\s*/, '')
    expect(min).toBe('20.17')
    expect(refusing(min, (e) => !e.dev)).toEqual([])
  })

  it('developing: Node 20.19 warns for openai alone; Node 22.13 and 24 for none', () => {
    const dev = () => true
    expect(refusing('20.19.0', dev).map((p) => p.replace(/@.*/, ''))).toEqual(['openai'])
    expect(refusing('22.13.0', dev)).toEqual([])
    expect(refusing('24.0.0', dev)).toEqual([])
  })
})
