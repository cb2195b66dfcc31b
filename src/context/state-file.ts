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
  BOOL,
  bool,
  decodeBytes,
  type GoInt,
  type GoNode,
  type GoObject,
  type GoStruct,
  GoSyntaxError,
  GoTypeError,
  type GoValue,
  goIntCompare,
  goIntText,
  INT,
  INT64,
  int,
  mapOf,
  marshalIndent,
  NULL,
  parseGoInt,
  STRING,
  sliceItems,
  sliceOf,
  sortedObject,
  str,
  unmarshal,
} from '../gocompat/index.js'
import { checkTranscriptId } from '../transcript/paths.js'
import { createInitialState } from './state.js'
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

// Norma's file structs (noaadapter/state_store.go).
const BLOCK_JSON: GoStruct = {
  kind: 'struct',
  name: 'noaadapter.blockJSON',
  fields: [
    { key: 'blockId', type: STRING },
    { key: 'tier', type: INT },
    { key: 'topic', type: STRING },
    { key: 'summary', type: STRING },
    { key: 'directMessageIds', type: sliceOf(STRING) },
    { key: 'effectiveMessageIds', type: sliceOf(STRING) },
    { key: 'directBlockIds', type: sliceOf(STRING) },
    { key: 'archivePath', type: STRING },
    { key: 'archiveRel', type: STRING },
    { key: 'compressedTokens', type: INT },
    { key: 'startRef', type: STRING },
    { key: 'endRef', type: STRING },
    { key: 'createdAt', type: INT64 },
    { key: 'active', type: BOOL },
    { key: 'compressCallId', type: STRING },
  ],
}
export const STATE_TYPE: GoStruct = {
  kind: 'struct',
  name: 'noaadapter.stateFile',
  fields: [
    { key: 'version', type: INT },
    { key: 'sessionId', type: STRING },
    { key: 'nextBlockId', type: INT },
    { key: 'blocks', type: sliceOf(BLOCK_JSON) },
    {
      key: 'messageRefs',
      type: {
        kind: 'struct',
        name: 'noaadapter.refMapJSON',
        fields: [
          { key: 'byRaw', type: mapOf(STRING) },
          { key: 'byRef', type: mapOf(STRING) },
        ],
      },
    },
    { key: 'tokenSnapshot', type: mapOf(INT) },
    {
      key: 'nudge',
      type: {
        kind: 'struct',
        name: 'noaadapter.nudgeJSON',
        fields: [
          { key: 'lastPerMessageNudgeTokens', type: INT },
          { key: 'lastNudgeShownTokens', type: INT },
          { key: 'lastShownByTier', type: mapOf(INT) },
        ],
      },
    },
    {
      key: 'stats',
      type: {
        kind: 'struct',
        name: 'noaadapter.statsJSON',
        fields: [
          { key: 'tokensCompressed', type: INT },
          { key: 'compressionCount', type: INT },
        ],
      },
    },
    { key: 'derivedFrom', type: STRING },
  ],
}

/** fmt's isSpace (the runes Sscanf skips before a number). */
function isScanSpace(c: number): boolean {
  return (
    (c >= 0x09 && c <= 0x0d) ||
    c === 0x20 ||
    c === 0x85 ||
    c === 0xa0 ||
    c === 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 ||
    c === 0x2029 ||
    c === 0x202f ||
    c === 0x205f ||
    c === 0x3000
  )
}

/**
 * `fmt.Sscanf(key, "%d", &tier)`: spaces skipped (a newline, or `\r\n`, is an error), one sign,
 * ASCII digits, within int64; what follows is ignored.
 */
export function scanTier(key: string): GoInt | undefined {
  let i = 0
  for (;;) {
    const c = key.charCodeAt(i)
    if (c === 0x0d && key.charCodeAt(i + 1) === 0x0a) return undefined
    if (c === 0x0a) return undefined
    if (!isScanSpace(c)) break
    i++
  }
  const m = /^[+-]?(\d+)/.exec(key.slice(i))
  if (!m) return undefined
  return parseGoInt(m[0].startsWith('+') ? m[0].slice(1) : m[0])
}

export interface DecodedState {
  state: CompressionState
  /** Keys Norma's struct does not have (ignored), as dotted paths. */
  unknownKeys: string[]
}

export function stateError(file: string, reason: string, cause?: unknown): NoaError {
  return new NoaError('NOA_BAD_STATE', `${file}: ${reason}`, { file, reason }, cause ? { cause } : undefined)
}

export interface StateReadOptions {
  /**
   * Norma mode: keep only what Norma's load keeps, so that saving gives what Norma's
   * load-and-save writes. Norma drops `derivedFrom` (noa keeps it by default).
   */
  strict?: boolean
}

function unknownPaths(root: GoObject): string[] {
  const out: string[] = []
  const add = (o: GoObject | null, prefix: string) => {
    if (o?.unknown) for (const k of o.unknown.keys()) out.push(prefix + k)
  }
  add(root, '')
  for (const b of (sliceItems(root.fields.blocks as GoValue) ?? []) as GoObject[]) add(b, 'blocks.')
  for (const key of ['messageRefs', 'nudge', 'stats']) add(root.fields[key] as GoObject, `${key}.`)
  return out
}

function stringMap(v: GoValue): Map<string, string> | undefined {
  return v === null ? undefined : (v as Map<string, string>)
}

/**
 * Decodes a state file's bytes (or text), as Norma's `json.Unmarshal` into its stateFile and
 * `fromFile` do. Throws NOA_BAD_STATE with Norma's reason (`parse state file: …`, `state file
 * version N, want 1`); `file` only names it in the message.
 */
export function decodeState(
  data: string | Uint8Array,
  sessionId: string,
  archiveRoot: string,
  file = STATE_FILE,
  options: StateReadOptions = {},
): DecodedState {
  const text = typeof data === 'string' ? data : decodeBytes(data)
  let root: GoObject
  try {
    root = unmarshal(text, STATE_TYPE, { keepUnknown: true }) as GoObject
  } catch (err) {
    if (err instanceof GoSyntaxError || err instanceof GoTypeError)
      throw stateError(file, `parse state file: ${err.message}`, err)
    throw err
  }
  const f = root.fields
  if (f.version !== STATE_VERSION)
    throw stateError(file, `state file version ${goIntText(f.version as GoInt)}, want ${STATE_VERSION}`)
  const st = createInitialState(sessionId, archiveRoot)
  if (f.sessionId !== '') st.sessionId = f.sessionId as string
  const next = f.nextBlockId as GoInt
  st.nextBlockId = goIntCompare(next, 1) < 0 ? 1 : next
  const refs = (f.messageRefs as GoObject).fields
  st.messageRefs.byRaw = stringMap(refs.byRaw as GoValue) ?? st.messageRefs.byRaw
  st.messageRefs.byRef = stringMap(refs.byRef as GoValue) ?? st.messageRefs.byRef
  if (f.tokenSnapshot !== null) st.tokenSnapshot = f.tokenSnapshot as Map<string, GoInt>
  const nudge = (f.nudge as GoObject).fields
  st.nudge.lastPerMessageNudgeTokens = nudge.lastPerMessageNudgeTokens as GoInt
  st.nudge.lastNudgeShownTokens = nudge.lastNudgeShownTokens as GoInt
  for (const [k, v] of (nudge.lastShownByTier as Map<string, GoInt> | null) ?? []) {
    const tier = scanTier(k)
    if (tier !== undefined) st.nudge.lastShownByTier.set(tier, v)
  }
  const stats = (f.stats as GoObject).fields
  st.stats.tokensCompressed = stats.tokensCompressed as GoInt
  st.stats.compressionCount = stats.compressionCount as GoInt
  for (const o of (sliceItems(f.blocks as GoValue) ?? []) as GoObject[]) {
    const b = o.fields
    const ids = (v: GoValue) => (sliceItems(v) ?? []) as string[]
    st.blocks.push({
      blockId: b.blockId as string,
      tier: b.tier as GoInt,
      topic: b.topic as string,
      summary: b.summary as string,
      directMessageIds: ids(b.directMessageIds as GoValue),
      effectiveMessageIds: ids(b.effectiveMessageIds as GoValue),
      directBlockIds: ids(b.directBlockIds as GoValue),
      archivePath: b.archivePath as string,
      archiveRel: b.archiveRel as string,
      compressedTokens: b.compressedTokens as GoInt,
      startRef: b.startRef as string,
      endRef: b.endRef as string,
      createdAt: b.createdAt as GoInt,
      active: b.active as boolean,
      compressCallId: b.compressCallId as string,
    })
  }
  // Norma's struct has the field (so a non-string value fails the load) but fromFile never reads it.
  st.derivedFrom = options.strict ? '' : (f.derivedFrom as string)
  return { state: st, unknownKeys: unknownPaths(root) }
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
export function loadStateFile(
  file: string,
  sessionId: string,
  archiveRoot: string,
  options: StateReadOptions = {},
): StateLoad {
  let text: Buffer
  try {
    const fd = openFileSync(file, READ, { what: 'state file' })
    try {
      text = readFileSync(fd)
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
    const { state, unknownKeys } = decodeState(text, sessionId, archiveRoot, file, options)
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
export function loadState(baseDir: string, sessionId: string, options: StateReadOptions = {}): StateLoad {
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
  return loadStateFile(file, sessionId, root, options)
}
