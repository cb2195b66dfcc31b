/**
 * An owner's outbox posted as one message at the end of the turn, with the ack slot for a lone
 * append (the caller's thread waits there for its ack instead of for the message back), and
 * what owners answer: acks (the append's promise resolves, the workspace's acknowledged seq
 * moves and its watchers wake), failures, replies to requests, applied atomic parts.
 */
import type { MessagePort } from 'node:worker_threads'
import { AgentLogOutbox } from './agent-log-outbox.js'
import type { Owner } from './agent-log-state.js'
import { LOG_END, LOG_HELD } from './checks.js'
import type { Ack } from './entry.js'
import { deserializeError } from './errors.js'
import type { LocalPort } from './local-port.js'
import { PHASE, stamp } from './phases.js'
import { ACK_SLOT, type FromOwner, slotTag, type ToOwner } from './protocol.js'

/**
 * A lone append (nothing else outstanding on the AgentLog) to a worker owner: at the end of its
 * turn the caller's thread waits for the ack in the owner's ack slot (ACK_SLOT, Atomics.wait)
 * instead of going back to its event loop, for at most this long. The message back and the wake
 * of the event loop cost a serial append about a quarter of its time (`npm run bench`'s
 * breakdown); an owner in the caller's thread (workers: 0) blocks it for the whole commit
 * anyway, as SQLite does. Past this the ack comes by the port as any other.
 */
const LONE_WAIT_MS = 2

/**
 * After a wait that ran out (a slow disk, a busy machine), this many lone appends of that owner
 * go without waiting, so that a disk slower than the wait costs the caller's thread 2 ms per 17
 * appends at most, not per append (a first append, which creates its workspace and its
 * worker's journal, is one such).
 */
const LONE_SKIP_AFTER_MISS = 16

export abstract class AgentLogAcks extends AgentLogOutbox {
  /** `turnEnd`: at the end of the caller's turn (not inside a call of its own): a lone append may wait there. */
  protected override flush(owner: Owner, turnEnd = false): void {
    owner.scheduled = false
    if (owner === this.local) this.freshOnLocal.clear()
    const out = owner.outbox
    if (out.ids.length === 0) return
    if (owner.port === null) this.started(owner) // the lone lane's, routed to in this turn
    owner.outbox = { ids: [], ws: [], counts: [], bodies: [], expects: null, files: null }
    const msg: ToOwner = { t: 'append', ids: out.ids, ws: out.ws, counts: out.counts, bodies: out.bodies }
    if (out.expects) msg.expects = out.expects
    if (out.files) msg.files = out.files
    const slot = owner.slot
    let lone = turnEnd && slot !== null && out.ids.length === 1 && !out.files && this.pending.size === 1
    if (lone && owner.slotSkip > 0) {
      owner.slotSkip--
      lone = false
    }
    const id = out.ids[0] as number
    if (lone) {
      msg.slot = slotTag(id)
      Atomics.store(slot as Int32Array, 0, msg.slot)
    }
    stamp(PHASE.posted)
    ;(owner.port as MessagePort | LocalPort).postMessage(msg)
    if (lone) this.waitLone(owner, slot as Int32Array, msg.slot as number)
  }

  /**
   * Waits up to LONE_WAIT_MS for a lone append's answer in the owner's ack slot, and takes the
   * ack from there; a failure, or an ack that takes longer, comes by the port (ACK_SLOT).
   */
  protected waitLone(owner: Owner, slot: Int32Array, tag: number): void {
    const deadline = performance.now() + LONE_WAIT_MS
    let v = Atomics.load(slot, 0)
    while (v === tag) {
      const left = deadline - performance.now()
      if (left <= 0) {
        v = Atomics.compareExchange(slot, 0, tag, 0)
        if (v === tag) {
          owner.slotSkip = LONE_SKIP_AFTER_MISS // given up: the owner posts the answer
          return
        }
        break
      }
      Atomics.wait(slot, 0, tag, left)
      v = Atomics.load(slot, 0)
    }
    Atomics.store(slot, 0, 0)
    if (v === ACK_SLOT.ack) {
      this.onMessage({ t: 'acks', data: Float64Array.from(owner.slotData as Float64Array) }, owner)
    }
  }

  protected override onMessage(msg: FromOwner, from?: Owner): void {
    switch (msg.t) {
      case 'acks': {
        stamp(PHASE.ackReceived)
        const d = msg.data
        for (let i = 0; i < d.length; i += 5) {
          const id = d[i] as number
          const p = this.pending.get(id)
          if (!p) continue
          this.pending.delete(id)
          this.settle(id, p)
          const seq = d[i + 1] as number
          const ts = d[i + 2] as number
          if (p.workspace !== undefined) this.committed(p.workspace, seq + Math.max(1, p.count) - 1)
          if (p.count === -1) p.resolve({ seq, ts })
          else if (p.count === -2) p.resolve(undefined)
          else {
            const acks: Ack[] & { [LOG_END]?: number; [LOG_HELD]?: () => boolean } = new Array(p.count)
            for (let k = 0; k < p.count; k++) acks[k] = { seq: seq + k, ts: ts + k }
            acks[LOG_END] = d[i + 3] as number
            if (p.workspace !== undefined && from !== undefined) {
              acks[LOG_HELD] = this.heldSince(from, p.workspace, d[i + 4] as number, seq + p.count - 1)
            }
            p.resolve(acks)
          }
        }
        break
      }
      case 'fail': {
        for (const id of msg.ids) {
          const p = this.pending.get(id)
          if (!p) continue
          this.pending.delete(id)
          this.settle(id, p)
          p.reject(deserializeError(msg.error))
        }
        break
      }
      case 'applied':
        if (from) this.partsApplied(msg.batch, from, msg.ok)
        break
      case 'reply': {
        const p = this.pending.get(msg.id)
        if (!p) break
        this.pending.delete(msg.id)
        if (msg.error) p.reject(deserializeError(msg.error))
        else p.resolve(msg.value)
        break
      }
    }
  }

  protected nextCommit(workspace: string): Promise<void> {
    let c = this.commits.get(workspace)
    if (!c) {
      let resolve!: () => void
      const promise = new Promise<void>((r) => {
        resolve = r
      })
      c = { promise, resolve }
      this.commits.set(workspace, c)
    }
    return c.promise
  }

  /** LOG_HELD of an append acknowledged with this close counter and last seq. */
  protected heldSince(owner: Owner, workspace: string, closes: number, lastSeq: number): () => boolean {
    const port = owner.port
    return () =>
      owner.port === port &&
      this.closing === null &&
      Atomics.load(owner.closes, 0) === closes &&
      this.ackedSeq.get(workspace) === lastSeq
  }

  /** A commit of this workspace was acknowledged: its watchers look at the file again. */
  protected committed(workspace: string, lastSeq: number): void {
    if (lastSeq > (this.ackedSeq.get(workspace) ?? 0)) this.ackedSeq.set(workspace, lastSeq)
    const c = this.commits.get(workspace)
    if (c) {
      this.commits.delete(workspace)
      c.resolve()
    }
  }
}
