/**
 * Go's `json.Unmarshal` into a described Go type, rule for rule (Go 1.19 and later):
 * - an object member fills the field whose JSON name equals its key, else the first field whose
 *   name equals it case-insensitively (Unicode simple folding: `ſ` is an `s`, the Kelvin sign a
 *   `k`); other members are skipped (or collected, for hosts that keep them);
 * - a member that repeats is decoded again *into* what the first one left: structs and pointed-to
 *   structs merge field by field, maps gain keys, a slice's elements are decoded into the elements
 *   already there (even past its current length, within what was decoded before: Go reuses the
 *   backing array), a `json.RawMessage`, string, int or bool is replaced;
 * - `null` leaves a string, int, bool or struct as it is, makes a pointer, slice or map nil and a
 *   RawMessage the text `null`; `[]` is an empty slice (a fresh one);
 * - an int takes a JSON number that `strconv.ParseInt(s, 10, 64)` reads (no fraction, no
 *   exponent, within int64); anything else is a type error;
 * - the first type error is what Unmarshal returns, worded as Go words it
 *   (`json: cannot unmarshal number 1.5 into Go struct field Usage.usage.input_tokens of type int`).
 *
 * Values are described by `GoType`s and held as `GoValue`s (see below); callers turn them into
 * their own shapes.
 */
import { type GoInt, parseGoInt } from './int.js'
import { type JsonNode, parseGoJson, plainValue } from './parse.js'

export type GoType =
  | { kind: 'string'; name: string }
  | { kind: 'int'; name: string }
  | { kind: 'bool' }
  | { kind: 'raw' }
  | { kind: 'slice'; name: string; elem: GoType }
  | { kind: 'map'; name: string; elem: GoType }
  | { kind: 'ptr'; elem: GoStruct }
  | GoStruct

export interface GoStruct {
  kind: 'struct'
  /** As `reflect.Type.String()` prints it: `llm.Message`. */
  name: string
  fields: GoField[]
}

export interface GoField {
  /** The JSON name (the tag's). */
  key: string
  type: GoType
}

/** A struct value: every field, and (when asked for) the members no field took. */
export interface GoObject {
  fields: Record<string, GoValue>
  /** Members that matched no field, as JSON.parse would give them (last duplicate wins). */
  unknown: Map<string, unknown> | undefined
}

/** A slice: `backing` holds every element decoded so far, `len` how many are in the slice. */
export interface GoSlice {
  backing: GoValue[]
  len: number
}

export type GoValue = string | GoInt | boolean | GoObject | GoSlice | Map<string, GoValue> | null

export const STRING: GoType = { kind: 'string', name: 'string' }
export const INT: GoType = { kind: 'int', name: 'int' }
export const INT64: GoType = { kind: 'int', name: 'int64' }
export const BOOL: GoType = { kind: 'bool' }
export const RAW: GoType = { kind: 'raw' }

export function sliceOf(elem: GoType): GoType {
  return { kind: 'slice', name: `[]${typeName(elem)}`, elem }
}

export function mapOf(elem: GoType): GoType {
  return { kind: 'map', name: `map[string]${typeName(elem)}`, elem }
}

export function typeName(t: GoType): string {
  switch (t.kind) {
    case 'bool':
      return 'bool'
    case 'raw':
      return 'json.RawMessage'
    case 'ptr':
      return `*${t.elem.name}`
    default:
      return t.name
  }
}

/** Go's zero value of `t`. */
export function zeroOf(t: GoType): GoValue {
  switch (t.kind) {
    case 'string':
      return ''
    case 'int':
      return 0
    case 'bool':
      return false
    case 'struct': {
      const fields: Record<string, GoValue> = {}
      for (const f of t.fields) fields[f.key] = zeroOf(f.type)
      return { fields, unknown: undefined }
    }
    default:
      return null
  }
}

/** The elements in the slice (nil gives undefined). */
export function sliceItems(v: GoValue): GoValue[] | undefined {
  if (v === null) return undefined
  const s = v as GoSlice
  return s.backing.slice(0, s.len)
}

/** A type error, as Go reports it; `path` is noa's dotted path with indexes (`message.content[1].text`). */
export class GoTypeError extends Error {
  override name = 'GoTypeError'
  constructor(
    message: string,
    readonly path: string,
    readonly value: string,
    readonly target: string,
  ) {
    super(message)
  }
}

/**
 * Folds a key as Go compares struct field names: ASCII letters to upper case, `ſ` (U+017F) to
 * `S` and the Kelvin sign (U+212A) to `K`, the only non-ASCII runes whose fold class holds an
 * ASCII letter. Other runes are left as they are, so they only ever equal themselves.
 */
export function foldKey(key: string): string {
  let out = ''
  let changed = false
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i)
    if (c >= 0x61 && c <= 0x7a) {
      out += String.fromCharCode(c - 0x20)
      changed = true
    } else if (c === 0x17f) {
      out += 'S'
      changed = true
    } else if (c === 0x212a) {
      out += 'K'
      changed = true
    } else out += key[i]
  }
  return changed ? out : key
}

interface FieldIndex {
  exact: Map<string, GoField>
  folded: Map<string, GoField>
}

const indexes = new WeakMap<GoStruct, FieldIndex>()

function fieldIndex(t: GoStruct): FieldIndex {
  let ix = indexes.get(t)
  if (ix === undefined) {
    ix = { exact: new Map(), folded: new Map() }
    for (const f of t.fields) {
      ix.exact.set(f.key, f)
      const k = foldKey(f.key)
      if (!ix.folded.has(k)) ix.folded.set(k, f)
    }
    indexes.set(t, ix)
  }
  return ix
}

/** The field a member's key fills: an exact match first, else the first that folds equal. */
export function fieldFor(t: GoStruct, key: string): GoField | undefined {
  const ix = fieldIndex(t)
  return ix.exact.get(key) ?? ix.folded.get(foldKey(key))
}

function shortName(t: GoStruct): string {
  const dot = t.name.lastIndexOf('.')
  return dot < 0 ? t.name : t.name.slice(dot + 1)
}

export interface UnmarshalOptions {
  /** Keep the members no field takes (`GoObject.unknown`). Go drops them. */
  keepUnknown?: boolean
}

class Decoder {
  /** Go's error context: the innermost struct and the JSON names of the fields on the way. */
  struct: GoStruct | undefined
  fields: string[] = []

  constructor(
    readonly text: string,
    readonly keepUnknown: boolean,
  ) {}

  fail(what: string, t: GoType, path: string): never {
    const type = typeName(t)
    const where =
      this.struct !== undefined || this.fields.length > 0
        ? `Go struct field ${this.struct ? shortName(this.struct) : ''}.${this.fields.join('.')}`
        : 'Go value'
    throw new GoTypeError(`json: cannot unmarshal ${what} into ${where} of type ${type}`, path, what, type)
  }

  kindName(n: JsonNode): string {
    switch (n.k) {
      case 'null':
        return 'null'
      case 'bool':
        return 'bool'
      case 'num':
        return 'number'
      case 'str':
        return 'string'
      case 'arr':
        return 'array'
      case 'obj':
        return 'object'
    }
  }

  value(n: JsonNode, t: GoType, into: GoValue, path: string): GoValue {
    if (t.kind === 'raw') return this.text.slice(n.s, n.e)
    if (n.k === 'null') {
      return t.kind === 'ptr' || t.kind === 'slice' || t.kind === 'map' ? null : into
    }
    if (t.kind === 'ptr') {
      const target = into === null ? zeroOf(t.elem) : into
      return this.value(n, t.elem, target, path)
    }
    switch (n.k) {
      case 'bool':
        if (t.kind === 'bool') return n.v
        return this.fail('bool', t, path)
      case 'num': {
        if (t.kind !== 'int') return this.fail('number', t, path)
        const v = parseGoInt(n.text)
        if (v === undefined) return this.fail(`number ${n.text}`, t, path)
        return v
      }
      case 'str':
        if (t.kind === 'string') return n.v
        return this.fail('string', t, path)
      case 'arr':
        if (t.kind !== 'slice') return this.fail('array', t, path)
        return this.slice(n, t, into as GoSlice | null, path)
      case 'obj':
        if (t.kind === 'struct') return this.object(n, t, into as GoObject, path)
        if (t.kind === 'map') return this.map(n, t, into as Map<string, GoValue> | null, path)
        return this.fail('object', t, path)
    }
  }

  slice(
    n: Extract<JsonNode, { k: 'arr' }>,
    t: Extract<GoType, { kind: 'slice' }>,
    into: GoSlice | null,
    path: string,
  ): GoSlice {
    if (n.items.length === 0) return { backing: [], len: 0 }
    const s = into ?? { backing: [], len: 0 }
    for (let i = 0; i < n.items.length; i++) {
      const old = i < s.backing.length ? (s.backing[i] as GoValue) : zeroOf(t.elem)
      s.backing[i] = this.value(n.items[i] as JsonNode, t.elem, old, `${path}[${i}]`)
    }
    s.len = n.items.length
    return s
  }

  map(
    n: Extract<JsonNode, { k: 'obj' }>,
    t: Extract<GoType, { kind: 'map' }>,
    into: Map<string, GoValue> | null,
    path: string,
  ): Map<string, GoValue> {
    const m = into ?? new Map<string, GoValue>()
    for (const [key, item] of n.members) {
      m.set(key, this.value(item, t.elem, zeroOf(t.elem), `${path}[${JSON.stringify(key)}]`))
    }
    return m
  }

  object(n: Extract<JsonNode, { k: 'obj' }>, t: GoStruct, into: GoObject, path: string): GoObject {
    for (const [key, item] of n.members) {
      const f = fieldFor(t, key)
      if (f === undefined) {
        if (this.keepUnknown) {
          into.unknown ??= new Map()
          into.unknown.set(key, plainValue(item))
        }
        continue
      }
      const struct = this.struct
      this.struct = t
      this.fields.push(f.key)
      into.fields[f.key] = this.value(
        item,
        f.type,
        into.fields[f.key] as GoValue,
        path === '' ? f.key : `${path}.${f.key}`,
      )
      this.fields.pop()
      this.struct = struct
    }
    return into
  }
}

/**
 * Decodes a parsed tree into `t`, starting from `into` (a fresh zero value by default), as
 * `json.Unmarshal` does; throws GoTypeError at Go's first type error. `text` is the text the tree
 * was parsed from (for RawMessage values).
 */
export function unmarshalNode(
  node: JsonNode,
  text: string,
  t: GoType,
  options: UnmarshalOptions = {},
  into: GoValue = zeroOf(t),
): GoValue {
  return new Decoder(text, options.keepUnknown ?? false).value(node, t, into, '')
}

/** `json.Unmarshal(text, &v)` for a `v` of type `t`: GoSyntaxError or GoTypeError on failure. */
export function unmarshal(text: string, t: GoType, options: UnmarshalOptions = {}): GoValue {
  return unmarshalNode(parseGoJson(text), text, t, options)
}
