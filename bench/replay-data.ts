/**
 * A realistic workspace log for the replay benchmark: ~10k (or 100k) distinct paths in a
 * source-tree layout, mostly writes (hot files more often than cold ones), some deletes and renames, every
 * entry valid against the files that exist at that point, ~200-byte lines. Seeded, so every run
 * replays the same log.
 */
import { closeSync, mkdirSync, openSync, statSync, writeFileSync, writeSync } from 'node:fs'
import { basename, dirname } from 'node:path'
import { crc32c } from '../src/engine/crc.js'
import { type EntryInput, encodeBody, formatLine } from '../src/engine/entry.js'
import { BLOCK_BYTES, encodeSumHeader, encodeSumRecord, sidecarPath } from '../src/engine/sidecar.js'

/** mulberry32: small, fast, seeded. */
function rng(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const AREAS = ['components', 'services', 'utils', 'api', 'models', 'hooks', 'pages', 'lib', 'tests', 'styles']
const EXTS = ['ts', 'tsx', 'json', 'md', 'css', 'test.ts']
const WORDS = [
  'user',
  'order',
  'cart',
  'session',
  'payment',
  'search',
  'profile',
  'invoice',
  'report',
  'auth',
]

export class WorkloadModel {
  private readonly random: () => number
  /** Every name a file may have (about 10k). */
  private readonly names: string[] = []
  private readonly live: string[] = []
  private readonly index = new Map<string, number>()

  constructor(seed = 42, distinctPaths = 10_000) {
    this.random = rng(seed)
    // A larger workspace has more packages and folders, not fuller folders. The 10k layout is
    // kept as it always was (its figures stay comparable across runs: 4 packages × 5 areas ×
    // 20 modules, its digits being tied); a larger one takes package, area and module from
    // independent digits of i: 40 × 10 × 40 folders, about 6 names each for 100k, as in a real
    // source tree, so that 1,000 scattered changes touch a small part of the tree.
    const packages = Math.max(4, Math.round(distinctPaths / 2500))
    const wide = distinctPaths > 10_000
    for (let i = 0; i < distinctPaths; i++) {
      const area = AREAS[(wide ? Math.floor(i / packages) : i) % AREAS.length] as string
      const mod = Math.floor(i / (wide ? packages * AREAS.length : AREAS.length)) % 40
      const word = WORDS[Math.floor(i / 400) % WORDS.length] as string
      const ext = EXTS[i % EXTS.length] as string
      this.names.push(
        `packages/agent-${i % packages}/src/${area}/module-${String(mod).padStart(2, '0')}/${word}-request-handler-${i}.${ext}`,
      )
    }
  }

  private blob(): string {
    let s = ''
    for (let i = 0; i < 8; i++)
      s += (Math.floor(this.random() * 0x100000000) >>> 0).toString(16).padStart(8, '0')
    return s
  }

  private add(path: string): void {
    this.index.set(path, this.live.length)
    this.live.push(path)
  }

  private drop(path: string): void {
    const i = this.index.get(path) as number
    const last = this.live.pop() as string
    if (last !== path) {
      this.live[i] = last
      this.index.set(last, i)
    }
    this.index.delete(path)
  }

  /** A free name (not a live file). */
  private freeName(): string {
    for (;;) {
      const name = this.names[Math.floor(this.random() * this.names.length)] as string
      if (!this.index.has(name)) return name
    }
  }

  /** Files that exist now. */
  get liveCount(): number {
    return this.live.length
  }

  next(): EntryInput {
    const r = this.random()
    const n = this.live.length
    if (n > 100 && r < 0.06) {
      const path = this.live[Math.floor(this.random() * n)] as string
      this.drop(path)
      return { op: 'delete', path }
    }
    if (n > 100 && r < 0.12 && n < this.names.length - 100) {
      const from = this.live[Math.floor(this.random() * n)] as string
      const to = this.freeName()
      this.drop(from)
      this.add(to)
      return { op: 'rename', from, to }
    }
    let path: string
    if (n < this.names.length * 0.9 && (n < 1000 || this.random() < 0.15)) {
      path = this.freeName()
      this.add(path)
    } else {
      // Hot files: a skewed pick (the square makes low indexes far more likely).
      const x = this.random()
      path = this.live[Math.floor(x * x * n)] as string
    }
    return { op: 'write', path, blob: this.blob() }
  }
}

/**
 * Writes `count` entries as stored lines (seq from 1, ts 37 µs apart) to `file`, with the
 * checksum sidecar an owner would have written beside it (a CRC32C per ~64 KiB of whole
 * lines), so that reads pay for the checksums as they do on a log noa wrote.
 */
export function writeLog(file: string, count: number, model: WorkloadModel): { bytes: number } {
  mkdirSync(dirname(file), { recursive: true })
  const fd = openSync(file, 'w')
  const records: Buffer[] = []
  let bytes = 0
  try {
    let block = ''
    let firstSeq = 1
    let entries = 0
    let out = ''
    const ts0 = 1_717_592_400_000_000
    const cut = () => {
      const data = Buffer.from(block)
      records.push(
        encodeSumRecord({ offset: bytes, firstSeq, length: data.length, entries, crc: crc32c(data) }),
      )
      bytes += writeSync(fd, data)
      block = ''
      entries = 0
    }
    for (let seq = 1; seq <= count; seq++) {
      if (entries === 0) firstSeq = seq
      out = formatLine(seq, encodeBody(model.next()), ts0 + seq * 37)
      block += out
      entries++
      if (block.length >= BLOCK_BYTES) cut()
    }
    if (entries > 0) cut()
  } finally {
    closeSync(fd)
  }
  const root = dirname(dirname(file))
  const sum = sidecarPath(root, basename(file, '.log'))
  mkdirSync(dirname(sum), { recursive: true })
  writeFileSync(sum, Buffer.concat([encodeSumHeader(statSync(file, { bigint: true }).ino), ...records]))
  return { bytes }
}
