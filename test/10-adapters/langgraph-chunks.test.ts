/**
 * NoaSaver over chunked objects (store/chunks.ts): a channel value that grows at its end (a
 * message list) costs about its new chunks per checkpoint, not its whole bytes again, in this
 * process and after a restart; every checkpoint still loads, after gc too; and a thread written
 * before chunked objects (test/fixtures/pre-chunks) loads and goes on.
 */
import { cpSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { type Checkpoint, emptyCheckpoint, uuid6 } from '@langchain/langgraph-checkpoint'
import { describe, expect, it } from 'vitest'
import { SnapshotEngine } from '../../dist/src/index.js'
import { NoaSaver } from '../../dist/src/langgraph/index.js'
import { verifyStore } from '../../dist/src/store/verify.js'
import { ROOT_DIR, runCli, tempDir } from '../helpers/index.js'

/** Bytes of every file under the root but the commit journal (preallocated, removed at close). */
function rootBytes(root: string): number {
  let total = 0
  for (const name of readdirSync(root, { recursive: true, encoding: 'utf8' })) {
    if (name.startsWith('journal')) continue
    const st = statSync(join(root, name))
    if (st.isFile()) total += st.size
  }
  return total
}

/** A ~1.5 KB message, different at each turn. */
const message = (n: number) => `message ${n}: ${`${n} lorem ipsum dolor sit amet `.repeat(50)}`

class Chat {
  messages: string[] = []
  parent: string | undefined
  constructor(
    readonly saver: NoaSaver,
    readonly id: string,
    private step = 0,
  ) {}

  async turn(): Promise<Checkpoint> {
    const n = this.step++
    this.messages.push(message(n))
    const c = emptyCheckpoint()
    c.id = uuid6(n)
    c.channel_values = { messages: [...this.messages], count: n }
    c.channel_versions = { messages: n + 2, count: n + 2 }
    const config = await this.saver.put(
      { configurable: { thread_id: this.id, checkpoint_ns: '', checkpoint_id: this.parent } },
      c,
      { source: 'loop', step: n, parents: {} },
      { messages: n + 2, count: n + 2 },
    )
    this.parent = config.configurable?.checkpoint_id as string
    return c
  }
}

async function expectAllLoad(saver: NoaSaver, id: string, turns: number): Promise<void> {
  let seen = 0
  for await (const t of saver.list({ configurable: { thread_id: id } })) {
    const count = t.checkpoint.channel_values.count as number
    const messages = t.checkpoint.channel_values.messages as string[]
    expect(messages.length).toBe(count + 1)
    expect(messages[count]).toBe(message(count))
    seen++
  }
  expect(seen).toBe(turns)
}

describe('NoaSaver with chunked values', () => {
  it('stores a growing message list at about its new chunks per checkpoint, before and after a restart and gc', async () => {
    const root = tempDir()
    let saver = await NoaSaver.open({ root })
    let chat = new Chat(saver, 'long')
    for (let i = 0; i < 60; i++) await chat.turn()
    // The list is ~90 KB by now: stored whole, each checkpoint would add at least that.
    const before = rootBytes(root)
    await chat.turn()
    const grew = rootBytes(root) - before
    expect(JSON.stringify(chat.messages).length).toBeGreaterThan(90_000)
    expect(grew).toBeLessThan(40_000)
    await saver.close()

    // A new saver (as after a restart) reads the list of the value in the tree, and appends as little.
    saver = await NoaSaver.open({ root })
    const parent = chat.parent
    const messages = chat.messages
    chat = new Chat(saver, 'long', 61)
    chat.parent = parent
    chat.messages = messages
    const again = rootBytes(root)
    await chat.turn()
    expect(rootBytes(root) - again).toBeLessThan(40_000)
    await expectAllLoad(saver, 'long', 62)
    await saver.close()

    const engine = new SnapshotEngine({ root })
    const gc = await engine.gc({ graceMs: 0, dryRun: false })
    expect(gc.missing).toBe(0)
    expect(await verifyStore(new SnapshotEngine({ root }), 'lg.long', { objects: true })).toEqual([])
    saver = await NoaSaver.open({ root })
    await expectAllLoad(saver, 'long', 62)
    await saver.close()
  })

  it('loads a thread written before chunked objects and goes on with it', async () => {
    const root = join(tempDir(), 'root')
    cpSync(join(ROOT_DIR, 'test', 'fixtures', 'pre-chunks', 'root'), root, { recursive: true })
    const want = JSON.parse(
      readFileSync(join(ROOT_DIR, 'test', 'fixtures', 'pre-chunks', 'expected.json'), 'utf8'),
    ).thread as { id: string; checkpoint: string; messages: number; count: number }
    const saver = await NoaSaver.open({ root })
    const tuple = await saver.getTuple({ configurable: { thread_id: want.id } })
    expect(tuple?.checkpoint.id).toBe(want.checkpoint)
    const old = tuple?.checkpoint.channel_values.messages as string[]
    expect(old.length).toBe(want.messages)
    expect(old[2]).toBe(`${'m'.repeat(12_000)} 2`)
    const chat = new Chat(saver, want.id, 3)
    chat.parent = want.checkpoint
    chat.messages = [...old]
    for (let i = 0; i < 3; i++) await chat.turn()
    const latest = await saver.getTuple({ configurable: { thread_id: want.id } })
    expect(latest?.checkpoint.channel_values.messages).toEqual(chat.messages)
    let n = 0
    for await (const t of saver.list({ configurable: { thread_id: want.id } })) {
      expect((t.checkpoint.channel_values.messages as string[]).length).toBe(
        (t.checkpoint.channel_values.count as number) + 1,
      )
      n++
    }
    expect(n).toBe(6)
    await saver.close()
    const cli = runCli(['verify', '--objects', '--root', root])
    expect(cli.stderr).toBe('')
    expect(cli.status).toBe(0)
  })
})
