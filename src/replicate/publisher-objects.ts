/**
 * Publishing the object store before the lines that name its objects: objectsBarrier waits for
 * a scan that started after a log's durable end was taken (shared by every workspace waiting
 * for one, at most one every SCAN_EVERY_MS), and scanObjects publishes what a scan found.
 */
import { isNoaError, type NoaErrorCode } from '../engine/errors.js'
import { sleep } from './failures.js'
import { type ObjectScanner, objectFile, publishObject } from './objects.js'
import { failureOf, PublisherBase, Stopped } from './publisher-state.js'

/** Least time between two scans of the object store (ms). */
const SCAN_EVERY_MS = 25

/** Object failures that are the object's own (it is skipped), not the run's. */
const UNREADABLE_OBJECT = new Set<NoaErrorCode>([
  'NOA_CORRUPT_OBJECT',
  'NOA_NOT_REGULAR_FILE',
  'NOA_NOT_DIRECTORY',
])

export abstract class PublisherObjects extends PublisherBase {
  /**
   * Returns once a scan of the object store that started after tick `t` has published what it
   * found. Scans are shared: one scan serves every workspace that waits for it, and a scan
   * (a stat of each shard folder) starts at most every SCAN_EVERY_MS, so that a hundred busy
   * workspaces do not each cost one.
   */
  protected async objectsBarrier(t: number): Promise<void> {
    if (!this.scanner?.present()) return
    while (this.scanDoneTick <= t) {
      if (this.signal.aborted) throw new Stopped()
      if (this.scanning) {
        await this.scanning
        continue
      }
      this.scanning = (async () => {
        const wait = this.lastScanAt + SCAN_EVERY_MS - Date.now()
        if (wait > 0) await sleep(wait, this.signal)
        // Taken after the wait: the rounds that came meanwhile are covered too.
        const startTick = ++this.tick
        this.lastScanAt = Date.now()
        await this.scanObjects(startTick)
      })().finally(() => {
        this.scanning = null
      })
      await this.scanning
    }
  }

  protected async scanObjects(startTick: number): Promise<void> {
    const scanner = this.scanner as ObjectScanner
    const ids = scanner.scan()
    const ctx = {
      link: this.link,
      stream: this.ref.name,
      prefix: this.s.prefix,
      partSize: this.partSize,
      retry: <T>(what: string, fn: () => Promise<T>) => this.retry(what, fn),
    }
    let next = 0
    const worker = async () => {
      while (next < ids.length) {
        const id = ids[next++] as string
        let sent: number
        try {
          sent = await publishObject(ctx, this.s.root, id)
        } catch (err) {
          // Removed since the scan found it: gc takes only objects no log reaches, so nothing
          // that follows in the stream needs it.
          if ((err as NodeJS.ErrnoException).code === 'ENOENT' || isNoaError(err, 'NOA_NOT_FOUND')) continue
          // An object that cannot be read (damaged, or not a regular file) is reported and left
          // out; the logs and the other objects go on.
          if (!isNoaError(err) || !UNREADABLE_OBJECT.has(err.code)) throw err
          const file = objectFile(this.s.root, id)
          this.failed.set(file, failureOf(err, file))
          continue
        }
        if (sent > 0) {
          this.objectsSent++
          this.s.onProgress?.({ entries: this.entries, objects: this.objectsSent })
        }
        scanner.markPublished(id)
      }
    }
    await Promise.all(Array.from({ length: Math.min(8, ids.length) }, worker))
    await scanner.flush()
    this.scanDoneTick = Math.max(this.scanDoneTick, startTick)
  }
}
