/**
 * A session item is stored as its JSON, so an item JSON cannot give back is refused by
 * `addItems` (NOA_BAD_ARGUMENT naming the item, the path inside it and what is there) before
 * anything is written, instead of coming back changed: a Map or Set as `{}`, a Date as a string,
 * a Uint8Array as an object of indexes, NaN as null, a function or Symbol left out.
 *
 * What is stored is what the Agents SDK's own items are made of (its MemorySession snapshot
 * check accepts the same shapes): null, booleans, strings, finite numbers, arrays and plain
 * objects (of Object.prototype or none) with string keys. Refused: functions, Symbols (as
 * values or keys), BigInts, NaN and ±Infinity, `undefined` in an array (JSON writes null),
 * objects of any other class (Map, Set, Date, RegExp, Error, Uint8Array and Buffer, class
 * instances), cycles. An object property whose value is `undefined` is stored without it, as
 * JSON does and as the SDK's types mean it (`field?: T`: absent and undefined are the same
 * value); -0 is stored as 0.
 */
import { describe } from '../adapters/names.js'
import { Errors } from '../engine/errors.js'

/** The item's JSON bytes, or NOA_BAD_ARGUMENT naming item `index` and what in it JSON cannot keep. */
export function encodeItem(item: unknown, index: number): Buffer {
  if (typeof item !== 'object' || item === null || Array.isArray(item)) {
    throw Errors.BAD_ARGUMENT(`addItems: item ${index} must be an object, got ${describe(item)}`, {
      field: `items[${index}]`,
    })
  }
  const problem = jsonProblem(item, '', [], [])
  if (problem !== null) {
    throw Errors.BAD_ARGUMENT(
      `addItems: item ${index} cannot be stored as JSON: ${problem.path === '' ? '' : `at ${problem.path}, `}${problem.why}; nothing was written`,
      { field: `items[${index}]`, path: `$${problem.path}` },
    )
  }
  return Buffer.from(JSON.stringify(item), 'utf8')
}

interface Problem {
  path: string
  why: string
}

function at(path: string, key: string | number): string {
  if (typeof key === 'number') return `${path}[${key}]`
  return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`
}

/** The first thing under `v` that JSON would not give back as it is, or null. */
function jsonProblem(v: unknown, path: string, ancestors: object[], paths: string[]): Problem | null {
  switch (typeof v) {
    case 'string':
    case 'boolean':
      return null
    case 'number':
      return Number.isFinite(v) ? null : { path, why: `${v} (JSON writes null for it)` }
    case 'bigint':
      return { path, why: 'a BigInt (JSON has no such number: store it as a string)' }
    case 'function':
      return { path, why: 'a function (JSON leaves it out)' }
    case 'symbol':
      return { path, why: 'a Symbol (JSON leaves it out)' }
    case 'undefined':
      return { path, why: 'undefined (JSON has no undefined)' }
  }
  if (v === null) return null
  const o = v as object
  const up = ancestors.indexOf(o)
  if (up >= 0) {
    const to = paths[up] === '' ? 'the item itself' : paths[up]
    return { path, why: `a cycle (it refers back to ${to})` }
  }
  ancestors.push(o)
  paths.push(path)
  try {
    if (Array.isArray(o)) {
      for (let i = 0; i < o.length; i++) {
        const x = o[i]
        if (x === undefined) {
          return {
            path: at(path, i),
            why: `${i in o ? 'undefined' : 'a hole'} in an array (JSON writes null)`,
          }
        }
        const p = jsonProblem(x, at(path, i), ancestors, paths)
        if (p) return p
      }
      return null
    }
    const proto = Object.getPrototypeOf(o)
    if (proto !== Object.prototype && proto !== null) {
      const name = (proto as { constructor?: { name?: unknown } }).constructor?.name
      const what = typeof name === 'string' && name !== '' ? `a ${name}` : 'an object of a class'
      const shown = showJson(o)
      return {
        path,
        why: `${what} (JSON keeps no ${typeof name === 'string' && name !== '' ? name : 'class'}${shown === null ? '' : `: it would come back as ${shown}`})`,
      }
    }
    if (Object.getOwnPropertySymbols(o).length > 0) {
      return { path, why: 'a Symbol key (JSON leaves it out)' }
    }
    for (const k of Object.keys(o)) {
      const x = (o as Record<string, unknown>)[k]
      if (x === undefined) continue // left out, as JSON does: absent and undefined are the same field
      const p = jsonProblem(x, at(path, k), ancestors, paths)
      if (p) return p
    }
    return null
  } finally {
    ancestors.pop()
    paths.pop()
  }
}

/** What JSON makes of a value, short (for messages), or null when it cannot say. */
function showJson(v: unknown): string | null {
  try {
    const s = JSON.stringify(v)
    if (s === undefined) return null
    return s.length > 40 ? `${s.slice(0, 37)}...` : s
  } catch {
    return null
  }
}
