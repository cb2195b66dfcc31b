/**
 * The owner's registry of open files: the open-file bound and its LRU (making room, closing idle
 * files), opening workspaces and raw files (locks, tail recovery, journal recovery of the root),
 * closing and forgetting them, waiting for them to be idle, and making logs durable (fdatasync of
 * one, or one syncfs of the log folder's file system for many: syncLogsTogether).
 */
import { fstatSync, mkdirSync } from 'node:fs'
import { dirname } from 'node:path'
import { isOutOfDescriptors, openFileLimit } from '../engine/descriptors.js'
import { Errors, type NoaError, withPath } from '../engine/errors.js'
import { openError } from '../engine/files.js'
import {
  deadJournalsIn,
  quarantinedError,
  quarantinedJournals,
  recoverJournalsLocked,
  scanJournal,
  withRootLock,
} from '../engine/journal-recovery.js'
import { describeHolder } from '../engine/locks.js'
import { SYNC_FDATASYNC, type SyncMode } from '../engine/native.js'
import type { RawAppendOptions } from '../engine/protocol.js'
import { countersOf, inspectTail } from '../engine/recovery.js'
import type { LogIo } from './io.js'
import type { Journal } from './journal.js'
import { EMPTY, type Job, mkdirDurable, type OwnedFile } from './owner-state.js'
import { OwnerSums } from './owner-sums.js'

/**
 * A checkpoint with at least this many logs to make durable (and a close with as many) does it
 * with one syncfs of their file system instead of an fdatasync of each: with thousands of live
 * workspaces, every checkpoint found about as many logs written since the last, and their
 * fdatasyncs (each a journal commit and a device flush, on the addon's pool) were most of what
 * an owner did. The syncfs goes through a descriptor of the log folder opened before any log was
 * written, so that the kernel (5.8 and later) reports through it any writeback error of the file
 * system since (errseq); when it reports one, each log is fdatasynced on its own after all, so
 * that the error lands on the log it belongs to and no other.
 */
const LOG_SYNCFS_MIN = Math.max(1, Number(process.env.NOA_LOG_SYNCFS_MIN) || 16) // env: a test seam (the crash explorer's few workspaces)

const EMPTY_TAIL = { truncatedBytes: 0, size: 0, lastSeq: 0, lastTs: 0 } as const

export abstract class OwnerFiles extends OwnerSums {
  protected abstract markReady(file: OwnedFile): void
  protected abstract submit(job: Job, fd: number, data: Buffer, mode: SyncMode): void
  protected abstract writeHeader(): void

  protected syncOne(file: OwnedFile): void {
    file.syncing = true
    this.submit({ kind: 'sync', file, lsn: file.lastLsn }, file.fd, EMPTY, SYNC_FDATASYNC)
  }

  /**
   * Of `files`, those one syncfs of the log folder's file system makes durable, when there are
   * enough of them for it to pay (LOG_SYNCFS_MIN); none otherwise.
   */
  protected onLogDirFs(files: Iterable<OwnedFile>): OwnedFile[] {
    if (this.logDirFd < 0) return []
    const same: OwnedFile[] = []
    for (const f of files) if (f.dev === this.logDirDev) same.push(f)
    return same.length >= LOG_SYNCFS_MIN ? same : []
  }

  /**
   * Before files are closed (the owner's close: every open one; making room: the idle ones let
   * go): those not yet durable, made so by one syncfs when there are enough of them
   * (LOG_SYNCFS_MIN), on this thread, with their sidecars' last records. On an error nothing is
   * marked: closing fdatasyncs each of them, and the one the error belongs to reports it.
   */
  protected syncLogsTogether(closing: Iterable<OwnedFile> = this.lru.keys()): void {
    const files = [...closing]
    const dirty: OwnedFile[] = []
    for (const f of files) if (f.dirty && !f.unapplied && f.fd >= 0) dirty.push(f)
    const together = this.onLogDirFs(dirty)
    if (together.length === 0) return
    // The sidecars' last records first, so that the same syncfs makes them durable too.
    for (const f of files) {
      if (f.sum === null || f.fd < 0) continue
      this.summed(f, EMPTY, 0, true)
      f.sum = null
    }
    try {
      this.io.syncfs(this.logDirFd)
    } catch {
      return
    }
    this.stats.logSyncfs++
    for (const f of together) f.syncedLsn = f.lastLsn
  }

  protected closeLogDir(): void {
    if (this.logDirFd < 0) return
    try {
      this.io.close(this.logDirFd)
    } catch {
      // the descriptor is released either way
    }
    this.logDirFd = -1
  }

  /** Opens the log folder to sync its file system through (see LOG_SYNCFS_MIN); without it, logs are synced one by one. */
  protected openLogDir(): void {
    if (this.logDirFd >= 0) return
    try {
      const fd = this.io.openDir(this.init.logDir)
      this.logDirFd = fd
      this.logDirDev = fstatSync(fd, { bigint: true }).dev
    } catch {
      this.logDirFd = -1
    }
  }

  /**
   * A checkpoint's syncfs returned: every log it covered is durable up to the frame it had then.
   * On an error, which a syncfs cannot tie to a file, each is fdatasynced on its own instead,
   * still counted in the checkpoint, so the error reaches the log it belongs to.
   */
  protected logsSynced(files: Array<[OwnedFile, number]>, err: Error | null): void {
    const c = this.checkpoint as { left: number }
    if (err !== null) {
      c.left += files.length - 1
      for (const [file] of files) {
        file.syncing = false
        this.syncOne(file)
      }
      return
    }
    for (const [file, lsn] of files) {
      file.syncing = false
      if (lsn > file.syncedLsn) file.syncedLsn = lsn
      if (!file.dirty && file.inFlight === null && file.queue.length === 0) file.record = null
      this.settled(file)
    }
    if (--c.left === 0) this.writeHeader()
  }

  protected ensureOpen(file: OwnedFile): void {
    if (file.fd >= 0) {
      this.lru.delete(file)
      this.lru.set(file, true)
      return
    }
    try {
      this.openNow(file)
    } catch (err) {
      if (!isOutOfDescriptors(err)) throw err
      // The process is out of descriptors (what else it opens counts too): idle files are
      // closed and the open is tried once more; then this append fails by name, and the next
      // one tries again.
      const closed = this.closeIdle(Math.max(8, this.lru.size >> 2))
      try {
        this.openNow(file)
      } catch (again) {
        if (!isOutOfDescriptors(again)) throw again
        throw this.outOfDescriptors(`open ${file.path}`, file.path, again, closed)
      }
    }
  }

  /** The named error of an append that found the process out of descriptors (NOA_BUSY). */
  protected outOfDescriptors(what: string, path: string, err: unknown, closed: number): NoaError {
    const limit = openFileLimit()
    return Errors.BUSY(
      `cannot ${what}: the process is out of file descriptors (${(err as NodeJS.ErrnoException).code}${limit === null ? '' : `, ulimit -n ${limit}`}) with ${this.lru.size} files open by this owner after closing ${closed} idle ones; raise the limit or lower maxOpenFiles`,
      { file: path, resource: 'file descriptors' },
    )
  }

  /** Closes up to `n` idle open files, least recently used first; returns how many it closed. */
  protected closeIdle(n: number): number {
    let closed = 0
    for (const f of [...this.lru.keys()]) {
      if (closed >= n) break
      if (f.idle && f.idleWaiters === null && this.closeFile(f) === null) closed++
    }
    this.stats.evictions += closed
    return closed
  }

  protected openNow(file: OwnedFile): void {
    if (file.kind === 'raw') {
      this.openRaw(file) // never journaled: no journal to replay before it is used
      this.lru.set(file, true)
      return
    }
    const err = this.openWorkspaces([file]).get(file)
    if (err !== undefined) throw err
  }

  /**
   * Opens workspaces' logs together, with one look for dead journals: a pass that opens many (a
   * host with more live workspaces than open files, or a burst of new ones) lists the journal
   * folder and reads the quarantine once, not once a workspace. Each log is opened and locked
   * first, then the dead journals are looked for: whoever wrote entries of a log into a journal
   * held the log's lock, so once this owner holds it, every journal that may hold such entries
   * is one of a dead process, and is found; only then is the root lock taken, to replay them.
   * A log that does not exist yet is made after that, and only if no quarantined journal names
   * it. Returns the workspaces that could not be opened, with why.
   *
   * `guess` (a pass of appends): when the root has no dead and no quarantined journal, each log
   * is opened creating it when missing (O_CREAT), without a look first: a burst of new
   * workspaces saves a failed open each, which cost ~45 µs of the owner's thread when two owners
   * created logs in one folder at once (its lock). That order is safe then: a log this open
   * makes never had a writer, so no journal holds entries of it (a journal's records name their
   * log's inode), and a log that was there is opened and locked as above, before the look for
   * dead journals. Whether it was made is told by its size (an empty log is taken as new: its
   * folder is fsynced again, which costs nothing that matters). Should a replay of this pass
   * quarantine a journal naming a log this pass may have made (a process died meanwhile), the
   * log is removed again while still empty, and the workspace refused as without the guess.
   */
  protected openWorkspaces(files: readonly OwnedFile[], guess = false): Map<OwnedFile, unknown> {
    const failed = new Map<OwnedFile, unknown>()
    const root = this.init.root
    const closeFd = (file: OwnedFile) => {
      if (file.fd < 0) return
      this.io.close(file.fd)
      file.fd = -1
    }
    const failAll = (err: unknown) => {
      for (const file of files) {
        if (failed.has(file) || this.lru.has(file)) continue
        closeFd(file)
        failed.set(file, err)
      }
      return failed
    }
    try {
      if (!this.logDirReady) {
        mkdirAnyDurable(this.io, root) // as the user named it
        withRootLock(root, () => mkdirDurable(this.io, root, this.init.logDir))
        this.logDirReady = true
        this.openLogDir()
      }
    } catch (err) {
      return failAll(err)
    }
    let bold = false
    try {
      bold = guess && !deadJournalsIn(root) && quarantinedJournals(root).length === 0
    } catch {
      bold = false // looked at again below, where a failure is the pass's answer
    }
    const missing = new Set<OwnedFile>()
    for (const file of files) {
      try {
        if (bold) this.openCreating(file)
        else if (!this.openExisting(file)) missing.add(file)
      } catch (err) {
        failed.set(file, err)
      }
    }
    let replayed = false
    try {
      // The root lock only when there is something to replay: two owners (or processes)
      // opening workspaces at once do not wait for each other.
      if (deadJournalsIn(root)) {
        withRootLock(root, () => recoverJournalsLocked(root))
        replayed = true
      }
    } catch (err) {
      return failAll(err)
    }
    const quarantined = bold && !replayed ? [] : quarantinedJournals(root)
    for (const file of files) {
      if (failed.has(file)) continue
      try {
        const q = quarantined.find((j) => j.workspaces.includes(file.key))
        if (q) {
          if (bold) this.unmake(file)
          throw quarantinedError(file.key, q)
        }
        if (bold) {
          this.openedWorkspace(file, null)
          continue
        }
        // Missing a moment ago: made at once (O_CREAT), without a second look, unless a replay
        // ran since, which may have made it (then looked for again: a log it made is not new).
        // A burst of new workspaces saves a failed open each (~10 µs of the owner's thread).
        const created =
          missing.has(file) && (replayed ? this.openLocked(file, true) : this.openCreating(file))
        this.openedWorkspace(file, created)
      } catch (err) {
        closeFd(file)
        failed.set(file, err)
      }
    }
    return failed
  }

  /**
   * A log opened by a guessing pass (openWorkspaces) that a quarantined journal turns out to
   * name: removed if it is empty (this pass may have made it; the refusal must find it missing
   * next time too), then closed by the caller.
   */
  protected unmake(file: OwnedFile): void {
    if (file.fd < 0 || fstatSync(file.fd).size !== 0) return
    try {
      this.io.unlink(file.path)
    } catch {
      // refused either way; a log left empty is one a later open finds
    }
  }

  /** Opens and locks an existing log; false when there is none (made later: openWorkspaces). */
  protected openExisting(file: OwnedFile): boolean {
    try {
      file.fd = this.io.openAppend(file.path, false, true)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false
      throw this.lockError(file, openError(err, file.path, 'workspace log'))
    }
    return true
  }

  /** Makes room for one more open file by closing the least recently used idle ones. */
  protected roomToOpen(): boolean {
    return this.makeRoom(1) === 1
  }

  /**
   * Makes room for `n` more open files, as far as it can, by closing the least recently used
   * idle ones (the logs among them not yet durable made so together, see syncLogsTogether);
   * returns how many may be opened now.
   */
  protected makeRoom(n: number): number {
    const max = this.init.maxOpenFiles
    const over = this.lru.size + n - max
    if (over > 0) {
      // Least recently used first, those a checkpoint already made durable before the others:
      // closing one of those costs no sync.
      const victims: OwnedFile[] = []
      const dirty: OwnedFile[] = []
      let looked = 0
      for (const file of this.lru.keys()) {
        if (victims.length >= over || looked++ > over * 8 + 256) break
        if (!file.idle || file.idleWaiters !== null) continue
        if (file.dirty || file.unapplied) dirty.push(file)
        else victims.push(file)
      }
      for (const file of dirty) {
        if (victims.length >= over) break
        victims.push(file)
      }
      this.syncLogsTogether(victims)
      for (const file of victims) if (this.closeFile(file) === null) this.stats.evictions++
    }
    return Math.max(0, Math.min(n, max - this.lru.size))
  }

  /**
   * Opens (creating when missing) and locks; returns whether the file was created. The addon
   * refuses a symlink or a non-regular file planted where the file should be.
   */
  protected openLocked(file: OwnedFile, lock: boolean): boolean {
    const what = file.kind === 'ws' ? 'workspace log' : 'file'
    let created = false
    try {
      try {
        file.fd = this.io.openAppend(file.path, false, lock)
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
        file.fd = this.io.openAppend(file.path, true, lock)
        created = true
      }
    } catch (err) {
      throw this.lockError(file, openError(err, file.path, what))
    }
    return created
  }

  /**
   * Opens a log found missing, creating it, and locks it; true (created). A writer that made it
   * since holds its lock (WORKSPACE_LOCKED), as in openLocked.
   */
  protected openCreating(file: OwnedFile): boolean {
    try {
      file.fd = this.io.openAppend(file.path, true, true)
    } catch (err) {
      throw this.lockError(file, openError(err, file.path, 'workspace log'))
    }
    return true
  }

  protected lockError(file: OwnedFile, err: unknown): unknown {
    const e = err as NodeJS.ErrnoException
    if (e.syscall === 'flock' && (e.code === 'EAGAIN' || e.code === 'EWOULDBLOCK')) {
      const what = file.kind === 'ws' ? `workspace ${file.key}` : `file ${file.path}`
      return Errors.WORKSPACE_LOCKED(
        `${what} is locked by ${describeHolder(file.path)} (${file.path}); one writer at a time may hold it`,
        { workspace: file.kind === 'ws' ? file.key : undefined, file: file.path },
      )
    }
    return err
  }

  /**
   * A workspace's log, opened and locked: its torn tail cut, its counters and sidecar read.
   * `created` null: not known (a guessing pass, openWorkspaces), taken as true when it is empty.
   */
  protected openedWorkspace(file: OwnedFile, made: boolean | null): void {
    let created = made === true
    try {
      const st = fstatSync(file.fd, { bigint: true })
      if (made === null) created = st.size === 0n
      // Its folder entry is made durable with those of the other workspaces created in the same
      // pass (syncCreated), before anything is committed to it.
      if (created) this.dirUnsynced.add(file.key)
      file.ino = st.ino
      file.dev = st.dev
      // An empty log (a new one) has no tail to read.
      const { truncatedBytes, size, lastSeq, lastTs } =
        st.size === 0n ? EMPTY_TAIL : this.recoverTail(file, true, Number(st.size))
      file.size = size
      file.lastSeq = lastSeq
      file.lastTs = lastTs
      this.openSidecar(file, created)
      file.openCreated = created
      file.openTruncated = truncatedBytes
      file.openSize = size
      file.openLastSeq = lastSeq
      file.openLastTs = lastTs
    } catch (err) {
      this.io.close(file.fd)
      file.fd = -1
      throw err
    }
    // Its record header is made by its first round (recordOf): a workspace opened and never
    // appended to (a recover, an open request) keeps no buffer.
    file.record = null // made again for this open's inode
    if (this.journal !== null) file.journaled = true
    this.lru.set(file, true)
    this.stats.opens++
  }

  /**
   * fsyncs the log folder when workspaces were created since the last time it was: one fsync for
   * all of them. Returns the error if it failed (those workspaces stay to be synced: nothing is
   * committed to them until a later fsync succeeds), null otherwise.
   */
  protected syncCreated(): Error | null {
    if (this.dirUnsynced.size === 0) return null
    const dir = this.init.logDir
    try {
      try {
        this.io.fsyncDir(dir)
      } catch (err) {
        if (!isOutOfDescriptors(err)) throw err
        // Out of descriptors, as an open can be (ensureOpen): idle files closed, tried again.
        const closed = this.closeIdle(Math.max(8, this.lru.size >> 2))
        try {
          this.io.fsyncDir(dir)
        } catch (again) {
          if (!isOutOfDescriptors(again)) throw again
          return this.outOfDescriptors(`fsync ${dir} for the workspaces created`, dir, again, closed)
        }
      }
    } catch (err) {
      return withPath(err, dir) as Error
    }
    this.stats.dirSyncs++
    this.dirUnsynced.clear()
    return null
  }

  protected openRaw(file: OwnedFile): void {
    const options = file.rawOptions as RawAppendOptions
    // The caller named this folder (a transcript folder, say) and checks what is below it.
    mkdirAnyDurable(this.io, dirname(file.path))
    const created = this.openLocked(file, options.lock)
    try {
      if (created) this.io.fsyncDir(dirname(file.path))
      file.size = options.repairTail ? this.recoverTail(file, false).size : inspectTail(file.fd).size
    } catch (err) {
      this.io.close(file.fd)
      file.fd = -1
      throw err
    }
  }

  /** Cuts a partial last line (ftruncate + fdatasync) and reads the last seq and ts. */
  protected recoverTail(file: OwnedFile, counters = true, size?: number) {
    // Read through the locked descriptor itself: no second open that a swapped file could divert.
    const tail = inspectTail(file.fd, size)
    const { lastSeq, lastTs } = counters ? countersOf(file.path, tail) : { lastSeq: 0, lastTs: 0 }
    let truncatedBytes = 0
    if (tail.validLength < tail.size) {
      truncatedBytes = tail.size - tail.validLength
      try {
        this.io.ftruncate(file.fd, tail.validLength)
        this.io.fdatasync(file.fd)
      } catch (err) {
        throw withPath(err, file.path)
      }
    }
    return { truncatedBytes, size: tail.validLength, lastSeq, lastTs }
  }

  /**
   * Closes a file (releasing its lock) once its journaled bytes are durable in it: fdatasync, or
   * for bytes that never reached it, written again from the journal first. If that fails the
   * file stays open and locked (the journal holds its only copy; no other writer may take it)
   * and the error is returned.
   */
  protected closeFile(file: OwnedFile): Error | null {
    if (file.fd >= 0) {
      const err = this.makeDurable(file)
      if (err !== null) return err
      if (file.sum !== null) {
        this.summed(file, EMPTY, 0, true) // the last, partial block (written, not synced: see appendSum)
        file.sum = null
      }
      try {
        this.io.close(file.fd)
      } catch {
        // close releases the descriptor (and its flock) even when it reports an error
      }
      file.fd = -1
    }
    this.lru.delete(file)
    this.forget(file)
    return null
  }

  protected makeDurable(file: OwnedFile): Error | null {
    if (!file.dirty && !file.unapplied) return null
    try {
      if (file.unapplied) this.reapply(file)
      else this.io.fdatasync(file.fd)
    } catch (err) {
      return withPath(err, file.path) as Error
    }
    file.syncedLsn = file.lastLsn
    file.unapplied = false
    return null
  }

  /** Writes a file's records again from the live journal at their offsets, then fdatasyncs it. */
  protected reapply(file: OwnedFile): void {
    const j = this.journal as Journal
    let scanned: ReturnType<typeof scanJournal>
    try {
      scanned = scanJournal(j.fd)
    } catch (err) {
      throw Errors.JOURNAL(`${j.path}: ${(err as Error).message}`, { journal: j.path })
    }
    const target = file.kind === 'ws' ? file.key : file.path
    // A second descriptor without O_APPEND (pwrite on an O_APPEND one appends on Linux); the
    // owner's descriptor keeps the lock.
    const fd = this.io.openPositional(file.path)
    try {
      for (const r of scanned.records) if (r.target === target) this.io.pwrite(fd, r.data, r.offset)
      for (const part of file.foreign ?? []) this.io.pwrite(fd, part.data, part.offset)
      this.io.fdatasync(fd)
    } finally {
      this.io.close(fd)
    }
    file.foreign = null
  }

  /** Drops all state: the next use reopens the file and recovers its tail again. */
  protected forget(file: OwnedFile): void {
    if (file.fd >= 0 || !file.idle) return
    if (file.kind === 'ws') this.ws.delete(file.key)
    else this.raw.delete(file.key)
  }

  protected whenIdle(file: OwnedFile, fn: () => void): void {
    if (file.idle) fn()
    else {
      file.idleWaiters ??= []
      file.idleWaiters.push(fn)
    }
  }

  protected settled(file: OwnedFile): void {
    // One thing of the file ended; another (a checkpoint's or an atomic part's fdatasync) may
    // still be running on its descriptor, which a waiting release must not close under it.
    if (file.idle && file.idleWaiters !== null) {
      const waiters = file.idleWaiters
      file.idleWaiters = null
      for (const fn of waiters) fn()
    }
    if (this.waiting.size > 0) {
      for (const f of this.waiting) this.markReady(f)
      this.waiting.clear()
    }
    if (this.closing) this.checkAllIdle()
  }

  protected whenAllIdle(fn: () => void): void {
    this.allIdleWaiter = fn
    this.checkAllIdle()
  }

  protected checkAllIdle(): void {
    if (this.allIdleWaiter === null) return
    // A round, a checkpoint or the journal's allocation still running: its completion calls back.
    if (this.round !== null || this.pending.length > 0 || this.checkpoint !== null) return
    if (this.journal?.state === 'creating') {
      this.journal.abort() // not needed any more: closing does not wait for its zero-fill
      return
    }
    if (this.atomics.size > 0 || this.fileSyncs !== null || this.placing > 0) return
    for (const file of [...this.ws.values(), ...this.raw.values()]) if (!file.idle) return
    const fn = this.allIdleWaiter
    this.allIdleWaiter = null
    fn()
  }
}

/** mkdir -p of a folder the caller chose, then fsync of the parent of each folder it created. */
function mkdirAnyDurable(io: Pick<LogIo, 'fsyncDir'>, dir: string): void {
  const first = mkdirSync(dir, { recursive: true, mode: 0o777 })
  if (first === undefined) return
  let d = dir
  for (;;) {
    const parent = dirname(d)
    io.fsyncDir(parent)
    if (d === first || parent === d) break
    d = parent
  }
}
