/**
 * A workspace's checksum sidecar (engine/sidecar.ts), as the owner keeps it: made with the log,
 * a record appended for each block of log written, through a short-lived descriptor.
 */
import { join } from 'node:path'
import { crc32c } from '../engine/crc.js'
import {
  BLOCK_BYTES,
  encodeSumHeader,
  encodeSumRecord,
  readSidecar,
  SIDECAR_DIR,
  sidecarPath,
} from '../engine/sidecar.js'
import { mkdirDurable, type OwnedFile, OwnerState, SumState } from './owner-state.js'

export abstract class OwnerSums extends OwnerState {
  /**
   * Opens (or starts) the workspace's checksum sidecar. Records past its first invalid one, or
   * reaching past the log's size, are cut; a sidecar of another log (inode) starts over. The
   * next block starts at the log's end: what the sidecar did not cover stays unverified. A
   * sidecar that cannot be used never fails the workspace: it only goes without checksums.
   */
  protected openSidecar(file: OwnedFile, created: boolean): void {
    const path = sidecarPath(this.init.root, file.key)
    let fd = -1
    try {
      if (!this.sumDirReady) {
        mkdirDurable(this.io, this.init.root, join(this.init.root, SIDECAR_DIR))
        this.sumDirReady = true
      }
      if (created) {
        // A new log: its sidecar is made with its first record (appendSum), so that creating a
        // workspace makes one file, not two (a file creation costs this disk 0.25-0.7 ms).
        file.sum = new SumState(true, file.size, file.lastSeq + 1)
        return
      }
      const found = readSidecar(path, file.ino, file.size)
      if (found !== null && found.size > found.validBytes) {
        fd = this.io.openAppend(path, false, false)
        this.io.ftruncate(fd, found.validBytes)
        this.io.close(fd)
        fd = -1
      }
      // None, or one of another log (inode): started over with the next record.
      file.sum = new SumState(found === null, file.size, file.lastSeq + 1)
    } catch {
      if (fd >= 0) this.io.close(fd)
      file.sum = null
    }
  }

  /** Adds committed bytes to the block being summed; a full block gets its record. */
  protected summed(file: OwnedFile, data: Buffer, entries: number, end: boolean): void {
    const sum = file.sum
    if (sum === null) return
    if (data.length > 0) {
      sum.crc = crc32c(data, sum.crc)
      sum.entries += entries
    }
    const length = file.size - sum.start
    if (length < BLOCK_BYTES && !end) return
    if (length === 0) return
    const record = encodeSumRecord({
      offset: sum.start,
      firstSeq: sum.firstSeq,
      length,
      entries: sum.entries,
      crc: sum.crc,
    })
    try {
      this.appendSum(file, sum, record)
    } catch {
      file.sum = null // the checksums are advisory: the log goes on without them
      return
    }
    sum.start = file.size
    sum.crc = 0
    sum.firstSeq = file.lastSeq + 1
    sum.entries = 0
  }

  /**
   * Appends a record to the sidecar through a descriptor of its own, started over first (made,
   * or cut to a new header) when it is fresh. Never synced on its own, the last (partial) one at
   * a close included: a sidecar is advisory (a record lost to a power cut leaves its block
   * unverified, one reaching past its log's durable end is cut when the log is next opened), and
   * an fdatasync per record cost every close of an idle workspace a device flush (the cliff of a
   * host with more live workspaces than open files). The syncfs of a checkpoint or of the
   * owner's close makes them durable with everything else.
   */
  protected appendSum(file: OwnedFile, sum: SumState, record: Buffer): void {
    const path = sidecarPath(this.init.root, file.key)
    if (sum.fresh) {
      // Header and record in one write, through a descriptor of a file made new (freshSum).
      const fd = this.freshSum(path)
      try {
        this.io.write(fd, record.length > 0 ? [encodeSumHeader(file.ino), record] : encodeSumHeader(file.ino))
        sum.fresh = false
      } finally {
        this.io.close(fd)
      }
      return
    }
    if (record.length === 0) return
    const fd = this.io.openAppend(path, false, false)
    try {
      this.io.write(fd, record)
    } finally {
      this.io.close(fd)
    }
  }

  /**
   * A descriptor of an empty sidecar: made (O_EXCL), or, when one is left by a removed log of
   * the same name, that one cut to nothing. Not opened and cut in every case: ext4 flushes a
   * file cut to empty when it is closed (auto_da_alloc), which cost each new workspace's first
   * sidecar record ~25-70 µs of the owner's thread (creating 1,000 workspaces at once).
   */
  protected freshSum(path: string): number {
    try {
      return this.io.createFile(path)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
    }
    const fd = this.io.openAppend(path, false, false)
    try {
      this.io.ftruncate(fd, 0)
    } catch (err) {
      this.io.close(fd)
      throw err
    }
    return fd
  }
}
