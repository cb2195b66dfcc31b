/**
 * state.json v1 (formats.md §c), written as Norma's `json.MarshalIndent(toFile(state), "", "  ")`
 * and read as its `json.Unmarshal` + `fromFile` would:
 * - keys in struct order, `blocks: null` when there is none, omitempty fields left out, map keys
 *   sorted, `<>&` escaped, no trailing newline;
 * - on read: unknown keys ignored (reported in `unknownKeys`), keys matched case-insensitively
 *   when no key matches exactly (Go's rule), `null` leaves a field at its zero value, a value of
 *   the wrong JSON type (`"1"` or `1.5` for an int) makes the whole file invalid, a null map
 *   keeps the initial empty map, `nextBlockId` below 1 becomes 1, tier keys that do not read as
 *   an integer are dropped.
 * `derivedFrom` is noa's: Norma never writes it and ignores it on read (its struct has the
 * field), so noa writes it last, only when set, and a file noa writes stays Norma's.
 *
 * Beyond Norma: the save is temp file + fsync + rename + directory fsync (Norma skips both
 * fsyncs), and load errors name the file.
 */
import { closeSync, readFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { mkdirDurable, writeFileAtomic } from '../engine/atomic.js'
import { NoaError } from '../engine/errors.js'
import { checkDirsBelow, openFileSync, READ } from '../engine/files.js'
import {
  bool,
  type GoNode,
  int,
  JsonNumber,
  JsonObject,
  type JsonValue,
  marshalIndent,
  NULL,
  parseJsonKeepingNumbers,
  sortedObject,
  str,
} from '../gocompat/index.js'
import { checkTranscriptId } from '../transcript/paths.js'
import { createInitialState, emptyBlock } from './state.js'
import type { CompressionBlock, CompressionState } from './types.js'

export const STATE_FILE = 'state.json'
export const STATE_VERSION = 1
/** Norma's temp name pattern for the state (`.noa-state-*.tmp`). */
export const STATE_TEMP_PREFIX = '.noa-state-'

/** A session's archive root: `<baseDir>/<sessionId>` (baseDir made absolute). */
export function sessionRoot(baseDir: string, sessionId: string): string {
  return join(resolve(baseDir), checkTranscriptId(sessionId))
}

export function stateFileOf(root: string): string {
  return join(root, STATE_FILE)
}

// ---------------------------------------------------------------------------------------------
// Writing

function strings(ids: readonly string[]): GoNode {
  return { arr: ids.map(str) }
}

function blockNode(b: CompressionBlock): GoNode {
  const e: Array<[string, GoNode]> = [
    ['blockId', str(b.blockId)],
    ['tier', int(b.tier)],
  ]
  if (b.topic !== '') e.push(['topic', str(b.topic)])
  e.push(['summary', str(b.summary)])
  if (b.directMessageIds.length > 0) e.push(['directMessageIds', strings(b.directMessageIds)])
  if (b.effectiveMessageIds.length > 0) e.push(['effectiveMessageIds', strings(b.effectiveMessageIds)])
  if (b.directBlockIds.length > 0) e.push(['directBlockIds', strings(b.directBlockIds)])
  if (b.archivePath !== '') e.push(['archivePath', str(b.archivePath)])
  if (b.archiveRel !== '') e.push(['archiveRel', str(b.archiveRel)])
  e.push(['compressedTokens', int(b.compressedTokens)])
  if (b.startRef !== '') e.push(['startRef', str(b.startRef)])
  if (b.endRef !== '') e.push(['endRef', str(b.endRef)])
  if (b.createdAt !== 0) e.push(['createdAt', int(b.createdAt)])
  e.push(['active', bool(b.active)])
  if (b.compressCallId !== '') e.push(['compressCallId', str(b.compressCallId)])
  return { obj: e }
}

/** The file's text: exactly what Norma's state store writes for this state (plus `derivedFrom`). */
export function encodeState(s: CompressionState): string {
  const stringMap = (m: Map<string, string>) => sortedObject([...m].map(([k, v]) => [k, str(v)]))
  const root: Array<[string, GoNode]> = [
    ['version', int(STATE_VERSION)],
    ['sessionId', str(s.sessionId)],
    ['nextBlockId', int(s.nextBlockId)],
    ['blocks', s.blocks.length === 0 ? NULL : { arr: s.blocks.map(blockNode) }],
    [
      'messageRefs',
      {
        obj: [
          ['byRaw', stringMap(s.messageRefs.byRaw)],
          ['byRef', stringMap(s.messageRefs.byRef)],
        ],
      },
    ],
  ]
  if (s.tokenSnapshot.size > 0)
    root.push(['tokenSnapshot', sortedObject([...s.tokenSnapshot].map(([k, v]) => [k, int(v)]))])
  const nudge: Array<[string, GoNode]> = [
    ['lastPerMessageNudgeTokens', int(s.nudge.lastPerMessageNudgeTokens)],
    ['lastNudgeShownTokens', int(s.nudge.lastNudgeShownTokens)],
  ]
  if (s.nudge.lastShownByTier.size > 0) {
    // Keys are Sprintf("%d", tier); two tiers never share a key, so the map is written whole.
    nudge.push([
      'lastShownByTier',
      sortedObject([...s.nudge.lastShownByTier].map(([k, v]) => [String(k), int(v)])),
    ])
  }
  root.push(['nudge', { obj: nudge }])
  root.push([
    'stats',
    {
      obj: [
        ['tokensCompressed', int(s.stats.tokensCompressed)],
        ['compressionCount', int(s.stats.compressionCount)],
      ],
    },
  ])
  if (s.derivedFrom !== '') root.push(['derivedFrom', str(s.derivedFrom)])
  return marshalIndent({ obj: root })
}

/**
 * mkdir -p of a session folder `<baseDir>/<sessionId>` (or of `dir` inside it, a `tier<N>/`),
 * fsyncing the parent of each folder made. `<baseDir>` is the caller's and may be a symlink;
 * the session folder and everything below it must be real folders (NOA_NOT_DIRECTORY).
 * Modes 0777 before the umask.
 */
export function mkdirSessionDir(root: string, dir: string = root): void {
  mkdirDurable(dirname(resolve(root)), dir)
}

/**
 * Saves the state to `<archiveRoot>/state.json` (or `file`): temp `.noa-state-*.tmp` in the same
 * directory, fsync, rename, directory fsync (0666 before the umask: 0644 under the usual 022).
 * A crash leaves the old file or the new one. A state.json that is a symlink, a folder or
 * anything but a regular file is refused (NOA_NOT_REGULAR_FILE), never written through.
 */
export function saveState(s: CompressionState, file = stateFileOf(s.archiveRoot)): string {
  mkdirSessionDir(dirname(file))
  return writeFileAtomic(file, encodeState(s), {
    tempPrefix: STATE_TEMP_PREFIX,
    tempSuffix: '.tmp',
    what: 'state file',
  })
}

// ---------------------------------------------------------------------------------------------
// Reading

class DecodeState {
  error: string | undefined
  readonly unknownKeys: string[] = []

  /** Go keeps the first type error and goes on. */
  fail(what: JsonValue, field: string, type: string): void {
    this.error ??= `json: cannot unmarshal ${jsonKind(what)} into Go ${field.includes('.') ? 'struct field ' : 'value '}${field} of type ${type}`
  }
}

function jsonKind(v: JsonValue): string {
  if (v === null) return 'null'
  if (typeof v === 'boolean') return 'bool'
  if (typeof v === 'string') return 'string'
  if (v instanceof JsonNumber) return `number ${v.text}`
  if (Array.isArray(v)) return 'array'
  return 'object'
}

type FieldDecoders = Record<string, (v: JsonValue, path: string) => void>

/** Go's struct decoding: exact key first, else the first case-insensitive match; others ignored. */
function decodeStruct(d: DecodeState, v: JsonValue, path: string, type: string, fields: FieldDecoders): void {
  if (v === null) return
  if (!(v instanceof JsonObject)) {
    d.fail(v, path, type)
    return
  }
  const names = Object.keys(fields)
  for (const [key, value] of v.members) {
    const name = names.includes(key) ? key : names.find((n) => n.toLowerCase() === key.toLowerCase())
    if (name === undefined) {
      d.unknownKeys.push(path.includes('.') ? `${path.slice(path.indexOf('.') + 1)}.${key}` : key)
      continue
    }
    ;(fields[name] as (v: JsonValue, path: string) => void)(value, `${path}.${name}`)
  }
}

function decodeInt(d: DecodeState, v: JsonValue, path: string, set: (n: number) => void): void {
  if (v === null) return
  if (v instanceof JsonNumber && /^-?\d+$/.test(v.text)) {
    const n = Number(v.text)
    if (Number.isSafeInteger(n)) {
      set(n === 0 ? 0 : n)
      return
    }
  }
  d.fail(v, path, 'int')
}

function decodeString(d: DecodeState, v: JsonValue, path: string, set: (s: string) => void): void {
  if (v === null) return
  if (typeof v === 'string') set(v)
  else d.fail(v, path, 'string')
}

function decodeBool(d: DecodeState, v: JsonValue, path: string, set: (b: boolean) => void): void {
  if (v === null) return
  if (typeof v === 'boolean') set(v)
  else d.fail(v, path, 'bool')
}

function decodeStrings(d: DecodeState, v: JsonValue, path: string, set: (a: string[]) => void): void {
  if (v === null) {
    set([])
    return
  }
  if (!Array.isArray(v)) {
    d.fail(v, path, '[]string')
    return
  }
  const out: string[] = []
  for (const item of v) {
    if (item === null) out.push('')
    else if (typeof item === 'string') out.push(item)
    else d.fail(item, path, 'string')
  }
  set(out)
}

/** A JSON object decoded into a Go map (duplicate keys: the last wins). null gives undefined. */
function decodeMap<T>(
  d: DecodeState,
  v: JsonValue,
  path: string,
  type: string,
  value: (item: JsonValue, set: (x: T) => void) => void,
): Map<string, T> | undefined {
  if (v === null) return undefined
  if (!(v instanceof JsonObject)) {
    d.fail(v, path, type)
    return undefined
  }
  const out = new Map<string, T>()
  for (const [key, item] of v.members) value(item, (x) => out.set(key, x))
  return out
}

interface FileData {
  version: number
  sessionId: string
  nextBlockId: number
  blocks: CompressionBlock[]
  byRaw: Map<string, string> | undefined
  byRef: Map<string, string> | undefined
  tokenSnapshot: Map<string, number> | undefined
  lastPerMessageNudgeTokens: number
  lastNudgeShownTokens: number
  lastShownByTier: Map<string, number> | undefined
  tokensCompressed: number
  compressionCount: number
  derivedFrom: string
}

function decodeBlock(d: DecodeState, v: JsonValue, path: string): CompressionBlock {
  const b = emptyBlock()
  const s =
    (
      key:
        | 'blockId'
        | 'topic'
        | 'summary'
        | 'archivePath'
        | 'archiveRel'
        | 'startRef'
        | 'endRef'
        | 'compressCallId',
    ) =>
    (x: JsonValue, p: string) =>
      decodeString(d, x, p, (y) => {
        b[key] = y
      })
  const n = (key: 'tier' | 'compressedTokens' | 'createdAt') => (x: JsonValue, p: string) =>
    decodeInt(d, x, p, (y) => {
      b[key] = y
    })
  const a =
    (key: 'directMessageIds' | 'effectiveMessageIds' | 'directBlockIds') => (x: JsonValue, p: string) =>
      decodeStrings(d, x, p, (y) => {
        b[key] = y
      })
  decodeStruct(d, v, path, 'noaadapter.blockJSON', {
    blockId: s('blockId'),
    tier: n('tier'),
    topic: s('topic'),
    summary: s('summary'),
    directMessageIds: a('directMessageIds'),
    effectiveMessageIds: a('effectiveMessageIds'),
    directBlockIds: a('directBlockIds'),
    archivePath: s('archivePath'),
    archiveRel: s('archiveRel'),
    compressedTokens: n('compressedTokens'),
    startRef: s('startRef'),
    endRef: s('endRef'),
    createdAt: n('createdAt'),
    active: (x, p) =>
      decodeBool(d, x, p, (y) => {
        b.active = y
      }),
    compressCallId: s('compressCallId'),
  })
  return b
}

function decodeFile(d: DecodeState, v: JsonValue): FileData {
  const f: FileData = {
    version: 0,
    sessionId: '',
    nextBlockId: 0,
    blocks: [],
    byRaw: undefined,
    byRef: undefined,
    tokenSnapshot: undefined,
    lastPerMessageNudgeTokens: 0,
    lastNudgeShownTokens: 0,
    lastShownByTier: undefined,
    tokensCompressed: 0,
    compressionCount: 0,
    derivedFrom: '',
  }
  const stringValue = (item: JsonValue, set: (x: string) => void) =>
    item === null ? set('') : typeof item === 'string' ? set(item) : d.fail(item, 'map', 'string')
  const intValue = (item: JsonValue, set: (x: number) => void) =>
    item === null ? set(0) : decodeInt(d, item, 'map', set)
  if (v !== null && !(v instanceof JsonObject)) {
    d.fail(v, 'noaadapter.stateFile', 'noaadapter.stateFile')
    return f
  }
  decodeStruct(d, v, 'stateFile', 'noaadapter.stateFile', {
    version: (x, p) =>
      decodeInt(d, x, p, (n) => {
        f.version = n
      }),
    sessionId: (x, p) =>
      decodeString(d, x, p, (s) => {
        f.sessionId = s
      }),
    nextBlockId: (x, p) =>
      decodeInt(d, x, p, (n) => {
        f.nextBlockId = n
      }),
    blocks: (x, p) => {
      if (x === null) f.blocks = []
      else if (!Array.isArray(x)) d.fail(x, p, '[]noaadapter.blockJSON')
      else f.blocks = x.map((item) => decodeBlock(d, item, p))
    },
    messageRefs: (x, p) =>
      decodeStruct(d, x, p, 'noaadapter.refMapJSON', {
        byRaw: (y, q) => {
          f.byRaw = decodeMap(d, y, q, 'map[string]string', stringValue)
        },
        byRef: (y, q) => {
          f.byRef = decodeMap(d, y, q, 'map[string]string', stringValue)
        },
      }),
    tokenSnapshot: (x, p) => {
      f.tokenSnapshot = decodeMap(d, x, p, 'map[string]int', intValue)
    },
    nudge: (x, p) =>
      decodeStruct(d, x, p, 'noaadapter.nudgeJSON', {
        lastPerMessageNudgeTokens: (y, q) =>
          decodeInt(d, y, q, (n) => {
            f.lastPerMessageNudgeTokens = n
          }),
        lastNudgeShownTokens: (y, q) =>
          decodeInt(d, y, q, (n) => {
            f.lastNudgeShownTokens = n
          }),
        lastShownByTier: (y, q) => {
          f.lastShownByTier = decodeMap(d, y, q, 'map[string]int', intValue)
        },
      }),
    stats: (x, p) =>
      decodeStruct(d, x, p, 'noaadapter.statsJSON', {
        tokensCompressed: (y, q) =>
          decodeInt(d, y, q, (n) => {
            f.tokensCompressed = n
          }),
        compressionCount: (y, q) =>
          decodeInt(d, y, q, (n) => {
            f.compressionCount = n
          }),
      }),
    derivedFrom: (x, p) =>
      decodeString(d, x, p, (s) => {
        f.derivedFrom = s
      }),
  })
  return f
}

/** fmt.Sscanf(k, "%d", &tier): leading spaces, a sign, digits; what follows is ignored. */
function scanTier(key: string): number | undefined {
  const m = /^[ \t\r\n]*([+-]?\d+)/.exec(key)
  if (!m) return undefined
  const n = Number(m[1])
  return Number.isSafeInteger(n) ? n : undefined
}

export interface DecodedState {
  state: CompressionState
  /** Keys Norma's struct does not have (ignored), as dotted paths. */
  unknownKeys: string[]
}

export function stateError(file: string, reason: string, cause?: unknown): NoaError {
  return new NoaError('NOA_BAD_STATE', `${file}: ${reason}`, { file, reason }, cause ? { cause } : undefined)
}

/**
 * Decodes a state file's text. Throws NOA_BAD_STATE with Norma's reason (`parse state file: …`,
 * `state file version N, want 1`); `file` only names it in the message.
 */
export function decodeState(
  text: string,
  sessionId: string,
  archiveRoot: string,
  file = STATE_FILE,
): DecodedState {
  let value: JsonValue
  try {
    value = parseJsonKeepingNumbers(text)
  } catch (err) {
    const reason = text.trim() === '' ? 'unexpected end of JSON input' : (err as Error).message
    throw stateError(file, `parse state file: ${reason}`, err)
  }
  const d = new DecodeState()
  const f = decodeFile(d, value)
  if (d.error !== undefined) throw stateError(file, `parse state file: ${d.error}`)
  if (f.version !== STATE_VERSION)
    throw stateError(file, `state file version ${f.version}, want ${STATE_VERSION}`)
  const st = createInitialState(sessionId, archiveRoot)
  if (f.sessionId !== '') st.sessionId = f.sessionId
  st.nextBlockId = Math.max(f.nextBlockId, 1)
  if (f.byRaw) st.messageRefs.byRaw = f.byRaw
  if (f.byRef) st.messageRefs.byRef = f.byRef
  if (f.tokenSnapshot) st.tokenSnapshot = f.tokenSnapshot
  st.nudge.lastPerMessageNudgeTokens = f.lastPerMessageNudgeTokens
  st.nudge.lastNudgeShownTokens = f.lastNudgeShownTokens
  for (const [k, v] of f.lastShownByTier ?? []) {
    const tier = scanTier(k)
    if (tier !== undefined) st.nudge.lastShownByTier.set(tier, v)
  }
  st.stats.tokensCompressed = f.tokensCompressed
  st.stats.compressionCount = f.compressionCount
  st.blocks = f.blocks
  st.derivedFrom = f.derivedFrom
  return { state: st, unknownKeys: d.unknownKeys }
}

export interface StateLoad {
  /** The loaded state, or the initial state when the file is missing or bad. */
  state: CompressionState
  file: string
  exists: boolean
  /**
   * Why the file could not be used (NOA_BAD_STATE; NOA_NOT_REGULAR_FILE for a symlink, FIFO or
   * folder under its name, which is never followed); `state` is then the initial state.
   */
  error?: NoaError
  unknownKeys: string[]
}

/**
 * Norma's `StateStore.Load`: a missing file is the initial state; a file that cannot be read,
 * is not valid JSON or is not version 1 gives the initial state together with the error (the
 * caller decides whether to go on, as Norma does, or stop). Never rebuilds anything.
 */
export function loadStateFile(file: string, sessionId: string, archiveRoot: string): StateLoad {
  let text: string
  try {
    const fd = openFileSync(file, READ, { what: 'state file' })
    try {
      text = readFileSync(fd, 'utf8')
    } finally {
      closeSync(fd)
    }
  } catch (err) {
    const e = err as NodeJS.ErrnoException
    const exists = e.code !== 'ENOENT'
    const out: StateLoad = {
      state: createInitialState(sessionId, archiveRoot),
      file,
      exists,
      unknownKeys: [],
    }
    if (err instanceof NoaError)
      out.error = new NoaError(err.code, err.message, { ...err.details, reason: err.message })
    else if (exists) out.error = stateError(file, e.message, err)
    return out
  }
  try {
    const { state, unknownKeys } = decodeState(text, sessionId, archiveRoot, file)
    return { state, file, exists: true, unknownKeys }
  } catch (err) {
    if (!(err instanceof NoaError)) throw err
    return {
      state: createInitialState(sessionId, archiveRoot),
      file,
      exists: true,
      error: err,
      unknownKeys: [],
    }
  }
}

/** The state of session `sessionId` under `baseDir` (see loadStateFile). */
export function loadState(baseDir: string, sessionId: string): StateLoad {
  const root = sessionRoot(baseDir, sessionId)
  const file = stateFileOf(root)
  try {
    // A session folder that is a symlink or a file is never read through.
    checkDirsBelow(resolve(baseDir), root)
  } catch (err) {
    if (!(err instanceof NoaError)) throw err
    const error = new NoaError(err.code, err.message, { ...err.details, reason: err.message })
    return { state: createInitialState(sessionId, root), file, exists: true, error, unknownKeys: [] }
  }
  return loadStateFile(file, sessionId, root)
}
