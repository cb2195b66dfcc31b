/**
 * Object logs (engine/object-log.ts): files an append writes beside its entries with `packed`,
 * appended to one file of the owner's instead of each created as its own. The format's valid
 * prefix (torn tails, flipped bytes, a record larger than a read chunk); appends that create no
 * file per object, read back by the object store of another process; symlinks and other things
 * planted where a log or its folder should be; and a writer killed with SIGKILL whose log is then
 * cut at every byte: recovery still gives back every object an acknowledged append wrote.
 */
import { execFileSync, spawn } from 'node:child_process'
import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { newestHeader } from '../../dist/src/engine/journal-format.js'
import {
  encodeObjectRecords,
  OBJECT_LOG_HEADER,
  type ObjectRecord,
  scanObjectLog,
} from '../../dist/src/engine/object-log.js'
import { AgentLog, ObjectStore } from '../../dist/src/index.js'
import { FILE_PLANTS, FOLDER_PLANTS, outsideState } from '../helpers/hostile.js'
import { blobOf, tempDir } from '../helpers/index.js'

const DIST = new URL('../../dist/src/index.js', import.meta.url).href

function scanBuffer(buf: Buffer): { end: number; records: ObjectRecord[] } {
  const records: ObjectRecord[] = []
  const readAt = (into: Buffer, length: number, position: number): number => {
    const n = Math.max(0, Math.min(length, buf.length - position))
    buf.copy(into, 0, position, position + n)
    return n
  }
  const end = scanObjectLog(readAt, OBJECT_LOG_HEADER.length, buf.length, (r) => records.push(r))
  return { end, records }
}

function logOf(files: Array<{ path: string; data: Buffer }>): Buffer {
  return Buffer.concat([OBJECT_LOG_HEADER, encodeObjectRecords(files)])
}

/** An object's bytes and its path in the store. */
function object(text: string): { id: string; path: string; data: Buffer } {
  const data = Buffer.from(text)
  const id = blobOfBytes(data)
  return { id, path: `objects/${id.slice(0, 2)}/${id.slice(2)}`, data }
}

function blobOfBytes(data: Buffer): string {
  return execFileSync('sha256sum', { input: data }).toString().slice(0, 64)
}

function logFiles(root: string): string[] {
  const dir = join(root, 'object-logs')
  return existsSync(dir) ? readdirSync(dir).filter((n) => n.endsWith('.olog')) : []
}

describe('object log format', () => {
  const files = [
    { path: 'objects/aa/one', data: Buffer.from('first object') },
    { path: 'objects/bb/two', data: Buffer.alloc(0) },
    { path: 'objects/cc/ünï', data: Buffer.from('third, after an empty one') },
  ]

  it('reads back every record it wrote, names and offsets', () => {
    const log = logOf(files)
    const { end, records } = scanBuffer(log)
    expect(end).toBe(log.length)
    expect(records.map((r) => r.name)).toEqual(files.map((f) => f.path))
    for (const [i, r] of records.entries()) {
      expect(log.subarray(r.offset, r.offset + r.length).equals(files[i]?.data as Buffer)).toBe(true)
    }
  })

  it('stops at the last whole record, wherever the tail is cut', () => {
    const log = logOf(files)
    const ends = [OBJECT_LOG_HEADER.length]
    for (const r of scanBuffer(log).records) ends.push(r.offset + r.length)
    for (let cut = OBJECT_LOG_HEADER.length; cut <= log.length; cut++) {
      const { end, records } = scanBuffer(log.subarray(0, cut))
      const whole = ends.filter((e) => e <= cut)
      expect(end).toBe(whole[whole.length - 1])
      expect(records.length).toBe(whole.length - 1)
    }
  })

  it('stops at a record whose bytes changed (a flipped byte in a name, in data, or zeros)', () => {
    const log = logOf(files)
    const second = scanBuffer(log).records[1] as ObjectRecord
    const third = scanBuffer(log).records[2] as ObjectRecord
    const flipped = Buffer.from(log)
    flipped[third.offset + 3] = (flipped[third.offset + 3] as number) ^ 0x20 // in the third's data
    expect(scanBuffer(flipped).records.map((r) => r.name)).toEqual(files.slice(0, 2).map((f) => f.path))
    const zeroed = Buffer.from(log)
    zeroed.fill(0, second.offset + second.length)
    expect(scanBuffer(zeroed).end).toBe(second.offset + second.length)
  })

  it('reads a record larger than its read chunk', () => {
    const big = { path: 'objects/dd/big', data: Buffer.alloc(3 << 20, 7) }
    const log = logOf([files[0] as (typeof files)[0], big, files[2] as (typeof files)[0]])
    const { end, records } = scanBuffer(log)
    expect(end).toBe(log.length)
    expect(records.map((r) => r.length)).toEqual([
      files[0]?.data.length,
      big.data.length,
      files[2]?.data.length,
    ])
  })
})

describe('appends with packed files', () => {
  for (const workers of [0, 1]) {
    it(`writes no file per object, and another process's store reads them (workers: ${workers})`, async () => {
      const root = tempDir()
      // One owner, one object log (the lone lane's owner would have one of its own).
      const log = await AgentLog.open({ root, workers, loneInThread: false })
      const objects = Array.from({ length: 30 }, (_, i) => object(`object ${i} `.repeat(i + 1)))
      try {
        await log.append('w', { op: 'write', path: 'seed', blob: blobOf(0) })
        await Promise.all(
          objects.map((o, i) =>
            log.append(
              'w',
              { op: 'write', path: `f${i}`, blob: o.id },
              { files: [{ path: o.path, data: o.data, readOnly: true, packed: true }] },
            ),
          ),
        )
        // Nothing in objects/: every one went to the owner's object log.
        expect(existsSync(join(root, 'objects'))).toBe(false)
        expect(logFiles(root)).toHaveLength(1)
        // This process's store, while the log is open.
        const store = new ObjectStore(root)
        for (const o of objects) expect((await store.getBlob(o.id)).equals(o.data)).toBe(true)
      } finally {
        await log.close()
      }
      // Another process, after the close: every object by id, and the bytes match.
      const script = `
        const { ObjectStore } = await import(${JSON.stringify(DIST)})
        const store = new ObjectStore(${JSON.stringify(root)})
        const out = []
        for (const id of ${JSON.stringify(objects.map((o) => o.id))}) out.push(store.has(id) ? (await store.getBlob(id)).toString('base64') : null)
        console.log(JSON.stringify(out))`
      const got = JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script]).toString())
      expect(got).toEqual(objects.map((o) => o.data.toString('base64')))
      // No journal left, no temp file: the close made the log durable.
      expect(existsSync(join(root, 'journal'))).toBe(false)
    })
  }

  it('refuses a packed flag that is not a boolean, and a path in the object logs folder', async () => {
    const root = tempDir()
    const log = await AgentLog.open({ root, workers: 0 })
    try {
      const e = { op: 'write' as const, path: 'x', blob: blobOf(1) }
      await expect(
        log.append('w', e, {
          files: [{ path: 'objects/aa/b', data: Buffer.from('x'), packed: 'yes' as never }],
        }),
      ).rejects.toThrow(/files\[0\]\.packed must be a boolean/)
      await expect(
        log.append('w', e, { files: [{ path: 'object-logs/aa.olog', data: Buffer.from('x') }] }),
      ).rejects.toThrow(/object-logs/)
      expect(existsSync(join(root, 'agent-logs', 'w.log'))).toBe(false)
    } finally {
      await log.close()
    }
  })

  for (const plant of FOLDER_PLANTS) {
    it(`fails the append, writing nothing outside, when object-logs is ${plant.name}`, async () => {
      const root = tempDir()
      const outside = tempDir()
      await plant.plant(join(root, 'object-logs'), outside)
      const before = outsideState(outside)
      const log = await AgentLog.open({ root, workers: 0 })
      try {
        const o = object('planted')
        await expect(
          log.append(
            'w',
            { op: 'write', path: 'p', blob: o.id },
            { files: [{ path: o.path, data: o.data, readOnly: true, packed: true }] },
          ),
        ).rejects.toThrow(/object-logs/)
        // The entry was not written either.
        const text = existsSync(join(root, 'agent-logs', 'w.log'))
          ? readFileSync(join(root, 'agent-logs', 'w.log'), 'utf8')
          : ''
        expect(text).not.toContain('"p"')
      } finally {
        await log.close()
      }
      expect(outsideState(outside)).toEqual(before)
      // A reader ignores it: no log is read through it.
      expect(new ObjectStore(root).has(object('planted').id)).toBe(false)
    })
  }

  for (const plant of FILE_PLANTS) {
    it(`a reader never reads a log that is ${plant.name}`, async () => {
      const root = tempDir()
      const outside = tempDir()
      const o = object('outside object')
      // A valid log outside the root, and the thing planted under a log's name inside.
      writeFileSync(join(outside, 'real.olog'), logOf([{ path: o.path, data: o.data }]))
      mkdirSync(join(root, 'object-logs'))
      const name = join(root, 'object-logs', '0123456789abcdef.olog')
      if (plant.name.startsWith('a symlink')) symlinkSync(join(outside, 'real.olog'), name)
      else await plant.plant(name, outside)
      const before = outsideState(outside)
      expect(new ObjectStore(root).has(o.id)).toBe(false)
      expect(outsideState(outside)).toEqual(before)
    })
  }
})

describe('a writer killed with SIGKILL', () => {
  it('loses no object of an acknowledged append, wherever its object log is cut', async () => {
    const root = tempDir()
    const objects = Array.from({ length: 12 }, (_, i) => object(`killed ${i} `.repeat(20 + i)))
    // A child appends them one by one (each acknowledged before the next), says so, and is killed.
    const script = `
      const { AgentLog } = await import(${JSON.stringify(DIST)})
      const log = await AgentLog.open({ root: ${JSON.stringify(root)}, workers: 1 })
      await log.append('w', { op: 'write', path: 'seed', blob: '${blobOf(0)}' })
      await log.append('w', { op: 'write', path: 'seed2', blob: '${blobOf(1)}' })
      const objects = ${JSON.stringify(objects.map((o) => ({ id: o.id, path: o.path, data: o.data.toString('base64') })))}
      for (const [i, o] of objects.entries()) {
        await log.append('w', { op: 'write', path: 'f' + i, blob: o.id }, {
          files: [{ path: o.path, data: Buffer.from(o.data, 'base64'), readOnly: true, packed: true }],
        })
        process.stdout.write('acked ' + i + '\\n')
      }
      process.stdout.write('done\\n')
      setInterval(() => {}, 1000)`
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'inherit'],
    })
    let out = ''
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (d) => {
        out += d
        if (out.includes('done\n')) resolve()
      })
      child.on('exit', (code) => reject(new Error(`the child exited (${code}) before it was killed: ${out}`)))
    })
    child.removeAllListeners('exit')
    child.kill('SIGKILL')
    await new Promise((r) => child.once('exit', r))
    expect(out.match(/acked/g)).toHaveLength(objects.length)
    const [name] = logFiles(root)
    expect(name).toBeDefined()
    const logPath = join(root, 'object-logs', name as string)
    const size = readFileSync(logPath).length
    // The dead owner's journal still holds every frame (no checkpoint reclaimed one: its tail is
    // the first frame), so no byte of the log after its header was needed durable yet.
    const [jnl] = readdirSync(join(root, 'journal')).filter((n) => n.endsWith('.jnl'))
    const head = readFileSync(join(root, 'journal', jnl as string)).subarray(0, 1024)
    const header = newestHeader(head.subarray(0, 512), head.subarray(512, 1024))
    const live = header?.tailLsn === 1
    // The log as the kill left it, and cut at every point since its header: a power loss can
    // leave any prefix of what was not yet fdatasynced. Recovery (the next opener replays the
    // dead owner's journal) must give back every object, from the log or as a file of its own.
    // (On a machine slow enough for a checkpoint to run first, only the state as killed is tried.)
    const cuts = [size]
    if (live) {
      for (let k = 0; k < 24; k++) {
        cuts.push(OBJECT_LOG_HEADER.length + Math.floor(((size - OBJECT_LOG_HEADER.length) * k) / 24))
      }
    }
    for (const cut of cuts) {
      const copy = tempDir()
      cpSync(root, copy, { recursive: true })
      truncateSync(join(copy, 'object-logs', name as string), cut)
      const log = await AgentLog.open({ root: copy, workers: 0 })
      try {
        const entries = await log.recover('w')
        expect(entries.lastSeq).toBe(objects.length + 2)
      } finally {
        await log.close()
      }
      const store = new ObjectStore(copy)
      for (const o of objects) expect((await store.getBlob(o.id)).equals(o.data)).toBe(true)
      rmSync(copy, { recursive: true, force: true })
    }
  })
})
