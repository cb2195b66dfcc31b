/**
 * An adapter keeps what it read of a workspace's log in memory, and must notice when the log
 * changed under it: another process appended while this one did not hold the workspace (the
 * engine unlocks a workspace it closes), or `noa` commands ran on it. Logs only grow, except
 * when recovery cuts a torn tail; so the file's size says whether anything changed, and the
 * entries after the last seq read are the change.
 */
import type { Entry } from '../engine/entry.js'
import { fileSize } from '../engine/files.js'
import { logPath } from '../engine/logs.js'
import { readEntryBatches } from '../engine/reader.js'

export type LogChange = { kind: 'none' } | { kind: 'grew'; entries: Entry[] } | { kind: 'reset' }

export class LogFollower {
  readonly file: string
  /**
   * Bytes of the log accounted for (what was read, or what this process wrote); -1 after an
   * append through a daemon, whose end in the file is not known here (see acceptAppended).
   */
  private knownSize = 0
  /** Last seq read or written. */
  lastSeq = 0
  /**
   * After this process's own append: whether the log is still as that append left it, known
   * without a stat (the engine's LOG_HELD); null once it said no, or after a read.
   */
  private held: (() => boolean) | null = null

  constructor(
    readonly root: string,
    readonly workspace: string,
  ) {
    this.file = logPath(root, workspace)
  }

  /** Bytes in the log file now (0 when there is none); a symlink or non-file there is refused. */
  size(): number {
    return Math.max(0, fileSize(this.file, 'workspace log'))
  }

  exists(): boolean {
    return fileSize(this.file, 'workspace log') >= 0
  }

  /**
   * What changed since the last call or `accept`: nothing, new entries (read up to the size
   * seen now), or a reset (the file shrank: read it again from the start).
   */
  async changes(): Promise<LogChange> {
    if (this.held !== null) {
      if (this.held()) return { kind: 'none' }
      this.held = null // it stays no: look at the file from now on
    }
    const size = this.size()
    if (size === this.knownSize) return { kind: 'none' }
    // Shrunk below what was read (or, after an append through a daemon, gone): read it again.
    if (size < this.knownSize || (this.knownSize < 0 && size === 0)) {
      this.knownSize = 0
      this.lastSeq = 0
      return { kind: 'reset' }
    }
    const entries: Entry[] = []
    for await (const batch of readEntryBatches(this.file, { fromSeq: this.lastSeq + 1, end: size })) {
      for (const e of batch) entries.push(e)
    }
    this.knownSize = size
    if (entries.length > 0) this.lastSeq = (entries[entries.length - 1] as Entry).seq
    return entries.length > 0 ? { kind: 'grew', entries } : { kind: 'none' }
  }

  /**
   * After a full read up to `size` bytes, or this process's own append (with the engine's
   * LOG_HELD of its acks, when it gave one).
   */
  accept(lastSeq: number, size = this.size(), held: (() => boolean) | undefined = undefined): void {
    this.lastSeq = lastSeq
    this.knownSize = size
    this.held = held ?? null
  }

  /**
   * After this process's own append through a daemon, acknowledged up to `lastSeq`: another
   * client may have appended right after it, before any stat here could tell the two apart, so
   * the next look reads whatever follows `lastSeq`, not what follows a size.
   */
  acceptAppended(lastSeq: number): void {
    this.lastSeq = lastSeq
    this.knownSize = -1
    this.held = null
  }
}

/** Entries of a log up to `end` bytes (complete lines only). */
export async function readLog(file: string, end: number): Promise<Entry[]> {
  const out: Entry[] = []
  for await (const batch of readEntryBatches(file, { end })) for (const e of batch) out.push(e)
  return out
}
