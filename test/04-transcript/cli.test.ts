import { appendFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { loadTranscript, type Message, TranscriptWriter, transcriptPath } from '../../dist/src/index.js'
import { runCli, tempDir } from '../helpers/index.js'

const cli = (args: string[], input = '') => runCli(['transcript', ...args], { input: Buffer.from(input) })

const jsonl = (...lines: unknown[]) => `${lines.map((l) => JSON.stringify(l)).join('\n')}\n`

async function session(dir: string): Promise<string[]> {
  const w = new TranscriptWriter({ dir, sessionId: 's' })
  const ids: string[] = []
  const m = (role: 'user' | 'assistant', content: Message['content']) => ({ role, content })
  ids.push((await w.recordMessage(m('user', [{ type: 'text', text: 'Please read\nnotes.txt' }]))).uuid)
  ids.push(
    (
      await w.recordMessage(
        m('assistant', [
          { type: 'thinking', thinking: 'ok' },
          { type: 'tool_use', id: 't1', name: 'Read', input: '{"path":"notes.txt"}' },
        ]),
        { input_tokens: 50, output_tokens: 5, cache_read_tokens: 1, cache_write_tokens: 2 },
      )
    ).uuid,
  )
  ids.push((await w.recordBoundary({ trigger: 'manual', pre_tokens: 55 })).uuid)
  await w.close()
  return ids
}

describe('noa transcript show', () => {
  it('--json: counts, usage, torn_tail and last_uuid', async () => {
    const dir = tempDir()
    const ids = await session(dir)
    const file = transcriptPath(dir, 's')
    const r = cli(['show', file, '--json'])
    expect(r.status).toBe(0)
    expect(JSON.parse(r.stdout)).toEqual({
      records: 3,
      messages: 2,
      boundaries: 1,
      usage: { input_tokens: 50, output_tokens: 5, cache_read_tokens: 1, cache_write_tokens: 2 },
      torn_tail: false,
      last_uuid: ids[2],
    })
    appendFileSync(file, '{"uuid":"half')
    expect(JSON.parse(cli(['show', file, '--json']).stdout)).toMatchObject({ records: 3, torn_tail: true })
  })

  it('a readable view: line, role, block kinds, text shortened', async () => {
    const dir = tempDir()
    const ids = await session(dir)
    const file = transcriptPath(dir, 's')
    appendFileSync(file, '{"uuid":"half')
    const r = cli(['show', file])
    expect(r.status).toBe(0)
    expect(r.stdout.split('\n')).toEqual([
      file,
      '1  user       text  "Please read notes.txt"',
      '2  assistant  thinking, tool_use Read  "ok"',
      '3  boundary   pre_tokens 55, trigger manual',
      '3 records, 2 messages, 1 boundary record; usage: input 50, output 5, cache read 1, cache write 2',
      'torn last line 4 (13 bytes at offset ' +
        `${readFileSync(file).length - 13}) dropped: not JSON: unexpected end of JSON input`,
      `last uuid: ${ids[2]}`,
      '',
    ])
  })

  it('a malformed file: exit 1 and <file>:<line>: <reason>', async () => {
    const dir = tempDir()
    await session(dir)
    const file = transcriptPath(dir, 's')
    const lines = readFileSync(file, 'utf8').split('\n')
    writeFileSync(file, [lines[0], '{"uuid":', lines[1], lines[2], ''].join('\n'))
    const r = cli(['show', file, '--json'])
    expect(r.status).toBe(1)
    expect(r.stdout).toBe('')
    expect(r.stderr).toMatch(new RegExp(`^noa transcript: ${file}:2: not JSON: .+\\n$`))
  })

  it('usage errors exit 2; a missing file exits 1', () => {
    expect(cli([]).status).toBe(2)
    expect(cli(['frob']).stderr).toMatch(/^noa transcript: unknown subcommand "frob"\nusage: noa transcript/)
    expect(cli(['show']).status).toBe(2)
    expect(cli(['show', 'a', '--jsn']).status).toBe(2)
    const missing = cli(['show', join(tempDir(), 'none.jsonl')])
    expect(missing.status).toBe(1)
    expect(missing.stderr).toMatch(/none\.jsonl: no such transcript/)
  })
})

describe('noa transcript resume and usage', () => {
  it('resume --json: what Resume keeps', async () => {
    const dir = tempDir()
    const ids = await session(dir)
    const r = cli(['resume', dir, 's', '--json'])
    expect(r.status).toBe(0)
    expect(JSON.parse(r.stdout)).toEqual({
      messages: 1,
      dropped: 1,
      parent_uuid: ids[2],
      usage: { input_tokens: 50, output_tokens: 5, cache_read_tokens: 1, cache_write_tokens: 2 },
    })
    const text = cli(['resume', dir, 's'])
    expect(text.stdout).toContain('1 message kept, 1 dropped (trailing tool_use without a result)')
    expect(cli(['resume', dir, 'other']).status).toBe(1)
  })

  it('usage: main and sidechain totals', async () => {
    const dir = tempDir()
    await session(dir)
    const side = new TranscriptWriter({ dir, sessionId: 's', agentId: 'a1' })
    await side.recordMessage({ role: 'assistant', content: [] }, { input_tokens: 7 })
    const r = cli(['usage', dir, 's', '--json'])
    expect(r.status).toBe(0)
    const u = JSON.parse(r.stdout)
    expect(u.main).toMatchObject({ records: 3, messages: 2, usage: { input_tokens: 50 }, torn_tail: false })
    expect(u.sidechains).toEqual([
      {
        agent_id: 'a1',
        file: join(dir, 's', 'subagents', 'agent-a1.jsonl'),
        records: 1,
        messages: 1,
        usage: { input_tokens: 7, output_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0 },
        torn_tail: false,
      },
    ])
    expect(u.total).toEqual({
      input_tokens: 57,
      output_tokens: 5,
      cache_read_tokens: 1,
      cache_write_tokens: 2,
    })
    expect(cli(['usage', dir, 's']).stdout).toMatch(/agent a1 +1 message +input 7/)
  })
})

describe('noa transcript append', () => {
  it('records stdin messages, prints each uuid, and continues the chain on the next call', async () => {
    const dir = tempDir()
    const first = cli(
      ['append', dir, 's'],
      `${JSON.stringify({ role: 'user', content: 'hi <there>' })}\r\n\n` +
        '{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"Grep","input":{ "pattern": "a&b", "n": 1.0 }}],"usage":{"input_tokens":3}}',
    )
    expect(first.status).toBe(0)
    const ids = first.stdout.trim().split('\n')
    expect(ids).toHaveLength(2)
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{32}$/)
    const second = cli(['append', dir, 's', '--durable'], jsonl({ role: 'user', content: [] }))
    expect(second.status).toBe(0)
    const t = await loadTranscript(transcriptPath(dir, 's'))
    expect(t.records.map((r) => r.uuid)).toEqual([...ids, second.stdout.trim()])
    expect(t.records[2]?.parent_uuid).toBe(ids[1])
    // The tool input is kept as given (1.0 stays 1.0) and HTML-escaped as Go writes it.
    expect(readFileSync(transcriptPath(dir, 's'), 'utf8')).toContain(
      '"input":{"pattern":"a\\u0026b","n":1.0}}]},"usage":{"input_tokens":3,',
    )
    const side = cli(['append', dir, 's', '--agent', 'helper'], jsonl({ role: 'assistant', content: 'sub' }))
    expect(side.status).toBe(0)
    expect((await loadTranscript(transcriptPath(dir, 's', 'helper'))).records[0]).toMatchObject({
      uuid: side.stdout.trim(),
      session_id: 's',
      agent_id: 'helper',
      is_sidechain: true,
    })
  })

  it('bad input is refused with a clear error and nothing is written', () => {
    const dir = tempDir()
    const good = JSON.stringify({ role: 'user', content: 'fine' })
    const cases: Array<[string, RegExp]> = [
      [
        JSON.stringify({ role: 'system', content: 'x' }),
        /^stdin:2: message\.role: must be one of user, assistant/,
      ],
      [
        JSON.stringify({ role: 'user', content: [{ type: 'text' }] }),
        /^stdin:2: message\.content\[0\]: a text block needs text/,
      ],
      [
        JSON.stringify({ role: 'assistant', content: [{ type: 'tool_use', id: 'a', input: {} }] }),
        /^stdin:2: message\.content\[0\]: a tool_use block needs name/,
      ],
      [
        '{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"n","input":{oops}}]}',
        /^stdin:2: not JSON: /,
      ],
      [JSON.stringify({ role: 'user', content: 'x', model: 'm' }), /^stdin:2: unknown key "model"/],
      [
        JSON.stringify({ role: 'user', content: 'x', usage: { input_tokens: -5 } }),
        /^stdin:2: usage\.input_tokens/,
      ],
    ]
    for (const [line, pattern] of cases) {
      const r = cli(['append', dir, 's'], `${good}\n${line}\n`)
      expect(r.status).toBe(1)
      expect(r.stdout).toBe('')
      expect(r.stderr.replace(/^noa transcript: /, '')).toMatch(pattern)
      expect(r.stderr).toMatch(/; nothing was written\n$/)
    }
    expect(existsSync(transcriptPath(dir, 's'))).toBe(false)
    expect(cli(['append', dir, '../escape'], `${good}\n`).status).toBe(1)
    expect(cli(['append', dir], `${good}\n`).status).toBe(2)
  })

  it('refuses to append to a corrupt transcript, naming file and line', async () => {
    const dir = tempDir()
    await session(dir)
    const file = transcriptPath(dir, 's')
    writeFileSync(file, `not json\n${readFileSync(file, 'utf8')}`)
    const before = readFileSync(file)
    const r = cli(['append', dir, 's'], jsonl({ role: 'user', content: 'x' }))
    expect(r.status).toBe(1)
    expect(r.stderr).toMatch(new RegExp(`^noa transcript: ${file}:1: not JSON`))
    expect(readFileSync(file)).toEqual(before)
  })
})
