/**
 * The object store (design.md §4): `<root>/objects/<2 hex>/<62 hex>`, each object named by the
 * SHA-256 of its bytes. It holds blobs (file contents, as given), trees (tree.ts) and snapshot
 * records. Writes go to a temp file that is fsynced and renamed into place, then the directory
 * is fsynced; an object that exists is never rewritten (unless its size is wrong, i.e. it is
 * damaged). Every read is checked against the hash: a damaged object is an error naming it.
 *
 * Snapshot ids are `noa_` + the hash of the record, so resolving one is a single object read.
 *
 * A tree is named by the hash of its canonical encoding (tree.ts) but may be stored as a delta:
 * the paths changed since a base tree. An incremental snapshot then writes what changed, not
 * the whole tree again. Reading one rebuilds the tree from the chain (at most MAX_DELTA_DEPTH
 * deltas over a full tree) and checks the result against the name, so the guarantee is the
 * same: a damaged object, or a damaged link of its chain, is an error naming the tree.
 */
import { closeSync, readFileSync } from 'node:fs'
import type { ObjectChecks } from '../engine/checks.js'
import { checkSnapshotId, type EntryInput } from '../engine/entry.js'
import { Errors, NoaError } from '../engine/errors.js'
import { openFileSync, READ } from '../engine/files.js'
import { isSystemError, type StoredObject, sha256 } from './object-files.js'
import { ObjectTrees } from './object-trees.js'
import { checkRecordEntries } from './records.js'
import { encodeSnapshotRecord, NOA_ID_RE, parseSnapshotRecord, SNAPSHOT_HEADER } from './snapshot-codec.js'
import type { SnapshotRecord, SnapshotRecordInput } from './snapshot-record.js'

export type { BlobSource } from './object-blobs.js'
export {
  checkObjectId,
  type ObjectStoreOptions,
  PACK_CACHE_BYTES,
  type StoredObject,
  sha256,
} from './object-files.js'
export { MAX_DELTA_DEPTH } from './object-trees.js'
export { encodeSnapshotRecord, snapshotEntry } from './snapshot-codec.js'
export type {
  ConflictSide,
  MergeConflict,
  RecordedNoEffect,
  SnapshotRecord,
  SnapshotRecordInput,
} from './snapshot-record.js'

/**
 * The object store: blobs (object-blobs.ts), trees and their packs (object-trees.ts) and object
 * files (object-files.ts) are the layers below; this one holds snapshot records, and the checks
 * an AgentLog asks of its objects (ObjectChecks).
 */
export class ObjectStore extends ObjectTrees implements ObjectChecks {
  /** ObjectChecks (for AgentLog.open({ objects })): whether a blob is stored. */
  hasBlob(hash: string): boolean {
    return this.has(hash)
  }

  /** ObjectChecks: snapshot and merge entries appended by hand must name this workspace's records. */
  checkRecords(workspace: string, entries: readonly EntryInput[], where: (i: number) => string): void {
    checkRecordEntries(this, workspace, entries, where)
  }

  /**
   * ObjectChecks: the last seq a snapshot of this workspace covers, when its record and tree are
   * stored (what a compacted log's base needs: nothing can rebuild that tree any more); null
   * for a snapshot of another workspace, an unknown one, or one whose tree gc took.
   */
  snapshotCover(workspace: string, snapshotId: string): number | null {
    const record = this.peekSnapshot(snapshotId)
    if (!record || record.workspace !== workspace) return null
    return this.has(record.tree) ? record.seq : null
  }

  /** Resolves a snapshot id to its record: one object read, never a log scan. */
  async getSnapshot(id: string): Promise<SnapshotRecord> {
    const cached = this.records.get(id)
    if (cached) return cached
    checkSnapshotIdArgument(id)
    if (!NOA_ID_RE.test(id)) {
      throw Errors.NOT_FOUND(`unknown snapshot ${id} (not a snapshot id noa made)`, {
        snapshot: id,
      })
    }
    const hash = id.slice(4)
    let bytes: Buffer
    try {
      bytes = await this.read(hash, `snapshot ${id}`)
    } catch (err) {
      if (err instanceof NoaError && err.code === 'NOA_NOT_FOUND') {
        throw Errors.NOT_FOUND(`unknown snapshot ${id} (no record ${this.pathOf(hash)})`, {
          snapshot: id,
        })
      }
      throw err
    }
    if (!bytes.subarray(0, SNAPSHOT_HEADER.length).equals(Buffer.from(SNAPSHOT_HEADER))) {
      throw Errors.NOT_FOUND(`unknown snapshot ${id}: object ${hash} is not a snapshot record`, {
        snapshot: id,
      })
    }
    const record = parseSnapshotRecord(id, bytes)
    if (this.records.size >= 100_000) this.records.clear()
    this.records.set(id, record)
    return record
  }

  /**
   * Stores a record, together with objects it needs (its tree, from treeObject) in the same
   * batch: one round of fsyncs for all of them.
   */
  async putSnapshot(
    input: SnapshotRecordInput,
    with_: readonly StoredObject[] = [],
  ): Promise<SnapshotRecord> {
    const bytes = encodeSnapshotRecord(input)
    const id = sha256(bytes)
    await this.write([...with_, { id, data: bytes, exact: true }])
    const record: SnapshotRecord = { id: `noa_${id}`, ...input }
    this.records.set(record.id, record)
    return record
  }

  /**
   * A snapshot record read synchronously (for checks on the append path), or null when there is
   * no such record. A damaged record is an error, as in getSnapshot.
   */
  peekSnapshot(id: string): SnapshotRecord | null {
    const cached = this.records.get(id)
    if (cached) return cached
    if (!NOA_ID_RE.test(id)) return null
    const hash = id.slice(4)
    let bytes: Buffer = Buffer.alloc(0)
    let fd: number
    try {
      fd = openFileSync(this.pathOf(hash), READ, { what: 'object' })
    } catch (err) {
      if (!isSystemError(err, 'ENOENT')) throw err
      const logged = this.logged(hash)
      if (logged === null) return null
      fd = -1
      bytes = logged
    }
    if (fd >= 0) {
      try {
        bytes = readFileSync(fd)
      } finally {
        closeSync(fd)
      }
    }
    if (!bytes.subarray(0, SNAPSHOT_HEADER.length).equals(Buffer.from(SNAPSHOT_HEADER))) return null
    this.check(hash, bytes, `snapshot ${id}`)
    const record = parseSnapshotRecord(id, bytes)
    if (this.records.size >= 100_000) this.records.clear()
    this.records.set(id, record)
    return record
  }
}

function checkSnapshotIdArgument(id: unknown): void {
  try {
    checkSnapshotId(id, 'snapshot id')
  } catch (err) {
    throw Errors.BAD_ARGUMENT((err as Error).message, { field: 'snapshot id' })
  }
}
