/**
 * One session's compression, on disk under `<baseDir>/<sessionId>/` (Norma's noaadapter
 * Session): state.json, `tier<N>/` archives. Opening never fails on a bad state file: the
 * error is kept in `loadError` (and passed to `onWarn`) and the session starts empty, as
 * Norma's does; a host that prefers to stop checks `loadError`.
 */
import { closeSync, lstatSync, renameSync } from 'node:fs'
import { join } from 'node:path'
import { NoaError } from '../engine/errors.js'
import { APPEND_CREATE, checkDirsBelow, openFileSync } from '../engine/files.js'
import { loadNative } from '../engine/native.js'
import { checkOptionKeys } from '../engine/options.js'
import type { Message } from '../transcript/types.js'
import { viewForModel } from '../transcript/view.js'
import { FileArchiver, ReuseArchiver } from './archive.js'
import { type ApplyResult, applyCompression } from './compress.js'
import { type CompressParseDiagnostics, parseCompressArgs } from './compress-args.js'
import { type ContextConfig, resolveConfig } from './config.js'
import { type InheritResult, inheritState } from './inherit.js'
import { materialize } from './materialize.js'
import { formatPanel } from './panel.js'
import { processTurn } from './pipeline.js'
import { project } from './project.js'
import { rebuildState } from './rebuild.js'
import { cloneState } from './state.js'
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
import { COMPRESS_TOOL_NAME, type CompressionState, type CompressRange, type CoreMessage } from './types.js'

export interface ContextSessionOptions extends ClockOptions {
  /** Norma's ArchiveBaseDir; made absolute. */
  baseDir: string
  sessionId: string
  config?: Partial<ContextConfig>
  /** Ancestors (nearest first) to inherit from when the session has no blocks. */
  parentSessionIds?: readonly string[]
  /** Warnings (a bad state file, an inheritance), as Norma's OnWarn. */
  onWarn?: (message: string) => void
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
}

const OPTION_KEYS = new Set(['baseDir', 'sessionId', 'config', 'parentSessionIds', 'onWarn', 'now', 'zone'])

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
    this.load = loadStateFile(this.stateFile, this.sessionId, this.root)
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
    const after = Math.max(before - result.tokensCompressed, 0)
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
   * Norma's RebuildFromHistory: a new state from the transcript's succeeded Compress calls,
   * reusing the archives already in place, saved to state.json.
   */
  rebuild(messages: readonly Message[]): RebuildOutcome {
    const { created, now } = this.stamp()
    const archiver = new ReuseArchiver(this.root)
    const res = rebuildState({
      messages: project(messages).messages,
      config: this.config,
      sessionId: this.sessionId,
      archiveRoot: this.root,
      archiver,
      created,
      now,
    })
    for (const w of res.warnings) this.warn(`rebuild: ${w}`)
    this.state = res.state
    this.save()
    return { replayed: res.replayed, skipped: res.skipped, warnings: res.warnings, reused: archiver.reused }
  }

  /** A copy of the state. */
  snapshot(): CompressionState {
    return cloneState(this.state)
  }
}
