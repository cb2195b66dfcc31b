/**
 * FastCDC content-defined chunking, as published by Xia et al., "FastCDC: a Fast and Efficient
 * Content-Defined Chunking Approach for Data Deduplication" (USENIX ATC 2016): a Gear rolling
 * hash, cut-point skipping below the minimum size, and normalized chunking (a mask with more
 * 1 bits before the average size, one with fewer after it).
 *
 * This is the 2016 algorithm exactly as the reference implementation the Rust crate `fastcdc`
 * (module v2016) follows: the same 64-bit Gear table (the high 8 bytes of the MD5 of 64 bytes
 * of value i, for i in 0..255, as in the C reference of destor), the same spread masks, the
 * same cut rule (a cut is at the position whose hash matched; the byte there starts the next
 * chunk). It gives that crate's published chunk boundaries and hashes (see
 * test/03-store/fastcdc.test.ts and docs/chunked-objects.md). JavaScript has no cheap 64-bit
 * integers, so the hash is kept as two 32-bit halves.
 */
import { createHash } from 'node:crypto'

/** Mask for each number of bits (index), from the C reference (64 B to 128 KiB) and restic. */
const MASKS: ReadonlyArray<readonly [number, number]> = [
  [0, 0],
  [0, 0],
  [0, 0],
  [0, 0],
  [0, 0],
  [0x00000000, 0x01804110], // unused except for NC 3
  [0x00000000, 0x01803110], // 64B
  [0x00000000, 0x18035100], // 128B
  [0x00000018, 0x00035300], // 256B
  [0x00000190, 0x00353000], // 512B
  [0x00005900, 0x03530000], // 1KB
  [0x0000d900, 0x03530000], // 2KB
  [0x0000d901, 0x03530000], // 4KB
  [0x0000d903, 0x03530000], // 8KB
  [0x0000d903, 0x13530000], // 16KB
  [0x0000d90f, 0x03530000], // 32KB
  [0x0000d903, 0x03537000], // 64KB
  [0x0000d907, 0x03537000], // 128KB
  [0x0000d907, 0x07537000], // 256KB
  [0x0000d917, 0x07537000], // 512KB
  [0x0000d917, 0x47537000], // 1MB
  [0x0000d917, 0x67537000], // 2MB
  [0x0000d937, 0x67537000], // 4MB
  [0x0000d937, 0x77537000], // 8MB
  [0x0000d937, 0x77577000], // 16MB
  [0x0000db37, 0x77577000], // unused except for NC 3
]

/** The Gear table: high and low halves of GEAR[i] = the first 8 bytes of MD5(64 bytes of i), big-endian. */
const GEAR_HI = new Uint32Array(256)
const GEAR_LO = new Uint32Array(256)
for (let i = 0; i < 256; i++) {
  const d = createHash('md5').update(Buffer.alloc(64, i)).digest()
  GEAR_HI[i] = d.readUInt32BE(0)
  GEAR_LO[i] = d.readUInt32BE(4)
}

export interface ChunkSizes {
  /** No cut before this many bytes (cut-point skipping). */
  min: number
  /** The size normalized chunking centres on (its rounded log2 picks the masks). */
  avg: number
  /** A chunk never exceeds this. */
  max: number
  /** Normalization level 0-3 (default 1, as the reference crate's default). */
  level?: number
}

export interface Cutter {
  /** Where the chunk starting at `start` of `data[..end]` ends, and the Gear hash there. */
  cut(data: Uint8Array, start: number, end: number): { at: number; hashHi: number; hashLo: number }
}

/** A FastCDC cutter for these sizes; bad sizes are a RangeError naming the rule. */
export function fastcdc(sizes: ChunkSizes): Cutter {
  const { min, avg, max } = sizes
  const level = sizes.level ?? 1
  if (!(Number.isSafeInteger(min) && min >= 64 && min <= 1 << 20))
    throw new RangeError(`min chunk size ${min}: 64 to 1 MiB`)
  if (!(Number.isSafeInteger(avg) && avg >= 256 && avg <= 4 << 20))
    throw new RangeError(`avg chunk size ${avg}: 256 to 4 MiB`)
  if (!(Number.isSafeInteger(max) && max >= 1024 && max <= 16 << 20))
    throw new RangeError(`max chunk size ${max}: 1 KiB to 16 MiB`)
  if (!(min <= avg && avg <= max))
    throw new RangeError(`chunk sizes must be min <= avg <= max, got ${min}, ${avg}, ${max}`)
  if (!(Number.isInteger(level) && level >= 0 && level <= 3))
    throw new RangeError(`normalization level ${level}: 0 to 3`)
  const bits = Math.round(Math.log2(avg))
  const [sHi, sLo] = MASKS[bits + level] as readonly [number, number]
  const [lHi, lLo] = MASKS[bits - level] as readonly [number, number]
  return {
    cut(data, start, end) {
      let remaining = end - start
      if (remaining <= min) return { at: end, hashHi: 0, hashLo: 0 }
      let center = avg
      if (remaining > max) remaining = max
      else if (remaining < center) center = remaining
      let i = start + min
      const centerAt = start + center
      const last = start + remaining
      let hi = 0
      let lo = 0
      for (; i < centerAt; i++) {
        const b = data[i] as number
        const sum = ((lo << 1) >>> 0) + (GEAR_LO[b] as number)
        hi = (((hi << 1) | (lo >>> 31)) + (GEAR_HI[b] as number) + (sum > 0xffffffff ? 1 : 0)) >>> 0
        lo = sum >>> 0
        if ((hi & sHi) === 0 && (lo & sLo) === 0) return { at: i, hashHi: hi, hashLo: lo }
      }
      for (; i < last; i++) {
        const b = data[i] as number
        const sum = ((lo << 1) >>> 0) + (GEAR_LO[b] as number)
        hi = (((hi << 1) | (lo >>> 31)) + (GEAR_HI[b] as number) + (sum > 0xffffffff ? 1 : 0)) >>> 0
        lo = sum >>> 0
        if ((hi & lHi) === 0 && (lo & lLo) === 0) return { at: i, hashHi: hi, hashLo: lo }
      }
      return { at: i, hashHi: hi, hashLo: lo }
    },
  }
}

/** The lengths of the chunks `data` is cut into (all of it; empty data has none). */
export function chunkLengths(cutter: Cutter, data: Uint8Array): number[] {
  const out: number[] = []
  for (let at = 0; at < data.length; ) {
    const { at: end } = cutter.cut(data, at, data.length)
    out.push(end - at)
    at = end
  }
  return out
}
