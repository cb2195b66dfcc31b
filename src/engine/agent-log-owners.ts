/**
 * Starting owners: the worker pool (made with the first worker owner), an owner's start (its
 * channel, descriptor table and ack slot, its init; in this thread with `workers: 0`), which
 * owner a name belongs to, and an owner whose worker died. The owner module is named here only.
 */
import { closeSync } from 'node:fs'
import { MessageChannel, type MessagePort } from 'node:worker_threads'
import type { Piscina } from 'piscina'
import { AgentLogState, type Owner, type Pending } from './agent-log-state.js'
import { Errors } from './errors.js'
import { LocalPort } from './local-port.js'
import { logDirOf } from './logs.js'
import { phaseStamps } from './phases.js'
import { ACK_SLOT, type FromOwner, type OwnerInit, type OwnerStatus } from './protocol.js'

const OWNER_MODULE = new URL('../workers/owner.js', import.meta.url).href

/** A worker owner's channel: port1 stays here, port2 goes to the worker. */
function channel(): [MessagePort, MessagePort] {
  const { port1, port2 } = new MessageChannel()
  return [port1, port2]
}

/**
 * What an in-thread owner posts, as a MessagePort would deliver it: a reply's value (an open's
 * report, a status) cloned, so that the caller owns what it gets; acks and failures are made
 * fresh for each message and pass as they are.
 */
function copyReply(msg: unknown): unknown {
  const m = msg as FromOwner
  if (m.t === 'reply' && typeof m.value === 'object' && m.value !== null) {
    return { ...m, value: structuredClone(m.value) }
  }
  return msg
}

/**
 * A serial writer's next append comes one hop after its ack. A worker that went back to sleep
 * in its event loop is woken for it by the kernel, which on a virtual machine costs tens of µs
 * (an idle vCPU is halted); polling its port for a little longer than a hop saves that wake.
 */
const SPIN_MICROS = 150

/**
 * Room in a worker's descriptor table beyond its open logs: the root lock, its journal (and one
 * being allocated), a sidecar or log being appended to through a descriptor of its own, object logs.
 */
const FD_TABLE_SLACK = 64

/** The lone lane's owner keeps at most this many logs open (more are closed idle first, LRU). */
const LONE_OPEN_FILES = 1024

/**
 * An owner worker's young generation (V8's new space: both semi-spaces and the new large object
 * space), in MB. V8's default lets each semi-space grow to 16 MB, which a worker under load
 * fills: 32 MB of each owner's heap for short-lived objects (a round's requests, lines, acks).
 * Capped, a worker's young generation is this size; its old generation is not capped (a worker
 * past a cap dies). 10,000 workspaces × 1 submitter, 4 runs each alternating (bench:peers'
 * 10kws): peak RSS 373 -> 290 MB (median) together with a round's bodies dropped at build,
 * rate and CPU per entry unchanged within noise; a 12 MB cap cost ~8% more CPU per entry.
 */
const OWNER_YOUNG_GENERATION_MB = 8

/** FNV-1a: a stable owner for a name, the same in every run. */
export function ownerIndex(name: string, n: number): number {
  let h = 0x811c9dc5
  for (let i = 0; i < name.length; i++) {
    h ^= name.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return (h >>> 0) % n
}

export abstract class AgentLogOwners extends AgentLogState {
  protected abstract onMessage(msg: FromOwner, from?: Owner): void
  protected abstract settle(_id: number, p: Pending): void
  protected abstract partsApplied(batch: number, from: Owner, ok: boolean): void
  protected abstract forgetBatch(batch: number): void

  /** The worker pool, made when the first owner worker starts (piscina is loaded then too). */
  protected async pool(): Promise<Piscina> {
    this.piscina ??= import('piscina').then(
      ({ Piscina }) =>
        new Piscina({
          filename: OWNER_MODULE,
          minThreads: 0,
          maxThreads: this.options.workers,
          concurrentTasksPerWorker: 1,
          idleTimeout: Number.POSITIVE_INFINITY,
          resourceLimits: { maxYoungGenerationSizeMb: OWNER_YOUNG_GENERATION_MB },
        }),
    )
    return this.piscina
  }

  /** The owner, started if it is not running. */
  protected started(owner: Owner): Owner {
    if (owner.port !== null || owner.failed !== null) return owner
    const o = this.options
    const inThread = owner.inThread
    const [port1, port2] = inThread ? LocalPort.pair(undefined, copyReply, true) : channel()
    owner.fds = inThread
      ? null
      : new Int32Array(new SharedArrayBuffer(4 * (this.openFilesOf(owner) + FD_TABLE_SLACK))).fill(-1)
    const ackSlot = inThread ? null : new SharedArrayBuffer(ACK_SLOT.bytes)
    owner.slot = ackSlot ? new Int32Array(ackSlot, 0, 1) : null
    owner.slotData = ackSlot ? new Float64Array(ackSlot, ACK_SLOT.dataOffset, ACK_SLOT.dataWords) : null
    const init: OwnerInit = {
      port: port2,
      index: owner.index,
      root: o.root,
      logDir: logDirOf(o.root),
      maxOpenFiles: this.openFilesOf(owner),
      syncThreads: o.syncThreads,
      inlineCommit: o.inlineCommit,
      spinMicros: inThread ? 0 : SPIN_MICROS,
      durability: o.durability,
      journalSize: o.journalSize,
      journalName: owner.generation === 0 ? this.journalBase : `${this.journalBase}.${owner.generation}`,
      fds: owner.fds,
      closes: owner.closes,
      ...(phaseStamps() ? { phases: phaseStamps() as Float64Array } : {}),
      ...(ackSlot ? { ackSlot } : {}),
      ioModule: this.ioModule,
      ioOptions: this.ioOptions,
    }
    owner.generation++
    owner.startedAt = performance.now()
    owner.port = port1
    port1.on('message', (msg: unknown) => this.onMessage(msg as FromOwner, owner))
    // Each task runs for the owner's life, so with one task per worker each lands on its own thread.
    const task = inThread
      ? // A literal specifier (the module OWNER_MODULE names), so the CLI's bundle carries the owner
        // instead of loading a second copy of the engine beside its own.
        (import('../workers/owner.js').then((m: { default: (init: OwnerInit) => Promise<OwnerStatus> }) =>
          m.default(init),
        ) as Promise<OwnerStatus>)
      : (this.pool().then((pool) =>
          pool.run(init, { transferList: [port2 as MessagePort] }),
        ) as Promise<OwnerStatus>)
    owner.task = task
    task.catch((err: unknown) => this.ownerFailed(owner, port1, err))
    return owner
  }

  /**
   * An owner's share of maxOpenFiles: the lone lane's in-thread owner keeps at most
   * LONE_OPEN_FILES (it holds workspaces appended to one at a time), the workers share the rest.
   */
  protected openFilesOf(owner: Owner): number {
    const all = this.options.maxOpenFiles
    const lone =
      this.local === null ? 0 : Math.max(1, Math.min(LONE_OPEN_FILES, Math.floor(all / (this.poolSize + 1))))
    if (owner === this.local) return lone
    return Math.max(1, Math.floor((all - lone) / this.poolSize))
  }

  /** A workspace's worker (its owner by name: the one it is on without a lone lane), started. */
  protected ownerOf(workspace: string): Owner {
    return this.started(this.owners[ownerIndex(workspace, this.poolSize)] as Owner)
  }

  /** The owner a workspace is on (with a lone lane: where it was routed; a new one by the lane), started. */
  protected routeOf(workspace: string): Owner {
    if (this.local === null) return this.ownerOf(workspace)
    let owner = this.route.get(workspace)
    if (owner === undefined) {
      owner =
        this.lane === 'local' ? this.local : (this.owners[ownerIndex(workspace, this.poolSize)] as Owner)
      this.route.set(workspace, owner)
      if (owner === this.local) this.freshOnLocal.add(workspace)
    }
    // The lone lane's owner starts when its outbox is posted or a request goes to it (flush,
    // request): the first append of a burst, routed there, may go on to a worker before.
    return owner === this.local ? owner : this.started(owner)
  }

  /**
   * The lone lane (`loneInThread`), at each append: appends overlap when another one of this
   * log is still in flight. Then the lane is the workers', and a workspace on the caller's
   * thread moves to its worker; after `laneQuietMs` without overlap, a workspace appended to
   * alone moves to the caller's thread. A move releases the workspace on its owner (once its
   * queued appends are committed: its log is made durable and closed) and only then routes it to
   * the other owner, which opens it; what comes for it meanwhile waits (`moving`).
   */
  protected steer(workspace: string): void {
    const local = this.local as Owner
    const now = performance.now()
    if (this.pending.size > 0) {
      this.lastBusy = now
      this.lane = 'pool'
      // The first appends of a burst, routed here in this turn, go with the rest of it.
      for (const fresh of this.freshOnLocal) {
        const worker = this.owners[ownerIndex(fresh, this.poolSize)] as Owner
        if (worker.failed === null) this.move(fresh, local, this.started(worker))
      }
    } else if (this.lane === 'pool' && now - this.lastBusy > this.options.laneQuietMs) {
      this.lane = 'local'
    }
    const current = this.route.get(workspace)
    if (current === undefined || this.moving.has(workspace)) return
    // An atomic batch holds its workspaces on their owners from prepare to apply: none moves then.
    if (this.atomicsRunning > 0 || this.coordinators.size > 0) return
    const wanted =
      this.lane === 'local' ? local : (this.owners[ownerIndex(workspace, this.poolSize)] as Owner)
    if (current !== wanted && wanted.failed === null) this.move(workspace, current, this.started(wanted))
  }

  /** Moves a workspace from one owner to another (see steer). */
  protected move(workspace: string, from: Owner, to: Owner): void {
    if (from === this.local && this.freshOnLocal.has(workspace)) {
      // Routed here in this turn and not yet posted (the first append of a burst): its queued
      // appends simply go to the other owner's outbox instead; nothing was opened here.
      this.freshOnLocal.delete(workspace)
      this.retarget(workspace, from, to)
      this.route.set(workspace, to)
      return
    }
    if (from.port === null) {
      this.route.set(workspace, to) // an owner never started (or whose worker died) holds nothing
      return
    }
    this.moves++
    const moved = this.releaseOn(from, workspace).then(
      () => {
        this.moving.delete(workspace)
        this.route.set(workspace, to)
      },
      () => {
        // Not released (its log could not be made durable, or its owner died): it stays where
        // it is, and the error comes with its next append there.
        this.moving.delete(workspace)
      },
    )
    this.moving.set(workspace, moved)
  }

  /** Moves a workspace's appends still in one owner's outbox (not posted) to another's. */
  protected abstract retarget(workspace: string, from: Owner, to: Owner): void

  /** Sends a release of a workspace to its owner (after the appends queued for it). */
  protected abstract releaseOn(owner: Owner, workspace: string): Promise<unknown>

  /**
   * The move a workspace is in, if any: once it settles the workspace is on its new owner, unless
   * another move started meanwhile (check again, and send at once when there is none).
   */
  protected settledOn(workspace: string): Promise<void> | undefined {
    return this.moving.get(workspace)
  }

  /** A move any of these workspaces is in (see settledOn). */
  protected movingOf(workspaces: readonly string[]): Promise<void> | undefined {
    if (this.moving.size === 0) return undefined
    for (const ws of workspaces) {
      const m = this.moving.get(ws)
      if (m !== undefined) return m
    }
    return undefined
  }

  /**
   * An owner worker died (an addon fault, out of memory in the worker): what was in flight on it
   * fails with NOA_WORKER_FAILED, the descriptors it held are closed (releasing their locks, and
   * its journal's), and the next use starts a new one, whose first open replays that journal as
   * a dead process's. One that keeps dying at once is not started again.
   */
  protected ownerFailed(owner: Owner, port: MessagePort | LocalPort, err: unknown): void {
    if (owner.port !== port) return
    const failed = Errors.WORKER_FAILED(
      `owner worker ${owner.index} failed: ${(err as Error)?.message ?? String(err)}; what was in flight on it was not committed`,
      {},
      { cause: err },
    )
    for (const [id, p] of this.pending) {
      if (p.owner !== owner) continue
      this.pending.delete(id)
      this.settle(id, p)
      p.reject(failed)
    }
    port.close()
    owner.port = null
    owner.task = null
    owner.outbox = { ids: [], ws: [], counts: [], bodies: [], expects: null, files: null }
    owner.scheduled = false
    // Its descriptors close now (from here, or they closed with its thread): no lock is held.
    Atomics.add(owner.closes, 0, 1)
    if (owner.fds) {
      for (let i = 0; i < owner.fds.length; i++) {
        const fd = Atomics.exchange(owner.fds, i, -1)
        if (fd >= 0) {
          try {
            closeSync(fd)
          } catch {
            // already closed
          }
        }
      }
    }
    owner.quickDeaths = performance.now() - owner.startedAt < 1000 ? owner.quickDeaths + 1 : 0
    if (owner.quickDeaths >= 3 || this.closing) {
      owner.failed = Errors.WORKER_FAILED(
        `owner worker ${owner.index} keeps failing (${failed.message}); its workspaces refuse appends`,
        {},
        { cause: err },
      )
    }
    // It will not answer for the atomic batches it had parts of (nor unpin those it committed).
    for (const [batch, c] of [...this.coordinators]) {
      if (c.owner === owner) this.forgetBatch(batch)
      else this.partsApplied(batch, owner, false)
    }
  }
}
