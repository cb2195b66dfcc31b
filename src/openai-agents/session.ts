/**
 * NoaSession: an OpenAI Agents SDK `Session` whose history is a noa workspace,
 * `oa.<session id>` (adapters/names.ts; `oah.<hash>` for a long id, with the id in `session`).
 *
 * Each item is a file, `items/<12-digit position>`, whose blob is the item's JSON: `addItems`
 * appends `write` entries (one commit for the call), `popItem` a `delete` of the last one,
 * `clearSession` a `delete` of each and a `write` of `cleared` (a tombstone, see clearSession). So `noa log` shows the history as it happened, and
 * `noa snapshot` + `noa tree`/`noa blob get` show it as it stands; `noa fork` copies a session.
 * Every change resolves once its blobs are fsynced and its entries are covered by an
 * fdatasync. An item JSON cannot give back as it is is refused before anything is written
 * (items.ts).
 */
import type { AgentInputItem, Session } from '@openai/agents'
import { LogFollower, readLog } from '../adapters/follow.js'
import { borrowedLog, type LogLease, leaseLog } from '../adapters/logs.js'
import { checkId, decodeWorkspace, describe, type NameScheme, workspaceFor } from '../adapters/names.js'
import { checkRetention, droppedBy, type Retention } from '../adapters/retention.js'
import type { AgentLog } from '../engine/agent-log.js'
import { LOG_END, LOG_HELD, STORE_APPEND } from '../engine/checks.js'
import { nowMicros } from '../engine/clock.js'
import type { Ack, Entry, EntryInput } from '../engine/entry.js'
import { Errors, isNoaError, NoaError, rewrap } from '../engine/errors.js'
import { readThroughJournals } from '../engine/journal-view.js'
import { resolveRoot } from '../engine/logs.js'
import { checkOptionKeys } from '../engine/options.js'
import { socketState } from '../serve/paths.js'
import { type KeyedMutex, mutexFor } from '../store/mutex.js'
import { ObjectStore, type StoredObject, sha256 } from '../store/objects.js'
import { SnapshotEngine } from '../store/snapshot.js'
import { encodeItem } from './items.js'

export const SESSIONS: NameScheme = { prefix: 'oa', what: 'session id' }

export interface NoaSessionOptions {
  /** noa root (default `$NOA_ROOT`, else `./.noa`); ignored when `log` is given. */
  root?: string
  /** Default: a random UUID, like the SDK's MemorySession. */
  sessionId?: string
  /** An open AgentLog to write through (left open by `close`). Default: one per root per process. */
  log?: AgentLog
  /** Owner worker threads, when the session starts the root's pool (default 0: the owner on the caller's thread). */
  workers?: number
  /**
   * Keep only some items (default: all): after each addItems the oldest items the policy no
   * longer keeps are deleted and a snapshot drops the session's earlier snapshots, so `noa gc`
   * frees them (adapters/retention.ts; an item's age is that of its write).
   */
  retention?: Retention
}

const OPTION_KEYS = new Set(['root', 'sessionId', 'log', 'workers', 'retention'])
const ITEM_RE = /^items\/(\d{12})$/
const SESSION_FILE = 'session'
/** Written by clearSession (its blob says when): a session object that read before it is a late writer. */
const CLEARED_FILE = 'cleared'
const CLEARED_FORMAT = 'noa-agents-cleared 1'
/**
 * How long a change through a daemon goes on trying while other clients' changes to the same
 * session keep going in first (each lost try means one of theirs went in).
 */
const GIVE_UP_MS = 30_000

function itemPath(n: number): string {
  return `items/${String(n).padStart(12, '0')}`
}

export class NoaSession implements Session {
  readonly sessionId: string
  readonly workspace: string
  readonly root: string
  private readonly options: NoaSessionOptions
  private readonly store: ObjectStore
  private readonly follower: LogFollower
  /** Position → blob of the items now, in order. */
  private items = new Map<number, string>()
  private files = new Map<string, string>()
  /** Position → ts (unix µs) of its write, for a retention age (read from the log when loaded). */
  private itemTs = new Map<number, number>()
  private readonly retention: Retention | undefined
  private readonly values = new Map<string, AgentInputItem>()
  private loaded = false
  private lease: Promise<LogLease> | null = null
  /** Whether the root's AgentLog is a daemon's client; unknown until it is opened. */
  private viaDaemon: boolean | undefined
  private writing = false
  /** The workspace was opened through the root's AgentLog (see write). */
  private opened = false
  private closed = false

  constructor(options: NoaSessionOptions = {}) {
    checkOptionKeys(options, OPTION_KEYS, 'NoaSession')
    this.retention = checkRetention(options.retention, 'NoaSession')
    this.options = options
    this.sessionId = checkId(options.sessionId ?? crypto.randomUUID(), 'sessionId')
    this.workspace = workspaceFor(SESSIONS, this.sessionId)
    this.root = options.log ? options.log.root : resolveRoot(options.root)
    this.store = new ObjectStore(this.root)
    this.follower = new LogFollower(this.root, this.workspace)
  }

  async getSessionId(): Promise<string> {
    return this.sessionId
  }

  /** The most recent `limit` items (all without one), oldest first. */
  async getItems(limit?: number): Promise<AgentInputItem[]> {
    if (limit !== undefined && (typeof limit !== 'number' || Number.isNaN(limit))) {
      throw Errors.BAD_ARGUMENT(`getItems limit must be a number, got ${describe(limit)}`, {
        field: 'limit',
      })
    }
    await this.refresh()
    const blobs = [...this.items.values()]
    const wanted =
      limit === undefined ? blobs : limit <= 0 ? [] : blobs.slice(Math.max(0, blobs.length - limit))
    const out: AgentInputItem[] = []
    for (const blob of wanted) out.push(structuredClone(await this.item(blob)))
    return out
  }

  async addItems(items: AgentInputItem[]): Promise<void> {
    if (!Array.isArray(items)) {
      throw Errors.BAD_ARGUMENT(`addItems takes an array of items, got ${describe(items)}`)
    }
    if (items.length === 0) return
    // Every item is checked before anything is written: one that JSON cannot give back refuses the call.
    const encoded = items.map((item, i) => encodeItem(item, i))
    await this.write(async () => {
      let next = this.lastPosition() + 1
      const objects: StoredObject[] = []
      const entries: EntryInput[] = []
      if (decodeWorkspace(SESSIONS, this.workspace)?.kind === 'hashed' && !this.files.has(SESSION_FILE)) {
        const id = Buffer.from(this.sessionId, 'utf8')
        objects.push({ id: sha256(id), data: id, exact: true })
        entries.push({ op: 'write', path: SESSION_FILE, blob: sha256(id) })
      }
      for (const data of encoded) {
        const blob = sha256(data)
        objects.push({ id: blob, data, exact: true })
        entries.push({ op: 'write', path: itemPath(next++), blob })
      }
      return { objects, entries }
    })
    if (this.retention) await this.retain(this.retention)
  }

  /**
   * Deletes the items the policy no longer keeps, then snapshots the session dropping its
   * earlier snapshots (SnapshotOptions.dropOlder): gc keeps only what the snapshot's tree and
   * later writes name.
   */
  private async retain(policy: Retention): Promise<void> {
    let dropped = 0
    await this.write(async () => {
      if (this.retention?.keepWithinMs !== undefined) await this.readItemTimes()
      const items = [...this.items.keys()]
        .reverse()
        .map((n) => ({ n, ts: this.itemTs.get(n) ?? Number.MAX_SAFE_INTEGER }))
      const drop = droppedBy(policy, items, nowMicros())
      dropped = drop.length
      return { objects: [], entries: drop.map(({ n }): EntryInput => ({ op: 'delete', path: itemPath(n) })) }
    })
    if (dropped === 0) return
    const { log } = await this.log()
    // Under the workspace's mutex (the engine takes the one of this log), after this session's writes.
    await new SnapshotEngine({ log, store: this.store }).snapshot(this.workspace, {
      message: `retention: dropped ${dropped} item${dropped === 1 ? '' : 's'}`,
      dropOlder: true,
    })
  }

  /** The ts of each item's write, from the log (a replay gives the items but not when they came). */
  private async readItemTimes(): Promise<void> {
    if ([...this.items.keys()].every((n) => this.itemTs.has(n))) return
    for (const e of await readLog(this.follower.file, this.follower.size())) {
      if (e.op !== 'write') continue
      const m = ITEM_RE.exec(e.path)
      if (m && this.items.get(Number(m[1])) === e.blob) this.itemTs.set(Number(m[1]), e.ts)
    }
  }

  /** Removes the most recent item and returns it (undefined when there is none). */
  async popItem(): Promise<AgentInputItem | undefined> {
    let popped: AgentInputItem | undefined
    await this.write(async () => {
      const last = this.lastPosition()
      const blob = this.items.get(last)
      if (blob === undefined) return { objects: [], entries: [] }
      popped = structuredClone(await this.item(blob))
      return { objects: [], entries: [{ op: 'delete', path: itemPath(last) }] }
    })
    return popped
  }

  /**
   * Deletes every item and leaves a tombstone (a `cleared` file): another session object (in
   * this process or another) that read the items before the clear has its next addItems or
   * popItem refused instead of going on from the cleared history; read them again (getItems)
   * to start the session anew.
   */
  async clearSession(): Promise<void> {
    const bytes = Buffer.from(
      `${JSON.stringify({ format: CLEARED_FORMAT, cleared_at: new Date().toISOString() })}\n`,
      'utf8',
    )
    await this.write(
      async () => ({
        objects: [{ id: sha256(bytes), data: bytes, exact: true }],
        entries: [
          ...[...this.items.keys()].map((n): EntryInput => ({ op: 'delete', path: itemPath(n) })),
          { op: 'write', path: CLEARED_FILE, blob: sha256(bytes) },
        ],
      }),
      true,
    )
  }

  /** Waits for changes in flight, then releases the root's AgentLog (closing it if this opened it). */
  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    if (!this.lease) return
    const lease = await this.lease
    await mutexFor(lease.log).run([this.workspace], async () => {})
    await lease.release()
  }

  private async item(blob: string): Promise<AgentInputItem> {
    let v = this.values.get(blob)
    if (v === undefined) {
      let bytes: Buffer
      try {
        bytes = await this.store.getBlob(blob)
      } catch (err) {
        throw err instanceof NoaError
          ? rewrap(err, `session ${this.sessionId}: item blob ${blob}: ${err.message}`)
          : err
      }
      try {
        v = JSON.parse(bytes.toString('utf8')) as AgentInputItem
      } catch {
        throw Errors.CORRUPT_OBJECT(`session ${this.sessionId}: item blob ${blob} is not JSON`, {
          object: blob,
        })
      }
      this.values.set(blob, v)
    }
    return v
  }

  private async log(): Promise<LogLease & { mutex: KeyedMutex }> {
    if (this.closed) throw Errors.CLOSED(`NoaSession ${this.sessionId} is closed`)
    this.lease ??= this.options.log
      ? Promise.resolve(borrowedLog(this.options.log))
      : leaseLog({ root: this.root, workers: this.options.workers })
    const lease = await this.lease.catch((err) => {
      this.lease = null
      throw err
    })
    this.viaDaemon = lease.viaDaemon
    return { ...lease, mutex: mutexFor(lease.log) }
  }

  /**
   * One change: built from the items as they stand (under the workspace's mutex), then made
   * durable. In process the workspace's lock makes the first try the only one. Through a daemon
   * (nothing locked here) the append is a compare-and-append on the seq the change was built
   * after; when another client appended first, the change is built again on the items as they
   * are then (an added item takes the next position, a pop the last item), so the daemon orders
   * the two writers and neither is refused.
   */
  private async write(
    build: () => Promise<{ objects: StoredObject[]; entries: EntryInput[] }>,
    clearing = false,
  ): Promise<void> {
    const { log, mutex, viaDaemon } = await this.log()
    await mutex.run([this.workspace], async () => {
      // In process, the lock first: nobody else appends from here on. Through a daemon this takes
      // no lock (the daemon opens the log, cutting a torn tail): once is enough.
      if (!viaDaemon || !this.opened) await log.openWorkspace(this.workspace)
      this.opened = true
      this.writing = true
      // What this object read last: a clear since (by another writer) makes this one a late writer.
      const readCleared = this.loaded ? (this.files.get(CLEARED_FILE) ?? null) : undefined
      try {
        const started = performance.now()
        for (let attempt = 1; ; attempt++) {
          await this.refresh(true)
          const cleared = this.files.get(CLEARED_FILE) ?? null
          if (!clearing && readCleared !== undefined && cleared !== readCleared) {
            throw Errors.CONFLICT(
              `session ${this.sessionId} was cleared (clearSession) by another writer since this session object read it: its change, built on the items before the clear, is refused; call getItems() to start from the cleared session`,
              { workspace: this.workspace, cleared: true },
            )
          }
          const { objects, entries } = await build()
          if (entries.length === 0) return
          let acks: Ack[] & { [LOG_END]?: number; [LOG_HELD]?: () => boolean }
          if (viaDaemon) {
            try {
              // Plain writes and deletes: the client writes the blobs as files of their own
              // before it sends the entries (nothing of them goes through the daemon's journal).
              acks = await log.appendMany(this.workspace, entries, {
                ifLastSeq: this.follower.lastSeq,
                files: this.store.filesFor(objects),
              })
            } catch (err) {
              if (!isNoaError(err, 'NOA_SEQ_MISMATCH')) throw err
              if (performance.now() - started > GIVE_UP_MS) {
                throw Errors.CONFLICT(
                  `session ${this.sessionId}: for ${GIVE_UP_MS / 1000} s (${attempt} tries), other clients of the daemon appended to ${this.workspace} before each try of this change went in; nothing of it was written`,
                  { workspace: this.workspace },
                )
              }
              continue
            }
          } else {
            // The items' blobs go with the entries, appended to the owner's object log: one
            // journal sync for both, instead of an fsync per blob and its folder before the
            // append. (The store's own path: a log opened with checkBlobs would refuse writes
            // whose blobs arrive with them.)
            const files = this.store.filesFor(objects, true)
            acks = await log[STORE_APPEND](this.workspace, entries, files.length > 0 ? { files } : undefined)
          }
          for (const [i, a] of acks.entries()) this.apply({ ...entries[i], seq: a.seq, ts: a.ts } as Entry)
          const last = acks[acks.length - 1]?.seq ?? this.follower.lastSeq
          const end = acks[LOG_END]
          if (viaDaemon) this.follower.acceptAppended(last)
          else if (end === undefined) this.follower.accept(last)
          else this.follower.accept(last, end, acks[LOG_HELD])
          return
        }
      } finally {
        this.writing = false
      }
    })
  }

  /** Brings the items up to date with the log (a write in flight does it itself). */
  private async refresh(force = false): Promise<void> {
    if (this.writing && !force) return
    if (!this.loaded) return this.load()
    const change = await this.follower.changes()
    if (change.kind === 'reset') return this.load()
    if (change.kind !== 'grew') return
    for (const e of change.entries) {
      // A snapshot or merge entry can bring files that no entry names (a fork, a merge): replay.
      if (e.op === 'snapshot' || e.op === 'merge') return this.load()
      this.apply(e)
    }
  }

  private async load(): Promise<void> {
    // After a power loss the last items may be only in a dead process's commit journal. Through
    // a daemon that is the daemon's to replay (it did when it opened the root): this process
    // takes no lock on a root the daemon serves.
    // Before the first write that is known only when a daemon's socket is there: then the root's
    // AgentLog is opened now to find out (one whose daemon died removes the socket and opens
    // the root in process). Without a socket nothing is opened for a read, as before.
    if (this.viaDaemon === undefined && !this.closed && socketState(this.root) === 'socket') await this.log()
    if (this.viaDaemon !== true) readThroughJournals(this.root)
    const size = this.follower.size()
    this.files = new Map()
    this.items = new Map()
    let lastSeq = 0
    if (size > 0) {
      const s = await new SnapshotEngine({ root: this.root, store: this.store }).replay(this.workspace)
      for (const [path, blob] of s.tree.entries()) this.setFile(path, blob)
      lastSeq = s.seq
    }
    this.follower.accept(lastSeq, size)
    this.loaded = true
  }

  private apply(e: Entry): void {
    if (e.op === 'write') {
      this.setFile(e.path, e.blob)
      const m = ITEM_RE.exec(e.path)
      if (m) this.itemTs.set(Number(m[1]), e.ts)
    } else if (e.op === 'delete') this.setFile(e.path, null)
    else if (e.op === 'rename') {
      const blob = this.files.get(e.from)
      this.setFile(e.from, null)
      if (blob !== undefined) this.setFile(e.to, blob)
    }
  }

  private setFile(path: string, blob: string | null): void {
    if (blob === null) this.files.delete(path)
    else this.files.set(path, blob)
    const m = ITEM_RE.exec(path)
    if (!m) return
    const n = Number(m[1])
    if (blob === null) this.items.delete(n)
    else this.items.set(n, blob)
    // Items are kept in position order (a Map iterates in insertion order): an item added
    // below the last one (by a rename, say) puts them in order again.
    if (blob !== null && n < this.lastPosition()) {
      this.items = new Map([...this.items].sort((a, b) => a[0] - b[0]))
    }
  }

  private lastPosition(): number {
    let last = 0
    for (const n of this.items.keys()) if (n > last) last = n
    return last
  }
}
