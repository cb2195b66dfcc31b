/**
 * NoaSaver: what cannot be read back is refused at the write, with a named error and nothing written;
 * what can is stored and read back as the framework's own stores give it back; and stored bytes
 * that do not parse are a named error at the read, never a raw SyntaxError.
 *
 * LangGraph's serializer (JsonPlusSerializer) is the judge; the expectations for what it can
 * store are its own round trip (dumpsTyped, then loadsTyped), which is what SqliteSaver and
 * MemorySaver give back too (src/langgraph/storable.ts says what SqliteSaver does with the rest).
 */
import { chmodSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Serializable } from '@langchain/core/load/serializable'
import { HumanMessage } from '@langchain/core/messages'
import {
  type Checkpoint,
  emptyCheckpoint,
  JsonPlusSerializer,
  type SerializerProtocol,
  uuid6,
} from '@langchain/langgraph-checkpoint'
import { describe, expect, it } from 'vitest'
import { readWorkspace } from '../../dist/src/engine/index.js'
import { NoaError } from '../../dist/src/index.js'
import { NoaSaver } from '../../dist/src/langgraph/index.js'
import { runCli, tempDir } from '../helpers/index.js'

let nextStep = 0
function checkpoint(values: Record<string, unknown>): Checkpoint {
  const c = emptyCheckpoint()
  c.id = uuid6(nextStep++)
  c.channel_values = values
  c.channel_versions = Object.fromEntries(Object.keys(values).map((k) => [k, 1]))
  return c
}

const meta = { source: 'loop' as const, step: 0, parents: {} }
const config = (thread: string) => ({ configurable: { thread_id: thread, checkpoint_ns: '' } })

async function entriesOf(root: string, ws: string): Promise<number> {
  let n = 0
  try {
    for await (const _ of readWorkspace(root, ws)) n++
  } catch (err) {
    if ((err as NoaError).code === 'NOA_NOT_FOUND') return 0
    throw err
  }
  return n
}

class Point {
  constructor(readonly x: number) {}
}

/** A LangChain object of a namespace LangChain's loader does not know. */
class Gadget extends Serializable {
  lc_namespace = ['my_company', 'gadgets']
  override lc_serializable = true
  readonly size: number
  constructor(fields: { size: number }) {
    super(fields)
    this.size = fields.size
  }
}

function cyclic(): Record<string, unknown> {
  const o: Record<string, unknown> = { a: 1, list: [] as unknown[] }
  ;(o.list as unknown[]).push({ up: o })
  return o
}

function mapCycle(): Map<string, unknown> {
  const m = new Map<string, unknown>()
  m.set('me', { inner: m })
  return m
}

describe('NoaSaver refuses at the write what LangGraph cannot read back', () => {
  const refused: Array<[string, () => unknown, RegExp, string]> = [
    ['a function', () => () => 1, /a function: LangGraph's serializer writes nothing for it/, '$'],
    ['a Symbol', () => Symbol('s'), /a Symbol: LangGraph's serializer writes nothing for it/, '$'],
    ['a BigInt', () => 12n, /a BigInt \(JSON has no such number\)/, '$'],
    [
      'a BigInt inside',
      () => ({ counts: [1, { big: 2n }] }),
      /at \.counts\[1\]\.big, a BigInt/,
      '$.counts[1].big',
    ],
    ['a BigInt in a Map', () => new Map([['k', 3n]]), /at <Map value 0>, a BigInt/, '$<Map value 0>'],
    ['a cycle', cyclic, /at \.list\[0\]\.up, a cycle \(it refers back to the value itself\)/, '$.list[0].up'],
    ['a cycle through a Map', mapCycle, /a cycle/, '$<Map value 0>.inner'],
    [
      'an lc:1 object LangChain cannot load',
      () => ({ lc: 1, type: 'constructor', id: ['nowhere', 'Thing'], kwargs: {} }),
      /a serialized LangChain object that LangChain cannot load \(Invalid namespace/,
      '$',
    ],
    [
      'a LangChain class outside its import map',
      () => [new Gadget({ size: 3 })],
      /a serialized LangChain object that LangChain cannot load/,
      '$',
    ],
  ]

  it.each(refused)(
    'put refuses %s in a channel, naming it, and writes nothing',
    async (_, make, why, path) => {
      const root = join(tempDir('noa-lg-refuse-'), 'noa')
      const saver = await NoaSaver.open({ root })
      try {
        const first = await saver.put(config('t'), checkpoint({ ok: 1 }), meta, { ok: 1 })
        const before = await entriesOf(root, 'lg.t')
        const bad = checkpoint({ ok: 2, bad: make() })
        const err = (await saver
          .put(first, bad, { ...meta, step: 1 }, { ok: 2, bad: 1 })
          .catch((e: unknown) => e)) as NoaError
        expect(err).toBeInstanceOf(NoaError)
        expect(err.code).toBe('NOA_BAD_ARGUMENT')
        expect(err.message).toMatch(why)
        expect(err.message).toContain(`channel "bad" of checkpoint ${bad.id} of thread "t" cannot be stored`)
        expect(err.message).toMatch(/nothing was written$/)
        expect(err.details).toMatchObject({ field: 'checkpoint.channel_values.bad', path })
        expect(await entriesOf(root, 'lg.t')).toBe(before)
        const latest = await saver.getTuple(config('t'))
        expect(latest?.config.configurable?.checkpoint_id).toBe(first.configurable?.checkpoint_id)
        expect(latest?.checkpoint.channel_values).toEqual({ ok: 1 })
      } finally {
        await saver.close()
      }
    },
  )

  it.each(refused)(
    'putWrites refuses %s, naming the write, and writes nothing',
    async (_, make, why, path) => {
      const root = join(tempDir('noa-lg-refuse-w-'), 'noa')
      const saver = await NoaSaver.open({ root })
      try {
        const c = await saver.put(config('t'), checkpoint({ ok: 1 }), meta, { ok: 1 })
        const before = await entriesOf(root, 'lg.t')
        const err = (await saver
          .putWrites(
            c,
            [
              ['ok', 1],
              ['bad', make()],
            ],
            'task-1',
          )
          .catch((e: unknown) => e)) as NoaError
        expect(err).toBeInstanceOf(NoaError)
        expect(err.code).toBe('NOA_BAD_ARGUMENT')
        expect(err.message).toMatch(why)
        expect(err.message).toContain('write 1 (channel "bad") of task task-1 of checkpoint')
        expect(err.details).toMatchObject({ field: 'writes[1]', path })
        expect(await entriesOf(root, 'lg.t')).toBe(before)
        expect((await saver.getTuple(c))?.pendingWrites).toEqual([])
      } finally {
        await saver.close()
      }
    },
  )

  it('refuses the metadata and the checkpoint too, and a refused put leaves the ones queued with it alone', async () => {
    const root = join(tempDir('noa-lg-refuse-m-'), 'noa')
    const saver = await NoaSaver.open({ root })
    try {
      await expect(
        saver.put(config('m'), checkpoint({ ok: 1 }), { ...meta, n: 5n } as typeof meta, { ok: 1 }),
      ).rejects.toMatchObject({
        code: 'NOA_BAD_ARGUMENT',
        details: { field: 'metadata', path: '$.n' },
      })
      const c = checkpoint({ ok: 1 })
      c.versions_seen = { agent: { ok: 5n as unknown as number } }
      const err = (await saver.put(config('m'), c, meta, { ok: 1 }).catch((e: unknown) => e)) as NoaError
      expect(err.message).toMatch(
        /^the checkpoint \(but its channel values\) of checkpoint .* at \.versions_seen\.agent\.ok, a BigInt/,
      )
      expect(err.details).toMatchObject({ field: 'checkpoint', path: '$.versions_seen.agent.ok' })
      expect(await saver.getTuple(config('m'))).toBeUndefined()
      // Submitted in one turn: the good ones go out together in one commit, the refused one never joins it.
      const good1 = checkpoint({ v: 1 })
      const good2 = checkpoint({ v: 2 })
      const results = await Promise.allSettled([
        saver.put(config('batch'), good1, meta, { v: 1 }),
        saver.put(config('batch'), checkpoint({ v: () => 0 }), meta, { v: 1 }),
        saver.put(config('batch'), good2, meta, { v: 1 }),
      ])
      expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled'])
      const ids: string[] = []
      for await (const t of saver.list(config('batch'))) ids.push(t.checkpoint.id)
      expect(ids.sort()).toEqual([good1.id, good2.id].sort())
    } finally {
      await saver.close()
    }
  })
})

describe('NoaSaver stores what LangGraph reads back, as its serializer gives it back', () => {
  const serde = new JsonPlusSerializer()
  const roundTrip = async (v: unknown) => serde.loadsTyped(...(await serde.dumpsTyped(v)))
  const stored: Array<[string, () => unknown]> = [
    [
      'a Map',
      () =>
        new Map<string, unknown>([
          ['a', 1],
          ['b', { c: [1, 2] }],
        ]),
    ],
    ['a Set', () => new Set([1, 'two'])],
    ['a Map inside an object', () => ({ m: new Map([['k', new Set([1])]]) })],
    ['a RegExp and an Error', () => ({ r: /ab+c/gi, e: new Error('boom') })],
    ['a Uint8Array', () => new Uint8Array([0, 1, 255])],
    ['undefined inside', () => ({ a: 1, u: undefined, arr: [1, undefined, 3] })],
    ['LangChain messages', () => [new HumanMessage('hi'), new HumanMessage({ content: 'again', id: 'm-2' })]],
    [
      'the same object twice (no cycle)',
      () => {
        const shared = { v: 1 }
        return { a: shared, b: [shared] }
      },
    ],
    [
      'strings that look like the serializer markers',
      () => ['[Circular]', '[unable to serialize, circular reference is too complex to analyze]', '"lc":1,'],
    ],
    // Lossy, by JSON's rules, and so in every LangGraph store: stored as the serializer gives it back.
    ['a Date (an ISO string back)', () => ({ when: new Date(0) })],
    ['a class instance (a plain object back)', () => new Point(3)],
    ['NaN and Infinity (null back)', () => [Number.NaN, Number.POSITIVE_INFINITY]],
    ['a function inside an object (left out)', () => ({ a: 1, f: () => 2 })],
  ]

  it.each(stored)('%s', async (_, make) => {
    const root = join(tempDir('noa-lg-store-'), 'noa')
    const saver = await NoaSaver.open({ root })
    try {
      const value = make()
      const c = await saver.put(config('s'), checkpoint({ v: value }), meta, { v: 1 })
      await saver.putWrites(c, [['w', value]], 'task-1')
      const want = await roundTrip(value)
      // Read by a saver of its own, from the files (nothing cached from the put).
      const fresh = await NoaSaver.open({ root })
      try {
        const t = await fresh.getTuple(c)
        expect(t?.checkpoint.channel_values.v).toStrictEqual(want)
        expect(t?.pendingWrites?.[0]?.[2]).toStrictEqual(want)
      } finally {
        await fresh.close()
      }
    } finally {
      await saver.close()
    }
  })
})

describe('NoaSaver reads: stored bytes that do not parse are a named error', () => {
  it('a value its serializer cannot read back (stored by another serializer)', async () => {
    const root = join(tempDir('noa-lg-unreadable-'), 'noa')
    const json = new JsonPlusSerializer()
    // A serializer of its own kind is trusted at the write; this one writes nothing for one value.
    const writesNothing: SerializerProtocol = {
      dumpsTyped: async (v: unknown) => (v === 'nothing' ? ['json', new Uint8Array()] : json.dumpsTyped(v)),
      loadsTyped: (type: string, data: Uint8Array | string) => json.loadsTyped(type, data),
    }
    const writer = await NoaSaver.open({ root, serde: writesNothing })
    const c = await writer.put(config('u'), checkpoint({ ok: 1, gone: 'nothing' }), meta, { ok: 1, gone: 1 })
    await writer.putWrites(c, [['w', 'nothing']], 'task-1')
    await writer.close()
    const reader = await NoaSaver.open({ root })
    try {
      const err = (await reader.getTuple(c).catch((e: unknown) => e)) as NoaError
      expect(err).toBeInstanceOf(NoaError)
      expect(err.code).toBe('NOA_CORRUPT_OBJECT')
      expect(err.message).toMatch(
        new RegExp(
          `^channel "gone" of checkpoint ${c.configurable?.checkpoint_id} of thread "u": the serializer cannot read the stored value \\(json, in record [0-9a-f]{64}\\) back: Unexpected end of JSON input`,
        ),
      )
      expect(err.details.object).toMatch(/^[0-9a-f]{64}$/)
      expect((err.cause as Error).name).toBe('SyntaxError')
    } finally {
      await reader.close()
    }
  })

  it('a checkpoint file that is not a record, and a record damaged on disk', async () => {
    const root = join(tempDir('noa-lg-damaged-'), 'noa')
    const saver = await NoaSaver.open({ root })
    const marker = 'marker-4f1c9e'
    const c = await saver.put(config('d'), checkpoint({ note: marker }), meta, { note: 1 })
    await saver.close()

    // A `write` of a checkpoint path naming a blob that is not a record (by hand, with the CLI).
    const blob = runCli(['blob', 'put', '-', '--root', root, '--json'], { input: 'not a record {' })
    const hash = (JSON.parse(blob.stdout) as { blob: string }).blob
    const forged = uuid6(99)
    const r = runCli(['append', 'lg.d', '--root', root], {
      input: `${JSON.stringify({ op: 'write', path: `checkpoints/${forged}`, blob: hash })}\n`,
    })
    expect(r.status, r.stderr).toBe(0)
    const reader = await NoaSaver.open({ root })
    try {
      const err = (await reader
        .getTuple({ configurable: { thread_id: 'd', checkpoint_id: forged } })
        .catch((e: unknown) => e)) as NoaError
      expect(err).toBeInstanceOf(NoaError)
      expect(err.code).toBe('NOA_CORRUPT_OBJECT')
      expect(err.message).toBe(
        `checkpoint ${forged} of thread "d": checkpoint record ${hash} is not a JSON record`,
      )
    } finally {
      await reader.close()
    }

    // The same file damaged on disk: the store checks every object against its hash.
    const file = join(root, 'objects', hash.slice(0, 2), hash.slice(2))
    chmodSync(file, 0o644)
    writeFileSync(file, 'not a record }')
    const damaged = await NoaSaver.open({ root })
    try {
      const err = (await damaged
        .getTuple({ configurable: { thread_id: 'd', checkpoint_id: forged } })
        .catch((e: unknown) => e)) as NoaError
      expect(err).toBeInstanceOf(NoaError)
      expect(err.code).toBe('NOA_CORRUPT_OBJECT')
      expect(err.message).toMatch(
        new RegExp(`^checkpoint ${forged} of thread "d": .*is corrupt: ${file} hashes to`),
      )
    } finally {
      await damaged.close()
    }

    // A record the saver wrote, damaged where it lies (the owner's object log, whose records
    // carry a checksum): the log no longer holds it, and the read says which checkpoint lost it.
    const dir = join(root, 'object-logs')
    let changed = 0
    for (const f of readdirSync(dir)) {
      const bytes = readFileSync(join(dir, f))
      const at = bytes.indexOf(marker)
      if (at < 0) continue
      bytes[at] = 'M'.charCodeAt(0)
      writeFileSync(join(dir, f), bytes)
      changed++
    }
    expect(changed).toBe(1)
    const again = await NoaSaver.open({ root })
    try {
      const err = (await again.getTuple(c).catch((e: unknown) => e)) as NoaError
      expect(err).toBeInstanceOf(NoaError)
      expect(err.code).toBe('NOA_NOT_FOUND')
      expect(err.message).toMatch(
        new RegExp(`^checkpoint ${c.configurable?.checkpoint_id} of thread "d": blob [0-9a-f]{64} not found`),
      )
    } finally {
      await again.close()
    }
  })
})
