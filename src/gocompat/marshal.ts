/**
 * The parts of Go's encoding/json that state.json and Compress inputs depend on when written:
 * - `MarshalIndent(v, "", "  ")`: one member per line, `{}`/`[]` when empty, no trailing newline;
 * - map keys sorted by their bytes (UTF-8 order = code point order, not UTF-16 order);
 * - Marshal of decoded `any` values (maps sorted, HTML characters escaped).
 */
import { type GoInt, goIntText } from './int.js'
import { goString } from './json.js'

/** A value ready to be written: encoded scalars, objects with their keys in order, arrays. */
export type GoNode = { raw: string } | { obj: Array<[string, GoNode]> } | { arr: GoNode[] }

export const raw = (text: string): GoNode => ({ raw: text })
export const str = (s: string): GoNode => ({ raw: goString(s) })
export const int = (n: GoInt): GoNode => ({ raw: goIntText(n) })
export const bool = (b: boolean): GoNode => ({ raw: b ? 'true' : 'false' })
export const NULL: GoNode = { raw: 'null' }

/** Orders strings as Go's `strings.Compare` does on their UTF-8 bytes. */
export function compareUtf8(a: string, b: string): number {
  const n = Math.min(a.length, b.length)
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i)
    const y = b.charCodeAt(i)
    if (x === y) continue
    // Surrogates (astral code points) sort after every BMP code point in UTF-8.
    const sx = x >= 0xd800 && x <= 0xdfff
    const sy = y >= 0xd800 && y <= 0xdfff
    if (sx !== sy) return sx ? 1 : -1
    return x < y ? -1 : 1
  }
  return a.length - b.length
}

/** A Go map: entries sorted by key. */
export function sortedObject(entries: Iterable<[string, GoNode]>): GoNode {
  return { obj: [...entries].sort((x, y) => compareUtf8(x[0], y[0])) }
}

function indentInto(node: GoNode, depth: number, out: string[]): void {
  if ('raw' in node) {
    out.push(node.raw)
    return
  }
  const inner = '  '.repeat(depth + 1)
  if ('arr' in node) {
    if (node.arr.length === 0) {
      out.push('[]')
      return
    }
    out.push('[')
    node.arr.forEach((item, i) => {
      out.push(i === 0 ? `\n${inner}` : `,\n${inner}`)
      indentInto(item, depth + 1, out)
    })
    out.push(`\n${'  '.repeat(depth)}]`)
    return
  }
  if (node.obj.length === 0) {
    out.push('{}')
    return
  }
  out.push('{')
  node.obj.forEach(([key, value], i) => {
    out.push(`${i === 0 ? '\n' : ',\n'}${inner}${goString(key)}: `)
    indentInto(value, depth + 1, out)
  })
  out.push(`\n${'  '.repeat(depth)}}`)
}

/** Go's `json.MarshalIndent(v, "", "  ")` of the prepared value. */
export function marshalIndent(node: GoNode): string {
  const out: string[] = []
  indentInto(node, 0, out)
  return out.join('')
}

/**
 * Go's `json.Marshal` of a value decoded into `any`: objects become maps (keys sorted), numbers
 * float64 (JSON.stringify writes them as Go does for finite values), strings HTML-escaped.
 */
export function marshalAny(value: unknown): string {
  if (value === null || value === undefined) return 'null'
  if (typeof value === 'string') return goString(value)
  if (typeof value === 'number') return Number.isFinite(value) ? JSON.stringify(value) : 'null'
  if (typeof value === 'boolean') return value ? 'true' : 'false'
  if (Array.isArray(value)) return `[${value.map(marshalAny).join(',')}]`
  const keys = Object.keys(value as object).sort(compareUtf8)
  return `{${keys.map((k) => `${goString(k)}:${marshalAny((value as Record<string, unknown>)[k])}`).join(',')}}`
}
