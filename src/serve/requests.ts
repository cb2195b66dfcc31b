/**
 * A request of a daemon connection: what the session keeps of it while it is in flight
 * (InFlight), and running a unary one against the AgentLog the daemon owns (callRequest): its
 * fields and sizes checked, its appends' last seqs noted. session.ts reads, counts and answers
 * requests; the streams are pumped by stream-pump.ts.
 */
import type { AgentLog, AppendOptions } from '../engine/agent-log.js'
import { STORE_APPEND } from '../engine/checks.js'
import { type Ack, checkWorkspace, type EntryInput, encodeBody } from '../engine/entry.js'
import { Errors } from '../engine/errors.js'
import {
  badArgument,
  bool,
  checkFields,
  type Limits,
  protocolError,
  type Request,
  tooLarge,
  utf8Bytes,
} from './protocol.js'

/** What a request needs from its daemon (a part of SessionHost). */
export interface RequestHost {
  readonly log: AgentLog
  readonly limits: Limits
  stats(): object
  /** Records the last seq an append through the daemon got (for lastSeq). */
  noteSeq(workspace: string, seq: number): void
  lastSeq(workspace: string): Promise<number>
}

/** A request in flight on a connection, as its session keeps it. */
export interface InFlight {
  op: string
  bytes: number
  /**
   * Streams, and appends sent with `"cancellable": true`: what `cancel` aborts. Others have
   * none (an AbortController and its listener per append cost more than the rest of its path).
   */
  abort: AbortController | null
  /** Streams: chunks the client still accepts, and a wake-up for a stream waiting for credit. */
  credits?: number
  wake?: (() => void) | null
}

/** A unary request against the AgentLog. Validation errors are thrown synchronously. */
export function callRequest(
  host: RequestHost,
  transport: 'unix' | 'tcp',
  req: Request,
  signal: AbortSignal | undefined,
): Promise<unknown> {
  const log = host.log
  const limits = host.limits
  switch (req.op) {
    case 'append': {
      checkFields(req, ['ws', 'entry', 'ifLastSeq', 'checkBlobs', 'cancellable'])
      const ws = checkWorkspace(req.ws) // in the engine's order: the workspace, then the entry
      const size = utf8Bytes(encodeBody(req.entry))
      if (size > limits.maxEntryBytes)
        throw tooLarge('the entry', size, limits.maxEntryBytes, '--max-entry-bytes')
      return log.append(ws, req.entry as EntryInput, appendOptions(req, signal)).then((ack) => {
        host.noteSeq(ws, ack.seq)
        return ack
      })
    }
    case 'appendMany': {
      checkFields(req, ['ws', 'entries', 'ifLastSeq', 'checkBlobs', 'cancellable'])
      const ws = checkWorkspace(req.ws)
      const entries = sizedEntries(host, req, 'appendMany')
      return log.appendMany(ws, entries, appendOptions(req, signal)).then((acks) => noted(host, ws, acks))
    }
    case 'storeAppend': {
      // The store's own path (its records, unchecked: it has just written them): for this
      // user's processes only, which could write the records' files themselves anyway.
      checkFields(req, ['ws', 'entries'])
      localOnly(transport, req.op)
      const ws = checkWorkspace(req.ws)
      const entries = sizedEntries(host, req, 'storeAppend')
      return log[STORE_APPEND](ws, entries).then((acks) => noted(host, ws, acks))
    }
    case 'appendAtomic': {
      checkFields(req, ['batch'])
      const batch = req.batch
      if (typeof batch === 'object' && batch !== null && !Array.isArray(batch)) {
        for (const [ws, entries] of Object.entries(batch)) {
          if (!Array.isArray(entries)) continue // the engine names it
          entries.forEach((e, i) => {
            const size = utf8Bytes(encodeBody(e, `${ws} entry ${i + 1}`))
            if (size > limits.maxEntryBytes)
              throw tooLarge(`${ws} entry ${i + 1}`, size, limits.maxEntryBytes, '--max-entry-bytes')
          })
        }
      }
      return log.appendAtomic(batch as Record<string, never[]>).then((out) => {
        for (const [ws, acks] of Object.entries(out)) noted(host, ws, acks)
        return out
      })
    }
    case 'appendReplicated': {
      checkFields(req, ['ws', 'lines'])
      const lines = req.lines
      if (!Array.isArray(lines) || !lines.every((l) => typeof l === 'string')) {
        throw badArgument('appendReplicated.lines must be an array of strings')
      }
      lines.forEach((l: string, i) => {
        const size = utf8Bytes(l)
        if (size > limits.maxEntryBytes)
          throw tooLarge(`line ${i + 1}`, size, limits.maxEntryBytes, '--max-entry-bytes')
      })
      const ws = req.ws as string
      return log.appendReplicated(ws, lines).then((acks) => noted(host, ws, acks))
    }
    case 'appendToFile': {
      checkFields(req, ['file', 'data', 'lock', 'repairTail'])
      localOnly(transport, req.op)
      if (typeof req.data !== 'string') throw badArgument('appendToFile.data must be a string')
      const size = utf8Bytes(req.data)
      if (size > limits.maxEntryBytes)
        throw tooLarge('the data', size, limits.maxEntryBytes, '--max-entry-bytes')
      const options: { lock?: boolean; repairTail?: boolean } = {}
      if (req.lock !== undefined) options.lock = bool(req.lock, 'appendToFile.lock')
      if (req.repairTail !== undefined) options.repairTail = bool(req.repairTail, 'appendToFile.repairTail')
      return log.appendToFile(req.file as string, req.data, options)
    }
    case 'releaseFile':
      checkFields(req, ['file'])
      localOnly(transport, req.op)
      return log.releaseFile(req.file as string)
    case 'verify':
      checkFields(req, ['ws'])
      return log.verify(req.ws as string)
    case 'workspaces':
      checkFields(req, [])
      return log.workspaces()
    case 'recover':
      checkFields(req, ['ws'])
      return log.recover(req.ws as string)
    case 'openWorkspace':
      checkFields(req, ['ws'])
      return log.openWorkspace(req.ws as string)
    case 'release':
      checkFields(req, ['ws'])
      return log.release(req.ws as string)
    case 'lastSeq':
      checkFields(req, ['ws'])
      return host.lastSeq(req.ws as string).then((lastSeq) => ({ lastSeq }))
    case 'status':
      checkFields(req, [])
      return log.status()
    case 'serverStatus':
      checkFields(req, [])
      return Promise.resolve(host.stats())
    default:
      throw protocolError(`op ${req.op} cannot be sent here`)
  }
}

/** The request's `entries`, each checked and within the entry limit. */
function sizedEntries(host: RequestHost, req: Request, op: string): EntryInput[] {
  const entries = req.entries
  if (!Array.isArray(entries)) throw badArgument(`${op}.entries must be an array of entries`)
  const max = host.limits.maxEntryBytes
  entries.forEach((e, i) => {
    const size = utf8Bytes(encodeBody(e, `entry ${i + 1}`))
    if (size > max) throw tooLarge(`entry ${i + 1}`, size, max, '--max-entry-bytes')
  })
  return entries as EntryInput[]
}

/** Acks of appends through the daemon: their last seq is remembered (lastSeq). */
function noted(host: RequestHost, workspace: string, acks: Ack[]): Ack[] {
  const last = acks[acks.length - 1]
  if (last) host.noteSeq(workspace, last.seq)
  return acks
}

/**
 * Files outside the root are the client's own business only when the client is this user (the
 * socket is 0600): a TCP client, even with the token, writes inside the root's logs only.
 */
function localOnly(transport: 'unix' | 'tcp', op: string): void {
  if (transport !== 'unix') {
    throw Errors.UNAUTHORIZED(`${op} writes files outside the root: only on the unix socket`)
  }
}

function appendOptions(req: Request, signal: AbortSignal | undefined): AppendOptions | undefined {
  if (req.cancellable !== undefined && typeof req.cancellable !== 'boolean') {
    throw badArgument(`${req.op}.cancellable must be true or false, got ${JSON.stringify(req.cancellable)}`)
  }
  if (signal === undefined && req.ifLastSeq === undefined && req.checkBlobs === undefined) return undefined
  const o: AppendOptions = {}
  if (signal) o.signal = signal
  if (req.checkBlobs !== undefined) o.checkBlobs = bool(req.checkBlobs, `${req.op}.checkBlobs`)
  if (req.ifLastSeq !== undefined) {
    const v = req.ifLastSeq
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) {
      throw badArgument(`${req.op}.ifLastSeq must be an integer >= 0, got ${JSON.stringify(v)}`)
    }
    o.ifLastSeq = v
  }
  return o
}
