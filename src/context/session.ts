/**
 * One session's compression, on disk under `<baseDir>/<sessionId>/` (Norma's noaadapter
 * Session): state.json, `tier<N>/` archives. Opening never fails on a bad state file: the
 * error is kept in `loadError` (and passed to `onWarn`) and the session starts empty, as
 * Norma's does; a host that prefers to stop checks `loadError`.
 */
import { closeSync, lstatSync, readFileSync, renameSync } from 'node:fs'
import { join } from 'node:path'
import { writeFileAtomic } from '../engine/atomic.js'
import { NoaError } from '../engine/errors.js'
import { APPEND_CREATE, checkDirsBelow, openFileSync, READ } from '../engine/files.js'
import { loadNative } from '../engine/native.js'
import { checkOptionKeys } from '../engine/options.js'
import { type GoInt, goIntAdd, goIntCompare, goIntText } from '../gocompat/index.js'
import type { Message } from '../transcript/types.js'
import { viewForModel } from '../transcript/view.js'
import { FileArchiver, ReuseArchiver } from './archive.js'
import { type ApplyResult, applyCompression } from './compress.js'
import { type CompressParseDiagnostics, parseCompressArgs } from './compress-args.js'
import { type ContextConfig, resolveConfig } from './config.js'
import { type InheritResult, inheritState } from './inherit.js'
import { materialize, materializeWithRefs, type ViewRefs } from './materialize.js'
import { formatPanel } from './panel.js'
import { processTurn } from './pipeline.js'
import { project } from './project.js'
import { rebuildState } from './rebuild.js'
import { cloneBlock, cloneState } from './state.js'
import {
  loadStateFile,
  mkdirSessionDir,
  type StateLoad,
  saveState,
  sessionRoot,
  stateFileOf,
} from './state-file.js'
import { type ClockOptions, checkZone, formatRfc3339, type TimeZoneOption, unixSeconds } from './time.js'
import { countTokens } from './tokens.js'
import {
  BLOCKED_REF,
  COMPRESS_TOOL_NAME,
  type CompressionBlock,
  type CompressionState,
  type CompressRange,
  type CoreMessage,
} from './types.js'

export interface ContextSessionOptions extends ClockOptions {
  /** Norma's ArchiveBaseDir; made absolute. */
  baseDir: string
  sessionId: string
  config?: Partial<ContextConfig>
  /** Ancestors (nearest first) to inherit from when the session has no blocks. */
  parentSessionIds?: readonly string[]
  /** Warnings (a bad state file, an inheritance), as Norma's OnWarn. */
  onWarn?: (message: string) => void
  /** Read state.json in Norma mode (what Norma's load keeps: no `derivedFrom`). */
  strict?: boolean
}

export interface CompressOutcome {
  /** The text for the Compress call's result. */
  panel: string
  result: ApplyResult
  /** The view's estimated tokens before the compression. */
  beforeTokens: number
  afterTokens: number
  /** Set when the call's input could not be read. */
  parse?: CompressParseDiagnostics
  /** Whether state.json was written. */
  saved: boolean
}

export interface RebuildOutcome {
  replayed: number
  skipped: number
  warnings: string[]
  /** Archives adopted as they were. */
  reused: string[]
  /** Blocks of the previous state the transcript does not produce, kept (`keepExisting`). */
  kept: string[]
  /** Where the previous state.json was kept (undefined when there was none). */
  previous: string | undefined
}

export interface RebuildOptions {
  /**
   * Keep the blocks of the current state that the transcript's recorded Compress calls do not
   * produce (made with `compress` without a call, or by a call whose result is not in the
   * transcript) instead of refusing the rebuild.
   */
  keepExisting?: boolean
}

/** Where a rebuild keeps the state it replaces: `state.json.before-rebuild-<ms>`. */
export const BEFORE_REBUILD_SUFFIX = '.before-rebuild-'

/** An archiver that writes nothing: a rebuild's dry run. */
class PlanArchiver extends FileArchiver {
  override write(tier: GoInt, blockId: string, startRef: string, endRef: string) {
    return this.pathsOf(tier, blockId, startRef, endRef)
  }
  override remove(): void {}
}

/** Whether `b` is the same block as `a` (what a replay of its call gives back). */
function sameBlock(a: CompressionBlock, b: CompressionBlock): boolean {
  return (
    a.blockId === b.blockId &&
    a.tier === b.tier &&
    a.startRef === b.startRef &&
    a.endRef === b.endRef &&
    a.summary === b.summary &&
    a.topic === b.topic &&
    a.effectiveMessageIds.join('\n') === b.effectiveMessageIds.join('\n') &&
    a.directBlockIds.join('\n') === b.directBlockIds.join('\n')
  )
}

function describeBlock(b: CompressionBlock): string {
  return `${b.blockId} (T${goIntText(b.tier)}, ${b.startRef}–${b.endRef}${b.active ? '' : ', absorbed'})`
}

/** The rebuilt state with `kept` blocks of `current` added; refuses (NOA_CONFLICT) what cannot go together. */
function keepBlocks(
  rebuilt: CompressionState,
  current: CompressionState,
  kept: readonly CompressionBlock[],
): CompressionState {
  const out = cloneState(rebuilt)
  const conflict = (b: CompressionBlock, why: string) =>
    new NoaError('NOA_CONFLICT', `cannot keep block ${describeBlock(b)}: ${why}; nothing was changed`, {
      field: b.blockId,
    })
  const covered = new Map<string, string>()
  for (const b of out.blocks) if (b.active) for (const id of b.effectiveMessageIds) covered.set(id, b.blockId)
  for (const [raw, ref] of current.messageRefs.byRaw) {
    const mine = out.messageRefs.byRaw.get(raw)
    if (mine !== undefined && mine !== ref)
      throw conflict(kept[0] as CompressionBlock, `the transcript gives message ${ref} the ref ${mine}`)
    if (mine === undefined) {
      const holder = ref === BLOCKED_REF ? undefined : out.messageRefs.byRef.get(ref)
      if (holder !== undefined && holder !== raw)
        throw conflict(kept[0] as CompressionBlock, `the transcript gives ${ref} to another message`)
      out.messageRefs.byRaw.set(raw, ref)
      if (ref !== BLOCKED_REF) out.messageRefs.byRef.set(ref, raw)
    }
  }
  for (const b of kept) {
    if (out.blocks.some((x) => x.blockId === b.blockId))
      throw conflict(b, `the transcript's calls make another block ${b.blockId}`)
    if (b.active)
      for (const id of b.effectiveMessageIds) {
        const other = covered.get(id)
        if (other !== undefined)
          throw conflict(
            b,
            `block ${other} from the transcript covers message ${current.messageRefs.byRaw.get(id) ?? id}`,
          )
      }
    out.blocks.push(cloneBlock(b))
    out.stats.compressionCount = goIntAdd(out.stats.compressionCount, 1)
    out.stats.tokensCompressed = goIntAdd(out.stats.tokensCompressed, b.compressedTokens)
  }
  for (const [ref, n] of current.tokenSnapshot) if (!out.tokenSnapshot.has(ref)) out.tokenSnapshot.set(ref, n)
  if (goIntCompare(current.nextBlockId, out.nextBlockId) > 0) out.nextBlockId = current.nextBlockId
  if (out.derivedFrom === '') out.derivedFrom = current.derivedFrom
  return out
}

const OPTION_KEYS = new Set([
  'baseDir',
  'sessionId',
  'config',
  'parentSessionIds',
  'onWarn',
  'now',
  'zone',
  'strict',
])

/** Lock file of a session folder (not `state.json`, not `.md`: nothing Norma reads). */
export const SESSION_LOCK_FILE = '.noa-context.lock'
const NO_LOCKING = new Set(['ENOLCK', 'EOPNOTSUPP', 'ENOTSUP', 'ENOSYS'])

/**
 * Runs `fn` holding the session folder's exclusive flock (beyond Norma, which takes none), so
 * that two processes compressing one session do not lose each other's blocks.
 */
export function withSessionLock<T>(root: string, fn: () => T): T {
  mkdirSessionDir(root)
  const fd = openFileSync(join(root, SESSION_LOCK_FILE), APPEND_CREATE, { what: 'lock file' })
  try {
    try {
      loadNative().flock(fd, true, false)
    } catch (err) {
      if (!NO_LOCKING.has((err as NodeJS.ErrnoException).code ?? '')) throw err
    }
    return fn()
  } finally {
    closeSync(fd)
  }
}

/** Norma's message for a Compress input that could not be read. */
export function formatParseError(d: CompressParseDiagnostics, raw: string): string {
  const lead: Record<string, string> = {
    'empty-input': 'Compress received no arguments.',
    'missing-content': 'Compress arguments have no `content` field.',
    'content-not-array': 'Compress `content` is neither an array of ranges nor a JSON-encoded one.',
    'no-valid-ranges': 'No usable ranges: every entry was missing startId, endId or summary.',
    truncated: 'The arguments were cut off mid-object and could not be salvaged.',
  }
  let out = lead[d.kind] ?? 'Compress arguments could not be parsed as JSON.'
  out += ' Expected shape: { "content": [{ "startId": "m00012", "endId": "m00045", "summary": "..." }] }'
  if (d.invalidItems > 0)
    out += `\n${d.invalidItems} entr${d.invalidItems === 1 ? 'y was' : 'ies were'} dropped: ${d.invalidReasons.join('; ')}`
  const cut = Buffer.from(raw, 'utf8').subarray(0, 800)
  if (cut.length > 0) out += `\nReceived (first ${cut.length} chars): ${cut.toString('utf8')}`
  return out
}

export class ContextSession {
  readonly baseDir: string
  readonly sessionId: string
  /** `<baseDir>/<sessionId>` */
  readonly root: string
  readonly stateFile: string
  readonly config: ContextConfig
  /** How state.json loaded (its error, unknown keys). */
  readonly load: StateLoad
  /** Set when the state was inherited at open. */
  readonly inherited: InheritResult | undefined
  state: CompressionState
  private readonly clock: () => Date
  private readonly zone: TimeZoneOption
  private readonly onWarn: ((message: string) => void) | undefined
  private setAside = false

  private constructor(o: ContextSessionOptions) {
    checkOptionKeys(o, OPTION_KEYS, 'ContextSession')
    this.root = sessionRoot(o.baseDir, o.sessionId)
    this.baseDir = join(this.root, '..')
    this.sessionId = o.sessionId
    this.stateFile = stateFileOf(this.root)
    this.config = resolveConfig(o.config)
    this.clock = o.now ?? (() => new Date())
    this.zone = checkZone(o.zone ?? 'local')
    this.onWarn = o.onWarn
    // A session folder that is a symlink (or a file) is refused before anything is read through it.
    checkDirsBelow(this.baseDir, this.root)
    this.load = loadStateFile(this.stateFile, this.sessionId, this.root, { strict: o.strict ?? false })
    if (this.load.error) this.warn(`state: ${this.load.error.message} — starting from an empty state`)
    let state = this.load.state
    if (state.blocks.length === 0 && o.parentSessionIds && o.parentSessionIds.length > 0) {
      this.inherited = inheritState({
        baseDir: this.baseDir,
        sessionId: this.sessionId,
        parentSessionIds: o.parentSessionIds,
      })
      if (this.inherited.state) {
        state = this.inherited.state
        this.warn(`inherited ${state.blocks.length} block(s) from session ${this.inherited.from}`)
      }
    }
    this.state = state
  }

  /** Loads (or starts) the session's state. */
  static open(options: ContextSessionOptions): ContextSession {
    return new ContextSession(options)
  }

  private warn(message: string): void {
    this.onWarn?.(`noa: ${message}`)
  }

  /** The load error, if state.json was unusable. */
  get loadError(): NoaError | undefined {
    return this.load.error
  }

  /**
   * Writes state.json (temp + fsync + rename + directory fsync). Beyond Norma, which overwrites
   * a state it could not read: the first save after such a load moves the unreadable file aside
   * (`state.json.unreadable-<ms>`), since it may be a newer version or the only copy of its blocks.
   */
  save(): void {
    if (this.load.error && !this.setAside) {
      this.setAside = true
      try {
        // lstat: only a regular file is kept aside; a symlink or anything else planted there is
        // refused by the save below, never renamed or followed.
        if (lstatSync(this.stateFile).isFile()) {
          const aside = `${this.stateFile}.unreadable-${Date.now()}`
          renameSync(this.stateFile, aside)
          this.warn(`state: the unreadable ${this.stateFile} was kept as ${aside}`)
        }
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
      }
    }
    saveState(this.state, this.stateFile)
  }

  private stamp(): { created: string; now: number } {
    const date = this.clock()
    return { created: formatRfc3339(date, this.zone), now: unixSeconds(date) }
  }

  private run(
    cores: readonly CoreMessage[],
    ranges: readonly CompressRange[],
    callId: string,
  ): CompressOutcome {
    const turn = processTurn(cores, this.state, this.config)
    let before = 0
    for (const m of turn.messages) before += countTokens(m.text)
    const { created, now } = this.stamp()
    const result = applyCompression({
      ranges,
      messages: turn.messages,
      state: turn.state,
      config: this.config,
      callId,
      archiver: new FileArchiver(this.root),
      created,
      now,
    })
    const after = Math.max(before - Number(result.tokensCompressed), 0)
    let saved = false
    if (result.blocksCreated.length > 0) {
      this.state = result.state
      this.save()
      saved = true
    }
    return {
      panel: formatPanel({ result, beforeTokens: before, afterTokens: after }),
      result,
      beforeTokens: before,
      afterTokens: after,
      saved,
    }
  }

  /**
   * Compresses ranges of the conversation as it stands (all messages after the last compaction
   * marker), writes the archives and saves the state. `callId` is recorded as the block's
   * `compressCallId` (none: the compression cannot be replayed from the transcript).
   */
  compress(
    messages: readonly Message[],
    ranges: readonly CompressRange[],
    options: { callId?: string } = {},
  ): CompressOutcome {
    return this.run(project(messages).messages, ranges, options.callId ?? '')
  }

  /**
   * Processes the Compress call `callId` found in the transcript, on the messages up to and
   * including it (exactly what a rebuild replays), and returns the panel to record as its result.
   */
  compressCall(messages: readonly Message[], callId: string): CompressOutcome {
    const cores = project(messages).messages
    const i = cores.findIndex(
      (m) => m.contentType === 'tool-call' && m.toolName === COMPRESS_TOOL_NAME && m.toolCallId === callId,
    )
    if (i < 0) {
      throw new NoaError(
        'NOA_NOT_FOUND',
        `no Compress call ${JSON.stringify(callId)} after the last compaction marker`,
        {
          field: 'callId',
        },
      )
    }
    const raw = (cores[i] as CoreMessage).text
    const parsed = parseCompressArgs(raw)
    const empty = (panel: string): CompressOutcome => ({
      panel,
      result: {
        state: this.state,
        blocksCreated: [],
        tokensCompressed: 0,
        errors: [panel],
        warnings: [],
        survivingBlockIds: [],
      },
      beforeTokens: 0,
      afterTokens: 0,
      parse: parsed.diagnostics,
      saved: false,
    })
    if (!parsed.diagnostics.ok && parsed.ranges.length === 0)
      return empty(formatParseError(parsed.diagnostics, raw))
    if (parsed.ranges.length === 0) return empty('No ranges provided.')
    const out = this.run(cores.slice(0, i + 1), parsed.ranges, callId)
    if (parsed.diagnostics.salvaged || parsed.diagnostics.tailRepaired) {
      out.panel +=
        '\n  note: the arguments were malformed and were repaired before parsing; check the call shape if this recurs.'
    }
    out.parse = parsed.diagnostics
    return out
  }

  /**
   * The messages the model is shown: Norma's Materialize, then what the transcript layer sends
   * (`viewForModel`: from the last compaction marker on, tool blocks paired). With active blocks
   * the second step changes nothing; without, it drops what precedes the last marker.
   */
  view(messages: readonly Message[]): Message[] {
    return viewForModel(materialize(messages, this.state, this.config))
  }

  /**
   * `view` with the ref of each block (`m00003`, `BLOCKED` for a protected one, `b1` for the
   * summary of block b1), as the next compression would assign them: what `compress --from/--to`
   * takes. The state is not changed.
   */
  viewWithRefs(messages: readonly Message[]): ViewRefs {
    const v = materializeWithRefs(messages, this.state, this.config)
    return { messages: viewForModel(v.messages), refs: v.refs }
  }

  /**
   * Norma's RebuildFromHistory: a new state from the transcript's succeeded Compress calls,
   * reusing the archives already in place, saved to state.json. Beyond Norma, which replaces
   * whatever state there was: when the current state holds blocks the calls do not produce, the
   * rebuild is refused (NOA_CONFLICT naming them) before anything is written, or, with
   * `keepExisting`, those blocks are kept; and the state it replaces is kept beside it
   * (`state.json.before-rebuild-<ms>`).
   */
  rebuild(messages: readonly Message[], options: RebuildOptions = {}): RebuildOutcome {
    const { created, now } = this.stamp()
    const input = {
      messages: project(messages).messages,
      config: this.config,
      sessionId: this.sessionId,
      archiveRoot: this.root,
      created,
      now,
    }
    // A dry run first: a refused rebuild must not leave archives behind.
    const planned = rebuildState({ ...input, archiver: new PlanArchiver(this.root) })
    const lost = this.state.blocks.filter((b) => !planned.state.blocks.some((x) => sameBlock(b, x)))
    if (lost.length > 0 && !options.keepExisting) {
      throw new NoaError(
        'NOA_CONFLICT',
        `rebuild would drop ${lost.length === 1 ? 'block' : 'blocks'} ${lost.map(describeBlock).join(', ')}: ` +
          "the transcript's recorded Compress calls do not produce " +
          `${lost.length === 1 ? 'it' : 'them'} (compressed without a call, or the call's result is not in the transcript); ` +
          'nothing was changed (keep them with --keep-existing, API: keepExisting)',
        { blocks: lost.map((b) => b.blockId) },
      )
    }
    const state = lost.length > 0 ? keepBlocks(planned.state, this.state, lost) : undefined
    const archiver = new ReuseArchiver(this.root)
    const res = rebuildState({ ...input, archiver })
    for (const w of res.warnings) this.warn(`rebuild: ${w}`)
    const previous = this.keepPrevious()
    this.state = state ? keepBlocks(res.state, this.state, lost) : res.state
    this.save()
    return {
      replayed: res.replayed,
      skipped: res.skipped,
      warnings: res.warnings,
      reused: archiver.reused,
      kept: lost.map((b) => b.blockId),
      previous,
    }
  }

  /** Copies a readable state.json aside before it is replaced (an unreadable one `save` moves aside). */
  private keepPrevious(): string | undefined {
    // An unreadable file the first save moves aside itself.
    if (this.load.error && !this.setAside) return undefined
    let data: Buffer
    try {
      // Never through a symlink, as every state read.
      const fd = openFileSync(this.stateFile, READ, { what: 'state file' })
      try {
        data = readFileSync(fd)
      } finally {
        closeSync(fd)
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
      throw err
    }
    const aside = `${this.stateFile}${BEFORE_REBUILD_SUFFIX}${Date.now()}`
    writeFileAtomic(aside, data, { tempPrefix: '.noa-state-', tempSuffix: '.tmp', what: 'state file' })
    return aside
  }

  /** A copy of the state. */
  snapshot(): CompressionState {
    return cloneState(this.state)
  }
}
