import { appendFileSync, readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import {
  boundaryMarker,
  cleanResumed,
  isBoundaryMarker,
  loadTranscript,
  type Message,
  messages,
  pairToolBlocks,
  parseBoundaryMeta,
  parseTranscript,
  resume,
  sessionUsage,
  TranscriptWriter,
  transcriptPath,
  viewForModel,
} from '../../dist/src/transcript/index.js'
import { tempDir } from '../helpers/index.js'

const text = (role: 'user' | 'assistant', t: string): Message => ({
  role,
  content: [{ type: 'text', text: t }],
})
const call = (id: string, extra: Message['content'] = []): Message => ({
  role: 'assistant',
  content: [...(extra ?? []), { type: 'tool_use', id, name: 'Read', input: '{}' }],
})
const result = (id: string): Message => ({
  role: 'user',
  content: [{ type: 'tool_result', tool_use_id: id, content: [{ type: 'text', text: 'ok' }] }],
})

describe('messages()', () => {
  it('skips boundary records and records without a message, sums usage of the rest', () => {
    const t = parseTranscript(
      [
        '{"uuid":"a","session_id":"s","timestamp":"t","type":"message","message":{"role":"user","content":[]},"usage":{"input_tokens":1,"output_tokens":2,"cache_read_tokens":3,"cache_write_tokens":4}}',
        '{"uuid":"b","session_id":"s","timestamp":"t","type":"boundary","boundary":{"pre_tokens":5},"message":{"role":"user","content":[]},"usage":{"input_tokens":100,"output_tokens":0,"cache_read_tokens":0,"cache_write_tokens":0}}',
        'null',
        '{"uuid":"c","session_id":"s","timestamp":"t","type":"message","usage":{"input_tokens":1000,"output_tokens":0,"cache_read_tokens":0,"cache_write_tokens":0}}',
        '{"uuid":"d","session_id":"s","timestamp":"t","type":"other","message":{"role":"assistant","content":null},"usage":{"input_tokens":10,"output_tokens":20,"cache_read_tokens":30,"cache_write_tokens":40}}',
      ].join('\n'),
    )
    const conv = messages(t.records)
    expect(conv.records.map((r) => r.uuid)).toEqual(['a', 'd'])
    expect(conv.messages).toEqual([
      { role: 'user', content: [] },
      { role: 'assistant', content: null },
    ])
    expect(conv.usage).toEqual({
      input_tokens: 11,
      output_tokens: 22,
      cache_read_tokens: 33,
      cache_write_tokens: 44,
    })
  })

  it('leaves blocks of unknown types out of the messages; the records keep them', () => {
    const line =
      '{"uuid":"a","session_id":"s","timestamp":"t","type":"message","message":{"role":"user","content":[' +
      '{"type":"skill","name":"pdf"},{"type":"text","text":"hi"},' +
      '{"type":"tool_result","tool_use_id":"x","content":[{"type":"image"},{"type":"text","text":"r"}]}]}}'
    const t = parseTranscript(line)
    const conv = messages(t.records)
    expect(conv.messages[0]).toEqual({
      role: 'user',
      content: [
        { type: 'text', text: 'hi' },
        { type: 'tool_result', tool_use_id: 'x', content: [{ type: 'text', text: 'r' }] },
      ],
    })
    expect(t.records[0]?.message?.content).toHaveLength(3)
    expect(conv.records[0]).toBe(t.records[0])
    // Messages with only known blocks are the records' own objects.
    const plain = parseTranscript(JSON.stringify({ type: 'message', message: text('user', 'x') }))
    expect(messages(plain.records).messages[0]).toBe(plain.records[0]?.message)
  })
})

describe('compaction markers and viewForModel()', () => {
  it('reads the meta of a marker: object, legacy integer, or anything else as zero', () => {
    const marker = boundaryMarker({ trigger: 'reactive', pre_tokens: 42, active_skills: ['a'] })
    expect(isBoundaryMarker(marker)).toBe(true)
    expect(parseBoundaryMeta(marker)).toEqual({ trigger: 'reactive', pre_tokens: 42, active_skills: ['a'] })
    const withInput = (input?: string): Message => ({
      role: 'user',
      content: [{ type: 'compact_boundary', ...(input === undefined ? {} : { input }) }],
    })
    expect(parseBoundaryMeta(withInput('1234'))).toEqual({ pre_tokens: 1234 })
    expect(parseBoundaryMeta(withInput('"x"'))).toEqual({ pre_tokens: 0 })
    expect(parseBoundaryMeta(withInput('{"pre_tokens":"x"}'))).toEqual({ pre_tokens: 0 })
    expect(parseBoundaryMeta(withInput())).toEqual({ pre_tokens: 0 })
    expect(parseBoundaryMeta(text('user', 'hi'))).toBeUndefined()
    // Exactly one block makes a marker.
    const two: Message = {
      role: 'user',
      content: [...(withInput('1').content ?? []), { type: 'text', text: 'x' }],
    }
    expect(isBoundaryMarker(two)).toBe(false)
  })

  it('starts at the last marker, drops it, and pairs tool blocks (Norma MessagesForAPI)', () => {
    const msgs: Message[] = [
      text('user', 'old'),
      boundaryMarker({ pre_tokens: 1 }),
      text('user', 'summary 1'),
      boundaryMarker({ pre_tokens: 2 }),
      text('user', '[conversation summarized to save context]\n\nsummary 2'),
      result('orphan-result'),
      call('t1', [{ type: 'text', text: 'using a tool' }]),
      result('t1'),
      call('dangling'),
      text('assistant', 'done'),
    ]
    expect(viewForModel(msgs)).toEqual([
      text('user', '[conversation summarized to save context]\n\nsummary 2'),
      call('t1', [{ type: 'text', text: 'using a tool' }]),
      result('t1'),
      text('assistant', 'done'),
    ])
    expect(viewForModel([text('user', 'a'), text('assistant', 'b')])).toEqual([
      text('user', 'a'),
      text('assistant', 'b'),
    ])
  })

  it('pairToolBlocks keeps pairs in any order and drops messages left empty', () => {
    const msgs: Message[] = [
      result('x'),
      call('x'),
      { role: 'user', content: null },
      { role: 'user', content: [] },
    ]
    expect(pairToolBlocks(msgs)).toEqual([result('x'), call('x')])
  })
})

describe('resume', () => {
  it('Norma cleanResumed: drops trailing assistant messages with a tool_use, keeps answered ones', () => {
    const answered = [text('user', 'q'), call('a'), result('a')]
    expect(cleanResumed(answered)).toEqual({ kept: answered, dropped: [] })
    const trailing = [
      text('user', 'q'),
      call('a'),
      result('a'),
      call('b'),
      call('c', [{ type: 'text', text: 'and' }]),
    ]
    expect(cleanResumed(trailing)).toEqual({ kept: answered, dropped: trailing.slice(3) })
    // A trailing user message, or an assistant message without tool_use, stops the drop.
    expect(cleanResumed([call('a'), text('assistant', 'fine')]).dropped).toEqual([])
  })

  it('drops a trailing tool_use, keeps the usage sum, and chains new records after the last uuid in the file', async () => {
    const dir = tempDir()
    const w = new TranscriptWriter({ dir, sessionId: 's' })
    await w.recordMessage(text('user', 'read a.txt'))
    await w.recordMessage(call('t1'), { input_tokens: 100, output_tokens: 10 })
    await w.recordMessage(result('t1'))
    const dangling = await w.recordMessage(call('t2'), { input_tokens: 200, output_tokens: 20 })
    await w.close()

    const r = await resume(dir, 's')
    expect(r.messages).toEqual([text('user', 'read a.txt'), call('t1'), result('t1')])
    expect(r.dropped).toEqual([call('t2')])
    expect(r.usage).toEqual({
      input_tokens: 300,
      output_tokens: 30,
      cache_read_tokens: 0,
      cache_write_tokens: 0,
    })
    // Norma's LastUUID: the dropped tool_use is still the parent of what comes next.
    expect(r.parentUuid).toBe(dangling.uuid)

    const next = new TranscriptWriter({ dir, sessionId: 's', parentUuid: r.parentUuid })
    const answer = await next.recordMessage(text('assistant', 'resumed'))
    expect(answer.parent_uuid).toBe(dangling.uuid)
    const t = await loadTranscript(transcriptPath(dir, 's'))
    expect(t.records.at(-1)?.uuid).toBe(answer.uuid)
  })

  it('chains after a boundary record when it is last; keeps markers in the resumed messages', async () => {
    const dir = tempDir()
    const w = new TranscriptWriter({ dir, sessionId: 's' })
    await w.recordMessage(text('user', 'long talk'))
    const b = await w.recordBoundary({ trigger: 'auto', pre_tokens: 5000 })
    const r1 = await resume(dir, 's')
    expect(r1.parentUuid).toBe(b.uuid)
    await w.recordMessage(boundaryMarker({ trigger: 'auto', pre_tokens: 5000 }))
    await w.recordMessage(text('user', 'summary'))
    const r2 = await resume(dir, 's')
    expect(r2.messages.map(isBoundaryMarker)).toEqual([false, true, false])
    expect(viewForModel(r2.messages)).toEqual([text('user', 'summary')])
  })

  it('a torn tail is dropped and reported; the chain goes on from the last complete record', async () => {
    const dir = tempDir()
    const w = new TranscriptWriter({ dir, sessionId: 's' })
    const a = await w.recordMessage(text('user', 'a'))
    appendFileSync(w.path, '{"uuid":"torn","sess')
    const r = await resume(dir, 's')
    expect(r.tornTail).toMatchObject({ line: 2, bytes: 20 })
    expect(r.parentUuid).toBe(a.uuid)
    await expect(resume(dir, 's', { strict: true })).rejects.toMatchObject({ code: 'NOA_BAD_TRANSCRIPT' })
  })

  it('a missing session resumes empty, as in Norma', async () => {
    const r = await resume(tempDir(), 'nobody')
    expect(r).toMatchObject({ exists: false, messages: [], dropped: [], parentUuid: undefined })
  })
})

describe('sessionUsage', () => {
  it('lists each sidechain beside the main transcript, and adds them up', async () => {
    const dir = tempDir()
    const main = new TranscriptWriter({ dir, sessionId: 's' })
    await main.recordMessage(text('assistant', 'm'), { input_tokens: 1, output_tokens: 2 })
    await main.recordMessage(text('assistant', 'm'), { cache_read_tokens: 5 })
    for (const [agent, n] of [
      ['beta', 100],
      ['alpha', 10],
    ] as const) {
      const side = new TranscriptWriter({ dir, sessionId: 's', agentId: agent })
      await side.recordMessage(text('assistant', agent), { input_tokens: n, cache_write_tokens: n })
    }
    const u = await sessionUsage(dir, 's')
    expect(u.main).toMatchObject({
      exists: true,
      records: 2,
      messages: 2,
      usage: { input_tokens: 1, output_tokens: 2, cache_read_tokens: 5, cache_write_tokens: 0 },
    })
    expect(u.sidechains.map((s) => [s.agentId, s.usage.input_tokens])).toEqual([
      ['alpha', 10],
      ['beta', 100],
    ])
    expect(u.total).toEqual({
      input_tokens: 111,
      output_tokens: 2,
      cache_read_tokens: 5,
      cache_write_tokens: 110,
    })
    expect(readFileSync(u.sidechains[0]?.file as string, 'utf8')).toContain(
      '"agent_id":"alpha","is_sidechain":true',
    )
  })
})
