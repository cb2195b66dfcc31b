/**
 * Record timestamps and ids as Norma makes them: `time.Now().UTC().Format(time.RFC3339Nano)` and
 * `newID()` (16 random bytes in lower-case hex, or the hex of the timestamp text when the random
 * source fails).
 */
import { randomFillSync } from 'node:crypto'

/** Unix time in nanoseconds. */
export type NanoClock = () => bigint

// The anchor pairs a wall-clock reading with a monotonic one. The first comes from
// performance.timeOrigin (sub-millisecond); later ones from Date.now() when the wall clock moved.
let anchorWallNs = BigInt(Math.round((performance.timeOrigin + performance.now()) * 1000)) * 1000n
let anchorHr = process.hrtime.bigint()

/**
 * The wall clock in nanoseconds. Date.now() has millisecond resolution, so the nanoseconds come
 * from the monotonic clock measured since an anchor; when that estimate and Date.now() disagree
 * by more than 2 ms (the wall clock was stepped), the anchor moves, so timestamps follow the wall
 * clock as Go's do.
 */
export function nowNanos(): bigint {
  const hr = process.hrtime.bigint()
  const estimate = anchorWallNs + (hr - anchorHr)
  const wallMs = Date.now()
  const driftMs = Number(estimate / 1_000_000n) - wallMs
  if (driftMs > 2 || driftMs < -2) {
    anchorWallNs = BigInt(wallMs) * 1_000_000n
    anchorHr = hr
    return anchorWallNs
  }
  return estimate
}

function pad(n: number, width: number): string {
  return String(n).padStart(width, '0')
}

/**
 * Go's RFC3339Nano in UTC: `2006-01-02T15:04:05.999999999Z`, the fraction without trailing
 * zeros and without the dot when it is zero.
 */
export function formatTimestamp(ns: bigint): string {
  let sec = ns / 1_000_000_000n
  let frac = ns % 1_000_000_000n
  if (frac < 0n) {
    frac += 1_000_000_000n
    sec -= 1n
  }
  const d = new Date(Number(sec) * 1000)
  if (Number.isNaN(d.getTime())) throw new RangeError(`timestamp out of range: ${ns} ns`)
  const year = d.getUTCFullYear()
  let s =
    `${year < 0 ? `-${pad(-year, 4)}` : pad(year, 4)}-${pad(d.getUTCMonth() + 1, 2)}-${pad(d.getUTCDate(), 2)}` +
    `T${pad(d.getUTCHours(), 2)}:${pad(d.getUTCMinutes(), 2)}:${pad(d.getUTCSeconds(), 2)}`
  if (frac !== 0n) s += `.${frac.toString().padStart(9, '0').replace(/0+$/, '')}`
  return `${s}Z`
}

export interface IdOptions {
  /** Random source (default: the CSPRNG); when it throws, the id is the timestamp's hex. */
  random?: (size: number) => Uint8Array
  clock?: NanoClock
}

// crypto.randomBytes costs microseconds per call; ids draw from a pool refilled 256 ids at a time.
const pool = Buffer.alloc(16 * 256)
let poolAt = pool.length

function pooledRandom(size: number): Uint8Array {
  if (poolAt + size > pool.length) {
    randomFillSync(pool)
    poolAt = 0
  }
  const out = pool.subarray(poolAt, poolAt + size)
  poolAt += size
  return out
}

/** A new record, session or agent id: 32 lower-case hex characters from 128 random bits. */
export function newTranscriptId(options: IdOptions = {}): string {
  try {
    const bytes = (options.random ?? pooledRandom)(16)
    if (bytes.length !== 16) throw new Error('short read')
    return Buffer.from(bytes.buffer, bytes.byteOffset, 16).toString('hex')
  } catch {
    // Norma's fallback: unique enough for one writer, and still hex.
    return Buffer.from(formatTimestamp((options.clock ?? nowNanos)()), 'utf8').toString('hex')
  }
}
