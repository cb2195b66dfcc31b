/**
 * Reading a root's snapshots (snapshot.ts has the rules): a workspace's head (the newest snapshot
 * entry that means something, found by a backward search of its log), its state (the head's tree
 * + the entries after it, replayed), its snapshots newest first, where a ref points, and a
 * record's tree (rebuilt from the log when gc took it). The view the operations take
 * (SnapshotView, view.ts); the writes (snapshot-write.ts) build on it, and SnapshotEngine is the
 * facade over both.
 */
import type { AgentLog } from '../engine/agent-log.js'
import { compactedError, readBase } from '../engine/base.js'
import { Errors, NoaError, rewrap } from '../engine/errors.js'
import { statFile } from '../engine/files.js'
import { readThroughJournals } from '../engine/journal-view.js'
import { existingLog, logPath } from '../engine/logs.js'
import { checkOptionKeys } from '../engine/options.js'
import { type Head, lengthOfLog, type StoredSnapshotEntry, snapshotEntriesBackward } from './heads.js'
import { type ObjectStore, type SnapshotRecord, sha256 } from './objects.js'
import { lastSeqOf } from './records.js'
import { type ChangeMark, type NoEffect, type ReplayProgress, replaySegment, type Skipped } from './replay.js'
import { EMPTY_TREE, Tree, TreeBuilder } from './tree.js'
import type { ResolvedRef, SnapshotInfo, SnapshotView } from './view.js'

const REPLAY_KEYS = new Set(['fromScratch', 'onProgress', 'strict', 'skipDamaged'])

export interface ReplayOptions {
  /**
   * Ignore the workspace's own snapshots and replay its entries from the start (or from the
   * newest fork or merge snapshot, whose tree did not come from this log): a check that
   * incremental snapshots agree with a full replay, and the benchmark's full replay.
   */
  fromScratch?: boolean
  /** Refuse entries that cannot apply (NOA_REPLAY) instead of giving them no effect. */
  strict?: boolean
  /** Leave damaged lines out (listed in `skipped`) instead of refusing the replay. */
  skipDamaged?: boolean
  onProgress?: (p: ReplayProgress) => void
}

export interface WorkspaceState {
  workspace: string
  tree: Tree
  /** The snapshot the replay started from (null: an empty tree). */
  parent: string | null
  /** The replay started after this seq. */
  since: number
  /** Last seq read. */
  seq: number
  /** Entries that changed the tree (write, delete, rename). */
  entriesReplayed: number
  /** Entries replayed that changed nothing, and why. */
  noEffect: NoEffect[]
  /** Damaged parts of the log left out (`skipDamaged`). */
  skipped: Skipped[]
}

/** What a search of the log for its head found. */
export interface HeadSearch {
  head: Head | null
  /** Snapshot entries after the head that mean nothing (unknown or foreign records). */
  ignored: Map<number, NoEffect>
}

export interface State {
  builder: TreeBuilder
  head: Head | null
  since: number
  seq: number
  applied: number
  treeOps: number
  noEffect: NoEffect[]
  skipped: Skipped[]
}

const REF_RE = /^([A-Za-z0-9][A-Za-z0-9._-]{0,127})(?:@(\d+))?$/

export class SnapshotReader implements SnapshotView {
  constructor(
    /** The root folder (its agent-logs/ and objects/). */
    readonly root: string,
    readonly store: ObjectStore,
    /** The process's AgentLog, if it has one (see logOf). */
    readonly log: AgentLog | undefined,
  ) {}

  /** A snapshot's record: one object read. */
  getSnapshot(id: string): Promise<SnapshotRecord> {
    return this.store.getSnapshot(id)
  }

  /** A snapshot's tree (path → blob), from the object store (rebuilt from its log if pruned and collected). */
  async tree(snapshotId: string): Promise<Tree> {
    const record = await this.store.getSnapshot(snapshotId)
    return this.treeOf(record)
  }

  /** The workspace's newest meaningful snapshot entry, or null. Reads the log backwards from its end. */
  async head(workspace: string): Promise<Head | null> {
    return (await this.findHead(workspace)).head
  }

  /** The workspace's snapshot entries, newest first (a backward byte search of its log). */
  async *snapshots(workspace: string): AsyncGenerator<SnapshotInfo> {
    const pruned = new Set<string>()
    for (const { entry, offset } of snapshotEntriesBackward(this.logOf(workspace))) {
      const found = await this.classify(workspace, entry, offset === 0, false)
      if (!('record' in found)) continue // names nothing of this workspace: verify reports it
      const { record, own } = found
      for (const p of record.pruned ?? []) pruned.add(p)
      yield {
        snapshotId: record.id,
        kind: record.merged ? 'merge' : own ? 'snapshot' : 'fork',
        workspace: record.workspace,
        tree: record.tree,
        parent: record.parent ?? null,
        seq: record.seq,
        message: entry.message,
        ts: record.ts,
        entry: { seq: entry.seq, ts: entry.ts },
        noEffect: record.noEffect ?? [],
        skipped: record.skipped ?? [],
        pruned: own && pruned.has(record.id),
        prunes: record.pruned ?? [],
      }
    }
  }

  async listSnapshots(workspace: string): Promise<SnapshotInfo[]> {
    const out: SnapshotInfo[] = []
    for await (const s of this.snapshots(workspace)) out.push(s)
    return out
  }

  /**
   * The workspace's files now (its head's tree + the entries after it), computed without
   * writing anything.
   */
  async replay(workspace: string, options: ReplayOptions = {}): Promise<WorkspaceState> {
    checkOptionKeys(options, REPLAY_KEYS, 'replay')
    const s = options.fromScratch
      ? await this.fromScratch(workspace, lengthOfLog(this.logOf(workspace)), options)
      : await this.computeState(workspace, options)
    return {
      workspace,
      tree: Tree.ofPack(s.builder.buildPack(this.store)),
      parent: s.head?.record.id ?? null,
      since: s.since,
      seq: s.seq,
      entriesReplayed: s.applied,
      noEffect: s.noEffect,
      skipped: s.skipped,
    }
  }

  /**
   * Resolves a ref: a snapshot id (`noa_…`), a workspace (its files now) or `ws@seq` (its files
   * after entry seq, replayed from the nearest snapshot at or before it).
   */
  async resolve(ref: string): Promise<ResolvedRef> {
    if (typeof ref !== 'string' || ref === '') {
      throw Errors.BAD_ARGUMENT(
        `a ref must be a snapshot id, a workspace or ws@seq, got ${JSON.stringify(ref)}`,
      )
    }
    if (ref.startsWith('noa_')) {
      const record = await this.store.getSnapshot(ref)
      return {
        ref,
        tree: await this.treeOf(record),
        snapshotId: record.id,
        workspace: record.workspace,
        seq: record.seq,
      }
    }
    const m = REF_RE.exec(ref)
    if (!m || m[1] === '.' || m[1] === '..') {
      throw Errors.BAD_ARGUMENT(
        `ref ${JSON.stringify(ref)} is not a snapshot id (noa_…), a workspace name or ws@seq`,
      )
    }
    const workspace = m[1] as string
    let until: number | undefined
    if (m[2] !== undefined) {
      until = Number(m[2])
      this.logOf(workspace)
      const last = lastSeqOf(this.root, workspace)
      if (!Number.isSafeInteger(until) || until > last) {
        throw Errors.NOT_FOUND(`workspace ${workspace} has no seq ${m[2]} (its last seq is ${last})`, {
          workspace,
        })
      }
    }
    const s = await this.computeState(workspace, { until })
    const tree = Tree.ofPack(s.builder.buildPack(this.store))
    this.store.remember(tree)
    return { ref, tree, snapshotId: s.head?.record.id ?? null, workspace, seq: until ?? s.seq }
  }

  /**
   * A record's tree. A tree that is no longer stored (its snapshot was pruned and gc took it) is
   * rebuilt from its parent's tree and the log segment the record covers, and checked against
   * the record; a merge's tree cannot be rebuilt that way, so gc always keeps those.
   */
  async treeOf(record: SnapshotRecord, depth = 0): Promise<Tree> {
    try {
      return await this.store.getTree(record.tree)
    } catch (err) {
      if (!(err instanceof NoaError && err.code === 'NOA_NOT_FOUND')) throw err
      const rebuilt = depth < 100_000 ? await this.rebuildTree(record, depth) : null
      if (rebuilt) return rebuilt
      if (err.details.object === record.tree) {
        throw Errors.NOT_FOUND(
          `snapshot ${record.id}: its tree ${record.tree} is missing from ${this.store.dir}`,
          { snapshot: record.id, object: record.tree },
        )
      }
      throw err
    }
  }

  private async rebuildTree(record: SnapshotRecord, depth: number): Promise<Tree | null> {
    if (record.merged || statFileOrNull(logPath(this.root, record.workspace)) === null) return null
    let base: Tree
    try {
      base = record.parent
        ? await this.treeOf(await this.store.getSnapshot(record.parent), depth + 1)
        : EMPTY_TREE
    } catch {
      return null
    }
    const builder = new TreeBuilder(base)
    await replaySegment(this.root, record.workspace, builder, {
      since: record.since,
      until: record.seq,
      // The same parts are left out as when it was made (the tree id is checked below).
      skipDamaged: (record.skipped?.length ?? 0) > 0,
    })
    // The record names the tree in the format it was written in: folders, or flat before.
    const pack = builder.buildPack(this.store)
    let tree: Tree
    if (pack.id === record.tree) tree = Tree.ofPack(pack)
    else {
      const bytes = builder.encode()
      if (sha256(bytes) !== record.tree) return null
      tree = Tree.decode(record.tree, bytes)
    }
    this.store.remember(tree)
    return tree
  }

  /**
   * A compacted log's base (engine/base.ts) as a head: the base's snapshot covers every seq up to
   * it. Null when the log has no base. A state wanted at a seq the base replaced is refused
   * (NOA_COMPACTED); the base's snapshot has it.
   */
  private async baseHead(workspace: string, until?: number): Promise<Head | null> {
    const file = this.logOf(workspace)
    const base = readBase(file)
    if (base === null) return null
    if (until !== undefined && until < base.seq) throw compactedError(file, until, base, workspace)
    const record = await this.store.getSnapshot(base.snapshotId)
    return { record, entrySeq: base.seq, pos: base.seq, own: true }
  }

  /** Finds the head: the newest snapshot entry (at or before `atOrBefore`) that means something. */
  async findHead(
    workspace: string,
    options: { strict?: boolean; atOrBefore?: number } = {},
  ): Promise<HeadSearch> {
    const ignored = new Map<number, NoEffect>()
    for (const { entry, offset } of snapshotEntriesBackward(this.logOf(workspace))) {
      if (options.atOrBefore !== undefined && entry.seq > options.atOrBefore) continue
      const found = await this.classify(workspace, entry, offset === 0, options.strict ?? false)
      if ('record' in found) return { head: found, ignored }
      ignored.set(entry.seq, found)
    }
    return { head: null, ignored }
  }

  /** What a snapshot entry stands for (records.ts has the rules), or why it means nothing. */
  private async classify(
    workspace: string,
    entry: StoredSnapshotEntry,
    first: boolean,
    strict: boolean,
  ): Promise<Head | NoEffect> {
    let record: SnapshotRecord
    try {
      record = await this.store.getSnapshot(entry.snapshot_id)
    } catch (err) {
      if (err instanceof NoaError) {
        if (!strict && err.code === 'NOA_NOT_FOUND') {
          return { seq: entry.seq, reason: 'unknown-snapshot', snapshotId: entry.snapshot_id }
        }
        throw rewrap(
          err,
          `workspace ${workspace} seq ${entry.seq} names snapshot ${entry.snapshot_id}: ${err.message}`,
          { workspace, seq: entry.seq },
          err.code === 'NOA_NOT_FOUND' ? 'NOA_REPLAY' : err.code,
        )
      }
      throw err
    }
    // A record of this workspace covers seqs before its own entry; a fork is the log's first
    // entry. Anything else was not written by the store for this log.
    const own = record.workspace === workspace && record.seq < entry.seq
    if (!own && !first) {
      if (strict) {
        throw Errors.REPLAY(
          `workspace ${workspace} seq ${entry.seq}: snapshot ${record.id} is not a snapshot of this log (workspace ${record.workspace}, seq ${record.seq}) nor a fork`,
          { workspace, seq: entry.seq },
        )
      }
      return { seq: entry.seq, reason: 'foreign-snapshot', snapshotId: entry.snapshot_id }
    }
    return { record, entrySeq: entry.seq, pos: own ? record.seq : entry.seq, own }
  }

  async computeState(
    workspace: string,
    options: {
      strict?: boolean
      until?: number
      onProgress?: ReplayOptions['onProgress']
      skipDamaged?: boolean
      track?: (path: string, value: string | null, mark: ChangeMark) => void
    },
  ): Promise<State> {
    const file = this.logOf(workspace)
    const endByte = lengthOfLog(file)
    const { head: found, ignored } = await this.findHead(workspace, {
      strict: options.strict,
      atOrBefore: options.until,
    })
    // A compacted log with no snapshot entry at or before `until` starts from its base's snapshot.
    const head = found ?? (await this.baseHead(workspace, options.until))
    const base = head ? await this.treeOf(head.record) : EMPTY_TREE
    const builder = new TreeBuilder(base)
    const since = head?.pos ?? 0
    const r = await replaySegment(this.root, workspace, builder, {
      since,
      until: options.until,
      endByte,
      snapshotsUpTo: head?.entrySeq ?? 0,
      ignoredSnapshots: ignored,
      strict: options.strict,
      onProgress: options.onProgress,
      skipDamaged: options.skipDamaged,
      track: options.track,
    })
    return {
      builder,
      head,
      since,
      seq: r.lastSeq,
      applied: r.applied,
      treeOps: r.treeOps,
      noEffect: r.noEffect,
      skipped: r.skipped,
    }
  }

  /**
   * Replays the whole log, ignoring the workspace's own snapshots but not those whose tree came
   * from elsewhere (a fork base, a merge): the newest of those replaces everything before it.
   * They are found on the way, so a log never forked or merged into is read once; meeting one
   * restarts the replay from the newest seen, until a pass meets none newer than its start.
   */
  private async fromScratch(workspace: string, endByte: number, options: ReplayOptions): Promise<State> {
    // A compacted log's scratch is its base: the entries before it are in the base's snapshot.
    let head: Head | null = await this.baseHead(workspace)
    const ignored = new Map<number, NoEffect>()
    for (;;) {
      const since = head?.pos ?? 0
      const builder = new TreeBuilder(head ? await this.treeOf(head.record) : EMPTY_TREE)
      const seen: Array<{ seq: number; id: string; first: boolean }> = []
      const r = await replaySegment(this.root, workspace, builder, {
        since,
        endByte,
        ignoredSnapshots: ignored,
        strict: options.strict,
        onSnapshot: (seq, id, first) => seen.push({ seq, id, first }),
        onProgress: options.onProgress,
        skipDamaged: options.skipDamaged,
      })
      let reset: Head | null = null
      let newlyIgnored = false
      for (let i = seen.length - 1; i >= 0 && !reset; i--) {
        const { seq, id, first } = seen[i] as (typeof seen)[number]
        if (head && seq <= head.entrySeq) break
        if (ignored.has(seq)) continue
        const entry: StoredSnapshotEntry = { op: 'snapshot', snapshot_id: id, message: '', seq, ts: 0 }
        const found = await this.classify(workspace, entry, first, options.strict ?? false)
        if (!('record' in found)) {
          ignored.set(seq, found)
          newlyIgnored = true
        } else if (!found.own || found.record.merged) reset = found
      }
      if (reset) {
        head = reset
        continue
      }
      if (newlyIgnored) continue // again, so the entries passed over are reported in order
      return {
        builder,
        head,
        since,
        seq: r.lastSeq,
        applied: r.applied,
        treeOps: r.treeOps,
        noEffect: r.noEffect,
        skipped: r.skipped,
      }
    }
  }

  /**
   * The workspace's log file, to be read. An engine without a log (a command that only reads)
   * reads through the dead commit journals of the root (engine/journal-view.ts): a power cut can
   * leave acknowledged rounds, snapshot entries among them, in a journal alone until the next
   * writer or `noa recover` replays it. An engine with a log is in a process whose AgentLog
   * replayed them when it opened the root.
   */
  private logOf(workspace: string): string {
    const file = existingLog(this.root, workspace)
    if (this.log === undefined) readThroughJournals(this.root)
    return file
  }
}

/** The file's stats, or null when it is missing or not a regular file. */
function statFileOrNull(file: string): ReturnType<typeof statFile> | null {
  try {
    return statFile(file, 'workspace log') ?? null
  } catch {
    return null
  }
}
