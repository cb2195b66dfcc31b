/**
 * The channel between the caller's thread and an owner running in that same thread
 * (`workers: 0`): what a MessageChannel gives a worker, without its costs. A MessagePort copies
 * each message (structured clone), writes an eventfd and wakes the event loop to deliver it; a
 * commit's request and its ack each paid that, about a tenth of a serial commit's CPU. Here a
 * message is handed over as it is, in order, never inside the sender's own call (no re-entry):
 * to the owner on a setImmediate, after the event loop has had its turn (a stream of commits
 * never starves timers and I/O, as a chain of microtasks would), and back to the caller in a
 * microtask (the owner's end made with `soon1`): one wait for the loop per round trip is enough,
 * and a second one cost a serial append a whole loop iteration, its epoll_wait included (about
 * 6 µs of the ~100 µs noa spent around the fdatasync, `npm run bench`'s breakdown). Nothing a message holds may be
 * shared by the two sides afterwards: the bytes an append writes are the engine's own copy
 * already (checkFiles), and an end made with `copy` passes each message it posts through it
 * (the owner's end: a reply's value, which the caller may keep and change, is cloned).
 */
export class LocalPort {
  private peer: LocalPort | null = null
  private queue: unknown[] = []
  private head = 0
  private listener: ((msg: unknown) => void) | null = null
  private scheduled = false
  private closed = false

  private constructor(
    private readonly copy: ((msg: unknown) => unknown) | undefined,
    private readonly later: (fn: () => void) => void,
  ) {}

  /**
   * Two connected ends, as MessageChannel's port1 and port2; each may copy what it posts, and
   * `soon1` has port1 take what port2 posts in a microtask instead of a setImmediate (see the top
   * of this file: one end that waits for the event loop's turn is enough to never starve it).
   */
  static pair(
    copy1?: (msg: unknown) => unknown,
    copy2?: (msg: unknown) => unknown,
    soon1 = false,
  ): [LocalPort, LocalPort] {
    const a = new LocalPort(copy1, soon1 ? queueMicrotask : setImmediate)
    const b = new LocalPort(copy2, setImmediate)
    a.peer = b
    b.peer = a
    return [a, b]
  }

  postMessage(msg: unknown): void {
    const peer = this.peer
    if (this.closed || peer === null || peer.closed) return // as a closed MessagePort: dropped
    peer.queue.push(this.copy ? this.copy(msg) : msg)
    peer.schedule()
  }

  on(event: 'message', listener: (msg: unknown) => void): this {
    if (event !== 'message') throw new Error(`LocalPort has no '${String(event)}' event`)
    this.listener = listener
    this.schedule()
    return this
  }

  /** The next message waiting, taken now (receiveMessageOnPort's answer), or undefined. */
  take(): { message: unknown } | undefined {
    if (this.head >= this.queue.length) return undefined
    const message = this.queue[this.head]
    this.queue[this.head++] = undefined
    if (this.head === this.queue.length) {
      this.queue = []
      this.head = 0
    }
    return { message }
  }

  /**
   * Closes both ends: neither posts any more. What was posted before still arrives (an owner's
   * last reply, posted just before it closes its end).
   */
  close(): void {
    this.closed = true
    if (this.peer && !this.peer.closed) this.peer.close()
  }

  private schedule(): void {
    if (this.scheduled || this.listener === null || this.head >= this.queue.length) return
    this.scheduled = true
    this.later(this.drain)
  }

  private readonly drain = (): void => {
    this.scheduled = false
    try {
      for (let m = this.take(); m !== undefined; m = this.take()) {
        ;(this.listener as (msg: unknown) => void)(m.message)
      }
    } finally {
      this.schedule() // a listener that threw: the messages after it still arrive
    }
  }
}
