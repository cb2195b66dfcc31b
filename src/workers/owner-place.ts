/**
 * The files an append carries (AppendOptions.files): placing them beside the log (or in the
 * owner's object log, when packed) before the commit that acknowledges them, and the checkpoint's
 * syncs that make them durable before their journal frame is reused.
 */
import { randomBytes } from 'node:crypto'
import { dirname, join } from 'node:path'
import { tempPath } from '../engine/atomic.js'
import { withPath } from '../engine/errors.js'
import { mkdirBelow } from '../engine/files.js'
import { SYNC_FDATASYNC, SYNC_FSYNC, SYNC_SYNCFS } from '../engine/native.js'
import {
  encodeObjectRecords,
  OBJECT_LOG_DIR,
  OBJECT_LOG_HEADER,
  OBJECT_LOG_ROTATE,
  OBJECT_LOG_SUFFIX,
} from '../engine/object-log.js'
import type { FileWrite } from '../engine/protocol.js'
import type { PlacedFile } from './io.js'
import { OwnerFiles } from './owner-files.js'
import { type Batch, EMPTY, type OwnerState, WrittenFiles } from './owner-state.js'

/**
 * A checkpoint makes the files appends wrote (AppendOptions.files) durable one by one (fdatasync
 * each, fsync each folder, on the addon's pool) up to this many; beyond, with one syncfs of the
 * root's file system. Measured here: 1,000 small files cost about 150 ms fdatasynced four at a
 * time (each a device flush), 20 ms with one syncfs. A checkpoint is off the ack path, so
 * flushing other programs' pages with ours costs them nothing they wait for.
 */
const FILE_SYNC_LIMIT = 64

/** File and folder syncs of a checkpoint in flight at once (each holds a descriptor). */
const FILE_SYNCS_IN_FLIGHT = 16

export abstract class OwnerPlace extends OwnerFiles {
  protected abstract finish(batch: Batch, err: unknown, untouched?: boolean): void

  /**
   * Writes a batch's files (AppendOptions.files) before its entries go anywhere: each to a temp
   * file in its folder, renamed into place. `durable` (the batch is committed straight to its
   * file, not through the journal): each fdatasynced before its rename and its folder fsynced
   * after, so the files are durable before the entries naming them are. Otherwise the journal
   * frame carries their bytes, and a checkpoint syncs them before the frame is reused. On a
   * failure the batch fails untouched (files already renamed stay: nothing names them yet).
   */
  protected async placeFiles(batch: Batch, durable: boolean): Promise<boolean> {
    try {
      const { places, dirs } = this.placesOf(batch, durable)
      // Off this thread: a create can wait for the file system's journal, and this thread has
      // rounds to run meanwhile.
      await this.io.placeFiles(places, durable)
      this.placed(batch, durable, dirs)
    } catch (err) {
      this.finish(batch, err, true)
      return false
    }
    return true
  }

  /** placeFiles on this thread: for a batch alone with nothing in flight (the serial path). */
  protected placeFilesNow(batch: Batch, durable: boolean): boolean {
    try {
      const { places, dirs } = this.placesOf(batch, durable)
      this.io.placeFilesSync(places, durable)
      this.placed(batch, durable, dirs)
    } catch (err) {
      this.finish(batch, err, true)
      return false
    }
    return true
  }

  /** Where each of a batch's files goes (its folders made), and the folders they go to. */
  protected placesOf(batch: Batch, durable: boolean): { places: PlacedFile[]; dirs: Set<string> } {
    const root = this.init.root
    const dirs = new Set<string>()
    const places: PlacedFile[] = []
    const written: string[] = []
    const all = batch.files as FileWrite[]
    const packed = all.filter((f) => f.packed === true)
    if (packed.length > 0) written.push(this.appendPacked(batch, packed, durable))
    batch.written = written
    for (const f of all) {
      if (f.packed === true) continue
      const target = join(root, f.path)
      const dir = dirname(target)
      if (!this.fileDirs.has(dir)) {
        // Through the journal, a new folder's entry is synced with the files, at the
        // checkpoint (recovery makes the folder again if a crash lost it).
        for (const made of mkdirBelow(root, dir)) {
          if (durable) this.io.fsyncDir(dirname(made))
          else {
            batch.parents ??= []
            batch.parents.push(dirname(made))
            this.unsyncedParents.add(dirname(made))
          }
        }
        this.fileDirs.add(dir)
      }
      dirs.add(dir)
      // Read-only from its creation (the descriptor that made it may still write it).
      places.push({ temp: tempPath(dir, '.tmp-'), target, data: f.data, mode: f.readOnly ? 0o444 : 0o666 })
      written.push(target)
    }
    return { places, dirs }
  }

  /**
   * Appends `files` to this owner's object log (one write), made first when there is none or the
   * one there is full; returns the log's path. `durable`: fdatasynced now (with its folder when
   * new), as placed files are; otherwise the checkpoint syncs it with the other written files.
   * A failed write is cut back off, so the log stays a run of whole records; when even that
   * fails the log is given up (a new one is made next time) and the error goes to the batch.
   */
  protected appendPacked(batch: Batch, files: FileWrite[], durable: boolean): string {
    let log = this.objectLog
    if (log === null || log.size >= OBJECT_LOG_ROTATE) {
      if (log !== null) this.closeObjectLog()
      log = this.newObjectLog(batch, durable)
    }
    const data = encodeObjectRecords(files)
    try {
      this.io.pwrite(log.fd, [data], log.size)
      if (durable) this.io.fdatasync(log.fd)
    } catch (err) {
      try {
        this.io.ftruncate(log.fd, log.size)
      } catch {
        this.closeObjectLog()
      }
      throw withPath(err, log.path)
    }
    log.size += data.length
    return log.path
  }

  protected newObjectLog(batch: Batch, durable: boolean): { fd: number; path: string; size: number } {
    const root = this.init.root
    const dir = join(root, OBJECT_LOG_DIR)
    const parents: string[] = []
    for (const made of mkdirBelow(root, dir)) parents.push(dirname(made))
    // Its own entry in the folder must be durable too before any frame naming its records is reclaimed.
    parents.push(dir)
    const path = join(dir, `${randomBytes(8).toString('hex')}${OBJECT_LOG_SUFFIX}`)
    const fd = this.io.createFile(path, 0o444)
    try {
      // Held while this owner lives: gc removes only logs whose writer is gone.
      this.io.flock(fd, true, true)
      this.io.pwrite(fd, [OBJECT_LOG_HEADER], 0)
    } catch (err) {
      this.io.close(fd)
      throw withPath(err, path)
    }
    for (const d of parents) {
      if (durable) this.io.fsyncDir(d)
      else {
        batch.parents ??= []
        batch.parents.push(d)
        this.unsyncedParents.add(d)
      }
    }
    this.objectLog = { fd, path, size: OBJECT_LOG_HEADER.length }
    return this.objectLog
  }

  /** Stops appending to the object log (its bytes are synced by the checkpoints that name it). */
  protected closeObjectLog(): void {
    const log = this.objectLog
    this.objectLog = null
    if (log === null) return
    try {
      this.io.close(log.fd)
    } catch {
      // the descriptor is released either way
    }
  }

  protected placed(batch: Batch, durable: boolean, dirs: Set<string>): void {
    this.stats.filesWritten += (batch.files as FileWrite[]).length
    if (durable) {
      // A folder made earlier for files that went through the journal may not be durable in
      // its parent yet (its checkpoint has not come): these files need it now.
      for (const d of this.unsyncedParents) this.io.fsyncDir(d)
      this.unsyncedParents.clear()
      for (const d of dirs) this.io.fsyncDir(d)
    }
  }

  /**
   * Runs `then` once the batch's files are in place (at once when it has none). `inline`: a
   * batch alone with nothing in flight places them on this thread, saving two hand-offs to the
   * pool and back on the path a lone waiting submitter is on.
   */
  protected placeThen(batch: Batch, durable: boolean, then: () => void, inline = false): void {
    if (batch.files === null) {
      then()
      return
    }
    if (inline && this.placing === 0) {
      if (this.placeFilesNow(batch, durable)) then()
      return
    }
    this.placing++
    void this.placeFiles(batch, durable).then((ok) => {
      this.placing--
      if (ok) then()
      else if (this.closing) this.checkAllIdle()
    })
  }

  /** Makes written files and their folders durable (see FILE_SYNC_LIMIT), then counts as one checkpoint target. */
  protected syncWrittenFiles(groups: WrittenFiles[]): void {
    const paths = new Set<string>()
    const parents = new Set<string>()
    for (const g of groups) {
      for (const p of g.paths) paths.add(p)
      for (const d of g.parents) parents.add(d)
    }
    const queue: Array<{ path: string; dir: boolean }> = []
    if (paths.size > FILE_SYNC_LIMIT) {
      this.stats.fileSyncfs++
      queue.push({ path: this.init.root, dir: true })
    } else {
      const dirs = new Set<string>()
      for (const p of paths) {
        queue.push({ path: p, dir: false })
        dirs.add(dirname(p))
      }
      for (const d of parents) dirs.add(d)
      for (const d of dirs) queue.push({ path: d, dir: true })
    }
    this.fileSyncs = { queue, inFlight: 0, groups, failed: null, syncfs: paths.size > FILE_SYNC_LIMIT }
    this.startFileSyncs()
  }

  protected startFileSyncs(): void {
    const fs = this.fileSyncs
    if (fs === null) return
    while (fs.inFlight < FILE_SYNCS_IN_FLIGHT && fs.queue.length > 0) {
      const { path, dir } = fs.queue.shift() as { path: string; dir: boolean }
      let fd: number
      try {
        fd = dir ? this.io.openDir(path) : this.io.openRead(path)
      } catch (err) {
        // Gone since (nothing of it left to make durable); anything else keeps it in the journal.
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') fs.failed ??= withPath(err, path) as Error
        continue
      }
      fs.inFlight++
      const mode = !dir ? SYNC_FDATASYNC : fs.syncfs ? SYNC_SYNCFS : SYNC_FSYNC
      this.submit({ kind: 'fileSync', fd, path }, fd, EMPTY, mode)
    }
    if (fs.inFlight === 0 && fs.queue.length === 0) {
      this.fileSyncs = null
      if (fs.failed === null) {
        for (const g of fs.groups) g.syncedLsn = Number.POSITIVE_INFINITY
        this.fileSyncError = null
      } else {
        this.fileSyncError = fs.failed
      }
      const c = this.checkpoint as { left: number }
      if (--c.left === 0) this.writeHeader()
    }
  }

  protected fileSynced(fd: number, path: string, err: Error | null): void {
    const fs = this.fileSyncs as NonNullable<OwnerState['fileSyncs']>
    try {
      this.io.close(fd)
    } catch {
      // the descriptor is released either way
    }
    if (err !== null) fs.failed ??= withPath(err, path) as Error
    fs.inFlight--
    this.startFileSyncs()
  }

  /** At a clean close: written files not yet synced by a checkpoint, synced here and now. */
  protected syncWrittenFilesNow(): Error | null {
    const j = this.journal
    if (j === null) return null
    const dirs = new Set<string>()
    const done = new Set<string>()
    try {
      for (const frame of j.frames) {
        for (const f of frame.files) {
          if (!(f instanceof WrittenFiles) || f.syncedLsn >= frame.lsn) continue
          for (const p of f.paths) {
            if (done.has(p)) continue // an object log holds many batches' files
            done.add(p)
            let fd: number
            try {
              fd = this.io.openRead(p)
            } catch (err) {
              if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue
              throw err
            }
            try {
              this.io.fdatasync(fd)
            } finally {
              this.io.close(fd)
            }
            dirs.add(dirname(p))
          }
          for (const d of f.parents) dirs.add(d)
          f.syncedLsn = Number.POSITIVE_INFINITY
        }
      }
      for (const d of dirs) this.io.fsyncDir(d)
    } catch (err) {
      return err as Error
    }
    return null
  }
}
