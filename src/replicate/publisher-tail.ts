/**
 * One round of one workspace: its log's read-only handle (kept between rounds, a bounded
 * number), the fdatasync that makes what is on disk durable before anything is published, the
 * check of every line about to go (checkRange), then the lines published in order from the
 * position (publishRange), a compacted log's base record first into an empty stream.
 */
import type { FileHandle } from 'node:fs/promises'
import { isBaseLine, type LogBase, parseBase } from '../engine/base.js'
import { parseEntry } from '../engine/entry.js'
import { Errors } from '../engine/errors.js'
import { openFile, READ } from '../engine/files.js'
import { countersOf, sameBytes } from './lines.js'
import { baseOf, PublisherExact } from './publisher-exact.js'
import { LogProblem, local, Stopped, type WorkspaceState } from './publisher-state.js'

const NL = 0x0a

/** Bytes read from a log at a time. */
const READ_CHUNK = 256 * 1024

/** Logs kept open between rounds (each is one file descriptor). */
const MAX_OPEN_LOGS = 512

export abstract class PublisherTail extends PublisherExact {
  /** The workspace's open read-only handle (kept between rounds, a bounded number of them). */
  protected async handleOf(st: WorkspaceState): Promise<FileHandle | null> {
    if (st.handle) {
      this.handles.delete(st)
      this.handles.add(st)
      return st.handle
    }
    let handle: FileHandle
    try {
      handle = await openFile(st.file, READ, { what: 'workspace log' })
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null // removed, or not created yet
      throw new LogProblem(err)
    }
    st.handle = handle
    st.ino = (await local(() => handle.stat())).ino
    this.handles.add(st)
    for (const old of this.handles) {
      if (this.handles.size <= MAX_OPEN_LOGS) break
      if (old.inRound) continue
      this.handles.delete(old)
      await this.closeHandle(old)
    }
    return handle
  }

  protected async closeHandle(st: WorkspaceState): Promise<void> {
    const h = st.handle
    st.handle = null
    this.handles.delete(st)
    if (h) await h.close().catch(() => {})
  }

  /** One round for one workspace: make what is on disk durable, then publish it. */
  protected async pushWorkspace(st: WorkspaceState): Promise<void> {
    st.inRound = true
    try {
      const handle = await this.handleOf(st)
      if (!handle) return
      const end = (await local(() => handle.stat())).size
      // Nothing new since the last acknowledged entry (or the checkpoint's): no request at all.
      if (end === st.pos.offset || (st.reconciled && end < st.pos.offset)) return
      // Every byte below `end` is now on disk, whoever wrote it and whether or not its
      // writer's own fdatasync has returned.
      await local(() => handle.datasync())
      // Objects named by these lines were stored before the lines were written: a scan that
      // starts now sees them.
      await this.objectsBarrier(++this.tick)
      if (!st.reconciled) await this.reconcile(st, null)
      // Every line about to be published is checked first: a corrupt log publishes nothing of
      // this round, so what the stream gets of a workspace never depends on where the bad line is.
      await local(() => this.checkRange(st, handle, end))
      // Again from the new position when the stream moved under us (see reconcile).
      let moved = true
      while (moved && st.pos.offset < end) moved = await this.publishRange(st, handle, end)
    } finally {
      st.inRound = false
    }
  }

  /**
   * Checks the complete lines from the position to `end` as verify would: each a valid entry,
   * seqs consecutive, ts never going back. Lines checked by an earlier round are not read again.
   * Throws NOA_CORRUPT_LOG naming the file and the byte offset of the first bad line.
   */
  protected async checkRange(st: WorkspaceState, handle: FileHandle, end: number): Promise<void> {
    const c = st.checked
    let prev: { seq: number; ts: number } | null = null
    let pos = st.pos.offset
    if (c.offset > pos && st.checkedFrom <= pos) {
      pos = c.offset
      prev = { seq: c.seq, ts: c.ts }
    } else st.checkedFrom = pos
    const corrupt = (at: number, why: string) =>
      Errors.CORRUPT_LOG(`${st.file} (line at byte ${at}): ${why}`, {
        file: st.file,
        offset: at,
        workspace: st.ws,
      })
    let buf = Buffer.allocUnsafe(Math.min(READ_CHUNK, Math.max(1, end - pos)))
    let filled = 0
    while (pos + filled < end) {
      if (filled === buf.length) {
        const bigger = Buffer.allocUnsafe(buf.length * 2)
        buf.copy(bigger, 0, 0, filled)
        buf = bigger
      }
      const { bytesRead } = await handle.read(
        buf,
        filled,
        Math.min(buf.length - filled, end - pos - filled),
        pos + filled,
      )
      if (bytesRead === 0) break
      filled += bytesRead
      let i = 0
      for (let nl = buf.indexOf(NL, 0); nl >= 0 && nl < filled; nl = buf.indexOf(NL, i)) {
        const at = pos + i
        if (nl === i) throw corrupt(at, 'empty line')
        let seq: number
        let ts: number
        try {
          const text = buf.toString('utf8', i, nl)
          // A compacted log's base record (engine/base.ts) is its first line.
          ;({ seq, ts } = (at === 0 ? parseBase(text) : null) ?? parseEntry(text))
        } catch (err) {
          throw corrupt(at, (err as Error).message)
        }
        if (prev && seq !== prev.seq + 1) throw corrupt(at, `seq ${seq} does not follow seq ${prev.seq}`)
        if (prev && ts < prev.ts) throw corrupt(at, `ts ${ts} goes back (previous ${prev.ts})`)
        prev = { seq, ts }
        i = nl + 1
        st.checked = { offset: pos + i, seq, ts }
      }
      if (i > 0) {
        buf.copy(buf, 0, i, filled)
        pos += i
        filled -= i
      }
    }
  }

  /** Publishes the complete lines from the position to `end`; true when the position moved. */
  protected async publishRange(st: WorkspaceState, handle: FileHandle, end: number): Promise<boolean> {
    let buf = Buffer.allocUnsafe(Math.min(READ_CHUNK, Math.max(1, end - st.pos.offset)))
    let pos = st.pos.offset // file offset of buf[0]
    let filled = 0
    while (pos + filled < end) {
      if (filled === buf.length) {
        // One line longer than the buffer: grow it.
        const bigger = Buffer.allocUnsafe(buf.length * 2)
        buf.copy(bigger, 0, 0, filled)
        buf = bigger
      }
      const want = Math.min(buf.length - filled, end - pos - filled)
      const { bytesRead } = await local(() => handle.read(buf, filled, want, pos + filled))
      if (bytesRead === 0) return false
      filled += bytesRead
      let i = 0
      for (let nl = buf.indexOf(NL, 0); nl >= 0 && nl < filled; nl = buf.indexOf(NL, i)) {
        if (this.signal.aborted) throw new Stopped()
        const at = pos + i
        const line = buf.subarray(i, nl)
        const lineEnd = pos + nl + 1
        i = nl + 1
        let counters: { seq: number; ts: number }
        try {
          counters = countersOf(line)
        } catch (err) {
          throw new LogProblem(
            Errors.CORRUPT_LOG(`${st.file} (line at byte ${at}): ${(err as Error).message}`, {
              file: st.file,
              offset: at,
              workspace: st.ws,
            }),
          )
        }
        const { seq, ts } = counters
        if (seq <= st.pos.seq) {
          // The stream already holds this entry (it was ahead of this log).
          if (st.junction && seq === st.junction.seq) {
            if (!sameBytes(line, st.junction.data)) {
              if (st.fenced) throw await this.fencedError(st)
              throw this.diverged(st, seq, 'the stream holds a different entry for this seq')
            }
            st.junction = null
          }
          st.pos.offset = lineEnd
          continue
        }
        // Another writer's fence: this log's new entries are not this root's to publish.
        if (st.fenced) throw await this.fencedError(st)
        if (at === 0 && seq > st.pos.seq + 1 && isBaseLine(line.toString('utf8'))) {
          // A compacted log: its base record goes first into an empty stream (a mirror starts
          // its log with it); a stream that ends before the base cannot be continued from here.
          if (st.pos.seq > 0) throw new LogProblem(this.behindBase(st, baseOf(st.file) as LogBase))
          if ((await this.publishEntry(st, line, seq, ts, lineEnd)) === 'moved') return true
          continue
        }
        if (seq !== st.pos.seq + 1) {
          throw new LogProblem(
            Errors.CORRUPT_LOG(
              `workspace ${st.ws}: ${st.file} jumps from seq ${st.pos.seq} to ${seq} at byte ${at}; nothing after seq ${st.pos.seq} was published`,
              { file: st.file, offset: at, workspace: st.ws, seq },
            ),
          )
        }
        if (st.junction) throw this.diverged(st, seq, 'the log skipped the entry where it joins the stream')
        if ((await this.publishEntry(st, line, seq, ts, lineEnd)) === 'moved') return true
      }
      // Keep the partial line at the end for the next read.
      if (i > 0) {
        buf.copy(buf, 0, i, filled)
        pos += i
        filled -= i
      }
    }
    return false
  }
}
