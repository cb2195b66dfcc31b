/**
 * Pumping one stream of a daemon connection (read, readBytes, watch) to its client: a chunk read
 * only when the client granted one and takes what it is sent, the reader parked (closed, its
 * position kept) otherwise, and its share of the daemon's budget taken and given back.
 */
import { type Budget, READER_BYTES, TAIL_BYTES } from './budget.js'
import type { InFlight } from './requests.js'
import { type Chunk, orAbort, type StreamSource } from './streams.js'

/** What a stream's pump uses of its connection (the session). */
export interface StreamOutlet {
  readonly budget: Budget
  /** Whether the stream may read its next chunk now (Session.mayPull). */
  mayPull(r: InFlight): boolean
  /** A stream of the connection began reading a chunk. */
  startedReading(): void
  /** A stream stopped reading: the ones parked behind its chunk may go on. */
  doneReading(): void
  push(line: string, bytes: number): void
  send(msg: object): void
}

/**
 * Sends a stream's chunks as credit and the socket allow; its result once it ends. The reader
 * is open only while chunks can go out: a stream its client does not take from is parked, its
 * reader closed (file, buffers, watch), and opened again at its position once it can go on.
 */
export async function pumpStream(
  outlet: StreamOutlet,
  id: number,
  r: InFlight,
  source: StreamSource,
): Promise<unknown> {
  const signal = (r.abort as AbortController).signal
  const budget = outlet.budget
  let reader: AsyncGenerator<Chunk> | null = null
  let opened = false
  let sent = 0
  // The reader's share of the budget: READER_BYTES, or TAIL_BYTES while its watch waits.
  let share = 0
  // Woken (perhaps) because a reader's share came free: taken, or handed on to the next waiter.
  let wokenForRoom = false
  const close = () => {
    if (reader === null) return
    closeReader(reader)
    reader = null
    budget.freeReader(share)
    share = 0
  }
  // The chunk being read, counted in `reading` unless its watch waits for a commit.
  let pull: { counted: boolean } | null = null
  const tail = (waiting: boolean) => {
    if (pull === null || pull.counted !== waiting) return // a late call, after its pull ended
    pull.counted = !waiting
    if (waiting) {
      budget.free(READER_BYTES - TAIL_BYTES)
      share = TAIL_BYTES
      outlet.doneReading()
    } else {
      // Woken by a commit: it reads now, whether or not that fits (what it reads is small).
      budget.add(READER_BYTES - TAIL_BYTES)
      share = READER_BYTES
      outlet.startedReading()
    }
  }
  try {
    let next: IteratorResult<Chunk, unknown> | null = null
    for (;;) {
      if (!outlet.mayPull(r)) {
        close()
        if (wokenForRoom) budget.handOn() // room it was woken for, that it does not take now
        wokenForRoom = false
        await orAbort(new Promise<void>((wake) => (r.wake = wake)), signal)
        r.wake = null
        continue
      }
      if (reader === null) {
        if (!budget.takeReader()) {
          // A new stream is refused; one under way waits its turn (it holds nothing meanwhile).
          if (!opened) throw budget.busy(`the ${source.op} stream is refused`)
          let wake!: () => void
          const freed = new Promise<void>((resolve) => {
            wake = resolve
          })
          r.wake = wake
          budget.wait(wake)
          try {
            await orAbort(freed, signal)
          } finally {
            budget.unwait(wake)
            r.wake = null
          }
          wokenForRoom = true
          continue
        }
        wokenForRoom = false
        opened = true
        share = READER_BYTES
        reader = source.open(signal, tail)
      }
      pull = { counted: true }
      outlet.startedReading()
      try {
        next = await orAbort(reader.next(), signal)
      } finally {
        if (pull.counted) outlet.doneReading()
        pull = null
      }
      if (next.done) return { chunks: sent, ...source.result() }
      source.sent(next.value)
      const data = next.value.data
      if (typeof data === 'string') {
        // Base64 (readBytes): nothing in it to escape, and one byte a character.
        const line = `{"id":${id},"chunk":"${data}"}\n`
        outlet.push(line, line.length)
      } else outlet.send({ id, chunk: data })
      next = null
      r.credits = (r.credits as number) - 1
      sent++
      await null // the chunk's write (a microtask queued before this one): then what the kernel did not take
    }
  } finally {
    close()
    if (wokenForRoom) budget.handOn()
  }
}

/** Not awaited: a reader waiting inside (a watch waiting for a commit) returns once it wakes. */
function closeReader(reader: AsyncGenerator<Chunk>): void {
  reader.return(undefined).catch(() => {})
}
