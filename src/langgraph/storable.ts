/**
 * What LangGraph's serializer cannot give back, refused at the write (before anything is queued)
 * instead of failing every read after it.
 *
 * `JsonPlusSerializer` (the default `serde`) is the judge of what is storable: what it gives back
 * is stored as it gives it back, which is what every LangGraph saver then reads (SqliteSaver and
 * MemorySaver serialize with it too): Map, Set, RegExp, Error, Uint8Array and `undefined`
 * anywhere come back as they were, LangChain messages as messages; a Date comes back as its ISO
 * string, a class instance as a plain object, NaN and ±Infinity as null, and a function or Symbol
 * inside an object or array is left out (null in an array), as JSON.stringify does. What it
 * cannot give back, measured against SqliteSaver 1.0.4 and the serializer of
 * @langchain/langgraph-checkpoint 1.2.2:
 *
 * - a function or Symbol as the value itself: it writes no bytes, and loading them throws a
 *   SyntaxError (SqliteSaver then drops the channel, or throws at every getTuple of its writes);
 * - a BigInt anywhere, or a cycle JSON.stringify meets through a Map or Set: JSON.stringify
 *   throws inside it and it writes a placeholder string instead of the value (SqliteSaver then
 *   throws a TypeError at getTuple);
 * - a cycle through plain objects and arrays: it writes the string "[Circular]" where the cycle
 *   closes;
 * - a serialized LangChain object (`lc: 1`) that LangChain cannot load (a class outside its
 *   import map, say): loading throws.
 *
 * The first three are told apart by the bytes written (an empty output, the placeholder, the
 * marker, each confirmed on the value before it is refused), so a value that has none of them
 * costs a few byte searches; the last is found by loading the value once per kind of LangChain
 * object, remembered per serializer. A serializer of another kind is trusted as it is.
 */
import { JsonPlusSerializer, type SerializerProtocol } from '@langchain/langgraph-checkpoint'
import { Errors, type NoaError } from '../engine/errors.js'

/** What the serializer writes when JSON.stringify throws inside it (fast-safe-stringify's). */
const UNSERIALIZABLE = Buffer.from(
  JSON.stringify('[unable to serialize, circular reference is too complex to analyze]'),
)
const CIRCULAR = Buffer.from('"[Circular]"')
const LC1 = Buffer.from('"lc":1,')
const LC1_CONSTRUCTOR = Buffer.from('"lc":1,"type":"constructor","id":[')
const CLOSE = ']'.charCodeAt(0)

/** Per serializer: the ids of LangChain objects it was seen to load. */
const loadable = new WeakMap<SerializerProtocol, Set<string>>()
const LOADABLE_MAX = 1024

export interface Where {
  /** What the value is, for messages: `channel "messages"`, `write 2 (channel "x")`. */
  what: string
  /** Where it goes, for messages: `checkpoint <id> of thread <id>`. */
  of: string
  /** `details.field` of the error. */
  field: string
}

/**
 * Refuses (NOA_BAD_ARGUMENT naming the value, the path inside it and the reason) a value the
 * serializer wrote as `[type, data]` and cannot give back. Synchronous but for a LangChain
 * object of a kind not loaded yet: then it returns the promise of that check.
 */
export function checkStorable(
  serde: SerializerProtocol,
  value: unknown,
  type: string,
  data: Uint8Array,
  where: Where,
): Promise<void> | undefined {
  if (!(serde instanceof JsonPlusSerializer) || type !== 'json') return
  const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength)
  if (bytes.length === 0) {
    throw refused(
      where,
      '',
      `${kindOf(value)}: LangGraph's serializer writes nothing for it, so nothing could be read back`,
    )
  }
  if (bytes.length === UNSERIALIZABLE.length && bytes.equals(UNSERIALIZABLE) && !isPlaceholder(value)) {
    const found = findUnserializable(value)
    throw refused(
      where,
      found?.path ?? '',
      `${found?.why ?? 'JSON.stringify threw inside it'}: LangGraph's serializer would store the string "[unable to serialize, …]" instead of the value`,
    )
  }
  if (bytes.includes(CIRCULAR)) {
    const cycle = findCycle(value)
    if (cycle) {
      throw refused(
        where,
        cycle.path,
        `a cycle (it refers back to ${cycle.to || 'the value itself'}): LangGraph's serializer would store the string "[Circular]" there`,
      )
    }
  }
  return bytes.includes(LC1) ? checkLangChainObjects(serde, type, bytes, where) : undefined
}

/**
 * Serialized LangChain objects must load. Each id (`["langchain_core","messages",…]`) is tried
 * once by loading the whole value; an object the id search cannot see (a secret, an object
 * whose keys come in another order) makes every value that holds one be loaded.
 */
function checkLangChainObjects(
  serde: SerializerProtocol,
  type: string,
  bytes: Buffer,
  where: Where,
): Promise<void> | undefined {
  let known = loadable.get(serde)
  if (!known) {
    known = new Set()
    loadable.set(serde, known)
  }
  const ids: string[] = []
  let all = 0
  let fresh = false
  for (let at = bytes.indexOf(LC1); at >= 0; at = bytes.indexOf(LC1, at + LC1.length)) {
    all++
    if (bytes.compare(LC1_CONSTRUCTOR, 0, LC1_CONSTRUCTOR.length, at, at + LC1_CONSTRUCTOR.length) !== 0)
      continue
    const from = at + LC1_CONSTRUCTOR.length
    const end = bytes.indexOf(CLOSE, from)
    if (end < 0) break
    const id = bytes.toString('latin1', from, end)
    ids.push(id)
    if (!known.has(id)) fresh = true
  }
  if (!fresh && ids.length === all) return
  return serde.loadsTyped(type, bytes).then(
    () => {
      if (ids.length !== all) return // not remembered: what the search could not see is checked again
      if (known.size + ids.length > LOADABLE_MAX) known.clear()
      for (const id of ids) known.add(id)
    },
    (err: unknown) => {
      throw refused(
        where,
        '',
        `a serialized LangChain object that LangChain cannot load (${(err as Error)?.message?.split('\n')[0]?.slice(0, 200)}): it could not be read back`,
        err,
      )
    },
  )
}

function refused(where: Where, path: string, why: string, cause?: unknown): NoaError {
  return Errors.BAD_ARGUMENT(
    `${where.what} of ${where.of} cannot be stored: ${path === '' ? '' : `at ${path}, `}${why}; nothing was written`,
    { field: where.field, path: `$${path}` },
    cause === undefined ? undefined : { cause },
  )
}

function isPlaceholder(value: unknown): boolean {
  return value === '[unable to serialize, circular reference is too complex to analyze]'
}

/** `a function`, `a Symbol`, `a BigInt`, `undefined`, `a Map`, … */
export function kindOf(v: unknown): string {
  if (v === undefined) return 'undefined'
  if (v === null) return 'null'
  switch (typeof v) {
    case 'function':
      return 'a function'
    case 'symbol':
      return 'a Symbol'
    case 'bigint':
      return 'a BigInt'
    case 'object': {
      const name = (Object.getPrototypeOf(v) as { constructor?: { name?: unknown } } | null)?.constructor
        ?.name
      return typeof name === 'string' && name !== '' && name !== 'Object' ? `a ${name}` : 'an object'
    }
    default:
      return `a ${typeof v}`
  }
}

/** `.a.b[2]`, `["a key"]`: where a value sits inside another. */
export function step(path: string, key: string | number): string {
  if (typeof key === 'number') return `${path}[${key}]`
  return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`
}

/**
 * Where JSON.stringify throws in the serializer: a BigInt, or a cycle that passes through a Map
 * or Set (the serializer turns those into arrays only as it writes, after its cycle search).
 * Null when neither is found (a toJSON or a getter that throws, say).
 */
function findUnserializable(value: unknown): { path: string; why: string } | null {
  const ancestors = new Map<object, string>()
  const walk = (v: unknown, path: string): { path: string; why: string } | null => {
    if (typeof v === 'bigint') return { path, why: 'a BigInt (JSON has no such number)' }
    if (typeof v !== 'object' || v === null) return null
    const up = ancestors.get(v)
    if (up !== undefined) return { path, why: `a cycle (it refers back to ${up || 'the value itself'})` }
    ancestors.set(v, path)
    try {
      for (const [at, x] of children(v, path)) {
        const found = walk(x, at)
        if (found) return found
      }
      return null
    } finally {
      ancestors.delete(v)
    }
  }
  return walk(value, '')
}

/** Where a value refers back to one of the objects holding it, through objects and arrays. */
function findCycle(value: unknown): { path: string; to: string } | null {
  const ancestors = new Map<object, string>()
  const walk = (v: unknown, path: string): { path: string; to: string } | null => {
    if (typeof v !== 'object' || v === null) return null
    const up = ancestors.get(v)
    if (up !== undefined) return { path, to: up }
    ancestors.set(v, path)
    try {
      if (v instanceof Map || v instanceof Set) return null // no "[Circular]" is written through these
      for (const [at, x] of children(v, path)) {
        const found = walk(x, at)
        if (found) return found
      }
      return null
    } finally {
      ancestors.delete(v)
    }
  }
  return walk(value, '')
}

/** The values inside `v` (as JSON.stringify, or the serializer for a Map or Set, sees them), with their paths. */
function* children(v: object, path: string): Generator<[string, unknown]> {
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) yield [step(path, i), v[i]]
  } else if (v instanceof Map) {
    let i = 0
    for (const [k, x] of v) {
      yield [`${path}<Map key ${i}>`, k]
      yield [`${path}<Map value ${i++}>`, x]
    }
  } else if (v instanceof Set) {
    let i = 0
    for (const x of v) yield [`${path}<Set item ${i++}>`, x]
  } else {
    for (const k of Object.keys(v)) yield [step(path, k), (v as Record<string, unknown>)[k]]
  }
}
