/**
 * The daemon's streams (read, readBytes, watch) as positions in a log that a reader can be
 * opened at again. A stream holds an engine reader (a file, its buffers, a watch's inotify
 * watch) only while its client can take a chunk; otherwise the session closes the reader and
 * keeps the position alone (the seq or byte after the last chunk sent), so a stream its client
 * does not read costs the daemon a few hundred bytes, whatever its window.
 *
 * Each reopening reads from the position as the first reader would have gone on: a read and a
 * readBytes keep the end the log had when the stream began (what was there then, no more), a
 * watch goes on from the next seq (the engine's own resume, no gap and no duplicate).
 */
import { statSync } from 'node:fs'
import type { AgentLog } from '../engine/agent-log.js'
import { byteStart } from '../engine/base.js'
import type { Entry } from '../engine/entry.js'
import { readThroughJournals } from '../engine/journal-view.js'
import { existingLog } from '../engine/logs.js'
import { type ReadTuning, readChunks, readEntryBatches, seekSeq } from '../engine/reader.js'
import type { WatchOptions } from '../engine/watch.js'
import { bool, CHUNK_ENTRIES, checkFields, protocolError, type Request, seqArg } from './protocol.js'

/**
 * Bytes a stream reads from its log at a time, and about the most a chunk holds: an open reader
 * holds two such buffers and the entries of one (1 MiB buffers, the engine's own, made each
 * lazy read stream cost 2-3.5 MB).
 */
export const STREAM_READ_BYTES = 64 << 10

const TUNING: ReadTuning = { chunkSize: STREAM_READ_BYTES, threads: false }

export interface Chunk {
  data: unknown
  /** readBytes: the stored bytes the chunk holds. */
  bytes?: number
}

/** A stream's place in its log, and how to read on from it. */
export interface StreamSource {
  readonly op: string
  /**
   * A reader from the position, ended by `signal` or by its `return()`. A watch calls `tail`
   * with true when it has read everything and waits for a commit, false once it reads again.
   */
  open(signal: AbortSignal, tail: (waiting: boolean) => void): AsyncGenerator<Chunk>
  /** `chunk` was sent: the position moves past it. */
  sent(chunk: Chunk): void
  /** What the final answer holds besides `chunks`. */
  result(): object
}

/** The source of a stream request; a bad field is refused here, before anything is opened. */
export function streamSource(req: Request, log: AgentLog, root: string): StreamSource {
  switch (req.op) {
    case 'read':
      return readSource(req, root)
    case 'readBytes':
      return bytesSource(req, root)
    case 'watch':
      return watchSource(req, log)
    default:
      throw protocolError(`op ${req.op} is not a stream`)
  }
}

function readSource(req: Request, root: string): StreamSource {
  checkFields(req, ['ws', 'fromSeq', 'validate', 'end', 'window'])
  let next = req.fromSeq === undefined ? 1 : seqArg(req.fromSeq, 'read.fromSeq')
  const validate = req.validate === undefined ? undefined : bool(req.validate, 'read.validate')
  let end = req.end === undefined ? undefined : seqArg(req.end, 'read.end')
  let file: string | null = null
  let entries = 0
  return {
    op: 'read',
    async *open() {
      if (file === null) {
        file = existingLog(root, req.ws as string)
        readThroughJournals(root)
        end ??= statSync(file).size // what a read sees is what was there when it began
      }
      const options = validate === undefined ? { fromSeq: next, end } : { fromSeq: next, end, validate }
      for await (const batch of readEntryBatches(file, options, TUNING)) yield* entryChunks(batch)
    },
    sent(chunk) {
      const batch = chunk.data as Entry[]
      entries += batch.length
      next = (batch[batch.length - 1] as Entry).seq + 1
    },
    result: () => ({ entries }),
  }
}

function bytesSource(req: Request, root: string): StreamSource {
  checkFields(req, ['ws', 'fromSeq', 'window'])
  const fromSeq = req.fromSeq === undefined ? 1 : seqArg(req.fromSeq, 'readBytes.fromSeq')
  let file: string | null = null
  let pos = 0
  let end = 0
  let bytes = 0
  return {
    op: 'readBytes',
    async *open() {
      if (file === null) {
        file = existingLog(root, req.ws as string)
        readThroughJournals(root)
        pos = byteStart(file, fromSeq, fromSeq > 1 ? seekSeq(file, fromSeq) : 0)
        end = statSync(file).size
      }
      // A position inside a line (a long line's chunk boundary) is fine: the bytes are the same.
      for await (const buf of readChunks(file, { start: pos, end, chunkSize: STREAM_READ_BYTES })) {
        for (let i = 0; i < buf.length; i += STREAM_READ_BYTES) {
          const part = buf.subarray(i, Math.min(buf.length, i + STREAM_READ_BYTES))
          yield { data: part.toString('base64'), bytes: part.length }
        }
      }
    },
    sent(chunk) {
      pos += chunk.bytes as number
      bytes += chunk.bytes as number
    },
    result: () => ({ bytes }),
  }
}

function watchSource(req: Request, log: AgentLog): StreamSource {
  checkFields(req, ['ws', 'fromSeq', 'pollMs', 'window'])
  let next = req.fromSeq === undefined ? 1 : seqArg(req.fromSeq, 'watch.fromSeq')
  const pollMs = req.pollMs === undefined ? undefined : seqArg(req.pollMs, 'watch.pollMs')
  return {
    op: 'watch',
    async *open(signal, tail) {
      // Its own signal: a reader closed while it waits for a commit stops waiting at once.
      const own = new AbortController()
      const stop = () => own.abort(signal.reason)
      signal.addEventListener('abort', stop, { once: true })
      try {
        const options: WatchOptions = { fromSeq: next, signal: own.signal }
        if (pollMs !== undefined) options.pollMs = pollMs
        yield* watchChunks(log.watch(req.ws as string, options), own.signal, tail)
      } finally {
        signal.removeEventListener('abort', stop)
        own.abort()
      }
    },
    sent(chunk) {
      const batch = chunk.data as Entry[]
      next = (batch[batch.length - 1] as Entry).seq + 1
    },
    result: () => ({}),
  }
}

/** Splits a read batch into chunks the protocol allows. */
function* entryChunks(batch: Entry[]): Generator<Chunk> {
  if (batch.length <= CHUNK_ENTRIES) {
    yield { data: batch }
    return
  }
  for (let i = 0; i < batch.length; i += CHUNK_ENTRIES) yield { data: batch.slice(i, i + CHUNK_ENTRIES) }
}

const IDLE = Symbol('idle')

/** IDLE after the I/O of this turn: what an iterator does not have by then, it waits for. */
function nextTurn(): Promise<typeof IDLE> {
  return new Promise((ok) => setImmediate(ok, IDLE))
}

/** About an entry's JSON size (its strings and some room for keys and numbers), cheaply. */
function entrySize(e: Entry): number {
  let n = 64
  for (const v of Object.values(e)) if (typeof v === 'string') n += v.length
  return n
}

/**
 * A watch's entries, gathered into chunks: whatever the iterator has ready now goes into one
 * chunk (up to the chunk bounds); the chunk is sent as soon as the iterator would have to wait.
 */
async function* watchChunks(
  source: AsyncIterable<Entry>,
  signal: AbortSignal,
  tail: (waiting: boolean) => void,
): AsyncGenerator<Chunk> {
  const it = source[Symbol.asyncIterator]()
  try {
    let pending = it.next()
    for (;;) {
      let first = await orAbort(Promise.race([pending, nextTurn()]), signal)
      if (first === IDLE) {
        tail(true)
        try {
          first = await orAbort(pending, signal)
        } finally {
          tail(false)
        }
      }
      if (first.done) return
      let batch: Entry[] = [first.value]
      let bytes = entrySize(first.value)
      pending = it.next()
      while (batch.length < CHUNK_ENTRIES && bytes < STREAM_READ_BYTES) {
        const r = await orAbort(Promise.race([pending, nextTurn()]), signal)
        if (r === IDLE) break
        if (r.done) {
          yield { data: batch }
          return
        }
        batch.push(r.value)
        bytes += entrySize(r.value)
        pending = it.next()
      }
      yield { data: batch }
      batch = [] // not kept alive by a suspended generator while it waits for the next commit
    }
  } finally {
    it.return?.(undefined)?.catch(() => {})
  }
}

/**
 * `p`, or a rejection with the signal's reason once it aborts. Not a race with one promise that
 * rejects on abort: every race adds a reaction to that promise, which stays until it settles and
 * keeps the race's result alive, so a stream that never aborts kept every chunk it ever sent
 * (1,000 watches that had each delivered 1,000 entries held 564 KB of heap apiece).
 */
export function orAbort<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason)
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason)
    signal.addEventListener('abort', onAbort, { once: true })
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort)
        resolve(v)
      },
      (err) => {
        signal.removeEventListener('abort', onAbort)
        reject(err)
      },
    )
  })
}
