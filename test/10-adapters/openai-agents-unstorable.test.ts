/**
 * NoaSession: an item JSON cannot give back as it is is refused by addItems with a named error
 * naming the item and the path to the bad value, nothing of the call written; what JSON gives
 * back is stored; and an item whose stored bytes are not JSON is a named error at the read.
 */
import { join } from 'node:path'
import type { AgentInputItem } from '@openai/agents'
import { describe, expect, it } from 'vitest'
import { readWorkspace } from '../../dist/src/engine/index.js'
import { NoaError } from '../../dist/src/index.js'
import { NoaSession } from '../../dist/src/openai-agents/index.js'
import { runCli, tempDir } from '../helpers/index.js'

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

const user = (text: string): AgentInputItem => ({ type: 'message', role: 'user', content: text })

describe('NoaSession refuses at addItems what JSON cannot give back', () => {
  const refused: Array<[string, () => unknown, string, RegExp]> = [
    [
      'a Map',
      () => ({ ...user('x'), providerData: { seen: new Map([['a', 1]]) } }),
      '$.providerData.seen',
      /a Map \(JSON keeps no Map: it would come back as \{\}\)/,
    ],
    [
      'a Set',
      () => ({ ...user('x'), providerData: { tags: new Set(['a']) } }),
      '$.providerData.tags',
      /a Set \(JSON keeps no Set/,
    ],
    [
      'a Date',
      () => ({ ...user('x'), providerData: { at: new Date(0) } }),
      '$.providerData.at',
      /a Date \(JSON keeps no Date: it would come back as "1970-01-01T00:00:00.000Z"\)/,
    ],
    [
      'a Uint8Array',
      () => ({
        type: 'message',
        role: 'user',
        content: [{ type: 'input_image', image: new Uint8Array([1, 2]) }],
      }),
      '$.content[0].image',
      /a Uint8Array/,
    ],
    [
      'a Buffer',
      () => ({ ...user('x'), providerData: { raw: Buffer.from('hi') } }),
      '$.providerData.raw',
      /a Buffer/,
    ],
    [
      'a class instance',
      () => ({ ...user('x'), providerData: { p: new Point(1) } }),
      '$.providerData.p',
      /a Point \(JSON keeps no Point/,
    ],
    [
      'a function',
      () => ({ ...user('x'), callback: () => 1 }),
      '$.callback',
      /a function \(JSON leaves it out\)/,
    ],
    [
      'a Symbol',
      () => ({ ...user('x'), providerData: { s: Symbol('s') } }),
      '$.providerData.s',
      /a Symbol \(JSON leaves it out\)/,
    ],
    [
      'a Symbol key',
      () => ({ ...user('x'), providerData: { [Symbol('k')]: 1 } }),
      '$.providerData',
      /a Symbol key/,
    ],
    ['a BigInt', () => ({ ...user('x'), providerData: { n: 10n } }), '$.providerData.n', /a BigInt/],
    [
      'NaN',
      () => ({ ...user('x'), providerData: { score: Number.NaN } }),
      '$.providerData.score',
      /NaN \(JSON writes null for it\)/,
    ],
    [
      'Infinity',
      () => ({ ...user('x'), providerData: { score: -Infinity } }),
      '$.providerData.score',
      /-Infinity/,
    ],
    [
      'undefined in an array',
      () => ({ ...user('x'), providerData: { list: [1, undefined] } }),
      '$.providerData.list[1]',
      /undefined in an array \(JSON writes null\)/,
    ],
    [
      'a hole in an array',
      () => {
        const list: number[] = [1]
        list[2] = 3 // list[1] is a hole
        return { ...user('x'), providerData: { list } }
      },
      '$.providerData.list[1]',
      /a hole in an array/,
    ],
    [
      'a cycle',
      () => {
        const item: Record<string, unknown> = { ...user('x'), providerData: { parts: [] as unknown[] } }
        ;(item.providerData as { parts: unknown[] }).parts.push({ back: item.providerData })
        return item
      },
      '$.providerData.parts[0].back',
      /a cycle \(it refers back to \.providerData\)/,
    ],
    [
      'a key that needs quoting',
      () => ({ ...user('x'), providerData: { 'a b': new Map() } }),
      '$.providerData["a b"]',
      /a Map/,
    ],
  ]

  it.each(refused)(
    '%s, naming the item and the path, and writes nothing of the call',
    async (_, make, path, why) => {
      const root = join(tempDir('noa-oa-refuse-'), 'noa')
      const s = new NoaSession({ root, sessionId: 's' })
      try {
        await s.addItems([user('before')])
        const before = await entriesOf(root, 'oa.s')
        const err = (await s
          .addItems([user('fine'), make() as AgentInputItem])
          .catch((e: unknown) => e)) as NoaError
        expect(err).toBeInstanceOf(NoaError)
        expect(err.code).toBe('NOA_BAD_ARGUMENT')
        expect(err.message).toMatch(/^addItems: item 1 cannot be stored as JSON: at /)
        expect(err.message).toContain(`at ${path.slice(1)}, `)
        expect(err.message).toMatch(why)
        expect(err.details).toEqual({ field: 'items[1]', path })
        expect(await entriesOf(root, 'oa.s')).toBe(before)
        expect(await s.getItems()).toEqual([user('before')])
      } finally {
        await s.close()
      }
    },
  )

  it('stores what JSON gives back: plain data, null-prototype objects, lone surrogates; undefined properties are left out, -0 is 0', async () => {
    const root = join(tempDir('noa-oa-store-'), 'noa')
    const s = new NoaSession({ root, sessionId: 's' })
    const bare = Object.assign(Object.create(null) as Record<string, unknown>, { k: [1, { deep: null }] })
    const items = [
      {
        ...user('a \ud800 lone surrogate and 😀'),
        providerData: { bare, nested: [[true, false]], n: -0, x: 1.5e-300 },
      },
      {
        type: 'message',
        role: 'assistant',
        status: 'completed',
        content: [{ type: 'output_text', text: 'ok' }],
        id: undefined,
      },
    ]
    try {
      await s.addItems(items as AgentInputItem[])
    } finally {
      await s.close()
    }
    const again = new NoaSession({ root, sessionId: 's' })
    try {
      const back = (await again.getItems()) as unknown as Array<Record<string, unknown>>
      expect(back).toStrictEqual(JSON.parse(JSON.stringify(items)))
      expect(Object.hasOwn(back[1] as object, 'id')).toBe(false)
      expect(String(back[0]?.content).includes('\ud800')).toBe(true)
      expect(Object.is((back[0]?.providerData as { n: number } | undefined)?.n, 0)).toBe(true)
    } finally {
      await again.close()
    }
  })

  it('reads an item whose stored bytes are not JSON as a named error', async () => {
    const root = join(tempDir('noa-oa-damaged-'), 'noa')
    const blob = runCli(['blob', 'put', '-', '--root', root, '--json'], { input: '{"type":"message",' })
    const hash = (JSON.parse(blob.stdout) as { blob: string }).blob
    const r = runCli(['append', 'oa.s', '--root', root], {
      input: `${JSON.stringify({ op: 'write', path: 'items/000000000001', blob: hash })}\n`,
    })
    expect(r.status, r.stderr).toBe(0)
    const s = new NoaSession({ root, sessionId: 's' })
    try {
      const err = (await s.getItems().catch((e: unknown) => e)) as NoaError
      expect(err).toBeInstanceOf(NoaError)
      expect(err.code).toBe('NOA_CORRUPT_OBJECT')
      expect(err.message).toBe(`session s: item blob ${hash} is not JSON`)
    } finally {
      await s.close()
    }
  })
})
