/**
 * The publisher (`noa replicate push`): tails one root's workspace logs and publishes every
 * entry, once it is durable on local disk, on `<prefix>.<workspace>` with
 * `Nats-Msg-Id: <workspace>:<seq>` and `Nats-Expected-Last-Subject-Sequence` set to the stream
 * sequence of the workspace's previous message.
 *
 * Durability first. The writer is usually another process, and a complete line on disk may not
 * be covered by its writer's fdatasync yet. Before publishing what it read, the publisher calls
 * fdatasync on the log itself (through its own read-only descriptor: the flush covers the
 * file's dirty pages whoever wrote them), so the stream never holds an entry that a crash of
 * this machine could take back. The writer never waits for any of this.
 *
 * Exactly once, in order. Before a workspace's first publish in a run, the publisher asks the
 * stream for the subject's last message and continues after it (after checking that the
 * stream's copy of the junction entry is byte-equal to the local one), so a restart sends
 * nothing twice whatever the checkpoint says. Each publish names the previous message's stream
 * sequence: a gap, a reorder or a second publisher for the workspace is refused by the server
 * instead of stored. The server checks Nats-Msg-Id before the expected sequence (nats-server
 * 2.9: a duplicate id is acknowledged as a duplicate, whatever the expectation), so a
 * duplicate acknowledgement is verified against the stored message: a different entry under
 * the same id is another publisher's, and refused here.
 *
 * This file holds replicatePush and the run (the workspaces and their rounds, follow mode,
 * checkpoints), the top of a class built in layers, one file each: see publisher-state.ts.
 */

import { existsSync, type FSWatcher, watch } from 'node:fs'
import { lstat } from 'node:fs/promises'
import { Errors } from '../engine/errors.js'
import { checkRoot } from '../engine/files.js'
import { logDirOf, logPath, resolveRoot, scanLogDir } from '../engine/logs.js'
import { ensureReplicationDir, loadCheckpoint, saveCheckpoint } from './checkpoint.js'
import { asNoaError, replicationError, sleep } from './failures.js'
import { checkKnownOptions, closeLink, openLink } from './link.js'
import {
  failureOf,
  LogProblem,
  type PushedWorkspace,
  type PushOptions,
  type PushReport,
  Stopped,
  type WorkspaceState,
} from './publisher-state.js'
import { PublisherTail } from './publisher-tail.js'
import { resolveStream } from './stream.js'
import { checkPrefix, DEFAULT_PREFIX, isSubjectSafe, workspaceSubject } from './subjects.js'

export type { PushedWorkspace, PushFailure, PushOptions, PushReport } from './publisher-state.js'

const OPTION_KEYS = new Set([
  'nats',
  'root',
  'prefix',
  'stream',
  'follow',
  'signal',
  'onEvent',
  'onProgress',
  'objects',
  'concurrency',
  'pollMs',
  'roundMs',
  'beforePublish',
])

function positive(value: number | undefined, name: string, fallback: number): number {
  if (value === undefined) return fallback
  if (!Number.isInteger(value) || value < 1) {
    throw Errors.BAD_OPTION(`option ${name} must be a positive integer, got ${value}`, {
      field: name,
    })
  }
  return value
}

/** Publishes what the root's logs hold beyond the stream; with `follow`, keeps doing so. */
export function replicatePush(options: PushOptions): Promise<PushReport> {
  return asNoaError('push', () => pushNow(options))
}

async function pushNow(options: PushOptions): Promise<PushReport> {
  checkKnownOptions(options, OPTION_KEYS, 'push')
  const prefix = checkPrefix(options.prefix ?? DEFAULT_PREFIX)
  const root = resolveRoot(options.root)
  const follow = options.follow ?? false
  const concurrency = positive(options.concurrency, 'concurrency', 64)
  const pollMs = positive(options.pollMs, 'pollMs', 1000)
  const roundMs = options.roundMs === 0 ? 0 : positive(options.roundMs, 'roundMs', 10)
  // A missing root (or one that is a file) is a named error, and nothing is created for it.
  checkRoot(root, true)
  const link = await openLink(options.nats, {
    name: `noa push ${root}`,
    waitForServer: follow,
    signal: options.signal,
    onEvent: options.onEvent,
  })
  try {
    const publisher = new Publisher(link, {
      root,
      prefix,
      stream: options.stream,
      follow,
      signal: options.signal,
      onEvent: options.onEvent,
      onProgress: options.onProgress,
      objects: options.objects ?? true,
      concurrency,
      pollMs,
      roundMs,
      beforePublish: options.beforePublish,
    })
    return await publisher.run()
  } finally {
    await closeLink(link)
  }
}

/** Room left in each object part for the subject and headers. */
const PART_HEADROOM = 8 * 1024

class Publisher extends PublisherTail {
  async run(): Promise<PushReport> {
    const started = performance.now()
    try {
      this.ref = await this.retry('look up the stream', () =>
        resolveStream(this.link, this.s.prefix, this.s.stream),
      )
    } catch (err) {
      if (err instanceof Stopped) throw replicationError('push was stopped before it could read the stream')
      throw err
    }
    const maxPayload = this.link.nc.info?.max_payload ?? 1024 * 1024
    const maxMsg = this.ref.config.max_msg_size > 0 ? this.ref.config.max_msg_size : maxPayload
    this.partSize = Math.max(1024, Math.min(maxPayload, maxMsg) - PART_HEADROOM)
    const saved = loadCheckpoint(this.s.root, 'push', this.s.prefix, (message) =>
      this.s.onEvent?.({ type: 'warning', message }),
    )
    const sameStream =
      saved !== null && saved.stream === this.ref.name && saved.streamCreated === this.ref.created
    this.checkpoint = {
      version: 1,
      kind: 'push',
      prefix: this.s.prefix,
      stream: this.ref.name,
      streamCreated: this.ref.created,
      savedAt: '',
      workspaces: sameStream ? saved.workspaces : {},
    }
    this.scanner?.load(!sameStream && saved !== null)
    // Where the checkpoint goes is checked before anything is published, not after.
    ensureReplicationDir(this.s.root)

    let watcher: FSWatcher | null = null
    let timer: NodeJS.Timeout | null = null
    try {
      if (this.s.follow) {
        const logDir = logDirOf(this.s.root)
        const startWatch = () => {
          if (watcher || !existsSync(logDir)) return
          try {
            watcher = watch(logDir, (_event, name) => {
              if (typeof name === 'string' && name.endsWith('.log')) this.wake(name.slice(0, -4))
            })
            watcher.on('error', () => {
              watcher?.close()
              watcher = null
            })
          } catch {
            watcher = null
          }
        }
        startWatch()
        for (const ws of this.listLogs()) this.wake(ws)
        this.s.onEvent?.({
          type: 'following',
          message: `following ${logDir} into stream ${this.ref.name} (${this.s.prefix}.>)`,
        })
        let lastSave = Date.now()
        timer = setInterval(() => {
          startWatch()
          void this.poll()
          if (this.checkpointDirty && Date.now() - lastSave >= 1000) {
            lastSave = Date.now()
            try {
              this.saveCheckpoint()
            } catch (err) {
              this.fail(err)
            }
          }
        }, this.s.pollMs)
        await new Promise<void>((resolve) => {
          if (this.signal.aborted) resolve()
          else this.signal.addEventListener('abort', () => resolve(), { once: true })
        })
      } else {
        for (const ws of this.listLogs()) this.wake(ws)
      }
      await this.settle()
    } finally {
      if (timer) clearInterval(timer)
      ;(watcher as FSWatcher | null)?.close()
      await this.settle()
      for (const st of [...this.handles]) await this.closeHandle(st)
      this.saveCheckpoint()
      await this.scanner?.flush()
    }
    if (this.fatal !== null) throw this.fatal
    const workspaces: PushedWorkspace[] = []
    for (const st of [...this.states.values()].sort((a, b) => (a.ws < b.ws ? -1 : 1))) {
      if (st.published) workspaces.push({ workspace: st.ws, ...st.published })
    }
    for (const p of this.scanner?.problems.values() ?? []) this.failed.set(p.file, p)
    return {
      stream: this.ref.name,
      prefix: this.s.prefix,
      entries: this.entries,
      objects: this.objectsSent,
      workspaces,
      skipped: [...this.skipped].map(([workspace, reason]) => ({ workspace, reason })),
      failed: [...this.failed.values()].sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : 0)),
      durationMs: performance.now() - started,
    }
  }

  /**
   * The workspaces with a regular log; every other entry of `agent-logs/` that is meant to be a
   * log (a symlink, a FIFO, a folder named `<workspace>.log`) is a failure of the run, reported.
   */
  private listLogs(): string[] {
    const { workspaces, problems } = scanLogDir(this.s.root)
    for (const p of problems) {
      if (p.code === 'NOA_BAD_WORKSPACE' || this.failed.has(p.file)) continue
      this.failed.set(p.file, p)
      this.s.onEvent?.({ type: 'warning', message: `${p.message}; not published` })
    }
    return workspaces
  }

  /** Stops one workspace whose log cannot be published; the run goes on with the others. */
  private failWorkspace(st: WorkspaceState, err: unknown): void {
    st.failed = true
    void this.closeHandle(st)
    const f = failureOf(err, st.file, st.ws)
    this.failed.set(st.file, f)
    this.s.onEvent?.({ type: 'skipped', workspace: st.ws, reason: `${f.message}; not published` })
  }

  /** Waits until no workspace task is running. */
  private async settle(): Promise<void> {
    for (;;) {
      const running = [...this.states.values()].map((s) => s.running).filter((p) => p !== null)
      if (running.length === 0 && this.scanning === null) return
      await Promise.allSettled([...running, this.scanning])
    }
  }

  private saveCheckpoint(): void {
    if (!this.checkpoint) return
    for (const st of this.states.values()) {
      if (st.reconciled || st.pos.seq > 0) this.checkpoint.workspaces[st.ws] = { ...st.pos }
    }
    saveCheckpoint(this.s.root, this.checkpoint)
    this.checkpointDirty = false
  }

  private state(ws: string): WorkspaceState | null {
    let st = this.states.get(ws)
    if (st) return st
    if (this.skipped.has(ws)) return null
    if (!isSubjectSafe(ws)) {
      const reason = 'its name would give an empty subject token (".." or a trailing "."); not replicated'
      this.skipped.set(ws, reason)
      this.s.onEvent?.({ type: 'skipped', workspace: ws, reason })
      return null
    }
    const saved = this.checkpoint.workspaces[ws]
    st = {
      ws,
      file: logPath(this.s.root, ws),
      subject: workspaceSubject(this.s.prefix, ws),
      pos: saved ? { ...saved } : { seq: 0, ts: 0, offset: 0, streamSeq: 0 },
      reconciled: false,
      junction: null,
      fenced: false,
      dirty: false,
      running: null,
      seenSize: -1,
      lastRound: 0,
      handle: null,
      ino: 0,
      inRound: false,
      published: null,
      failed: false,
      checkedFrom: 0,
      checked: { offset: 0, seq: 0, ts: 0 },
    }
    this.states.set(ws, st)
    return st
  }

  /** Marks a workspace as possibly grown and starts its task if it is not running. */
  private wake(ws: string): void {
    if (this.signal.aborted) return
    let st: WorkspaceState | null
    try {
      st = this.state(ws)
    } catch {
      return // not a workspace name
    }
    if (!st || st.failed) return
    st.dirty = true
    if (st.running) return
    const task = st
    task.running = (async () => {
      while (task.dirty && !this.signal.aborted) {
        // Follow mode: let a few milliseconds of appends gather, so that one fdatasync and one
        // round cover them all instead of one per entry.
        if (this.s.follow) {
          const wait = task.lastRound + this.s.roundMs - Date.now()
          if (wait > 0) await sleep(wait, this.signal)
          task.lastRound = Date.now()
        }
        task.dirty = false
        await this.limited(() => this.pushWorkspace(task))
      }
    })()
      .catch((err: unknown) => {
        if (err instanceof LogProblem) this.failWorkspace(task, err.error)
        else if (!(err instanceof Stopped)) this.fail(err)
      })
      .finally(() => {
        task.running = null
      })
  }

  private async poll(): Promise<void> {
    try {
      for (const ws of this.listLogs()) {
        const st = this.state(ws)
        if (!st || st.failed) continue
        const info = await lstat(st.file).catch(() => null)
        const size = info?.size ?? -1
        if (info && st.handle && !st.inRound && info.ino !== st.ino) {
          // The log was replaced: read the new file, from what the stream holds.
          await this.closeHandle(st)
          st.reconciled = false
          st.checkedFrom = 0
          st.checked = { offset: 0, seq: 0, ts: 0 }
        }
        if (size !== st.seenSize) {
          st.seenSize = size
          this.wake(ws)
        }
      }
    } catch {
      // the next poll tries again
    }
  }

  private async limited<T>(fn: () => Promise<T>): Promise<T> {
    if (this.active >= this.s.concurrency) {
      await new Promise<void>((resolve) => this.queue.push(resolve))
    }
    this.active++
    try {
      return await fn()
    } finally {
      this.active--
      this.queue.shift()?.()
    }
  }
}
