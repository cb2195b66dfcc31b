/**
 * Following a log as it grows: every entry in order from a seq, then each new one as it commits.
 * The file is the source of truth: the follower reads complete lines from its last offset, so
 * resuming from a seq (found by binary search) gives no gap and no duplicate, and a slow
 * consumer costs nothing but its read position (it pulls; nothing is buffered for it).
 *
 * It wakes when this process commits to the workspace, when the file changes (another process
 * writing it), or at the latest after `pollMs`. Entries past `limit()` (the last seq this
 * process has acknowledged, when it writes the workspace) wait: a line can reach the file before
 * the fdatasync that commits it returns, and only committed entries are delivered.
 */
import { closeSync, type FSWatcher, fstatSync, watch as fsWatch, readSync } from 'node:fs'
import { entryStart } from './base.js'
import { type Entry, parseEntry } from './entry.js'
import { Errors } from './errors.js'
import { openFileSync, READ } from './files.js'
import { seekSeq } from './reader.js'

export interface WatchOptions {
  /** First seq to deliver (default 1). */
  fromSeq?: number
  /** Ends the iteration (it returns) when aborted. */
  signal?: AbortSignal
  /** Longest wait between two looks at the file (default 250 ms). */
  pollMs?: number
}

const CHUNK = 1 << 16

export interface FollowHooks {
  /** Resolves on the next commit this process makes to the workspace (or never). */
  nextCommit(): Promise<void>
  /** The last seq that may be delivered (Infinity: every complete line is committed). */
  limit(): number
}

/** Refuses a bad fromSeq or pollMs before the workspace is looked at (the daemon's client does the same). */
export function checkWatchOptions(options: WatchOptions): void {
  for (const field of ['fromSeq', 'pollMs'] as const) {
    const v = options[field]
    if (v !== undefined && (!Number.isSafeInteger(v) || v < 1)) {
      throw Errors.BAD_OPTION(`option ${field} must be an integer >= 1, got ${JSON.stringify(v)}`, {
        field,
      })
    }
  }
}

export async function* followLog(
  file: string,
  workspace: string,
  options: WatchOptions,
  hooks: FollowHooks,
): AsyncGenerator<Entry> {
  const fromSeq = options.fromSeq ?? 1
  const pollMs = options.pollMs ?? 250
  const signal = options.signal
  // Where the entries from a seq start: past a compacted log's base record (base.ts).
  const startOf = (seq: number) => entryStart(file, seq, seq > 1 ? seekSeq(file, seq) : 0).start
  let offset = startOf(fromSeq)
  let lastSeq = fromSeq - 1
  let ino = -1
  let watcher: FSWatcher | null = null
  let wake: (() => void) | null = null
  const poke = () => {
    const w = wake
    wake = null
    w?.()
  }
  try {
    watcher = fsWatch(file, { persistent: false }, poke)
  } catch {
    // no inotify here: the poll alone
  }
  signal?.addEventListener('abort', poke, { once: true })
  let carry = Buffer.alloc(0)
  try {
    while (!signal?.aborted) {
      // Read what is there, up to the last committed seq.
      let blocked = false
      const fd = openFileSync(file, READ, { what: 'workspace log' })
      try {
        const st = fstatSync(fd)
        const size = st.size
        if (ino !== st.ino) {
          // Another file at the path since the last look: a compaction replaced the log (its
          // later lines kept byte for byte at other offsets). Found again by seq; a watcher
          // behind the new base is refused (NOA_COMPACTED), never handed a gap.
          if (ino !== -1) {
            offset = startOf(lastSeq + 1)
            carry = Buffer.alloc(0)
          }
          ino = st.ino
        }
        if (size < offset) {
          throw Errors.CORRUPT_LOG(`${file} became shorter (${size} bytes) than what was read (${offset})`, {
            file,
            workspace,
          })
        }
        const buf = Buffer.allocUnsafe(CHUNK)
        while (offset + carry.length < size && !blocked) {
          const n = readSync(fd, buf, 0, CHUNK, offset + carry.length)
          if (n === 0) break
          let data = carry.length > 0 ? Buffer.concat([carry, buf.subarray(0, n)]) : buf.subarray(0, n)
          let start = 0
          const limit = hooks.limit()
          for (let nl = data.indexOf(0x0a); nl >= 0; nl = data.indexOf(0x0a, start)) {
            const line = data.toString('utf8', start, nl)
            let entry: Entry
            try {
              entry = parseEntry(line)
            } catch (err) {
              throw Errors.CORRUPT_LOG(`${file} (line at byte ${offset}): ${(err as Error).message}`, {
                file,
                offset,
              })
            }
            if (entry.seq > limit) {
              blocked = true
              break
            }
            offset += nl + 1 - start
            start = nl + 1
            if (entry.seq <= lastSeq) continue
            lastSeq = entry.seq
            yield entry
            if (signal?.aborted) return
          }
          data = blocked ? Buffer.alloc(0) : data.subarray(start)
          carry = Buffer.from(data) // a partial last line waits for its end
        }
      } finally {
        closeSync(fd)
      }
      carry = Buffer.alloc(0)
      // Wait for a commit, a change of the file, or the poll.
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, pollMs)
        wake = () => {
          clearTimeout(timer)
          resolve()
        }
        hooks.nextCommit().then(poke, poke)
        if (signal?.aborted) poke()
      })
    }
  } finally {
    watcher?.close()
    signal?.removeEventListener('abort', poke)
  }
}
