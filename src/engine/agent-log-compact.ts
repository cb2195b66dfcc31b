/**
 * compact (docs/compaction.md): the base picked from the log's snapshots (planCompaction), the
 * replaced lines archived when asked, then the workspace's owner replaces the file.
 */

import { realpathSync } from 'node:fs'
import { basename, dirname, join, resolve } from 'node:path'
import { AgentLogAtomic } from './agent-log-atomic.js'
import { mkdirDurable } from './atomic.js'
import { type LogBase, readBase } from './base.js'
import {
  type ArchiveFormat,
  type CompactFileReport,
  type CompactPlan,
  snapshotEntries,
  writeArchive,
} from './compact.js'
import { checkSnapshotId, checkWorkspace } from './entry.js'
import { Errors, type NoaError } from './errors.js'
import { isInside, statFile } from './files.js'
import { existingLog } from './logs.js'
import { checkOptionKeys } from './options.js'
import type { OpenReport } from './protocol.js'
import { seekSeq } from './reader.js'

/** Options of `AgentLog.compact`. */
export interface CompactOptions {
  /** A snapshot id, or a seq: compact up to the newest snapshot covering only seqs before it. Default: the newest snapshot. */
  before?: string | number
  /** Keep the replaced lines, compressed, in this folder (outside the root's own folders). */
  archive?: string
  /** How the archive is compressed (node:zlib). Default 'gzip'. */
  archiveFormat?: ArchiveFormat
}

export interface CompactResult {
  workspace: string
  /** False when the log already started at that base (nothing changed). */
  compacted: boolean
  /** The seq the base record stands for (0: the log has no base). */
  baseSeq: number
  snapshotId: string | null
  bytesBefore: number
  bytesAfter: number
  archive: { path: string; bytes: number; format: ArchiveFormat; rawBytes: number } | null
}

const COMPACT_KEYS = new Set(['before', 'archive', 'archiveFormat'])

function badOption(field: string, rule: string, value: unknown): NoaError {
  return Errors.BAD_OPTION(`option ${field} ${rule}, got ${JSON.stringify(value)}`, { field })
}

/**
 * Picks the base of a compaction from the log's snapshot entries (each one's record says what it
 * covers): null when the log already starts at it. A snapshot entry only ever follows the seqs
 * its record covers, so the lines from the base on keep it, and the workspace's head with it.
 */
function planCompaction(
  file: string,
  workspace: string,
  base: LogBase | null,
  before: string | number | undefined,
  cover: (workspace: string, snapshotId: string) => number | null,
): CompactPlan | null {
  const from = base?.seq ?? 0
  let best: { seq: number; id: string } | null = null
  let named = false
  for (const e of snapshotEntries(file)) {
    if (typeof before === 'string' && e.snapshot_id !== before) continue
    const seq = cover(workspace, e.snapshot_id)
    if (seq === null || seq >= e.seq) continue
    named = true
    if (typeof before === 'number' && seq >= before) continue
    if (best === null || seq > best.seq) best = { seq, id: e.snapshot_id }
  }
  if (best !== null && best.seq <= from) return null // the log starts there already (or later)
  if (best === null || best.seq === 0) {
    if (base !== null && (before === base.snapshotId || (typeof before === 'number' && before <= from + 1)))
      return null
    const what =
      before === undefined
        ? 'it has no snapshot whose tree is stored'
        : typeof before === 'string'
          ? named
            ? `snapshot ${before} covers nothing after its base (seq ${from})`
            : `${before} is not a snapshot of it with its tree stored (is it in this log, and not collected by gc?)`
          : `no snapshot of it covers only seqs before ${before}`
    throw Errors.NOT_COVERED(
      `workspace ${workspace} cannot be compacted: ${what}; take a snapshot first (noa snapshot ${workspace})`,
      {
        workspace,
        ...(before === undefined ? {} : { before }),
      },
    )
  }
  return { workspace, baseSeq: best.seq, snapshotId: best.id, cut: seekSeq(file, best.seq + 1) }
}

export abstract class AgentLogCompact extends AgentLogAtomic {
  abstract openWorkspace(workspace: string): Promise<OpenReport>
  abstract release(workspace: string): Promise<boolean>

  /**
   * Compacts a workspace's log (docs/compaction.md): the entries up to the seq a snapshot of it
   * covers are replaced by one base record naming that snapshot; every later line is kept byte
   * for byte, seqs included. `before` picks the snapshot: a snapshot id, or a seq (the newest
   * snapshot covering only seqs before it); by default the newest snapshot. With `archive`, the
   * replaced lines are first kept, compressed, in that folder (outside the root's own folders).
   * Needs the log's `objects` (the object store says what a snapshot covers). Refused, with
   * nothing changed: a `before` no snapshot covers (NOA_NOT_COVERED), a workspace another
   * process is appending to (NOA_WORKSPACE_LOCKED), an archive folder inside the root's own
   * folders (NOA_BAD_OPTION). Appends to the workspace wait while its owner replaces the file.
   */
  async compact(workspace: string, options: CompactOptions = {}): Promise<CompactResult> {
    checkOptionKeys(options, COMPACT_KEYS, 'compact')
    checkWorkspace(workspace)
    const { before, archive } = options
    const format = options.archiveFormat ?? 'gzip'
    if (
      before !== undefined &&
      !(typeof before === 'string' && before.startsWith('noa_')) &&
      !(typeof before === 'number' && Number.isSafeInteger(before) && before >= 1)
    ) {
      throw badOption('before', 'must be a snapshot id (noa_…) or a seq (an integer >= 1)', before)
    }
    if (typeof before === 'string') checkSnapshotId(before, 'before')
    if (format !== 'gzip' && format !== 'brotli')
      throw badOption('archiveFormat', "must be 'gzip' or 'brotli'", format)
    const archiveDir = archive === undefined ? null : this.archiveDir(archive)
    const cover = this.objects?.snapshotCover?.bind(this.objects)
    if (!cover) {
      throw Errors.BAD_OPTION(
        'compact needs option objects with snapshotCover (an ObjectStore): the store says which seqs a snapshot covers',
        { field: 'objects' },
      )
    }
    const file = existingLog(this.root, workspace)
    // The log made whole on disk first: a dead process's journal replayed, a torn tail cut, and
    // every byte this process's owner journaled written and fdatasynced (release). Another
    // process appending is refused here, before anything is read or written.
    await this.openWorkspace(workspace)
    await this.release(workspace)
    const base = readBase(file)
    const plan = planCompaction(file, workspace, base, before, cover)
    const result: CompactResult = {
      workspace,
      compacted: false,
      baseSeq: base?.seq ?? 0,
      snapshotId: base?.snapshotId ?? null,
      bytesBefore: statFile(file, 'workspace log')?.size ?? 0,
      bytesAfter: 0,
      archive: null,
    }
    result.bytesAfter = result.bytesBefore
    if (plan === null) return result
    if (archiveDir !== null) {
      mkdirDurable(archiveDir)
      const path = join(
        archiveDir,
        `${workspace}.${base ? base.seq : 1}-${plan.baseSeq}.log.${format === 'gzip' ? 'gz' : 'br'}`,
      )
      const bytes = await writeArchive(file, plan.cut, path, format)
      result.archive = { path, bytes, format, rawBytes: plan.cut }
    }
    const done = (await this.requestFor(workspace, (id) => ({
      t: 'compact',
      id,
      plan,
    }))) as CompactFileReport
    result.compacted = done.compacted
    result.baseSeq = done.baseSeq
    result.snapshotId = done.snapshotId
    result.bytesBefore = done.bytesBefore
    result.bytesAfter = done.bytesAfter
    return result
  }

  /** An archive folder, resolved; refused inside the root's own folders (by any path). */
  protected archiveDir(archive: unknown): string {
    if (typeof archive !== 'string' || archive === '')
      throw badOption('archive', 'must be a folder path', archive)
    const dir = resolve(archive)
    const real = (p: string): string => {
      // The nearest folder that exists, resolved (symlinks included), with the rest after it.
      let at = p
      const rest: string[] = []
      for (;;) {
        try {
          return join(realpathSync(at), ...rest)
        } catch {
          if (dirname(at) === at) return p
          rest.unshift(basename(at))
          at = dirname(at)
        }
      }
    }
    const target = real(dir)
    for (const own of ['agent-logs', 'journal', 'checksums', 'object-logs', 'objects']) {
      const inside = join(this.root, own)
      if (isInside(inside, dir) || isInside(real(inside), target)) {
        throw Errors.BAD_OPTION(
          `option archive ${archive} is inside ${inside}, a folder of the root's own (${own}/): keep archives outside agent-logs/, journal/, checksums/, object-logs/ and objects/`,
          { field: 'archive', file: dir },
        )
      }
    }
    return dir
  }
}
