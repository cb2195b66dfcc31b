/**
 * JSON text to a tree, as Go's decoder reads it (the tree keeps what JSON.parse loses):
 * - every member of an object in order, duplicates included (Go decodes each one in turn);
 * - each number's text (Go refuses `1.0` or `1e3` for an int, and ints go past 2^53);
 * - each value's span in the text (a `json.RawMessage` is the value's exact text);
 * - strings unquoted as Go unquotes them: each byte that is not UTF-8 becomes U+FFFD, and so
 *   does a `\uXXXX` surrogate escape that is not half of a pair (JSON.parse keeps it as a lone
 *   surrogate, which no Go string can hold).
 * Syntax errors carry Go's message (scan.ts). Input is text from `decodeBytes` (utf8.ts), or any
 * JavaScript string.
 */
import { goSyntaxError, MAX_NESTING_DEPTH } from './scan.js'
import { isEscapedByte } from './utf8.js'

export type JsonNode =
  | { k: 'null'; s: number; e: number }
  | { k: 'bool'; v: boolean; s: number; e: number }
  | { k: 'num'; text: string; s: number; e: number }
  | { k: 'str'; v: string; s: number; e: number }
  | { k: 'arr'; items: JsonNode[]; s: number; e: number }
  | { k: 'obj'; members: Array<[string, JsonNode]>; s: number; e: number }

/** Text Go's `json.Unmarshal` refuses before decoding anything. `message` is Go's. */
export class GoSyntaxError extends Error {
  override name = 'GoSyntaxError'
}

class Invalid extends Error {}
const INVALID = new Invalid()

function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09
}

function hex4(s: string, i: number): number {
  let v = 0
  for (let k = 0; k < 4; k++) {
    const c = s.charCodeAt(i + k)
    let d: number
    if (c >= 0x30 && c <= 0x39) d = c - 0x30
    else if (c >= 0x61 && c <= 0x66) d = c - 0x57
    else if (c >= 0x41 && c <= 0x46) d = c - 0x37
    else return -1
    v = v * 16 + d
  }
  return v
}

const SIMPLE_ESCAPES: Record<number, string> = {
  34: '"',
  92: '\\',
  47: '/',
  98: '\b',
  102: '\f',
  110: '\n',
  114: '\r',
  116: '\t',
}

/**
 * Go's `unquote` of the string literal whose opening quote is at `i`: the value and the index
 * after the closing quote. Throws INVALID on anything the scanner refuses.
 */
function readString(s: string, i: number, notes?: ParseNotes): [string, number] {
  let j = i + 1
  // Fast path: no escapes, no escaped bytes, no control characters.
  for (;;) {
    const c = s.charCodeAt(j)
    if (c === 0x22) return [s.slice(i + 1, j), j + 1]
    if (c === 0x5c || c < 0x20 || Number.isNaN(c) || (c >= 0xdc80 && c <= 0xdcff)) break
    j++
  }
  let out = s.slice(i + 1, j)
  for (;;) {
    const c = s.charCodeAt(j)
    if (Number.isNaN(c) || c < 0x20) throw INVALID
    if (c === 0x22) return [out, j + 1]
    if (c === 0x5c) {
      const e = s.charCodeAt(j + 1)
      const simple = SIMPLE_ESCAPES[e]
      if (simple !== undefined) {
        out += simple
        j += 2
        continue
      }
      if (e !== 0x75) throw INVALID
      const r = hex4(s, j + 2)
      if (r < 0) throw INVALID
      j += 6
      if (r >= 0xd800 && r <= 0xdfff) {
        // Go: a high surrogate followed by a `\u` low surrogate is one rune; anything else is U+FFFD.
        if (r <= 0xdbff && s.charCodeAt(j) === 0x5c && s.charCodeAt(j + 1) === 0x75) {
          const r2 = hex4(s, j + 2)
          if (r2 >= 0xdc00 && r2 <= 0xdfff) {
            out += String.fromCharCode(r, r2)
            j += 6
            continue
          }
        }
        if (notes && notes.loneSurrogate < 0) notes.loneSurrogate = j - 6
        out += '\ufffd'
        continue
      }
      out += String.fromCharCode(r)
      continue
    }
    if (c >= 0xdc80 && c <= 0xdcff && isEscapedByte(s, j)) {
      if (notes && notes.invalidByte < 0) notes.invalidByte = j
      out += '\ufffd'
    } else out += s[j]
    j++
  }
}

/** What Go's decoding replaced by U+FFFD, for callers that refuse it: code unit offsets, -1 if none. */
export interface ParseNotes {
  /** The first `\uXXXX` escape of half a surrogate pair. */
  loneSurrogate: number
  /** The first byte in a string that is not UTF-8. */
  invalidByte: number
}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39
}

/** Index after the digits starting at `j` (at least one, else INVALID). */
function digits(s: string, j: number): number {
  if (!isDigit(s.charCodeAt(j))) throw INVALID
  let k = j + 1
  while (isDigit(s.charCodeAt(k))) k++
  return k
}

function readNumber(s: string, i: number): number {
  let j = i
  if (s.charCodeAt(j) === 0x2d) j++
  j = s.charCodeAt(j) === 0x30 ? j + 1 : digits(s, j)
  if (s.charCodeAt(j) === 0x2e) j = digits(s, j + 1)
  const c = s.charCodeAt(j)
  if (c === 0x65 || c === 0x45) {
    j++
    const sign = s.charCodeAt(j)
    if (sign === 0x2b || sign === 0x2d) j++
    j = digits(s, j)
  }
  return j
}

interface Frame {
  node: Extract<JsonNode, { k: 'arr' } | { k: 'obj' }>
  key: string | undefined
}

function parseTree(s: string, notes?: ParseNotes): JsonNode {
  const n = s.length
  let i = 0
  const skip = () => {
    while (i < n && isSpace(s.charCodeAt(i))) i++
  }
  const stack: Frame[] = []
  let root: JsonNode | undefined
  for (;;) {
    // At a value.
    skip()
    const c = s.charCodeAt(i)
    let value: JsonNode | undefined
    if (c === 0x7b || c === 0x5b) {
      if (stack.length >= MAX_NESTING_DEPTH) throw INVALID
      const node: Frame['node'] =
        c === 0x7b ? { k: 'obj', members: [], s: i, e: -1 } : { k: 'arr', items: [], s: i, e: -1 }
      i++
      skip()
      const close = c === 0x7b ? 0x7d : 0x5d
      if (s.charCodeAt(i) === close) {
        i++
        node.e = i
        value = node
      } else {
        const frame: Frame = { node, key: undefined }
        stack.push(frame)
        if (node.k === 'obj') {
          if (s.charCodeAt(i) !== 0x22) throw INVALID
          const [key, after] = readString(s, i, notes)
          i = after
          skip()
          if (s.charCodeAt(i) !== 0x3a) throw INVALID
          i++
          frame.key = key
        }
        continue
      }
    } else if (c === 0x22) {
      const [v, after] = readString(s, i, notes)
      value = { k: 'str', v, s: i, e: after }
      i = after
    } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      const end = readNumber(s, i)
      value = { k: 'num', text: s.slice(i, end), s: i, e: end }
      i = end
    } else if (s.startsWith('true', i)) {
      value = { k: 'bool', v: true, s: i, e: i + 4 }
      i += 4
    } else if (s.startsWith('false', i)) {
      value = { k: 'bool', v: false, s: i, e: i + 5 }
      i += 5
    } else if (s.startsWith('null', i)) {
      value = { k: 'null', s: i, e: i + 4 }
      i += 4
    } else throw INVALID
    // After a value: attach it, then close containers or go on to the next member.
    for (;;) {
      const top = stack[stack.length - 1]
      if (top === undefined) {
        root = value
        skip()
        if (i !== n) throw INVALID
        return root
      }
      if (top.node.k === 'obj') top.node.members.push([top.key as string, value])
      else top.node.items.push(value)
      skip()
      const d = s.charCodeAt(i)
      if (d === 0x2c) {
        i++
        if (top.node.k === 'obj') {
          skip()
          if (s.charCodeAt(i) !== 0x22) throw INVALID
          const [key, after] = readString(s, i, notes)
          i = after
          skip()
          if (s.charCodeAt(i) !== 0x3a) throw INVALID
          i++
          top.key = key
        }
        break
      }
      if (d === (top.node.k === 'obj' ? 0x7d : 0x5d)) {
        i++
        top.node.e = i
        stack.pop()
        value = top.node
        continue
      }
      throw INVALID
    }
  }
}

/** Parses one JSON value; throws GoSyntaxError with Go's message when Go would refuse it. */
export function parseGoJson(text: string, notes?: ParseNotes): JsonNode {
  try {
    return parseTree(text, notes)
  } catch (err) {
    if (err !== INVALID) throw err
    throw new GoSyntaxError(goSyntaxError(text) ?? 'invalid JSON')
  }
}

/** The node as JSON.parse would give it (objects: last duplicate wins), strings unquoted as Go does. */
export function plainValue(node: JsonNode): unknown {
  switch (node.k) {
    case 'null':
      return null
    case 'bool':
      return node.v
    case 'num':
      return Number(node.text)
    case 'str':
      return node.v
    case 'arr':
      return node.items.map(plainValue)
    case 'obj': {
      const o: Record<string, unknown> = {}
      for (const [k, v] of node.members) defineValue(o, k, plainValue(v))
      return o
    }
  }
}

/** `o[k] = v` as an own property even for `__proto__` (what JSON.parse does). */
export function defineValue(o: Record<string, unknown>, k: string, v: unknown): void {
  if (k === '__proto__')
    Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true })
  else o[k] = v
}
