/**
 * The floors: what plain files cost without any library. `node-fs` is the Node floor (fs calls
 * on the caller's thread), `disk` the disk floor (write + fdatasync through noa's own addon, no
 * threads, no messages), `disk-batched` the same with ideal group commit on one thread,
 * `disk-parallel` many fdatasyncs in flight on the addon's own thread pool. The
 * JSONL store is the file all three (and sonic-boom) leave behind, read without noa.
 */
import {
  closeSync,
  fdatasyncSync,
  fstatSync,
  fsyncSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readSync,
  writeSync,
} from 'node:fs'
import { join } from 'node:path'
import { loadNative, SYNC_FDATASYNC } from '../../src/engine/native.js'
import { lineFor, type Peer, REPLAY_WS, Seqs, type Store, wsName } from './common.js'

function fsyncDirOf(dir: string): void {
  const fd = openSync(dir, 'r')
  try {
    fsyncSync(fd)
  } finally {
    closeSync(fd)
  }
}

export const nodeFs: Peer = {
  id: 'node-fs',
  label: 'fs.writeSync + fdatasyncSync',
  kind: 'floor',
  how: "the Node floor: `fs.writeSync` + `fs.fdatasyncSync` per entry, one file per workspace, on the caller's thread",
  load() {},
  async writer(dir, workspaces) {
    const folder = join(dir, 'node-fs')
    mkdirSync(folder, { recursive: true })
    const fds = Array.from({ length: workspaces }, (_, k) => openSync(join(folder, `${wsName(k)}.log`), 'a'))
    fsyncDirOf(folder)
    const seqs = new Seqs(workspaces)
    return {
      async append(k, i) {
        const fd = fds[k] as number
        writeSync(fd, lineFor(seqs.take(k), i))
        fdatasyncSync(fd)
      },
      async close() {
        for (const fd of fds) closeSync(fd)
      },
    }
  },
}

function openRaw(dir: string, name: string, workspaces: number): number[] {
  const io = loadNative()
  const folder = join(dir, name)
  mkdirSync(folder, { recursive: true })
  const fds = Array.from({ length: workspaces }, (_, k) =>
    io.openAppend(join(folder, `${wsName(k)}.log`), true, false),
  )
  io.fsyncDir(folder)
  return fds
}

export const disk: Peer = {
  id: 'disk',
  label: 'raw write + fdatasync (addon)',
  kind: 'floor',
  how: "the disk floor: write + fdatasync per entry through noa's addon, one file per workspace, on the caller's thread",
  load() {
    loadNative()
  },
  async writer(dir, workspaces) {
    const io = loadNative()
    const fds = openRaw(dir, 'disk', workspaces)
    const seqs = new Seqs(workspaces)
    return {
      async append(k, i) {
        const fd = fds[k] as number
        io.write(fd, Buffer.from(lineFor(seqs.take(k), i)))
        io.fdatasync(fd)
      },
      async close() {
        for (const fd of fds) io.close(fd)
      },
    }
  },
}

export const diskParallel: Peer = {
  id: 'disk-parallel',
  label: 'raw, fdatasyncs in flight (addon pool)',
  kind: 'floor',
  how: "the best a file-per-workspace design gets here: each append is one write + fdatasync of its workspace's file on a pool of 128 threads inside noa's addon (noa's default total), driven from the caller's thread with no workers and no messages; as many in flight as there are submitters",
  load() {
    loadNative()
  },
  async writer(dir, workspaces) {
    const io = loadNative()
    const fds = openRaw(dir, 'disk-parallel', workspaces)
    const seqs = new Seqs(workspaces)
    const waiting = new Map<number, (err: Error | null) => void>()
    let nextId = 1
    // As many sync threads as noa has by default (2 workers × 64), so both can keep as many in flight.
    io.setMaxThreads(128)
    io.setCompletionHandler((id, err) => {
      const done = waiting.get(id)
      waiting.delete(id)
      done?.(err)
    })
    return {
      append(k, i) {
        const id = nextId++
        const data = Buffer.from(lineFor(seqs.take(k), i))
        return new Promise<void>((resolve, reject) => {
          waiting.set(id, (err) => (err ? reject(err) : resolve()))
          io.commit(id, fds[k] as number, data, SYNC_FDATASYNC)
        })
      },
      async close() {
        for (const fd of fds) io.close(fd)
      },
    }
  },
}

interface Queued {
  k: number
  line: string
  resolve(): void
  reject(err: unknown): void
}

export const diskBatched: Peer = {
  id: 'disk-batched',
  label: 'raw, 1 write + fdatasync per turn',
  kind: 'floor',
  how: 'group commit with no threads: the lines queued in one event-loop turn, one write + one fdatasync per file through the addon, then all resolved',
  load() {
    loadNative()
  },
  async writer(dir, workspaces) {
    const io = loadNative()
    const fds = openRaw(dir, 'disk-batched', workspaces)
    const seqs = new Seqs(workspaces)
    let queue: Queued[] = []
    const flush = () => {
      const batch = queue
      queue = []
      const byFile = new Map<number, Queued[]>()
      for (const q of batch) {
        const list = byFile.get(q.k)
        if (list) list.push(q)
        else byFile.set(q.k, [q])
      }
      for (const [k, list] of byFile) {
        const fd = fds[k] as number
        try {
          io.write(fd, Buffer.from(list.map((q) => q.line).join('')))
          io.fdatasync(fd)
        } catch (err) {
          for (const q of list) q.reject(err)
          continue
        }
        for (const q of list) q.resolve()
      }
    }
    return {
      append(k, i) {
        const line = lineFor(seqs.take(k), i)
        return new Promise<void>((resolve, reject) => {
          if (queue.push({ k, line, resolve, reject }) === 1) setImmediate(flush)
        })
      },
      async close() {
        for (const fd of fds) io.close(fd)
      },
    }
  },
}

const CHUNK = 1 << 20

/** Calls `onLine` for each complete line; returns the length up to the last `\n`. */
function scanLines(fd: number, onLine: (line: string) => void): number {
  const size = fstatSync(fd).size
  let buf = Buffer.allocUnsafe(CHUNK)
  let carry = 0
  let pos = 0
  while (pos < size) {
    if (carry === buf.length) {
      const bigger = Buffer.allocUnsafe(buf.length * 2)
      buf.copy(bigger, 0, 0, carry)
      buf = bigger
    }
    const n = readSync(fd, buf, carry, Math.min(buf.length - carry, size - pos), pos)
    if (n === 0) break
    pos += n
    const filled = carry + n
    const lastNl = buf.lastIndexOf(0x0a, filled - 1)
    if (lastNl < 0) {
      carry = filled
      continue
    }
    const text = buf.toString('utf8', 0, lastNl)
    for (const line of text.split('\n')) if (line.length > 0) onLine(line)
    carry = filled - (lastNl + 1)
    buf.copy(buf, 0, lastNl + 1, filled)
  }
  return pos - carry
}

export const jsonlStore: Store = {
  id: 'jsonl',
  label: 'JSONL file (sonic-boom, fs, raw)',
  kind: 'peer',
  replayHow:
    'the file sonic-boom and the floors write: read in 1 MiB chunks, split on `\\n`, `JSON.parse` each line (no validation)',
  openHow:
    "the seed's recovery, which a plain file needs: read every line, `JSON.parse` it, check seq increasing, cut a partial tail; last seq",
  load() {},
  async prepare(dir, entries) {
    const fd = openSync(join(dir, `${REPLAY_WS}.log`), 'a')
    try {
      for (let done = 0; done < entries; done += 10_000) {
        let text = ''
        for (let j = done; j < Math.min(done + 10_000, entries); j++) text += lineFor(j + 1, j)
        writeSync(fd, text)
      }
      fdatasyncSync(fd)
    } finally {
      closeSync(fd)
    }
  },
  async replay(dir) {
    const fd = openSync(join(dir, `${REPLAY_WS}.log`), 'r')
    let n = 0
    try {
      scanLines(fd, (line) => {
        JSON.parse(line)
        n++
      })
    } finally {
      closeSync(fd)
    }
    return n
  },
  async open(dir) {
    const fd = openSync(join(dir, `${REPLAY_WS}.log`), 'r+')
    let lastSeq = 0
    try {
      const end = scanLines(fd, (line) => {
        const { seq } = JSON.parse(line) as { seq: number }
        if (!(seq > lastSeq)) throw new Error(`seq ${seq} after ${lastSeq}`)
        lastSeq = seq
      })
      if (end < fstatSync(fd).size) {
        ftruncateSync(fd, end)
        fdatasyncSync(fd)
      }
    } catch (err) {
      closeSync(fd)
      throw err
    }
    return {
      lastSeq,
      close: async () => {
        closeSync(fd)
      },
    }
  },
}
