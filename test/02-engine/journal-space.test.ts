/**
 * The journal's space accounting (src/workers/journal.ts), in memory: a frame is never placed
 * over anything the durable header may still name as the start of replay. The case a crash
 * explorer run found: a checkpoint reclaims every frame, so its header names the head as the
 * tail; the next round wraps, writing its marker there; later rounds must not write over that
 * marker before another header moves the tail past it, or a crash in between leaves a header
 * pointing at garbage and replay loses every frame after it.
 */
import { describe, expect, it } from 'vitest'
import { DATA_START, SECTOR } from '../../dist/src/engine/journal-format.js'
import { Journal } from '../../dist/src/workers/journal.js'

const SIZE = DATA_START + 8 * SECTOR // 8 sectors of frames

function frame(j: Journal, length: number) {
  return { lsn: j.nextLsn, length, pieces: [] as Buffer[] }
}

/** Places and records a frame as the owner does; returns where it went, or null. */
function commit(j: Journal, length: number, file: { syncedLsn: number }): number | null {
  const place = j.place(length)
  if (place === null) return null
  const wrapped = place.wrapAt !== null
  const f = { ...frame(j, length), lsn: j.nextLsn + (wrapped ? 1 : 0) }
  j.written(f as never, place.offset, [file], wrapped)
  return place.offset
}

/** A checkpoint: every file durable, the header names the new tail. */
function checkpoint(j: Journal, file: { syncedLsn: number }): { lsn: number; offset: number } | null {
  file.syncedLsn = j.nextLsn
  const tail = j.reclaimable()
  if (tail === null) return null
  j.reclaimed(tail)
  return { lsn: j.tailLsn, offset: j.tailOffset }
}

/** A checkpoint after which the file is durable up to `lsn` (the frames before it can go). */
function checkpointTo(j: Journal, file: { syncedLsn: number }, lsn: number) {
  file.syncedLsn = lsn
  const tail = j.reclaimable()
  if (tail === null) return null
  j.reclaimed(tail)
  return { lsn: j.tailLsn, offset: j.tailOffset }
}

describe('journal space', () => {
  it('keeps a wrap marker named by the durable tail until a later header moves past it', () => {
    const j = new Journal('/nonexistent', '/nonexistent/journal', 'test', SIZE)
    const file = { syncedLsn: 0 }
    const frames = [2, 2, 2].map(() => commit(j, 2 * SECTOR, file))
    expect(frames).toEqual([DATA_START, DATA_START + 2 * SECTOR, DATA_START + 4 * SECTOR])
    // Everything durable: the header names the head (6 sectors in) as where replay starts.
    const tail = checkpoint(j, file)
    expect(tail).toEqual({ lsn: 4, offset: DATA_START + 6 * SECTOR })
    // A frame of 3 sectors does not fit before the end: it wraps, its marker at that tail.
    expect(commit(j, 3 * SECTOR, file)).toBe(DATA_START)
    expect(j.frames.map((f) => [f.lsn, f.offset])).toEqual([
      [4, DATA_START + 6 * SECTOR],
      [5, DATA_START],
    ])
    expect(commit(j, 2 * SECTOR, file)).toBe(DATA_START + 3 * SECTOR)
    // The next would reach the marker (the durable tail): refused until a checkpoint.
    expect(commit(j, 2 * SECTOR, file)).toBeNull()
    expect(j.used()).toBe(2 * SECTOR + 5 * SECTOR)
    // After the checkpoint the header names the frame after the marker, and space is free again.
    expect(checkpoint(j, file)).toEqual({ lsn: 7, offset: DATA_START + 5 * SECTOR })
    expect(commit(j, 2 * SECTOR, file)).toBe(DATA_START + 5 * SECTOR)
  })

  it('never places a frame over a live one, whatever the sizes (every placement checked)', () => {
    const j = new Journal('/nonexistent', '/nonexistent/journal', 'test', SIZE)
    const file = { syncedLsn: 0 }
    let seed = 7
    const next = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31
      // The high bits: an LCG's low bits repeat with a tiny period (seed % 4 made nearly every
      // step a checkpoint, and 5000 steps placed 18 frames).
      return seed >>> 8
    }
    // The durable tail, as the last header written names it.
    let durableTail = { lsn: 1, offset: DATA_START }
    for (let step = 0; step < 5000; step++) {
      if (next() % 4 === 0) {
        // A checkpoint after which the file is durable only up to some frame: the live part
        // of the journal stays long, so rounds wrap right up to the tail.
        const synced = file.syncedLsn + (next() % Math.max(1, j.nextLsn - file.syncedLsn + 1))
        const t = checkpointTo(j, file, synced)
        if (t) durableTail = t
        continue
      }
      const length = (1 + (next() % 3)) * SECTOR
      const before = j.head
      const place = j.place(length)
      if (place === null) continue
      // What replay reads from the durable tail up to the head must not be written over.
      // (Nothing when the tail is the next lsn: every frame before it reclaimed.)
      const live: Array<[number, number]> = []
      const tailAt = durableTail.offset >= SIZE ? DATA_START : durableTail.offset
      if (durableTail.lsn < j.nextLsn) {
        if (before > tailAt) live.push([tailAt, before])
        else live.push([tailAt, SIZE], [DATA_START, before])
      }
      const writes: Array<[number, number]> = [[place.offset, place.offset + length]]
      if (place.wrapAt !== null) writes.push([place.wrapAt, place.wrapAt + SECTOR])
      for (const [a, b] of writes) {
        for (const [c, d] of live) {
          // The marker is written at the head itself (the end of the live part): allowed.
          const overlap = a < d && c < b
          expect(overlap, `step ${step}: write [${a}, ${b}) over live [${c}, ${d})`).toBe(false)
        }
      }
      const wrapped = place.wrapAt !== null
      j.written(
        { lsn: j.nextLsn + (wrapped ? 1 : 0), length, pieces: [] } as never,
        place.offset,
        [file],
        wrapped,
      )
    }
  })
})
