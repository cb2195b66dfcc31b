/**
 * A connection's answers on their way out. They wait here and go to the socket a batch at a
 * time (up to 64 KiB after the line that starts it), the next only once the kernel has taken
 * everything before it: what a client has not read yet waits in this queue, where the daemon
 * counts it against its budget and can drop it when the client reads nothing, and not in the
 * socket's own buffer, which grows without bound and can be neither counted cheaply nor cut.
 */
import type { Socket } from 'node:net'

/** A batch handed to the socket in one write: its first line, then lines up to this many bytes. */
const BATCH_BYTES = 64 << 10

export interface OutboxHooks {
  /** The bytes this outbox holds changed by `delta` (the daemon's budget counts them). */
  changed(delta: number): void
  /** The client took a batch: room again for what waited for it. */
  taken(): void
  /** Answers have waited `stuckMs` with no batch taken: the client does not read. */
  stuck(): void
}

export class Outbox {
  private lines: string[] = []
  private sizes: number[] = []
  /** Bytes of `lines`. */
  private queued = 0
  /** Bytes handed to the socket whose write has not called back yet. */
  private writing = 0
  private scheduled = false
  /** Nothing more is queued or written (the connection ends); what the socket holds is counted until it closes. */
  private ended = false
  /** Nothing more is counted: the connection is gone. */
  private closed = false
  /** When the client last took a batch, or answers began to wait for it. */
  private takenAt = 0
  private timer: NodeJS.Timeout | null = null

  constructor(
    private readonly socket: Socket,
    private readonly hooks: OutboxHooks,
    private readonly stuckMs: number,
  ) {}

  /** Bytes the daemon holds for this client: queued here, or in the socket not yet taken. */
  get bytes(): number {
    return this.queued + this.writing
  }

  /** Bytes the client has not taken yet: queued here, or left in the socket's buffer. */
  get waiting(): number {
    return this.queued + this.socket.writableLength
  }

  /** Queues a line of `n` bytes; what is queued in one turn of the event loop goes out in one write. */
  push(line: string, n: number): void {
    if (this.ended) return
    this.lines.push(line)
    this.sizes.push(n)
    this.queued += n
    this.hooks.changed(n)
    if (!this.scheduled) {
      this.scheduled = true
      queueMicrotask(() => this.write())
    }
  }

  private write(): void {
    this.scheduled = false
    // While the kernel takes everything at once, batches follow each other in this turn.
    while (!this.ended && this.lines.length > 0 && this.socket.writableLength === 0) {
      let k = 0
      let bytes = 0
      while (k < this.lines.length && (k === 0 || bytes < BATCH_BYTES)) bytes += this.sizes[k++] as number
      const data = k === 1 ? (this.lines[0] as string) : this.lines.slice(0, k).join('')
      if (k === this.lines.length) {
        this.lines = []
        this.sizes = []
      } else {
        this.lines.splice(0, k)
        this.sizes.splice(0, k)
      }
      this.queued -= bytes
      this.writing += bytes
      this.socket.write(data, () => this.onTaken(bytes))
    }
    if (!this.ended && this.socket.writableLength > 0 && this.timer === null) {
      this.takenAt = Date.now()
      this.arm(this.stuckMs)
    }
  }

  private onTaken(bytes: number): void {
    if (this.closed) return
    this.writing -= bytes
    this.hooks.changed(-bytes)
    if (this.ended) return
    this.takenAt = Date.now()
    this.write()
    this.hooks.taken()
  }

  private arm(ms: number): void {
    this.timer = setTimeout(() => this.check(), ms)
    this.timer.unref()
  }

  private check(): void {
    this.timer = null
    if (this.ended || this.socket.writableLength === 0) return
    const idle = Date.now() - this.takenAt
    if (idle >= this.stuckMs) this.hooks.stuck()
    else this.arm(this.stuckMs - idle)
  }

  /**
   * The connection's last words, in one write: what is queued (unless `keep` is false: a client
   * that reads nothing would never get it), then `last`. Nothing is queued after; what the socket
   * holds stays counted until the client takes it or the connection is gone.
   */
  end(last: string | null, keep: boolean): void {
    if (this.ended) return
    this.ended = true
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
    const data = (keep ? this.lines.join('') : '') + (last ?? '')
    const bytes = (keep ? this.queued : 0) + (last === null ? 0 : Buffer.byteLength(last))
    this.hooks.changed(bytes - this.queued)
    this.lines = []
    this.sizes = []
    this.queued = 0
    if (data === '') return
    // Counted until the client takes it or the socket closes: a client that never reads keeps it.
    this.writing += bytes
    this.socket.write(data, () => this.onTaken(bytes))
  }

  /** Counts nothing more: the connection is gone. */
  release(): void {
    if (this.closed) return
    this.closed = true
    this.hooks.changed(-(this.queued + this.writing))
    this.lines = []
    this.sizes = []
    this.queued = 0
    this.writing = 0
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
  }
}
