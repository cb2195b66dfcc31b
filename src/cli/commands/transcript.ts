/**
 * `noa transcript show|resume|append|usage`: Norma-compatible session transcripts.
 * A malformed transcript is refused with `<file>:<line>: <reason>` (exit 1).
 */
import { Errors, NoaError } from '../../engine/errors.js'
import {
  defineValue,
  describeInvalidUtf8,
  findInvalidUtf8,
  GoSyntaxError,
  type JsonNode,
  parseGoInt,
  parseGoJson,
  plainValue,
  stringifyWithInts,
} from '../../gocompat/index.js'
import { loadTranscript, type TornTail } from '../../transcript/loader.js'
import { checkTranscriptId, transcriptPath } from '../../transcript/paths.js'
import { resume, sessionUsage } from '../../transcript/session.js'
import type { ContentBlock, Message, TranscriptRecord, Usage } from '../../transcript/types.js'
import { checkMessage, checkUsage } from '../../transcript/validate.js'
import { lastUuid, messages, parseBoundaryMeta } from '../../transcript/view.js'
import { TranscriptWriter } from '../../transcript/writer.js'
import { type GroupSpec, JSON_OPTION, parseCommand, runSubcommand, subcommand } from '../args.js'
import { type CliIo, readInput, write } from '../io.js'

const SHOW = 'usage: noa transcript show <file> [--norma] [--json]'
const RESUME = 'usage: noa transcript resume <dir> <sessionId> [--norma] [--json]'
const APPEND =
  'usage: noa transcript append <dir> <sessionId> [--agent <agentId>] [--durable] < messages.jsonl\n' +
  '  each stdin line: {"role":"user"|"assistant","content":[blocks] or "text","usage":{…}?}'
const USAGE_CMD = 'usage: noa transcript usage <dir> <sessionId> [--norma] [--json]'
const ALL = `usage: noa transcript <show|resume|append|usage> …\n  ${[SHOW, RESUME, APPEND, USAGE_CMD]
  .map((u) => u.replace('usage: ', ''))
  .join('\n  ')}`

const READ_OPTIONS = {
  ...JSON_OPTION,
  norma: {
    type: 'boolean',
    description:
      "Norma's Load exactly: any bad line fails (a torn last one too), blocks of every type are messages",
  },
} as const

/** Output with ints past 2^53 exact. */
function json(value: unknown): string {
  return `${stringifyWithInts(value)}\n`
}

const SESSION = { positionals: [2, 2], complete: ['dir'] } as const

const SPECS = {
  show: subcommand({
    summary: "a transcript's records one per line, with counts, usage and the last uuid",
    usage: SHOW,
    options: READ_OPTIONS,
    positionals: [1, 1],
    complete: ['file'],
    details: '--json: {records, messages, boundaries, usage, torn_tail, last_uuid}.',
    examples: ['noa transcript show sessions/sid-1.jsonl'],
    exitCodes: { 1: 'no such transcript, or a malformed one (<file>:<line>: <reason>)' },
  }),
  resume: subcommand({
    summary: 'what resuming a session keeps: messages, dropped tool calls, the uuid to chain after',
    usage: RESUME,
    options: READ_OPTIONS,
    ...SESSION,
    details: '--json: {messages, dropped, parent_uuid, usage}.',
    examples: ['noa transcript resume sessions sid-1 --json'],
    exitCodes: { 1: 'the session has no transcript, or a malformed one' },
  }),
  append: subcommand({
    summary: "append messages from stdin to a session's transcript, continuing its uuid chain",
    usage: APPEND,
    options: {
      agent: {
        type: 'string',
        value: 'AGENT_ID',
        description: "append to this subagent's sidechain instead of the main transcript",
        defaultText: 'the main transcript',
      },
      durable: { type: 'boolean', description: 'print each uuid once the record is on disk (fdatasync)' },
    },
    ...SESSION,
    details: 'Every line is checked before any is written; each new uuid is printed once written.',
    examples: [`echo '{"role":"user","content":"hello"}' | noa transcript append sessions sid-1 --durable`],
    exitCodes: { 1: 'an invalid line (stdin:<line>: <reason>; nothing written), or the file is locked' },
  }),
  usage: subcommand({
    summary: 'token usage of the main transcript and of each sidechain, and their total',
    usage: USAGE_CMD,
    options: READ_OPTIONS,
    ...SESSION,
    examples: ['noa transcript usage sessions sid-1'],
    exitCodes: { 1: 'the session has no transcript' },
  }),
}

export const spec: GroupSpec = {
  usage: ALL,
  subcommands: {
    show: { spec: SPECS.show, run: show },
    resume: { spec: SPECS.resume, run: resumeCmd },
    append: { spec: SPECS.append, run: append },
    usage: { spec: SPECS.usage, run: usageCmd },
  },
}

export function run(args: string[], io: CliIo): Promise<number> {
  return runSubcommand(args, io, spec)
}

function usageJson(u: Usage): Usage {
  return {
    input_tokens: u.input_tokens,
    output_tokens: u.output_tokens,
    cache_read_tokens: u.cache_read_tokens,
    cache_write_tokens: u.cache_write_tokens,
  }
}

function count(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`
}

function usageText(u: Usage): string {
  return `input ${u.input_tokens}, output ${u.output_tokens}, cache read ${u.cache_read_tokens}, cache write ${u.cache_write_tokens}`
}

function tornText(t: TornTail): string {
  return `torn last line ${t.line} (${t.bytes} bytes at offset ${t.offset}) dropped: ${t.reason}`
}

function shorten(s: string, max = 72): string {
  const flat = s.replace(/\s+/g, ' ').trim()
  return JSON.stringify(flat.length > max ? `${flat.slice(0, max - 1)}…` : flat)
}

function blockKind(b: ContentBlock): string {
  switch (b.type) {
    case 'tool_use':
      return `tool_use ${b.name || '?'}`
    case 'tool_result':
      return b.is_error ? 'tool_result (error)' : 'tool_result'
    default:
      return b.type || '(untyped)'
  }
}

function firstText(blocks: readonly ContentBlock[]): string | undefined {
  for (const b of blocks) {
    if (b.type === 'text' && b.text) return b.text
    if (b.type === 'tool_result' && b.content) {
      const t = firstText(b.content)
      if (t) return t
    }
  }
  for (const b of blocks) if (b.type === 'thinking' && b.thinking) return b.thinking
  return undefined
}

function describeRecord(r: TranscriptRecord): { kind: string; what: string } {
  if (r.type === 'boundary' || (!r.message && r.boundary)) {
    const b = r.boundary
    const parts = b ? [`pre_tokens ${b.pre_tokens}`] : []
    if (b?.trigger) parts.push(`trigger ${b.trigger}`)
    if (b?.messages_summarized) parts.push(`${b.messages_summarized} messages summarized`)
    return { kind: 'boundary', what: parts.join(', ') }
  }
  if (!r.message) return { kind: r.type || '(empty)', what: '(no message)' }
  const m: Message = r.message
  const blocks = m.content ?? []
  const marker = parseBoundaryMeta(m)
  if (marker) return { kind: m.role || '?', what: `compaction marker (pre_tokens ${marker.pre_tokens})` }
  const kinds = blocks.length > 0 ? blocks.map(blockKind).join(', ') : '(no content)'
  const text = firstText(blocks)
  return { kind: m.role || '?', what: text === undefined ? kinds : `${kinds}  ${shorten(text)}` }
}

async function show(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, SPECS.show)
  const file = positionals[0] as string
  const strict = values.norma ?? false
  const t = await loadTranscript(file, { strict })
  if (!t.exists) throw Errors.NOT_FOUND(`${file}: no such transcript`, { file })
  const conv = messages(t.records, { strict })
  const boundaries = t.records.filter((r) => r.type === 'boundary').length
  const last = lastUuid(t.records)
  if (values.json) {
    await write(
      io.stdout,
      json({
        records: t.records.length,
        messages: conv.messages.length,
        boundaries,
        usage: usageJson(conv.usage),
        torn_tail: t.tornTail !== null,
        last_uuid: last || null,
      }),
    )
    return 0
  }
  const width = String(t.lines[t.lines.length - 1] ?? 1).length
  const rows = t.records.map((r, i) => ({ line: String(t.lines[i]), ...describeRecord(r) }))
  // A loop, not Math.max(...rows): a long transcript would overflow the argument list.
  let kindWidth = 9
  for (const r of rows) kindWidth = Math.max(kindWidth, r.kind.length)
  let out = `${file}\n`
  for (const r of rows)
    out += `${`${r.line.padStart(width)}  ${r.kind.padEnd(kindWidth)}  ${r.what}`.trimEnd()}\n`
  out += `${count(t.records.length, 'record')}, ${count(conv.messages.length, 'message')}, ${count(boundaries, 'boundary record')}; usage: ${usageText(conv.usage)}\n`
  if (t.tornTail) out += `${tornText(t.tornTail)}\n`
  out += `last uuid: ${last || '(none)'}\n`
  await write(io.stdout, out)
  return 0
}

async function resumeCmd(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, SPECS.resume)
  const [dir, sessionId] = positionals as [string, string]
  const r = await resume(dir, sessionId, { strict: values.norma ?? false })
  if (!r.exists) {
    throw Errors.NOT_FOUND(`session ${sessionId} has no transcript (${r.file})`, {
      file: r.file,
    })
  }
  if (r.tornTail) io.stderr.write(`noa transcript: ${r.file}: ${tornText(r.tornTail)}\n`)
  if (values.json) {
    await write(
      io.stdout,
      json({
        messages: r.messages.length,
        dropped: r.dropped.length,
        parent_uuid: r.parentUuid ?? null,
        usage: usageJson(r.usage),
      }),
    )
    return 0
  }
  let out = `session ${sessionId} (${r.file}): ${count(r.messages.length, 'message')} kept`
  out += r.dropped.length > 0 ? `, ${r.dropped.length} dropped (trailing tool_use without a result)\n` : '\n'
  out += `usage: ${usageText(r.usage)}\n`
  out += `new records chain after: ${r.parentUuid ?? '(nothing: a new chain)'}\n`
  await write(io.stdout, out)
  return 0
}

/** The exact text of each block's `input` (the last one when a key repeats), at any depth. */
function blocksFromTree(node: JsonNode, text: string): unknown {
  if (node.k !== 'arr') return plainValue(node)
  return node.items.map((item) => {
    if (item.k !== 'obj') return plainValue(item)
    const b = plainValue(item) as Record<string, unknown>
    for (const [key, v] of item.members) {
      if (key === 'input') b.input = text.slice(v.s, v.e)
      else if (key === 'content') b.content = blocksFromTree(v, text)
    }
    return b
  })
}

/** Usage counters exactly (an int past 2^53 stays exact, as Go's int64). */
function usageFromTree(node: JsonNode): unknown {
  if (node.k !== 'obj') return plainValue(node)
  const u: Record<string, unknown> = {}
  for (const [key, v] of node.members) {
    defineValue(u, key, v.k === 'num' ? (parseGoInt(v.text) ?? Number(v.text)) : plainValue(v))
  }
  return u
}

const INPUT_KEYS = new Set(['role', 'content', 'usage'])

interface Input {
  message: Message
  usage?: Partial<Usage>
}

function stdinError(line: number, reason: string): NoaError {
  return Errors.BAD_RECORD(`stdin:${line}: ${reason}; nothing was written`, { line })
}

function parseInput(buf: Buffer): Input[] {
  // Refused, not rewritten: each bad byte would become U+FFFD, other bytes than the ones given.
  const bad = findInvalidUtf8(buf)
  if (bad) throw stdinError(bad.line, describeInvalidUtf8(bad))
  const out: Input[] = []
  const lines = buf.toString('utf8').split('\n')
  for (let i = 0; i < lines.length; i++) {
    const n = i + 1
    const line = (lines[i] as string).replace(/\r$/, '')
    if (line.trim() === '') continue
    let node: JsonNode
    const notes = { loneSurrogate: -1, invalidByte: -1 }
    try {
      node = parseGoJson(line, notes)
    } catch (err) {
      if (err instanceof GoSyntaxError) throw stdinError(n, `not JSON: ${err.message}`)
      throw err
    }
    if (notes.loneSurrogate >= 0) {
      const at = notes.loneSurrogate
      throw stdinError(
        n,
        `${line.slice(at, at + 6)} at byte ${Buffer.byteLength(line.slice(0, at)) + 1} of the line is half a surrogate pair, not text`,
      )
    }
    if (node.k !== 'obj') throw stdinError(n, 'each line must be an object {"role","content","usage"?}')
    const o: Record<string, unknown> = {}
    for (const [key, v] of node.members) {
      if (!INPUT_KEYS.has(key))
        throw stdinError(n, `unknown key ${JSON.stringify(key)} (known: role, content, usage)`)
      o[key] =
        key === 'content' ? blocksFromTree(v, line) : key === 'usage' ? usageFromTree(v) : plainValue(v)
    }
    // A bare string is shorthand for one text block.
    const content = typeof o.content === 'string' ? [{ type: 'text', text: o.content }] : o.content
    const message = { role: o.role, content }
    try {
      checkMessage(message)
      if (o.usage !== undefined) checkUsage(o.usage)
    } catch (err) {
      if (err instanceof NoaError) {
        // The API's hint about its allowUnknown option means nothing on the command line.
        const reason = err.message
          .replace(/; nothing was written$/, '')
          .replace(/; the writer option allowUnknown [^)]*/, '')
        throw stdinError(n, reason)
      }
      throw err
    }
    const input: Input = { message: message as Message }
    if (o.usage !== undefined) input.usage = o.usage as Partial<Usage>
    out.push(input)
  }
  return out
}

async function append(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, SPECS.append)
  const [dir, sessionId] = positionals as [string, string]
  checkTranscriptId(sessionId)
  const agentId = values.agent
  if (agentId !== undefined) checkTranscriptId(agentId, 'agent id')
  // Everything is checked before anything is written.
  const inputs = parseInput(await readInput(io))
  const file = transcriptPath(dir, sessionId, agentId)
  // Continue the file's chain; a corrupt file is refused here rather than appended to.
  const existing = await loadTranscript(file)
  if (existing.tornTail) {
    io.stderr.write(`noa transcript: ${file}: ${tornText(existing.tornTail)}; it is cut before appending\n`)
  }
  if (inputs.length === 0) return 0
  const writer = new TranscriptWriter({
    dir,
    sessionId,
    ...(agentId !== undefined ? { agentId } : {}),
    mode: values.durable ? 'durable' : 'buffered',
    parentUuid: lastUuid(existing.records) || undefined,
  })
  const pending = inputs.map((x) => writer.recordMessage(x.message, x.usage))
  let failure: unknown
  try {
    for (const p of pending) {
      try {
        const record = await p
        await write(io.stdout, `${record.uuid}\n`)
      } catch (err) {
        failure = err
        break
      }
    }
  } finally {
    await writer.close()
  }
  if (failure !== undefined) throw failure
  return 0
}

async function usageCmd(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, SPECS.usage)
  const [dir, sessionId] = positionals as [string, string]
  const u = await sessionUsage(dir, sessionId, { strict: values.norma ?? false })
  if (!u.main.exists && u.sidechains.length === 0) {
    throw Errors.NOT_FOUND(`session ${sessionId} has no transcript in ${dir}`, {
      file: u.main.file,
    })
  }
  if (values.json) {
    const file = (f: typeof u.main) => ({
      file: f.file,
      records: f.records,
      messages: f.messages,
      usage: usageJson(f.usage),
      torn_tail: f.tornTail !== null,
    })
    await write(
      io.stdout,
      json({
        session_id: u.sessionId,
        main: { exists: u.main.exists, ...file(u.main) },
        sidechains: u.sidechains.map((s) => ({ agent_id: s.agentId, ...file(s) })),
        total: usageJson(u.total),
      }),
    )
    return 0
  }
  const rows: Array<[string, string, string]> = [
    ['main', u.main.exists ? count(u.main.messages, 'message') : '(no file)', usageText(u.main.usage)],
    ...u.sidechains.map((s): [string, string, string] => [
      `agent ${s.agentId}`,
      count(s.messages, 'message'),
      usageText(s.usage),
    ]),
    ['total', '', usageText(u.total)],
  ]
  const w0 = rows.reduce((w, r) => Math.max(w, r[0].length), 0)
  const w1 = rows.reduce((w, r) => Math.max(w, r[1].length), 0)
  let out = `session ${sessionId}\n`
  for (const [a, b, c] of rows) out += `  ${a.padEnd(w0)}  ${b.padEnd(w1)}  ${c}`.trimEnd().concat('\n')
  for (const f of [u.main, ...u.sidechains]) if (f.tornTail) out += `  ${f.file}: ${tornText(f.tornTail)}\n`
  await write(io.stdout, out)
  return 0
}
