/**
 * The transcript writer (Norma's `transcript.Writer`): fills in the identity of each record
 * (uuid, parent_uuid, session, agent, timestamp), writes it as Norma's `json.Marshal` would, and
 * chains each record to the last one that was appended successfully.
 *
 * Appends are queued and written in order, one batch at a time: a batch's records are chained
 * to each other when the batch is built, and `lastUuid` moves only when the whole batch is
 * written, so a failed append never becomes a parent (Norma's rule), while appends made
 * meanwhile share one write (and, durable, one fdatasync).
 *
 * Modes:
 * - `buffered` (Norma's): append to the file (synchronously, like Norma), no fsync. Survives a
 *   process crash, not a power cut.
 * - `durable`: through an AgentLog's owner workers (`appendToFile`): the promise resolves after
 *   the fdatasync that covers the record, and the file is flocked while open, so a second
 *   process is refused (NOA_WORKSPACE_LOCKED).
 *
 * Like Norma's, the writer keeps its first error (`err()`) and goes on. Each append's promise
 * also rejects with its own error; it is marked handled, so a caller that fires and forgets
 * (as Norma's callers do) does not crash the process.
 */
import { closeSync, ftruncateSync, writeSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import type { AgentLog } from '../engine/agent-log.js'
import { mkdirDurable } from '../engine/atomic.js'
import { NoaError } from '../engine/errors.js'
import { APPEND_CREATE, openFileSync } from '../engine/files.js'
import { checkOptionKeys } from '../engine/options.js'
import { encodeRecordBody, encodeRecordHead, USAGE_KEYS } from './encode.js'
import { formatTimestamp, type NanoClock, newTranscriptId, nowNanos } from './ids.js'
import { MAX_LINE_BYTES } from './loader.js'
import { transcriptPath } from './paths.js'
import { inspectTranscriptTail } from './tail.js'
import {
  type BoundaryMeta,
  isZeroUsage,
  type Message,
  type TranscriptRecord,
  type Usage,
  zeroUsage,
} from './types.js'
import { checkBoundaryMeta, checkMessage, checkUsage, checkWellFormed, recordError } from './validate.js'

export type WriterMode = 'buffered' | 'durable'

export interface TranscriptWriterOptions {
  /** Folder of the session transcripts. */
  dir: string
  sessionId: string
  /** Write the sidechain of this agent (`<dir>/<sessionId>/subagents/agent-<agentId>.jsonl`). */
  agentId?: string
  /** Default `durable` when `log` is given, else `buffered`. */
  mode?: WriterMode
  /** Durable mode: the AgentLog to append through. The writer never closes it. */
  log?: AgentLog
  /** Durable mode without `log`: root of the AgentLog the writer opens itself (and closes). */
  root?: string
  /** Chain the first record after this uuid (what `resume` returns as `parentUuid`). */
  parentUuid?: string
  /**
   * Accept anything the loader can return (other roles, block types, keys) instead of refusing
   * what Norma would never write. For re-recording loaded messages as they are.
   */
  allowUnknown?: boolean
  /** Unix time in nanoseconds, for the timestamps (and the id fallback). */
  clock?: NanoClock
  /** Random source for the uuids (test seam). */
  random?: (size: number) => Uint8Array
}

const OPTION_KEYS = new Set([
  'dir',
  'sessionId',
  'agentId',
  'mode',
  'log',
  'root',
  'parentUuid',
  'allowUnknown',
  'clock',
  'random',
])

/** Bytes per write when many appends queue up while one is in flight. */
const MAX_BATCH_BYTES = 8 * 1024 * 1024

interface Pending {
  uuid: string
  /** `,"timestamp":…}`: everything after the identity keys, serialized when the append was made. */
  body: string
  fields: Omit<TranscriptRecord, 'uuid' | 'parent_uuid' | 'session_id' | 'agent_id' | 'is_sidechain'>
  resolve(record: TranscriptRecord): void
  reject(err: unknown): void
}

function optionError(name: string, rule: string, value: unknown): NoaError {
  return new NoaError('NOA_BAD_OPTION', `option ${name} ${rule}, got ${String(value)}`, { field: name })
}

function handled<T>(p: Promise<T>): Promise<T> {
  p.catch(() => {})
  return p
}

export class TranscriptWriter {
  /** Absolute path of the file written. */
  readonly path: string
  /** The folder the writer was given (absolute): the only part of the path that may be a symlink. */
  readonly dir: string
  readonly sessionId: string
  readonly agentId: string | undefined
  readonly mode: WriterMode
  /** Bytes of a torn last line cut before the first append (0 when there was none). */
  repairedTailBytes = 0

  private readonly isSidechain: boolean
  private readonly allowUnknown: boolean
  private readonly clock: NanoClock
  private readonly random: ((size: number) => Uint8Array) | undefined
  private readonly root: string | undefined
  private log: AgentLog | undefined
  private ownLog: Promise<AgentLog> | undefined
  private last: string | undefined
  private firstError: Error | null = null
  private queue: Pending[] = []
  private pumping = false
  private idleWaiters: Array<() => void> = []
  private prepared = false
  /** The transcript's folders were made or checked (again after the file went missing). */
  private foldersReady = false
  private closing: Promise<void> | undefined

  constructor(options: TranscriptWriterOptions) {
    checkOptionKeys(options, OPTION_KEYS)
    if (typeof options.dir !== 'string' || options.dir === '') {
      throw optionError('dir', 'must be a non-empty string', options.dir)
    }
    this.path = resolve(transcriptPath(options.dir, options.sessionId, options.agentId))
    this.dir = resolve(options.dir)
    this.sessionId = options.sessionId
    this.agentId = options.agentId
    this.isSidechain = options.agentId !== undefined
    const mode = options.mode ?? (options.log ? 'durable' : 'buffered')
    if (mode !== 'buffered' && mode !== 'durable')
      throw optionError('mode', "must be 'buffered' or 'durable'", mode)
    if (mode === 'buffered' && (options.log !== undefined || options.root !== undefined)) {
      throw optionError(options.log ? 'log' : 'root', 'is for durable mode only', 'buffered mode')
    }
    if (
      options.log !== undefined &&
      typeof (options.log as { appendToFile?: unknown }).appendToFile !== 'function'
    ) {
      throw optionError('log', 'must be an AgentLog', options.log)
    }
    if (options.log !== undefined && options.root !== undefined) {
      throw optionError(
        'root',
        'is for the AgentLog the writer opens itself; the given log has its own',
        options.root,
      )
    }
    if (options.allowUnknown !== undefined && typeof options.allowUnknown !== 'boolean') {
      throw optionError('allowUnknown', 'must be a boolean', options.allowUnknown)
    }
    this.mode = mode
    this.log = options.log
    this.root = options.root
    if (options.parentUuid !== undefined && typeof options.parentUuid !== 'string') {
      throw optionError('parentUuid', 'must be a string', options.parentUuid)
    }
    this.last = options.parentUuid || undefined
    this.allowUnknown = options.allowUnknown ?? false
    if (options.clock !== undefined && typeof options.clock !== 'function') {
      throw optionError('clock', 'must be a function returning Unix nanoseconds as a bigint', options.clock)
    }
    if (options.random !== undefined && typeof options.random !== 'function') {
      throw optionError('random', 'must be a function (size) => bytes', options.random)
    }
    this.clock = options.clock ?? nowNanos
    this.random = options.random
  }

  /** The uuid of the last record appended successfully (the next record's parent). */
  get lastUuid(): string | undefined {
    return this.last
  }

  /** The first error any append met (Norma's `Err()`), or null. */
  err(): Error | null {
    return this.firstError
  }

  /** Records a message (Norma's `RecordMessage`); usage is written only when not all zero. */
  recordMessage(message: Message, usage?: Partial<Usage>): Promise<TranscriptRecord> {
    return this.submit(() => {
      checkMessage(message, { strict: !this.allowUnknown })
      checkWellFormed(message, 'message')
      const fields: Pending['fields'] = { timestamp: '', type: 'message', message }
      if (usage !== undefined) {
        checkUsage(usage, { strict: !this.allowUnknown })
        // Keys the model does not know survive only with allowUnknown (strict checks refused them).
        const full: Usage = { ...usage, ...zeroUsage() }
        for (const key of USAGE_KEYS) full[key as keyof Usage] = usage[key as keyof Usage] ?? 0
        if (!isZeroUsage(full)) fields.usage = full
      }
      return fields
    })
  }

  /** Records a boundary record (Norma's `RecordBoundary`), as written at a compaction. */
  recordBoundary(meta: BoundaryMeta): Promise<TranscriptRecord> {
    return this.submit(() => {
      checkBoundaryMeta(meta, { strict: !this.allowUnknown })
      checkWellFormed(meta, 'boundary')
      return { timestamp: '', type: 'boundary', boundary: meta }
    })
  }

  /** Resolves once every append made so far has been written (or has failed). */
  flush(): Promise<void> {
    if (!this.pumping && this.queue.length === 0) return Promise.resolve()
    return new Promise((resolve) => this.idleWaiters.push(resolve))
  }

  /** Flushes, then closes the AgentLog the writer opened itself (never one it was given). */
  close(): Promise<void> {
    this.closing ??= (async () => {
      await this.flush()
      const own = this.ownLog
      this.ownLog = undefined
      if (own) await (await own.catch(() => undefined))?.close()
    })()
    return this.closing
  }

  private keep(err: unknown): void {
    if (this.firstError === null) this.firstError = err instanceof Error ? err : new Error(String(err))
  }

  private submit(build: () => Pending['fields']): Promise<TranscriptRecord> {
    let fields: Pending['fields']
    let body: string
    const ns = this.clock()
    const uuid = newTranscriptId({ random: this.random, clock: this.clock })
    try {
      if (this.closing) throw new NoaError('NOA_CLOSED', `the transcript writer of ${this.path} is closed`)
      fields = build()
      fields.timestamp = formatTimestamp(ns)
      body = encodeRecordBody(fields)
    } catch (err) {
      this.keep(err)
      return handled(Promise.reject(err))
    }
    const p = new Promise<TranscriptRecord>((resolve, reject) => {
      this.queue.push({ uuid, body, fields, resolve, reject })
    })
    if (!this.pumping) {
      this.pumping = true
      // Appends made in the same turn go out in one batch.
      queueMicrotask(() => void this.pump())
    }
    return handled(p)
  }

  private async pump(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        let parent = this.last
        let data = ''
        const batch: Array<{ p: Pending; record: TranscriptRecord }> = []
        let taken = 0
        while (taken < this.queue.length && data.length < MAX_BATCH_BYTES) {
          const p = this.queue[taken++] as Pending
          const head = {
            uuid: p.uuid,
            parent_uuid: parent,
            session_id: this.sessionId,
            agent_id: this.agentId,
            is_sidechain: this.isSidechain || undefined,
          }
          const line = `${encodeRecordHead(head)}${p.body}\n`
          // UTF-8 takes at most 3 bytes per UTF-16 unit: count exactly only near the limit.
          if (line.length * 3 > MAX_LINE_BYTES && Buffer.byteLength(line) > MAX_LINE_BYTES) {
            const err = recordError(
              'record',
              `is ${Buffer.byteLength(line)} bytes; Norma reads lines of less than 64 MiB (bufio.Scanner)`,
            )
            this.keep(err)
            p.reject(err)
            continue
          }
          const record: TranscriptRecord = {
            uuid: p.uuid,
            ...(parent ? { parent_uuid: parent } : {}),
            session_id: this.sessionId,
            ...(this.isSidechain ? { agent_id: this.agentId as string, is_sidechain: true } : {}),
            ...p.fields,
          }
          batch.push({ p, record })
          data += line
          parent = p.uuid
        }
        // One splice per batch: shifting one at a time is quadratic in a long queue.
        this.queue.splice(0, taken)
        if (batch.length === 0) continue
        try {
          await this.write(data)
          this.last = parent
          for (const { p, record } of batch) p.resolve(record)
        } catch (err) {
          this.keep(err)
          for (const { p } of batch) p.reject(err)
        }
      }
    } finally {
      this.pumping = false
      const waiters = this.idleWaiters
      this.idleWaiters = []
      for (const fn of waiters) fn()
    }
  }

  private async write(data: string): Promise<void> {
    // The transcript's folders are made (or checked) first: a symlinked `<session>/` or
    // `subagents/` is refused before anything is read or written through it. The tail is read
    // without following a symlink, so a planted `.jsonl` link (dangling or not) fails here, in
    // both modes, before any cut.
    this.prepareFolders()
    const tail = this.prepared ? undefined : await inspectTranscriptTail(this.path)
    const prefix = tail?.state === 'unterminated' ? '\n' : ''
    const cut = tail?.state === 'torn' ? tail.size - tail.validLength : 0
    if (this.mode === 'durable') {
      const log = await this.agentLog()
      // The owner cuts a torn tail when it opens the file; a complete unterminated line must stay.
      await log.appendToFile(this.path, prefix + data, { repairTail: tail?.state !== 'unterminated' })
    } else {
      // Synchronous, as Norma's Store.Append is: a page-cache write takes microseconds, where
      // each asynchronous call would cost a thread-pool round trip. The cut and the append go
      // through one descriptor opened without following a symlink (0666 before the umask).
      let fd: number
      try {
        fd = openFileSync(this.path, APPEND_CREATE, { what: 'transcript' })
      } catch (err) {
        // Its folder was removed since it was checked: made (and checked) again, as Norma's
        // MkdirAll before each append would.
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
        this.foldersReady = false
        this.prepareFolders()
        fd = openFileSync(this.path, APPEND_CREATE, { what: 'transcript' })
      }
      try {
        if (tail && cut > 0) ftruncateSync(fd, tail.validLength)
        const buf = Buffer.from(prefix + data, 'utf8')
        let off = 0
        while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off)
      } finally {
        closeSync(fd)
      }
    }
    if (tail) {
      this.prepared = true
      this.repairedTailBytes = cut
    }
  }

  private prepareFolders(): void {
    if (this.foldersReady) return
    mkdirDurable(this.dir, dirname(this.path))
    this.foldersReady = true
  }

  private agentLog(): Promise<AgentLog> {
    if (this.log) return Promise.resolve(this.log)
    this.ownLog ??= (async () => {
      const { AgentLog } = await import('../engine/agent-log.js')
      return AgentLog.open({ root: this.root, workers: 1 })
    })()
    const own = this.ownLog
    // A failed open is retried by the next append.
    own.catch(() => {
      if (this.ownLog === own) this.ownLog = undefined
    })
    return own
  }
}
