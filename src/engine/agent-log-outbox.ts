/**
 * Queueing appends for their owner: each goes into the owner's outbox for this turn (flushed at
 * its end), or waits its turn while more than maxPendingBytes are not yet acknowledged
 * (backpressure); an abort drops or asks back an append not yet committed; an append that
 * settled lets waiting ones move up. And a request to an owner, sent after its queued appends.
 */

import type { MessagePort } from 'node:worker_threads'
import {
  type AppendOptions,
  abortedError,
  checkAppendOptions,
  checkFiles,
  closedError,
} from './agent-log-options.js'
import { AgentLogOwners } from './agent-log-owners.js'
import type { Outbox, Owner, Pending } from './agent-log-state.js'
import type { LocalPort } from './local-port.js'
import { PHASE, stamp } from './phases.js'
import type { FileWrite, ToOwner } from './protocol.js'

export abstract class AgentLogOutbox extends AgentLogOwners {
  protected abstract flush(owner: Owner, turnEnd?: boolean): void

  /**
   * Queues bodies (one, or an appendMany's array) for the owner; flushed at the end of the turn.
   * Past maxPendingBytes not yet acknowledged, the append waits its turn first.
   */
  protected submit(
    workspace: string,
    bodies: string | string[],
    count: number,
    options?: AppendOptions,
    held = false,
  ): Promise<unknown> {
    // Held while its workspace moved: it was made before a close, which waits for it.
    if (this.closing && !held) return Promise.reject(closedError())
    if (this.local !== null) {
      if (!this.moving.has(workspace)) this.steer(workspace)
      const moving = this.moving.get(workspace)
      if (moving !== undefined) return moving.then(() => this.submit(workspace, bodies, count, options, true))
    }
    const owner = this.routeOf(workspace)
    if (owner.failed) return Promise.reject(owner.failed)
    const expect = checkAppendOptions(options)
    const files = checkFiles(options?.files)
    const signal = options?.signal
    if (signal?.aborted) return Promise.reject(abortedError(workspace, signal))
    let bytes = 0
    if (typeof bodies === 'string') bytes = bodies.length
    else for (const b of bodies) bytes += b.length
    if (files) for (const f of files) bytes += f.data.length
    return new Promise((resolve, reject) => {
      const p: Pending = { resolve, reject, count, owner, bytes, workspace }
      if (files) p.files = files
      const queued = this.waitingHead < this.waiting.length // FIFO: nobody overtakes a waiting append
      if (queued || (this.pendingBytes > 0 && this.pendingBytes + bytes > this.maxPendingBytes)) {
        p.bodies = bodies
        p.expect = expect
        this.waiting.push(p)
        if (signal) this.listen(p, signal, () => this.dropWaiter(p))
        return
      }
      if (signal) this.listen(p, signal, null)
      this.enqueueAppend(p, workspace, bodies, expect, held)
    })
  }

  protected enqueueAppend(
    p: Pending,
    workspace: string,
    bodies: string | string[],
    expect: number,
    held = false,
  ): void {
    if (this.closing && !held) {
      this.settle(-1, p)
      p.reject(closedError())
      return
    }
    const owner = p.owner
    const id = this.nextId++
    this.pendingBytes += p.bytes ?? 0
    this.pending.set(id, p)
    p.id = id
    pushRequest(owner.outbox, id, workspace, bodies, expect, p.files ?? null)
    if (!owner.scheduled) {
      owner.scheduled = true
      queueMicrotask(() => this.flush(owner, true))
    }
    stamp(PHASE.queued)
  }

  /**
   * On abort: an append still waiting (backpressure) or still in this thread's outbox is simply
   * dropped; one already with its owner is asked back, and fails only if the owner had not yet
   * taken it into a commit.
   */
  protected listen(p: Pending, signal: AbortSignal, waitingDrop: (() => boolean) | null): void {
    const onAbort = () => {
      if (waitingDrop?.()) {
        p.unlisten?.()
        p.reject(abortedError(p.workspace as string, signal))
        return
      }
      const id = p.id
      if (id === undefined || !this.pending.has(id)) return
      if (this.removeFromOutbox(p.owner, id)) {
        this.pending.delete(id)
        this.settle(id, p)
        p.reject(abortedError(p.workspace as string, signal))
        return
      }
      p.owner.port?.postMessage({ t: 'cancel', ws: p.workspace as string, id } satisfies ToOwner)
    }
    signal.addEventListener('abort', onAbort, { once: true })
    p.unlisten = () => signal.removeEventListener('abort', onAbort)
  }

  protected dropWaiter(waiter: Pending): boolean {
    const i = this.waiting.indexOf(waiter, this.waitingHead)
    if (i < 0) return false
    this.waiting[i] = null
    return true
  }

  protected removeFromOutbox(owner: Owner, id: number): boolean {
    const out = owner.outbox
    const i = out.ids.indexOf(id)
    if (i < 0) return false
    let b = 0
    for (let k = 0; k < i; k++) b += out.counts[k] as number
    out.bodies.splice(b, out.counts[i] as number)
    out.ids.splice(i, 1)
    out.ws.splice(i, 1)
    out.counts.splice(i, 1)
    out.expects?.splice(i, 1)
    out.files?.splice(i, 1)
    return true
  }

  /** An append settled: its bytes no longer count, its listener goes, and waiting appends move up. */
  protected override settle(_id: number, p: Pending): void {
    p.unlisten?.()
    if (p.bytes !== undefined && p.id !== undefined) {
      this.pendingBytes -= p.bytes
      p.bytes = undefined
    }
    while (this.waitingHead < this.waiting.length) {
      const next = this.waiting[this.waitingHead]
      if (next === null || next === undefined) {
        this.waitingHead++
        continue
      }
      if (this.pendingBytes > 0 && this.pendingBytes + (next.bytes ?? 0) > this.maxPendingBytes) break
      this.waiting[this.waitingHead++] = null
      const { bodies, expect } = next
      next.bodies = undefined
      this.enqueueWaited(next, next.workspace as string, bodies as string | string[], expect ?? -1)
    }
    // A queue with a moving head: compacted once the head has passed half of it.
    if (this.waitingHead > 1024 && this.waitingHead * 2 > this.waiting.length) {
      this.waiting = this.waiting.slice(this.waitingHead)
      this.waitingHead = 0
    }
  }

  /**
   * An append that waited for room (backpressure): its workspace may have moved meanwhile (the
   * lone lane), so it goes where the workspace is now, once it is there.
   */
  protected enqueueWaited(
    p: Pending,
    workspace: string,
    bodies: string | string[],
    expect: number,
    held = false,
  ): void {
    if (this.local !== null) {
      const moving = this.moving.get(workspace)
      if (moving !== undefined) {
        moving.then(() => this.enqueueWaited(p, workspace, bodies, expect, true))
        return
      }
      p.owner = this.routeOf(workspace)
    }
    this.enqueueAppend(p, workspace, bodies, expect, held)
  }

  protected override retarget(workspace: string, from: Owner, to: Owner): void {
    const out = from.outbox
    const keep: Outbox = { ids: [], ws: [], counts: [], bodies: [], expects: null, files: null }
    let b = 0
    for (let i = 0; i < out.ids.length; i++) {
      const count = out.counts[i] as number
      const id = out.ids[i] as number
      const bodies = out.bodies.slice(b, b + count)
      b += count
      const mine = out.ws[i] === workspace
      pushRequest(
        mine ? to.outbox : keep,
        id,
        out.ws[i] as string,
        bodies,
        out.expects?.[i] ?? -1,
        out.files?.[i] ?? null,
      )
      if (mine) {
        const p = this.pending.get(id)
        if (p) p.owner = to
      }
    }
    from.outbox = keep
    if (to.outbox.ids.length > 0 && !to.scheduled) {
      to.scheduled = true
      queueMicrotask(() => this.flush(to, true))
    }
  }

  protected override releaseOn(owner: Owner, workspace: string): Promise<unknown> {
    return this.request(owner, (id) => ({ t: 'release', id, target: workspace }), true)
  }

  /** A request about a workspace, to the owner it is on once it is not moving (see steer). */
  protected requestFor(workspace: string, make: (id: number) => ToOwner): Promise<unknown> {
    const moving = this.settledOn(workspace)
    if (moving !== undefined) return moving.then(() => this.requestFor(workspace, make))
    if (this.closing) return Promise.reject(closedError()) // before routeOf, which would start an owner
    return this.request(this.routeOf(workspace), make)
  }

  protected request(owner: Owner, make: (id: number) => ToOwner, closing = false): Promise<unknown> {
    if (this.closing && !closing) return Promise.reject(closedError())
    if (owner.failed) return Promise.reject(owner.failed)
    if (owner.port === null) this.started(owner) // the lone lane's, routed to in this turn
    this.flush(owner) // keep order: earlier appends go first
    const id = this.nextId++
    const p = new Promise((resolve, reject) => this.pending.set(id, { resolve, reject, count: -2, owner }))
    ;(owner.port as MessagePort | LocalPort).postMessage(make(id))
    return p
  }
}

/** Adds one request (an append's bodies, its ifLastSeq or -1, its files or null) to an outbox. */
function pushRequest(
  out: Outbox,
  id: number,
  workspace: string,
  bodies: string | string[],
  expect: number,
  files: FileWrite[] | null,
): void {
  out.ids.push(id)
  out.ws.push(workspace)
  if (expect >= 0 || out.expects) {
    out.expects ??= new Array(out.ids.length - 1).fill(-1)
    out.expects.push(expect)
  }
  if (files || out.files) {
    out.files ??= new Array(out.ids.length - 1).fill(null)
    out.files.push(files)
  }
  if (typeof bodies === 'string') {
    out.counts.push(1)
    out.bodies.push(bodies)
  } else {
    out.counts.push(bodies.length)
    for (const body of bodies) out.bodies.push(body)
  }
}
