/**
 * Log compaction (docs/compaction.md): a workspace's log whose prefix a snapshot covers is
 * replaced by a new file holding one base record (base.ts) and every later line byte for byte.
 *
 * The replacement survives a crash at any point: the new log is written to a temp file in the
 * log folder (created O_EXCL, locked before it is renamed, so that whoever opens the new log
 * after the rename waits for this to end), fdatasynced, renamed over the old one, and the folder
 * fsynced. Before the rename a crash leaves the old log (and a temp file the next compaction
 * removes); after it, the new one. Its checksum sidecar is written beside it the same way
 * (advisory: until it is renamed the old one names the old inode and is not used).
 *
 * It runs in the workspace's owner (the only writer of the file), after the owner has made the
 * log complete (every journaled byte written and fdatasynced) and closed its descriptor, and
 * through the owner's I/O layer (workers/io.ts), so that a test seam sees every step.
 */
import {
  closeSync,
  createReadStream,
  createWriteStream,
  fstatSync,
  fsyncSync,
  lstatSync,
  readSync,
  renameSync,
  rmSync,
} from 'node:fs'
import { basename, dirname, join } from 'node:path'
import { pipeline } from 'node:stream/promises'
import { createBrotliCompress, createGzip, constants as zlibConstants } from 'node:zlib'
import { fsyncDir, tempPath } from './atomic.js'
import { formatBase, parseBase } from './base.js'
import { crc32c } from './crc.js'
import { parseCounters, parseEntry, type SnapshotEntry } from './entry.js'
import { Errors, withPath } from './errors.js'
import { openFileSync, READ } from './files.js'
import { logDirOf, logPath } from './logs.js'
import type { NativeIo } from './native.js'
import { findLastNewline, readAt, seekSeq } from './reader.js'
import {
  BLOCK_BYTES,
  encodeSumHeader,
  encodeSumRecord,
  SIDECAR_DIR,
  type SumBlock,
  sidecarPath,
} from './sidecar.js'

/** The I/O a compaction does (a subset of the owner's LogIo). */
export interface CompactIo
  extends Pick<NativeIo, 'openAppend' | 'flock' | 'write' | 'fdatasync' | 'fsyncDir' | 'close'> {
  createFile(path: string, mode?: number): number
  rename(from: string, to: string): void
  unlink(path: string): void
}

/** What to compact, as the caller planned it (AgentLog.compact). */
export interface CompactPlan {
  workspace: string
  /** The last seq the base replaces (the snapshot's record seq). */
  baseSeq: number
  snapshotId: string
  /** Where the planner found the first kept line (its archive holds the bytes before it). */
  cut: number
}

export interface CompactFileReport {
  workspace: string
  file: string
  /** False when the log already starts at this base (nothing was changed). */
  compacted: boolean
  baseSeq: number
  baseTs: number
  snapshotId: string
  bytesBefore: number
  bytesAfter: number
}

const COPY_CHUNK = 4 << 20
const NL = 0x0a

/** The temp names a compaction writes (one per workspace: a crash's leftover is replaced). */
export function compactTemps(root: string, workspace: string): { log: string; sum: string } {
  return {
    log: join(logDirOf(root), `.${workspace}.log.compact`),
    sum: join(root, SIDECAR_DIR, `.${workspace}.sum.compact`),
  }
}

/** The line ending just before `end` (a line start), without its `\n`, and where it starts. */
function lineBefore(fd: number, end: number): { line: string; start: number } {
  const prev = findLastNewline(fd, end - 1)
  const buf = Buffer.allocUnsafe(end - 1 - (prev + 1))
  readAt(fd, buf, prev + 1)
  return { line: buf.toString('utf8'), start: prev + 1 }
}

/**
 * Checks the plan against the log as it is now (under its lock): the line before `cut` is the
 * entry `baseSeq` (or already the base record naming it: nothing to do). Returns that entry's ts.
 */
function checkCut(fd: number, file: string, size: number, plan: CompactPlan): { ts: number; done: boolean } {
  const changed = (why: string) =>
    Errors.CONFLICT(
      `workspace ${plan.workspace} changed while it was being compacted (${why}); nothing was changed, run compact again`,
      { workspace: plan.workspace, file },
    )
  if (plan.cut <= 0 || plan.cut > size) throw changed(`byte ${plan.cut} is past its end (${size} bytes)`)
  if (seekSeq(file, plan.baseSeq + 1) !== plan.cut) throw changed(`seq ${plan.baseSeq + 1} moved`)
  const { line, start } = lineBefore(fd, plan.cut)
  const base = start === 0 ? parseBase(line) : null
  const { seq, ts } = parseCounters(line)
  if (seq !== plan.baseSeq)
    throw changed(`the entry before byte ${plan.cut} is seq ${seq}, not ${plan.baseSeq}`)
  return { ts, done: base !== null && base.snapshotId === plan.snapshotId }
}

/** Sums the new log's blocks (whole lines, about BLOCK_BYTES each) as its bytes go by. */
class Summer {
  readonly blocks: SumBlock[] = []
  private start = 0
  private pos = 0
  private crc = 0
  private entries = 0
  private firstSeq = 0

  add(data: Buffer): void {
    let s = 0
    while (s < data.length) {
      const nl = data.indexOf(NL, s)
      const end = nl < 0 ? data.length : nl + 1
      if (this.entries === 0 && this.pos === this.start) {
        // A line starts a block: its seq is the block's first (lines are never split across
        // the chunks given here: each chunk ends with a whole line).
        this.firstSeq = parseCounters(data.toString('utf8', s, end - 1)).seq
      }
      this.crc = crc32c(data.subarray(s, end), this.crc)
      this.pos += end - s
      this.entries++
      s = end
      if (this.pos - this.start >= BLOCK_BYTES) this.close()
    }
  }

  close(): void {
    if (this.pos === this.start) return
    this.blocks.push({
      offset: this.start,
      firstSeq: this.firstSeq,
      length: this.pos - this.start,
      entries: this.entries,
      crc: this.crc,
    })
    this.start = this.pos
    this.crc = 0
    this.entries = 0
  }
}

/**
 * Compacts one workspace's log (see the file's comment). The caller is the workspace's owner
 * and holds no descriptor of it; this takes its lock for the whole replacement.
 */
export function compactLogFile(io: CompactIo, root: string, plan: CompactPlan): CompactFileReport {
  const { workspace } = plan
  const file = logPath(root, workspace)
  const dir = logDirOf(root)
  let lockFd: number
  try {
    lockFd = io.openAppend(file, false, true)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).syscall === 'flock') {
      throw Errors.WORKSPACE_LOCKED(
        `workspace ${workspace} is being appended to by another process (${file}); compact it where it is written, or once that process has closed it`,
        { workspace, file },
      )
    }
    throw withPath(err, file)
  }
  const temps = compactTemps(root, workspace)
  let tempFd = -1
  let sumFd = -1
  let renamed = false
  try {
    const size = fstatSync(lockFd).size
    const { ts, done } = checkCut(lockFd, file, size, plan)
    const report: CompactFileReport = {
      workspace,
      file,
      compacted: !done,
      baseSeq: plan.baseSeq,
      baseTs: ts,
      snapshotId: plan.snapshotId,
      bytesBefore: size,
      bytesAfter: size,
    }
    if (done) return report
    for (const t of [temps.log, temps.sum]) {
      try {
        io.unlink(t) // left by a compaction that crashed
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw withPath(err, t)
      }
    }
    tempFd = io.createFile(temps.log)
    io.flock(tempFd, true, true)
    const summer = new Summer()
    const head = Buffer.from(formatBase(plan.baseSeq, plan.snapshotId, ts))
    io.write(tempFd, head)
    summer.add(head)
    const buf = Buffer.allocUnsafe(COPY_CHUNK)
    let at = plan.cut
    let carry = 0
    while (at < size) {
      const n = readSync(lockFd, buf, carry, Math.min(buf.length - carry, size - at), at)
      if (n === 0) break
      at += n
      const filled = carry + n
      const last = buf.lastIndexOf(NL, filled - 1)
      const whole = last < 0 ? 0 : last + 1
      if (whole > 0) {
        const part = buf.subarray(0, whole)
        io.write(tempFd, part)
        summer.add(part)
      }
      carry = filled - whole
      if (carry === buf.length)
        throw Errors.CORRUPT_LOG(`${file}: a line longer than ${COPY_CHUNK} bytes at byte ${at - carry}`, {
          file,
        })
      buf.copy(buf, 0, whole, filled)
    }
    if (carry > 0)
      throw Errors.CORRUPT_LOG(`${file}: partial last line (${carry} bytes) while compacting`, { file })
    summer.close()
    io.fdatasync(tempFd)
    report.bytesAfter = head.length + size - plan.cut
    // The sidecar names the new log's inode; written before the rename, renamed after it.
    const sumDir = join(root, SIDECAR_DIR)
    let withSum = false
    try {
      withSum = lstatSync(sumDir).isDirectory()
    } catch {
      // no checksums folder: the log goes without a sidecar, as a log written before them does
    }
    if (withSum) {
      sumFd = io.createFile(temps.sum)
      io.write(sumFd, encodeSumHeader(fstatSync(tempFd, { bigint: true }).ino))
      if (summer.blocks.length > 0) io.write(sumFd, Buffer.concat(summer.blocks.map(encodeSumRecord)))
      io.close(sumFd)
      sumFd = -1
    }
    io.rename(temps.log, file)
    renamed = true
    io.fsyncDir(dir)
    if (withSum) {
      io.rename(temps.sum, sidecarPath(root, workspace))
      io.fsyncDir(sumDir)
    }
    return report
  } finally {
    if (sumFd >= 0) io.close(sumFd)
    // Closing the new log's descriptor releases its lock: the owner opens it on the next append.
    if (tempFd >= 0) io.close(tempFd)
    io.close(lockFd)
    if (tempFd >= 0 && !renamed) {
      try {
        io.unlink(temps.log) // failed before the rename: the old log stands, unchanged
      } catch {
        // the next compaction removes it
      }
    }
  }
}

export type ArchiveFormat = 'gzip' | 'brotli'

/**
 * Writes a log's bytes [0, end) (the prefix a compaction replaces) compressed to `target`
 * durably (temp, fsync, rename, folder fsync) before the log is touched: with it, the old
 * lines can be read again (`gunzip` or `brotli -d` gives them back byte for byte).
 */
export async function writeArchive(
  file: string,
  end: number,
  target: string,
  format: ArchiveFormat,
): Promise<number> {
  const temp = tempPath(dirname(target), `.${basename(target)}.`)
  const fd = openFileSync(file, READ, { what: 'workspace log' })
  try {
    const zip =
      format === 'gzip'
        ? createGzip({ level: 6 })
        : createBrotliCompress({ params: { [zlibConstants.BROTLI_PARAM_QUALITY]: 4 } })
    await pipeline(
      createReadStream('', { fd, start: 0, end: end - 1, autoClose: false }),
      zip,
      createWriteStream(temp, { flags: 'wx', mode: 0o666 }),
    )
    const out = openFileSync(temp, READ, { what: 'archive' })
    let size: number
    try {
      fsyncSync(out)
      size = fstatSync(out).size
    } finally {
      closeSync(out)
    }
    renameSync(temp, target)
    fsyncDir(dirname(target))
    return size
  } catch (err) {
    rmSync(temp, { force: true })
    throw err
  } finally {
    closeSync(fd)
  }
}

const SNAPSHOT_MARK = Buffer.from('"op":"snapshot"')

/**
 * The snapshot entries of a log, in file order, found by their bytes (a compaction plans from
 * them without parsing every entry): each line holding the op is parsed in full.
 */
export function* snapshotEntries(file: string): Generator<SnapshotEntry & { seq: number }> {
  const fd = openFileSync(file, READ, { what: 'workspace log' })
  try {
    const size = fstatSync(fd).size
    let buf = Buffer.allocUnsafe(COPY_CHUNK)
    let at = 0
    let carry = 0
    while (at < size) {
      const n = readSync(fd, buf, carry, Math.min(buf.length - carry, size - at), at)
      if (n === 0) break
      at += n
      const filled = carry + n
      const whole = buf.lastIndexOf(NL, filled - 1) + 1
      for (
        let i = buf.indexOf(SNAPSHOT_MARK, 0);
        i >= 0 && i < whole;
        i = buf.indexOf(SNAPSHOT_MARK, i + 1)
      ) {
        const start = i === 0 ? 0 : buf.lastIndexOf(NL, i - 1) + 1
        const end = buf.indexOf(NL, i)
        if (end < 0 || end >= whole) break
        const e = parseEntry(buf.toString('utf8', start, end))
        if (e.op === 'snapshot') yield e
        i = end
      }
      carry = filled - whole
      if (carry === buf.length) {
        const bigger = Buffer.allocUnsafe(buf.length * 2)
        buf.copy(bigger, 0, 0, carry)
        buf = bigger
      } else buf.copy(buf, 0, whole, filled)
    }
  } finally {
    closeSync(fd)
  }
}
