import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { afterEach, describe, expect, it } from 'vitest'
import { AgentLog, isNoaError } from '../../dist/src/index.js'
import {
  formatRecord,
  loadTranscript,
  type Message,
  messages,
  type TranscriptRecord,
  TranscriptWriter,
  transcriptPath,
} from '../../dist/src/transcript/index.js'
import { runCli, tempDir } from '../helpers/index.js'

const user = (text: string): Message => ({ role: 'user', content: [{ type: 'text', text }] })
const toolCall = (id: string): Message => ({
  role: 'assistant',
  content: [
    { type: 'text', text: 'calling' },
    { type: 'tool_use', id, name: 'Read', input: '{"path":"a.txt"}' },
  ],
})
const toolResult = (id: string): Message => ({
  role: 'user',
  content: [{ type: 'tool_result', tool_use_id: id, content: [{ type: 'text', text: 'data' }] }],
})

const logs: AgentLog[] = []
afterEach(async () => {
  await Promise.all(logs.splice(0).map((l) => l.close()))
})

async function openLog(root: string, extra: Parameters<typeof AgentLog.open>[0] = {}): Promise<AgentLog> {
  const log = await AgentLog.open({ root, workers: 1, ...extra })
  logs.push(log)
  return log
}

async function refusal(p: Promise<unknown>): Promise<{ code: string; message: string }> {
  try {
    await p
  } catch (err) {
    return { code: (err as { code: string }).code, message: (err as Error).message }
  }
  throw new Error('expected a refusal')
}

describe('writer: round trip and chaining', () => {
  for (const mode of ['buffered', 'durable'] as const) {
    it(`${mode}: what the writer writes, the loader reads back equal, chained record to record`, async () => {
      const dir = tempDir()
      const log = mode === 'durable' ? await openLog(join(dir, '.noa')) : undefined
      const w = new TranscriptWriter({ dir, sessionId: 'sess', ...(log ? { log } : {}) })
      expect(w.mode).toBe(mode)
      const written: TranscriptRecord[] = []
      written.push(await w.recordMessage(user('hello')))
      // Appends made together go out in one batch, still chained in order.
      written.push(
        ...(await Promise.all([
          w.recordMessage(toolCall('t1'), { input_tokens: 10, output_tokens: 3 }),
          w.recordMessage(toolResult('t1')),
          w.recordBoundary({ trigger: 'manual', pre_tokens: 99 }),
        ])),
      )
      await w.close()
      expect(w.err()).toBeNull()
      const t = await loadTranscript(transcriptPath(dir, 'sess'))
      expect(t.records).toEqual(written)
      expect(t.records[0]?.parent_uuid).toBeUndefined()
      for (let i = 1; i < t.records.length; i++) {
        expect(t.records[i]?.parent_uuid).toBe(t.records[i - 1]?.uuid)
      }
      expect(w.lastUuid).toBe(written[3]?.uuid)
      expect(messages(t.records).usage).toEqual({
        input_tokens: 10,
        output_tokens: 3,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
      })
      expect(statSync(w.path).mode & 0o777).toBe(0o644)
      if (log) {
        const status = await log.status()
        expect(status.flatMap((s) => s.rawFiles)).toContain(w.path)
      }
    })
  }

  it('a new writer continues a chain from parentUuid; a sidechain has its own file and chain', async () => {
    const dir = tempDir()
    const a = new TranscriptWriter({ dir, sessionId: 's' })
    const first = await a.recordMessage(user('one'))
    const b = new TranscriptWriter({ dir, sessionId: 's', parentUuid: first.uuid })
    const second = await b.recordMessage(user('two'))
    expect(second.parent_uuid).toBe(first.uuid)
    const side = new TranscriptWriter({ dir, sessionId: 's', agentId: 'a1' })
    const sub = await side.recordMessage(user('sub'))
    expect(sub).toMatchObject({ session_id: 's', agent_id: 'a1', is_sidechain: true })
    expect(sub.parent_uuid).toBeUndefined()
    expect(existsSync(join(dir, 's', 'subagents', 'agent-a1.jsonl'))).toBe(true)
    expect((await loadTranscript(transcriptPath(dir, 's'))).records).toHaveLength(2)
  })

  it('re-records loaded messages as they are with allowUnknown; refuses them without', async () => {
    const dir = tempDir()
    const src = join(dir, 'src.jsonl')
    writeFileSync(
      src,
      '{"uuid":"u","session_id":"s","timestamp":"t","type":"message","message":{"role":"user","content":[{"type":"skill","name":"pdf"},{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}]}}\n',
    )
    const [r] = (await loadTranscript(src)).records as [TranscriptRecord]
    const strict = new TranscriptWriter({ dir, sessionId: 'strict' })
    expect((await refusal(strict.recordMessage(r.message as Message))).message).toMatch(
      /^message\.content\[0\]\.type: unknown block type "skill"/,
    )
    const w = new TranscriptWriter({ dir, sessionId: 'copy', allowUnknown: true })
    const copy = await w.recordMessage(r.message as Message)
    expect(formatRecord(copy)).toContain(
      '"content":[{"type":"skill","name":"pdf"},{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}]',
    )
    expect((await loadTranscript(w.path)).records[0]?.message).toEqual(r.message)
  })
})

describe('writer: refusals write nothing', () => {
  const bad: Array<[string, unknown, RegExp]> = [
    [
      'invalid role',
      { role: 'system', content: [] },
      /^message\.role: must be one of user, assistant, got "system"/,
    ],
    ['role missing', { content: [] }, /^message\.role: must be a string, got undefined/],
    [
      'content missing',
      { role: 'user' },
      /^message\.content: must be an array of content blocks \(or null\)/,
    ],
    ['content a string', { role: 'user', content: 'hi' }, /^message\.content: must be an array/],
    [
      'text without text',
      { role: 'user', content: [{ type: 'text' }] },
      /^message\.content\[0\]: a text block needs text/,
    ],
    [
      'tool_use without id',
      { role: 'assistant', content: [{ type: 'tool_use', name: 'n', input: '{}' }] },
      /^message\.content\[0\]: a tool_use block needs id/,
    ],
    [
      'tool_use without input',
      { role: 'assistant', content: [{ type: 'tool_use', id: 'i', name: 'n' }] },
      /^message\.content\[0\]: a tool_use block needs input/,
    ],
    [
      'non-JSON tool input',
      { role: 'assistant', content: [{ type: 'tool_use', id: 'i', name: 'n', input: '{"a":' }] },
      /^message\.content\[0\]\.input: is not JSON: /,
    ],
    [
      'tool input as an object',
      { role: 'assistant', content: [{ type: 'tool_use', id: 'i', name: 'n', input: { a: 1 } }] },
      /^message\.content\[0\]\.input: must be JSON text \(a string, e\.g\. JSON\.stringify\(args\)\), got an object/,
    ],
    [
      'tool_result without tool_use_id',
      { role: 'user', content: [{ type: 'tool_result', content: [] }] },
      /^message\.content\[0\]: a tool_result block needs tool_use_id/,
    ],
    [
      'nested bad block',
      {
        role: 'user',
        content: [{ type: 'tool_result', tool_use_id: 't', content: [{ type: 'text', text: 5 }] }],
      },
      /^message\.content\[0\]\.content\[0\]\.text: must be a string, got number 5/,
    ],
    [
      'field of another type',
      { role: 'user', content: [{ type: 'text', text: 'x', tool_use_id: 't' }] },
      /^message\.content\[0\]\.tool_use_id: does not belong in a text block/,
    ],
    [
      'misspelled key',
      { role: 'user', content: [{ type: 'text', text: 'x', txt: 'y' }] },
      /^message\.content\[0\]\.txt: unknown key/,
    ],
    ['unknown block type', { role: 'user', content: [{ type: 'image' }] }, /unknown block type "image"/],
    [
      'empty tool id',
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: '' }] },
      /tool_use_id: must not be empty/,
    ],
  ]
  for (const [what, message, pattern] of bad) {
    it(what, async () => {
      const dir = tempDir()
      const w = new TranscriptWriter({ dir, sessionId: 's' })
      const r = await refusal(w.recordMessage(message as Message))
      expect(r.code).toBe('NOA_BAD_RECORD')
      expect(r.message).toMatch(pattern)
      expect(r.message).toMatch(/; nothing was written$/)
      await w.close()
      expect(existsSync(w.path)).toBe(false)
    })
  }

  it('bad usage and boundary meta', async () => {
    const w = new TranscriptWriter({ dir: tempDir(), sessionId: 's' })
    expect((await refusal(w.recordMessage(user('x'), { input_tokens: -1 }))).message).toMatch(
      /^usage\.input_tokens: must be a non-negative integer, got number -1/,
    )
    expect((await refusal(w.recordMessage(user('x'), { input_token: 1 } as never))).message).toMatch(
      /^usage\.input_token: unknown key/,
    )
    expect((await refusal(w.recordBoundary({ trigger: 'sometimes', pre_tokens: 1 }))).message).toMatch(
      /^boundary\.trigger: must be one of auto, reactive, manual/,
    )
    expect((await refusal(w.recordBoundary({} as never))).message).toMatch(
      /^boundary\.pre_tokens: is required/,
    )
    await w.close()
    expect(existsSync(w.path)).toBe(false)
  })

  it('the first refusal is kept in err(); the writer goes on and the chain skips what failed', async () => {
    const dir = tempDir()
    const w = new TranscriptWriter({ dir, sessionId: 's' })
    const a = await w.recordMessage(user('a'))
    // Fire and forget, as Norma's callers do: no unhandled rejection.
    void w.recordMessage({ role: 'robot', content: [] })
    const c = await w.recordMessage(user('c'))
    await w.close()
    expect(w.err()?.message).toMatch(/^message\.role/)
    expect(c.parent_uuid).toBe(a.uuid)
    expect((await loadTranscript(w.path)).records.map((r) => r.uuid)).toEqual([a.uuid, c.uuid])
  })

  it('refuses a record Norma could not read back (a line of 64 MiB or more)', async () => {
    const w = new TranscriptWriter({ dir: tempDir(), sessionId: 's' })
    const r = await refusal(w.recordMessage(user('x'.repeat(64 * 1024 * 1024))))
    expect(r.message).toMatch(/^record: is \d+ bytes; Norma reads lines of less than 64 MiB/)
    const ok = await w.recordMessage(user('small'))
    expect(ok.parent_uuid).toBeUndefined()
    await w.close()
    expect((await loadTranscript(w.path)).records).toHaveLength(1)
  })

  it('refuses unknown options and bad ids before touching anything', () => {
    const dir = tempDir()
    const attempt = (o: unknown) => {
      try {
        new TranscriptWriter(o as never)
      } catch (err) {
        if (isNoaError(err)) return `${err.code}: ${err.message}`
        throw err
      }
      return 'ok'
    }
    expect(attempt({ dir, sessionId: 's', durable: true })).toMatch(/^NOA_BAD_OPTION: unknown option durable/)
    expect(attempt({ dir, sessionId: '../x' })).toMatch(/^NOA_BAD_ARGUMENT: session id must be/)
    expect(attempt({ dir, sessionId: 's', agentId: 'a/b' })).toMatch(/^NOA_BAD_ARGUMENT: agent id must be/)
    expect(attempt({ dir, sessionId: 's', mode: 'fast' })).toMatch(/^NOA_BAD_OPTION: option mode/)
    expect(attempt({ dir, sessionId: 's', mode: 'buffered', root: dir })).toMatch(
      /root is for durable mode only/,
    )
  })
})

describe('writer: I/O failures', () => {
  it('buffered: the first error is kept, the writer goes on, the failed record is never a parent', async () => {
    const base = tempDir()
    const dir = join(base, 'sessions')
    writeFileSync(dir, 'not a folder')
    const w = new TranscriptWriter({ dir, sessionId: 's' })
    const r = await refusal(w.recordMessage(user('lost')))
    expect(r.code).toBe('NOA_NOT_DIRECTORY')
    rmSync(dir)
    const next = await w.recordMessage(user('kept'))
    expect(next.parent_uuid).toBeUndefined()
    expect((w.err() as NodeJS.ErrnoException).code).toBe(r.code)
    expect((await loadTranscript(w.path)).records.map((x) => x.uuid)).toEqual([next.uuid])
  })

  it('durable: a failed write is cut back, rejected, kept in err(); the next record chains to the last success', async () => {
    const dir = tempDir()
    const ioModule = join(dir, 'failing-io.mjs')
    // Fails the write (or the fdatasync) of any batch holding a marker; everything else goes through.
    writeFileSync(
      ioModule,
      `export default function wrap(io) {
        const has = (data, marker) => (Array.isArray(data) ? data : [data]).some((d) => Buffer.from(d).includes(marker))
        const fail = (syscall) => Object.assign(new Error('injected EIO'), { code: 'EIO', syscall })
        return {
          ...io,
          write(fd, data) {
            if (has(data, 'FAIL-WRITE')) throw fail('write')
            if (has(data, 'FAIL-SYNC')) { io.write(fd, data); throw fail('fdatasync') }
            return io.write(fd, data)
          },
        }
      }\n`,
    )
    const log = await openLog(join(dir, '.noa'), {
      ioModule: pathToFileURL(ioModule).href,
      inlineCommit: true,
    })
    const w = new TranscriptWriter({ dir, sessionId: 's', log })
    const a = await w.recordMessage(user('first'))
    const r = await refusal(w.recordMessage(user('FAIL-WRITE')))
    expect(r.code).toBe('EIO')
    const c = await w.recordMessage(user('third'))
    expect(c.parent_uuid).toBe(a.uuid)
    expect((w.err() as NodeJS.ErrnoException).code).toBe('EIO')
    // A failed fdatasync poisons the file in the engine: later appends are refused, not retried blindly.
    expect((await refusal(w.recordMessage(user('FAIL-SYNC')))).code).toBe('EIO')
    expect((await refusal(w.recordMessage(user('after')))).code).toBe('NOA_WORKSPACE_POISONED')
    expect(w.lastUuid).toBe(c.uuid)
    await w.close()
    const t = await loadTranscript(w.path)
    expect(t.records.map((x) => x.uuid)).toEqual([a.uuid, c.uuid])
    expect(t.tornTail).toBeNull()
  })

  it('durable: a second process is refused while this one holds the transcript', async () => {
    const dir = tempDir()
    const log = await openLog(join(dir, '.noa'))
    const w = new TranscriptWriter({ dir, sessionId: 's', log })
    await w.recordMessage(user('mine'))
    const before = readFileSync(w.path)
    const other = runCli(['transcript', 'append', dir, 's', '--durable'], {
      input: Buffer.from('{"role":"user","content":"theirs"}\n'),
    })
    expect(other.status).toBe(1)
    expect(other.stderr).toMatch(/^noa transcript: file .* is locked by process \d+ \(/)
    expect(readFileSync(w.path)).toEqual(before)
    await w.close()
  })
})

describe('writer: the tail it finds', () => {
  for (const mode of ['buffered', 'durable'] as const) {
    it(`${mode}: cuts a torn last line before appending, so the file loads`, async () => {
      const dir = tempDir()
      const log = mode === 'durable' ? await openLog(join(dir, '.noa')) : undefined
      const seed = new TranscriptWriter({ dir, sessionId: 's' })
      const a = await seed.recordMessage(user('a'))
      await seed.recordMessage(user('torn'))
      const full = readFileSync(seed.path)
      const aBytes = full.indexOf(0x0a) + 1
      // The owner keeps a file open once it wrote it, so a durable round is run once per log.
      for (const keep of mode === 'durable' ? [60] : [5, 60]) {
        writeFileSync(seed.path, full.subarray(0, aBytes + keep))
        const w = new TranscriptWriter({ dir, sessionId: 's', parentUuid: a.uuid, ...(log ? { log } : {}) })
        const b = await w.recordMessage(user(`after ${keep}`))
        expect(w.repairedTailBytes).toBe(keep)
        await w.close()
        const t = await loadTranscript(seed.path)
        expect(t.tornTail).toBeNull()
        expect(t.records.map((r) => r.uuid)).toEqual([a.uuid, b.uuid])
      }
    })

    it(`${mode}: keeps a complete last line that lacks its newline and adds the newline`, async () => {
      const dir = tempDir()
      const log = mode === 'durable' ? await openLog(join(dir, '.noa')) : undefined
      const seed = new TranscriptWriter({ dir, sessionId: 's' })
      const a = await seed.recordMessage(user('no newline'))
      const text = readFileSync(seed.path, 'utf8')
      writeFileSync(seed.path, text.slice(0, -1))
      const w = new TranscriptWriter({ dir, sessionId: 's', parentUuid: a.uuid, ...(log ? { log } : {}) })
      const b = await w.recordMessage(user('next'))
      expect(w.repairedTailBytes).toBe(0)
      await w.close()
      expect((await loadTranscript(seed.path)).records.map((r) => r.uuid)).toEqual([a.uuid, b.uuid])
    })
  }

  it('creates missing folders', async () => {
    const dir = join(tempDir(), 'a', 'b')
    mkdirSync(join(dir, '..'), { recursive: true })
    const w = new TranscriptWriter({ dir, sessionId: 's', agentId: 'x' })
    await w.recordMessage(user('deep'))
    expect(existsSync(join(dir, 's', 'subagents', 'agent-x.jsonl'))).toBe(true)
  })
})
