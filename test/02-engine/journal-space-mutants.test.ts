/**
 * The journal's space accounting (src/workers/journal.ts) at its edges, in memory: a frame that
 * ends exactly at the end of the file, a head exactly at the end or one sector before it, a tail
 * exactly where a wrapped frame would end, a file durable exactly up to a frame. Each case pins
 * where the owner writes its next frame (and its wrap marker), or which frames a checkpoint may
 * free, at a boundary the randomized run of journal-space.test.ts reaches too rarely to check.
 */
import { describe, expect, it } from 'vitest'
import { DATA_START, decodeHeader, SECTOR } from '../../dist/src/engine/journal-format.js'
import { Journal } from '../../dist/src/workers/journal.js'

const S = SECTOR
const SIZE = DATA_START + 8 * S // 8 sectors of frames

interface File {
  syncedLsn: number
}

function journal(): Journal {
  return new Journal('/nonexistent', '/nonexistent/journal', 'test', SIZE)
}

/** Places and records a frame of `sectors` as the owner does (startRound, roundDone); returns its place. */
function commit(j: Journal, sectors: number, files: File[]) {
  const place = j.place(sectors * S)
  if (place === null) throw new Error(`a frame of ${sectors} sectors found no place`)
  const wrapped = place.wrapAt !== null
  j.written(
    { lsn: j.nextLsn + (wrapped ? 1 : 0), length: sectors * S, pieces: [] } as never,
    place.offset,
    files,
    wrapped,
  )
  return place
}

/** A checkpoint after which `file` is durable up to `lsn`: the header names the new tail. */
function checkpointTo(j: Journal, file: File, lsn: number) {
  file.syncedLsn = lsn
  const tail = j.reclaimable()
  if (tail !== null) j.reclaimed(tail)
  return tail
}

describe('journal space at its edges', () => {
  it('counts nothing live in a new journal, nor once every frame is reclaimed', () => {
    const j = journal()
    expect(j.used()).toBe(0)
    const file = { syncedLsn: 0 }
    commit(j, 2, [file])
    commit(j, 1, [file])
    expect(j.used()).toBe(3 * S)
    checkpointTo(j, file, 2)
    expect(j.frames).toEqual([])
    expect(j.head).toBe(DATA_START + 3 * S)
    expect(j.used()).toBe(0)
  })

  it('with nothing live: a frame that ends exactly at the end goes at the head, one too large for the file nowhere', () => {
    const j = journal()
    expect(j.place(8 * S)).toEqual({ offset: DATA_START, wrapAt: null })
    expect(j.place(9 * S)).toBeNull()
    expect(j.place(SIZE)).toBeNull()
  })

  it('with nothing live past the head: a frame as large as the data region wraps, its marker at the head', () => {
    const j = journal()
    const file = { syncedLsn: 0 }
    commit(j, 2, [file])
    commit(j, 2, [file])
    checkpointTo(j, file, 2)
    expect(j.place(8 * S)).toEqual({ offset: DATA_START, wrapAt: DATA_START + 4 * S })
    expect(j.place(5 * S)).toEqual({ offset: DATA_START, wrapAt: DATA_START + 4 * S })
    expect(j.place(4 * S)).toEqual({ offset: DATA_START + 4 * S, wrapAt: null })
  })

  it('with nothing live and the head at the very end: the next frame wraps with no marker (there is no room for one)', () => {
    const j = journal()
    const file = { syncedLsn: 0 }
    commit(j, 4, [file])
    commit(j, 4, [file])
    expect(j.head).toBe(SIZE)
    checkpointTo(j, file, 2)
    expect(j.place(2 * S)).toEqual({ offset: DATA_START, wrapAt: null })
    expect(commit(j, 2, [file])).toEqual({ offset: DATA_START, wrapAt: null })
    expect(j.frames.map((f) => [f.lsn, f.offset])).toEqual([[3, DATA_START]])
  })

  it('with frames live: a frame that ends exactly at the end goes at the head; one past it waits rather than run over the end', () => {
    const j = journal()
    const file = { syncedLsn: 0 }
    commit(j, 2, [file])
    commit(j, 2, [file])
    checkpointTo(j, file, 1) // live: [2 S, 4 S)
    expect(j.place(4 * S)).toEqual({ offset: DATA_START + 4 * S, wrapAt: null })
    // Past the end, and the start is not free up to the tail (2 sectors there, 5 wanted).
    expect(j.place(5 * S)).toBeNull()
  })

  it('with frames live: a frame past the end wraps when it ends before the tail, its marker at the head', () => {
    const j = journal()
    const file = { syncedLsn: 0 }
    for (let i = 0; i < 3; i++) commit(j, 2, [file])
    checkpointTo(j, file, 2) // live: [4 S, 6 S)
    expect(j.place(3 * S)).toEqual({ offset: DATA_START, wrapAt: DATA_START + 6 * S })
    // Ending exactly at the tail is not before it.
    expect(j.place(4 * S)).toBeNull()
    expect(commit(j, 3, [file])).toEqual({ offset: DATA_START, wrapAt: DATA_START + 6 * S })
    // The marker is live like a frame, with the lsn before the frame's.
    expect(j.frames.map((f) => [f.lsn, f.offset, f.length])).toEqual([
      [3, DATA_START + 4 * S, 2 * S],
      [4, DATA_START + 6 * S, S],
      [5, DATA_START, 3 * S],
    ])
    expect(j.nextLsn).toBe(6)
    expect(j.used()).toBe(SIZE - (DATA_START + 4 * S) + 3 * S)
  })

  it('with frames live and the head one sector before the end: the marker takes that last sector', () => {
    const j = journal()
    const file = { syncedLsn: 0 }
    commit(j, 2, [file])
    commit(j, 2, [file])
    commit(j, 3, [file])
    expect(j.head).toBe(SIZE - S)
    checkpointTo(j, file, 2) // live: [4 S, 7 S)
    expect(j.place(3 * S)).toEqual({ offset: DATA_START, wrapAt: SIZE - S })
  })

  it('with frames live and the head at the very end: a frame wraps to the start with no marker', () => {
    const j = journal()
    const file = { syncedLsn: 0 }
    commit(j, 2, [file])
    commit(j, 2, [file])
    commit(j, 4, [file])
    expect(j.head).toBe(SIZE)
    checkpointTo(j, file, 2) // live: [4 S, 8 S)
    expect(j.place(3 * S)).toEqual({ offset: DATA_START, wrapAt: null })
    expect(commit(j, 3, [file])).toEqual({ offset: DATA_START, wrapAt: null })
    expect(j.frames.map((f) => [f.lsn, f.offset])).toEqual([
      [3, DATA_START + 4 * S],
      [4, DATA_START],
    ])
  })

  it('records one frame, and no marker, for a round that did not wrap', () => {
    const j = journal()
    const file = { syncedLsn: 0 }
    commit(j, 2, [file])
    expect(j.frames.map((f) => [f.lsn, f.offset, f.length])).toEqual([[1, DATA_START, 2 * S]])
    expect(j.nextLsn).toBe(2)
    expect(j.used()).toBe(2 * S)
  })

  it('frees a frame only once every file it holds is durable up to it, and exactly up to it is enough', () => {
    const j = journal()
    const a = { syncedLsn: 0 }
    const b = { syncedLsn: 0 }
    commit(j, 1, [a, b]) // lsn 1
    commit(j, 1, [a]) // lsn 2
    // Nothing durable: nothing to free, and no header to write.
    expect(j.reclaimable()).toBeNull()
    a.syncedLsn = 2
    expect(j.reclaimable()).toBeNull() // b is not durable up to lsn 1
    b.syncedLsn = 1 // durable exactly up to the frame
    expect(j.reclaimable()).toEqual({ lsn: 3, offset: DATA_START + 2 * S, drop: 2 })
    a.syncedLsn = 1
    expect(j.reclaimable()).toEqual({ lsn: 2, offset: DATA_START + S, drop: 1 })
  })

  it('a tail at the very end is named as the start of the data region (a header saying the end is invalid)', () => {
    const j = journal()
    const file = { syncedLsn: 0 }
    commit(j, 4, [file])
    commit(j, 4, [file])
    const tail = checkpointTo(j, file, 2)
    expect(tail).toEqual({ lsn: 3, offset: SIZE, drop: 2 })
    expect(j.tailLsn).toBe(3)
    expect(j.tailOffset).toBe(DATA_START)
    expect(decodeHeader(j.headerBytes())).toMatchObject({ tailLsn: 3, tailOffset: DATA_START, size: SIZE })
  })
})
