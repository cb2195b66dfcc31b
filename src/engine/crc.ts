/**
 * CRC32C (Castagnoli), through @node-rs/crc32: hardware instructions, about 1.4 GB/s here, safe
 * in worker threads. A process's first 64 KiB are summed with the table below instead: a
 * one-shot CLI command (an append of a few entries, a sidecar header) sums a few hundred bytes,
 * microseconds in JS, while loading the native module costs a fresh process 5-15 ms (resolve,
 * read, dlopen). A long-lived writer loads it once past that budget, where its speed pays.
 */
import { createRequire } from 'node:module'

type Crc32c = (data: Uint8Array, initial?: number) => number
let fn: Crc32c | null = null
let jsBudget = 64 << 10

/** CRC32C of `data`, continuing from `initial` (the CRC of the bytes before it). */
export function crc32c(data: Uint8Array, initial = 0): number {
  if (fn === null && data.length <= jsBudget) {
    jsBudget -= data.length
    return crcTable(data, 0, data.length, initial)
  }
  fn ??= (createRequire(import.meta.url)('@node-rs/crc32') as { crc32c: Crc32c }).crc32c
  return fn(data, initial) >>> 0
}

let table: Uint32Array | null = null

/**
 * CRC32C of `buf[start, end)` in plain JS, the same value as `crc32c`: for the 28-byte records
 * of a checksum sidecar, read by the thousand, where a native call each costs more than the sum.
 */
export function crc32cSmall(buf: Uint8Array, start: number, end: number): number {
  return crcTable(buf, start, end, 0)
}

function crcTable(buf: Uint8Array, start: number, end: number, initial: number): number {
  if (table === null) {
    table = new Uint32Array(256)
    for (let n = 0; n < 256; n++) {
      let c = n
      for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1
      table[n] = c >>> 0
    }
  }
  let c = (initial ^ 0xffffffff) >>> 0
  for (let i = start; i < end; i++) c = (table[(c ^ (buf[i] as number)) & 0xff] as number) ^ (c >>> 8)
  return (c ^ 0xffffffff) >>> 0
}
