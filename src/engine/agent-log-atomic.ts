/**
 * appendAtomic: entries to several workspaces as one. Each owner involved prepares its part,
 * the first commits them all in one journal frame, the others then write theirs to their logs;
 * the committing owner keeps its frame (the batch's coordinator here) until every other owner
 * answers that its parts are durable. close() waits for them (checkDrained).
 */
import { AgentLogAcks } from './agent-log-acks.js'
import { type AppendOptions, closedError } from './agent-log-options.js'
import type { Owner } from './agent-log-state.js'
import { type Ack, checkWorkspace, type EntryInput, encodeBody } from './entry.js'
import { Errors } from './errors.js'
import type { AtomicPart, ToOwner } from './protocol.js'

export abstract class AgentLogAtomic extends AgentLogAcks {
  protected abstract checkEntries(
    workspace: string,
    entries: readonly EntryInput[],
    options: AppendOptions | undefined,
    where: (i: number) => string,
  ): void

  /**
   * Appends entries to several workspaces as one: after any crash, all of them are in their logs
   * or none is. Each workspace's entries get consecutive seqs. The parts of every owner worker
   * involved are prepared (each workspace waits until it is idle, then gets its seqs and is held),
   * then committed in one journal frame of the first owner (one fdatasync), then written to their
   * logs; the promise resolves once every part is in its log. Needs `durability: 'journal'`.
   */
  async appendAtomic(batch: Readonly<Record<string, readonly EntryInput[]>>): Promise<Record<string, Ack[]>> {
    if (typeof batch !== 'object' || batch === null || Array.isArray(batch)) {
      throw Errors.BAD_ARGUMENT('appendAtomic takes an object: { workspace: [entries] }')
    }
    if (this.closing) throw closedError() // before ownerOf, which would start an owner
    // A workspace moving between owners (loneInThread) is on the one it moves to once it is there.
    // (Checked again after each wait: another move may have started meanwhile.)
    for (let m = this.movingOf(Object.keys(batch)); m !== undefined; m = this.movingOf(Object.keys(batch))) {
      await m
      if (this.closing) throw closedError()
    }
    const groups = new Map<Owner, { ws: string[]; counts: number[]; bodies: string[] }>()
    for (const [workspace, entries] of Object.entries(batch)) {
      checkWorkspace(workspace)
      if (!Array.isArray(entries)) {
        throw Errors.BAD_ARGUMENT(`appendAtomic: ${workspace} must map to an array of entries`)
      }
      if (entries.length === 0) continue
      const bodies = entries.map((e, i) => encodeBody(e, `${workspace} entry ${i + 1}`))
      this.checkEntries(workspace, entries, undefined, (i) => `${workspace} entry ${i + 1}`)
      const owner = this.routeOf(workspace)
      let g = groups.get(owner)
      if (!g) {
        g = { ws: [], counts: [], bodies: [] }
        groups.set(owner, g)
      }
      g.ws.push(workspace)
      g.counts.push(bodies.length)
      for (const b of bodies) g.bodies.push(b)
    }
    const owners = [...groups.keys()]
    if (owners.length === 0) return {}
    // A close that starts meanwhile lets the batch finish (its steps are sent even while
    // closing): owners holding prepared parts would otherwise never become idle.
    this.atomicsRunning++
    try {
      return await this.runAtomic(groups, owners)
    } finally {
      this.atomicsRunning--
      this.checkDrained()
    }
  }

  protected async runAtomic(
    groups: Map<Owner, { ws: string[]; counts: number[]; bodies: string[] }>,
    owners: Owner[],
  ): Promise<Record<string, Ack[]>> {
    const coordinator = owners[0] as Owner
    const id = this.nextBatch++
    const step = (o: Owner, make: (rid: number) => ToOwner) => this.request(o, make, true)
    const abortAll = () =>
      Promise.allSettled(owners.map((o) => step(o, (rid) => ({ t: 'abort', id: rid, batch: id }))))
    const prepared = await Promise.allSettled(
      owners.map((o) => {
        const g = groups.get(o) as { ws: string[]; counts: number[]; bodies: string[] }
        return step(o, (rid) => ({ t: 'prepare', id: rid, batch: id, ...g })) as Promise<AtomicPart[]>
      }),
    )
    const refused = prepared.find((r) => r.status === 'rejected')
    if (refused) {
      await abortAll()
      throw (refused as PromiseRejectedResult).reason
    }
    const parts = prepared.map((r) => (r as PromiseFulfilledResult<AtomicPart[]>).value)
    const others = owners.slice(1)
    if (others.length > 0) {
      this.coordinators.set(id, { owner: coordinator, waiting: new Set(others), ok: true })
    }
    try {
      await step(coordinator, (rid) => ({
        t: 'atomicCommit',
        id: rid,
        batch: id,
        foreign: parts.slice(1).flat(),
      }))
    } catch (err) {
      this.forgetBatch(id)
      await abortAll()
      throw err
    }
    await Promise.all(
      others.map((o) =>
        step(o, (rid) => ({ t: 'apply', id: rid, batch: id })).catch((err: unknown) => {
          // Nothing was applied there, so no answer will come.
          this.partsApplied(id, o, false)
          throw err
        }),
      ),
    )
    const out: Record<string, Ack[]> = {}
    for (const part of parts.flat()) {
      out[part.ws] = Array.from({ length: part.count }, (_, k) => ({
        seq: part.firstSeq + k,
        ts: part.firstTs + k,
      }))
      this.committed(part.ws, part.firstSeq + part.count - 1)
    }
    return out
  }

  /**
   * One other owner's answer for an atomic batch: its parts are durable in its logs (ok), or one
   * could not be made so. Once all answered, the committing owner may reuse the batch's frame
   * if all were ok; otherwise the frame stays, and its journal is kept at close for the next
   * opener to replay.
   */
  protected override partsApplied(batch: number, from: Owner, ok: boolean): void {
    const c = this.coordinators.get(batch)
    // Each owner answers once, whichever way (its message, its failure, a refused apply).
    if (!c?.waiting.delete(from)) return
    if (!ok) c.ok = false
    if (c.waiting.size > 0) return
    if (c.ok) c.owner.port?.postMessage({ t: 'unpin', batch } satisfies ToOwner)
    this.forgetBatch(batch)
  }

  protected override forgetBatch(batch: number): void {
    this.coordinators.delete(batch)
    this.checkDrained()
  }

  protected checkDrained(): void {
    if (this.drained === null || this.atomicsRunning > 0 || this.coordinators.size > 0) return
    const drained = this.drained
    this.drained = null
    drained()
  }
}
