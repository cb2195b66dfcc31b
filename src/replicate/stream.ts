/**
 * The JetStream stream that holds `<prefix>.>`: finding it, refusing one whose configuration
 * would break the guarantees, creating or fixing one (`noa replicate init`), and reading its
 * messages by stream sequence or subject. The connection is link.ts; failures and retries are
 * failures.ts.
 */

import {
  DiscardPolicy,
  RetentionPolicy,
  StorageType,
  type StoredMsg,
  type StreamConfig,
  type StreamInfo,
} from '@nats-io/jetstream'
import { apiCode, asNoaError, describe, replicationError, streamConfigError } from './failures.js'
import { closeLink, type Link, type NatsTarget, openLink } from './link.js'
import { checkStreamName, defaultStreamName, patternCoversPrefix, wildcardOf } from './subjects.js'

/** 2 minutes, the server's own default: long enough to cover a publisher's retries. */
export const DEFAULT_DUPLICATE_WINDOW_MS = 120_000
const NS_PER_MS = 1_000_000

/** Why a stream cannot hold noa's replicated logs; empty when it can. */
export function streamProblems(config: StreamConfig, prefix: string): string[] {
  const out: string[] = []
  const wildcard = wildcardOf(prefix)
  const subjects = config.subjects ?? []
  if (!subjects.some((p) => patternCoversPrefix(p, prefix))) {
    out.push(
      `its subjects (${subjects.join(', ') || 'none'}) do not capture ${wildcard}, so some workspaces would not be stored`,
    )
  }
  if (!(config.duplicate_window > 0)) {
    out.push(
      'it has no de-duplication window (duplicate_window 0): a publish retried after a lost ack could be stored twice',
    )
  }
  if (config.retention !== RetentionPolicy.Limits) {
    out.push(
      `its retention is ${config.retention}: such streams delete entries once consumed, but a mirror rebuilds logs from the whole history (use limits)`,
    )
  }
  if (config.storage !== StorageType.File) {
    out.push(`its storage is ${config.storage}: a server restart would lose replicated entries (use file)`)
  }
  const dropping: string[] = []
  if (config.max_msgs_per_subject > 0) dropping.push(`max_msgs_per_subject ${config.max_msgs_per_subject}`)
  if (config.max_msgs > 0) dropping.push(`max_msgs ${config.max_msgs}`)
  if (config.max_bytes > 0) dropping.push(`max_bytes ${config.max_bytes}`)
  if (config.max_age > 0) dropping.push(`max_age ${config.max_age / NS_PER_MS / 1000}s`)
  if (dropping.length > 0) {
    out.push(
      `its limits (${dropping.join(', ')}) would delete old entries, and a mirror needs every entry from seq 1 to rebuild a log`,
    )
  }
  if (config.mirror) out.push(`it is a mirror of ${config.mirror.name}: noa publishes to the origin stream`)
  if (config.sealed) out.push('it is sealed: it accepts no more messages')
  return out
}

function isStreamNotFound(err: unknown): boolean {
  return (
    err instanceof Error &&
    (err.name === 'StreamNotFoundError' ||
      /no stream matches subject|stream not found/i.test(err.message) ||
      apiCode(err) === 10059)
  )
}

export interface StreamRef {
  name: string
  /** When the stream was created: a different value means it was deleted and made again. */
  created: string
  config: StreamConfig
  lastSeq: number
  firstSeq: number
}

function refOf(info: StreamInfo): StreamRef {
  return {
    name: info.config.name,
    created: String(info.created),
    config: info.config,
    lastSeq: info.state.last_seq,
    firstSeq: info.state.first_seq,
  }
}

/** Finds the stream (by name, or as the one capturing `<prefix>.>`) and checks its configuration. */
export async function resolveStream(link: Link, prefix: string, stream?: string): Promise<StreamRef> {
  const wildcard = wildcardOf(prefix)
  let name = stream === undefined ? undefined : checkStreamName(stream)
  const hint = `create it with \`noa replicate init --nats ${link.where}${prefix === 'noa' ? '' : ` --prefix ${prefix}`}\``
  if (name === undefined) {
    try {
      name = await link.jsm.streams.find(wildcard)
    } catch (err) {
      if (isStreamNotFound(err)) {
        throw streamConfigError(
          `no JetStream stream on ${link.where} captures ${wildcard}: ${hint} (subjects ${wildcard}, file storage, limits retention, a de-duplication window)`,
          { prefix },
        )
      }
      throw replicationError(`cannot look up the stream for ${wildcard} on ${link.where}: ${describe(err)}`)
    }
  }
  let info: StreamInfo
  try {
    info = await link.jsm.streams.info(name)
  } catch (err) {
    if (isStreamNotFound(err)) {
      throw streamConfigError(`JetStream stream ${name} does not exist on ${link.where}: ${hint}`, {
        stream: name,
      })
    }
    throw replicationError(`cannot read stream ${name} on ${link.where}: ${describe(err)}`)
  }
  const problems = streamProblems(info.config, prefix)
  if (problems.length > 0) {
    throw streamConfigError(
      `JetStream stream ${name} cannot hold noa's replicated logs: ${problems.join('; ')}. \`noa replicate init\` fixes what can be changed in place`,
      { stream: name, problems },
    )
  }
  return refOf(info)
}

export interface InitOptions {
  nats: NatsTarget
  prefix: string
  stream?: string
  /** Copies of each message in a JetStream cluster (1 on a single server, 3 for a cluster of 3). */
  replicas?: number
  duplicateWindowMs?: number
}

export interface InitReport {
  stream: string
  created: boolean
  /** What was changed on an existing stream. */
  changed: string[]
  config: StreamConfig
}

/** Creates the stream noa needs, or fixes an existing one where the server allows it. */
export function initStream(options: InitOptions): Promise<InitReport> {
  return asNoaError('init', () => initStreamNow(options))
}

async function initStreamNow(options: InitOptions): Promise<InitReport> {
  const link = await openLink(options.nats, { name: 'noa replicate init' })
  try {
    const prefix = options.prefix
    const wildcard = wildcardOf(prefix)
    const windowNs = (options.duplicateWindowMs ?? DEFAULT_DUPLICATE_WINDOW_MS) * NS_PER_MS
    let name = options.stream === undefined ? undefined : checkStreamName(options.stream)
    if (name === undefined) {
      name = await link.jsm.streams.find(wildcard).catch((err: unknown) => {
        if (isStreamNotFound(err)) return defaultStreamName(prefix)
        throw err
      })
    }
    checkReplicas(link, options.replicas)
    let existing: StreamInfo | null = null
    try {
      existing = await link.jsm.streams.info(name)
    } catch (err) {
      if (!isStreamNotFound(err)) throw err
    }
    if (existing === null) {
      const info = await link.jsm.streams.add({
        name,
        subjects: [wildcard],
        retention: RetentionPolicy.Limits,
        storage: StorageType.File,
        discard: DiscardPolicy.Old,
        num_replicas: options.replicas ?? 1,
        duplicate_window: windowNs,
        max_msgs: -1,
        max_bytes: -1,
        max_age: 0,
        max_msgs_per_subject: -1,
      })
      return { stream: name, created: true, changed: [], config: info.config }
    }
    const c = existing.config
    const fatal: string[] = []
    if (c.retention !== RetentionPolicy.Limits) fatal.push(`retention is ${c.retention} (needs limits)`)
    if (c.storage !== StorageType.File) fatal.push(`storage is ${c.storage} (needs file)`)
    if (c.mirror) fatal.push(`it is a mirror of ${c.mirror.name}`)
    if (c.sealed) fatal.push('it is sealed')
    if (fatal.length > 0) {
      throw streamConfigError(
        `JetStream stream ${name} cannot be fixed in place: ${fatal.join('; ')}. Use another stream name (--stream) or recreate it`,
        { stream: name, problems: fatal },
      )
    }
    const update: Partial<StreamConfig> = {}
    const changed: string[] = []
    const subjects = c.subjects ?? []
    if (!subjects.some((p) => patternCoversPrefix(p, prefix))) {
      // Subjects under the prefix are covered by the wildcard (and the server refuses overlaps).
      const under = subjects.filter((p) => p.startsWith(`${prefix}.`))
      update.subjects = [...subjects.filter((p) => !under.includes(p)), wildcard]
      changed.push(`subjects += ${wildcard}${under.length > 0 ? ` (replacing ${under.join(', ')})` : ''}`)
    }
    if (!(c.duplicate_window > 0)) {
      update.duplicate_window = windowNs
      changed.push(`duplicate_window = ${windowNs / NS_PER_MS} ms`)
    }
    for (const key of ['max_msgs', 'max_bytes', 'max_msgs_per_subject'] as const) {
      if (c[key] > 0) {
        update[key] = -1
        changed.push(`${key} = -1 (unlimited)`)
      }
    }
    if (c.max_age > 0) {
      update.max_age = 0
      changed.push('max_age = 0 (unlimited)')
    }
    if (options.replicas !== undefined && c.num_replicas !== options.replicas) {
      update.num_replicas = options.replicas
      changed.push(`num_replicas = ${options.replicas}`)
    }
    if (changed.length === 0) return { stream: name, created: false, changed, config: c }
    const info = await link.jsm.streams.update(name, update)
    return { stream: name, created: false, changed, config: info.config }
  } finally {
    await closeLink(link)
  }
}

/**
 * More than one replica needs a JetStream cluster. A server that is not in one has no `cluster`
 * in its INFO; depending on its version it refuses such a stream ("replicas > 1 not supported
 * in non-clustered mode") or makes it with one replica and reports success, so the request is
 * refused here first, before anything is created or changed.
 */
function checkReplicas(link: Link, replicas: number | undefined): void {
  if (replicas === undefined || replicas <= 1 || link.nc.info?.cluster) return
  throw streamConfigError(
    `replicas ${replicas} needs a JetStream cluster of at least ${replicas} servers, but ${link.where} is a single server (not in a cluster), which keeps one copy of each message: use replicas 1 there, or connect to a cluster`,
    { replicas },
  )
}

/** The stored message with this stream sequence, or null. */
export function messageAt(link: Link, stream: string, seq: number): Promise<StoredMsg | null> {
  return link.jsm.streams.getMessage(stream, { seq })
}

export function lastOnSubject(link: Link, stream: string, subject: string): Promise<StoredMsg | null> {
  return link.jsm.streams.getMessage(stream, { last_by_subj: subject })
}

/** First message on `subject` whose stream sequence is ≥ `fromSeq` (server ≥ 2.9), or null. */
export function nextOnSubject(
  link: Link,
  stream: string,
  subject: string,
  fromSeq: number,
): Promise<StoredMsg | null> {
  // The request type lists only seq and last_by_subj; the server also takes next_by_subj.
  return link.jsm.streams.getMessage(stream, { seq: fromSeq, next_by_subj: subject } as unknown as {
    seq: number
  })
}

/**
 * The message carrying entry `seq` on a workspace subject, found by binary search over stream
 * sequences (entries of one subject are stored in seq order), or null. O(log n) requests.
 */
export async function findEntryOnSubject(
  link: Link,
  stream: string,
  subject: string,
  seq: number,
  hiStreamSeq: number,
  seqOf: (data: Uint8Array) => number,
  retry: <T>(what: string, fn: () => Promise<T>) => Promise<T> = (_what, fn) => fn(),
): Promise<StoredMsg | null> {
  let lo = 1
  let hi = hiStreamSeq
  while (lo <= hi) {
    const mid = Math.floor((lo + hi) / 2)
    const m = await retry(`search ${subject}`, () => nextOnSubject(link, stream, subject, mid))
    if (m === null || m.seq > hi) {
      hi = mid - 1
      continue
    }
    const at = seqOf(m.data)
    if (at === seq) return m
    if (at < seq) lo = m.seq + 1
    else hi = mid - 1
  }
  return null
}
