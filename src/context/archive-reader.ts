/**
 * Reading an archive back (beyond Norma, which has no reader). The layout is Norma's
 * (archive.ts); the reader accepts exactly the files Norma's RenderArchive can write and
 * guarantees that the document it returns renders to the same text, refusing anything else
 * with the line and reason. `renderArchive` (archive-writer.ts) is the other direction: it
 * writes only documents the reader gives back whole (`parseArchive(renderArchive(doc))` equals
 * `doc`), and refuses the others naming the field.
 *
 * Norma writes every value as it is, so a value can hold a line break (a session id, a topic)
 * and a text or thinking body a line that looks like the next entry's heading. Frontmatter
 * values are taken one line long when that reads, else the shortest split that does; entries
 * are split so that their number matches the frontmatter's counts, preferring the shortest body
 * when several splits fit.
 */
import { Errors, NoaError } from '../engine/errors.js'
import { type GoInt, goIntText, parseGoInt } from '../gocompat/index.js'
import {
  type ArchiveBlockEntry,
  type ArchiveDocument,
  type ArchiveEntry,
  type ArchiveMessageEntry,
  renderArchiveUnchecked,
  renderBlockEntry,
  SUMMARY_INTRO,
} from './archive.js'

export interface ParseArchiveOptions {
  /** Name used in error messages (default `<archive>`). */
  file?: string
}

/** Work limit of the entry splitter: a file that needs more is refused as ambiguous. */
const MAX_STEPS = 200_000

class Reader {
  pos = 0
  line = 1
  constructor(
    readonly text: string,
    readonly file: string,
  ) {}

  fail(reason: string, line = this.line): NoaError {
    return Errors.BAD_ARCHIVE(`${this.file}:${line}: ${reason}`, {
      file: this.file,
      line,
      reason,
    })
  }

  /** The next line without its `\n` (a missing final `\n` is an error: Norma always writes one). */
  next(what: string): string {
    if (this.pos >= this.text.length) throw this.fail(`unexpected end of file, expected ${what}`)
    const nl = this.text.indexOf('\n', this.pos)
    if (nl < 0) throw this.fail(`line without a newline, expected ${what}`)
    const line = this.text.slice(this.pos, nl)
    this.pos = nl + 1
    this.line++
    return line
  }

  peek(): string {
    const nl = this.text.indexOf('\n', this.pos)
    return nl < 0 ? this.text.slice(this.pos) : this.text.slice(this.pos, nl)
  }

  expect(line: string, what = JSON.stringify(line)): void {
    const got = this.next(what)
    if (got !== line) throw this.fail(`expected ${what}, got ${JSON.stringify(got)}`, this.line - 1)
  }

  key(name: string): string {
    const got = this.next(`\`${name}:\``)
    if (!got.startsWith(`${name}: `))
      throw this.fail(`expected \`${name}: …\`, got ${JSON.stringify(got)}`, this.line - 1)
    return got.slice(name.length + 2)
  }

  optionalKey(name: string): string {
    return this.peek().startsWith(`${name}: `) ? this.key(name) : ''
  }

  int(name: string): GoInt {
    const v = this.key(name)
    const n = /^-?\d+$/.test(v) ? parseGoInt(v) : undefined
    if (n === undefined || (n === 0 && v.startsWith('-')))
      throw this.fail(`${name} must be an integer, got ${JSON.stringify(v)}`, this.line - 1)
    return n
  }
}

const BLOCK_HEADING = /^## (\S+) · Tier (-?\d+) · ([^\n]*)$/
const LIST = /^\[(.*)\]$/

function lineAt(text: string, pos: number): string {
  const nl = text.indexOf('\n', pos)
  return nl < 0 ? text.slice(pos) : text.slice(pos, nl)
}

function lineNumber(text: string, pos: number): number {
  let n = 1
  for (let i = text.indexOf('\n'); i >= 0 && i < pos; i = text.indexOf('\n', i + 1)) n++
  return n
}

/** A message heading's fields (the level already stripped), or undefined. */
function parseMessageHeading(rest: string): Omit<ArchiveMessageEntry, 'text'> | undefined {
  const m = /^(\S+) · (.+)$/.exec(rest)
  if (!m) return undefined
  const ref = m[1] === '(unaddressed)' ? '' : (m[1] as string)
  const tail = m[2] as string
  if (tail.startsWith('tool_result · '))
    return { kind: 'message', ref, role: 'tool', type: 'tool_result', toolName: tail.slice(14) }
  const use = /^(\S+) · tool_use · (.*)$/.exec(tail)
  if (use)
    return { kind: 'message', ref, role: use[1] as string, type: 'tool_use', toolName: use[2] as string }
  const think = /^(\S+) · thinking$/.exec(tail)
  if (think) return { kind: 'message', ref, role: think[1] as string, type: 'thinking', toolName: '' }
  if (/^\S+$/.test(tail)) return { kind: 'message', ref, role: tail, type: 'text', toolName: '' }
  return undefined
}

function splitRefs(span: string): [string, string] {
  const i = span.indexOf('–')
  return i < 0 ? [span, ''] : [span.slice(0, i), span.slice(i + 1)]
}

/** One absorbed-block section (heading to the blank line that ends it), or undefined. */
function parseBlockSection(section: string): ArchiveBlockEntry | undefined {
  const nl = section.indexOf('\n')
  const h = BLOCK_HEADING.exec(section.slice(0, nl))
  if (!h || section[nl + 1] !== '\n' || !section.endsWith('\n')) return undefined
  const [startRef, endRef] = splitRefs(h[3] as string)
  let body = section.slice(nl + 2, -1) // without the final blank line
  const lastLine = (): string | undefined => {
    if (!body.endsWith('\n')) return undefined
    const start = body.lastIndexOf('\n', body.length - 2) + 1
    return body.slice(start, -1)
  }
  const entry: ArchiveBlockEntry = {
    kind: 'block',
    blockId: h[1] as string,
    tier: parseGoInt(h[2] as string) ?? Number.NaN,
    startRef,
    endRef,
    topic: '',
    summary: '',
    childRel: '',
    childLink: '',
    absolutePath: '',
  }
  const abs = /^> Absolute path: `(.*)`$/.exec(lastLine() ?? '')
  if (abs) {
    entry.absolutePath = abs[1] as string
    body = body.slice(0, body.length - (abs[0].length + 1))
  }
  const child = /^> Child archive: \[`(.*)`\]\((.*)\)$/.exec(lastLine() ?? '')
  if (child) {
    entry.childRel = child[1] as string
    entry.childLink = child[2] as string
    body = body.slice(0, body.length - (child[0].length + 1))
  }
  // What is left is `**topic**\n\n`, the summary + `\n\n`, both or neither: try the splits.
  const candidates: Array<[string, string]> = []
  if (body === '') candidates.push(['', ''])
  else if (body.endsWith('\n\n')) {
    if (body.startsWith('**')) {
      for (let i = body.indexOf('**\n\n', 2); i >= 0; i = body.indexOf('**\n\n', i + 1)) {
        const rest = body.slice(i + 4)
        candidates.push([body.slice(2, i), rest === '' ? '' : rest.slice(0, -2)])
      }
    }
    candidates.push(['', body.slice(0, -2)])
  }
  for (const [topic, summary] of candidates) {
    const e = { ...entry, topic, summary }
    if (renderBlockEntry(e) === section) return e
  }
  return undefined
}

/** The frontmatter and heading of an archive, read. */
interface Front {
  blockId: string
  tier: GoInt
  session: string
  created: string
  startRef: string
  endRef: string
  consumed: string[]
  messageCount: GoInt
  originalTokens: GoInt
  topic: string
  /** Where the text after the heading's blank line starts, and its line number. */
  pos: number
  line: number
}

function splitRange(range: string, heading: string, prefix: string): [string, string] | undefined {
  // `range: <start>-<end>`: split where the heading (`<start>–<end>`) agrees.
  for (let i = range.indexOf('-'); i >= 0; i = range.indexOf('-', i + 1)) {
    if (heading === `${prefix}${range.slice(0, i)}–${range.slice(i + 1)}`)
      return [range.slice(0, i), range.slice(i + 1)]
  }
  return undefined
}

/** The frontmatter with every value on one line (what Norma writes for ordinary values). */
function readFront(r: Reader): Front {
  r.expect('---', 'the opening `---`')
  const blockId = r.key('block')
  const tier = r.int('tier')
  const session = r.optionalKey('session')
  const created = r.optionalKey('created')
  const range = r.key('range')
  let messageCount: GoInt
  let consumed: string[] = []
  if (r.peek().startsWith('consumed_blocks: ')) {
    const list = LIST.exec(r.key('consumed_blocks'))
    if (!list || list[1] === '') throw r.fail('consumed_blocks must be a list `[b1, b2]`', r.line - 1)
    consumed = (list[1] as string).split(', ')
    messageCount = r.int('loose_messages')
  } else {
    messageCount = r.int('message_count')
  }
  const originalTokens = r.int('original_tokens')
  const topic = r.optionalKey('topic')
  r.expect('---', 'the closing `---` of the frontmatter')
  r.expect('', 'a blank line')
  const prefix = `# Archive ${blockId} · Tier ${goIntText(tier)} · `
  const gotHeading = r.next('the `# Archive` heading')
  const refs = splitRange(range, gotHeading, prefix)
  if (refs === undefined)
    throw r.fail(
      `heading ${JSON.stringify(gotHeading)} does not match the frontmatter (block ${blockId}, tier ${goIntText(tier)}, range ${range})`,
      r.line - 1,
    )
  r.expect('', 'a blank line')
  return {
    blockId,
    tier,
    session,
    created,
    startRef: refs[0],
    endRef: refs[1],
    consumed,
    messageCount,
    originalTokens,
    topic,
    pos: r.pos,
    line: r.line,
  }
}

/** How many frontmatter readings the search tries before giving up. */
const MAX_FRONTS = 256

type FrontKey =
  | 'block'
  | 'tier'
  | 'session'
  | 'created'
  | 'range'
  | 'consumed_blocks'
  | 'loose_messages'
  | 'message_count'
  | 'original_tokens'
  | 'topic'

/** What may follow each key, in the order Norma writes them; `end` is the closing `---`. */
const NEXT: Record<FrontKey | 'start', Array<FrontKey | 'end'>> = {
  start: ['block'],
  block: ['tier'],
  tier: ['session', 'created', 'range'],
  session: ['created', 'range'],
  created: ['range'],
  range: ['consumed_blocks', 'message_count'],
  consumed_blocks: ['loose_messages'],
  loose_messages: ['original_tokens'],
  message_count: ['original_tokens'],
  original_tokens: ['topic', 'end'],
  topic: ['end'],
}
const INT_KEYS: ReadonlySet<FrontKey> = new Set([
  'tier',
  'loose_messages',
  'message_count',
  'original_tokens',
])

/**
 * Every reading of the frontmatter where values may span lines (shortest values first), each
 * checked against the heading, which repeats the block, tier and range.
 */
function* searchFronts(text: string): Generator<Front> {
  if (!text.startsWith('---\n')) return
  const values = new Map<FrontKey, string>()
  function* at(pos: number, prev: FrontKey | 'start'): Generator<Front> {
    for (const key of NEXT[prev]) {
      if (key === 'end') {
        if (!text.startsWith('---\n\n', pos)) continue
        const front = finish(pos + 5)
        if (front) yield front
        continue
      }
      const lead = `${key}: `
      if (!text.startsWith(lead, pos)) continue
      const v = pos + lead.length
      for (let q = text.indexOf('\n', v); q >= 0; q = text.indexOf('\n', q + 1)) {
        values.set(key, text.slice(v, q))
        yield* at(q + 1, key)
        if (INT_KEYS.has(key)) break
      }
      values.delete(key)
    }
  }
  function finish(pos: number): Front | undefined {
    const int = (k: FrontKey) => {
      const v = values.get(k)
      return v !== undefined && /^-?\d+$/.test(v) ? parseGoInt(v) : undefined
    }
    const blockId = values.get('block') as string
    const tier = int('tier')
    const originalTokens = int('original_tokens')
    const count = values.has('message_count') ? int('message_count') : int('loose_messages')
    if (tier === undefined || originalTokens === undefined || count === undefined) return undefined
    let consumed: string[] = []
    if (values.has('consumed_blocks')) {
      const list = LIST.exec(values.get('consumed_blocks') as string)
      if (!list || list[1] === '') return undefined
      consumed = (list[1] as string).split(', ')
    }
    const prefix = `# Archive ${blockId} · Tier ${goIntText(tier)} · `
    if (!text.startsWith(prefix, pos)) return undefined
    // The heading ends where a blank line follows the refs; the refs may hold line breaks too.
    const range = values.get('range') as string
    for (let i = range.indexOf('-'); i >= 0; i = range.indexOf('-', i + 1)) {
      const heading = `${prefix}${range.slice(0, i)}–${range.slice(i + 1)}\n\n`
      if (!text.startsWith(heading, pos)) continue
      const after = pos + heading.length
      return {
        blockId,
        tier,
        session: values.get('session') ?? '',
        created: values.get('created') ?? '',
        startRef: range.slice(0, i),
        endRef: range.slice(i + 1),
        consumed,
        messageCount: count,
        originalTokens,
        topic: values.get('topic') ?? '',
        pos: after,
        line: lineNumber(text, after),
      }
    }
    return undefined
  }
  yield* at(4, 'start')
}

/** The summary and the entries after the frontmatter; checks the whole text re-renders. */
function readBody(r: Reader, f: Front): ArchiveDocument {
  const doc: ArchiveDocument = {
    blockId: f.blockId,
    tier: f.tier,
    session: f.session,
    created: f.created,
    startRef: f.startRef,
    endRef: f.endRef,
    originalTokens: f.originalTokens,
    topic: f.topic,
    summary: '',
    entries: [],
  }
  if (r.peek() === SUMMARY_INTRO) {
    r.next(SUMMARY_INTRO)
    r.expect('', 'a blank line')
    const lines: string[] = []
    for (;;) {
      const line = r.next('a summary line `> …` or a blank line')
      if (line === '') break
      if (!line.startsWith('> ')) throw r.fail('summary lines must start with `> `', r.line - 1)
      lines.push(line.slice(2))
    }
    doc.summary = lines.join('\n')
  }
  r.expect('---', 'the `---` line before the entries')
  r.expect('', 'a blank line')
  const count = typeof f.messageCount === 'number' ? f.messageCount : Number.MAX_SAFE_INTEGER
  doc.entries = parseEntries(r, count, f.consumed.length)
  const again = renderArchiveUnchecked(doc)
  if (again !== r.text) {
    let i = 0
    while (i < again.length && again[i] === r.text[i]) i++
    throw r.fail(
      'not in Norma’s archive layout (the text differs from its re-rendering here)',
      lineNumber(r.text, i),
    )
  }
  return doc
}

/** Reads an archive's text into its document. Throws NOA_BAD_ARCHIVE naming the line and reason. */
export function parseArchive(text: string, options: ParseArchiveOptions = {}): ArchiveDocument {
  const file = options.file ?? '<archive>'
  const r = new Reader(text, file)
  let first: NoaError
  try {
    return readBody(r, readFront(r))
  } catch (err) {
    if (!(err instanceof NoaError)) throw err
    first = err
  }
  // A value with a line break in it: try the readings where values span lines.
  let tried = 0
  for (const f of searchFronts(text)) {
    if (++tried > MAX_FRONTS) break
    const again = new Reader(text, file)
    again.pos = f.pos
    again.line = f.line
    try {
      return readBody(again, f)
    } catch (err) {
      if (!(err instanceof NoaError)) throw err
    }
  }
  throw first
}

function parseEntries(r: Reader, messages: number, blocks: number): ArchiveEntry[] {
  const text = r.text
  const start = r.pos
  const level = blocks > 0 ? '###' : '##'
  // Where an entry may start: the region's start, or a heading line after a blank line.
  const starts: number[] = []
  for (let p = start; p < text.length; ) {
    const line = lineAt(text, p)
    if (p === start || (text[p - 1] === '\n' && text[p - 2] === '\n')) {
      const isBlock = blocks > 0 && BLOCK_HEADING.test(line)
      const isMessage = line.startsWith(`${level} `) && parseMessageHeading(line.slice(level.length + 1))
      if (isBlock || isMessage) starts.push(p)
    }
    const nl = text.indexOf('\n', p)
    if (nl < 0) break
    p = nl + 1
  }
  if (start < text.length && starts[0] !== start)
    throw r.fail(
      `expected an entry heading (\`${level} <ref> · …\`${blocks > 0 ? ' or `## <block> · Tier …`' : ''})`,
    )
  const ends = [...starts.slice(1), text.length]
  const indexOf = new Map(starts.map((p, i) => [p, i]))
  const memo = new Map<string, ArchiveEntry[] | null>()
  let steps = 0

  const solve = (k: number, msgs: number, blks: number): ArchiveEntry[] | null => {
    if (k === starts.length) return msgs === 0 && blks === 0 ? [] : null
    const key = `${k}:${msgs}:${blks}`
    const known = memo.get(key)
    if (known !== undefined) return known
    if (++steps > MAX_STEPS)
      throw r.fail('too ambiguous to split into entries', lineNumber(text, starts[k] as number))
    const result = tryAt(k, msgs, blks)
    memo.set(key, result)
    return result
  }

  const tryAt = (k: number, msgs: number, blks: number): ArchiveEntry[] | null => {
    const pos = starts[k] as number
    const line = lineAt(text, pos)
    const bodyStart = pos + line.length + 2
    if (blks > 0 && BLOCK_HEADING.test(line)) {
      for (let j = k; j < starts.length; j++) {
        const entry = parseBlockSection(text.slice(pos, ends[j]))
        if (!entry) continue
        const rest = solve(j + 1, msgs, blks - 1)
        if (rest) return [entry, ...rest]
      }
    }
    const head = line.startsWith(`${level} `) ? parseMessageHeading(line.slice(level.length + 1)) : undefined
    if (!head || msgs === 0 || text.slice(pos + line.length, bodyStart) !== '\n\n') return null
    if (head.type === 'tool_use' || head.type === 'tool_result') {
      const open = /^(`{3,})(json)?$/.exec(lineAt(text, bodyStart))
      if (!open || (open[2] === 'json') !== (head.type === 'tool_use')) return null
      const fence = open[1] as string
      const contentStart = bodyStart + open[0].length + 1
      const close = text.indexOf(fence, contentStart)
      if (close < 0 || text.slice(close + fence.length, close + fence.length + 2) !== '\n\n') return null
      const end = close + fence.length + 2
      const j = end === text.length ? starts.length : indexOf.get(end)
      if (j === undefined) return null
      const rest = solve(j, msgs - 1, blks)
      return rest ? [{ ...head, text: text.slice(contentStart, close) }, ...rest] : null
    }
    for (let j = k; j < starts.length; j++) {
      const end = ends[j] as number
      if (end - bodyStart < 2 || text.slice(end - 2, end) !== '\n\n') continue
      const rest = solve(j + 1, msgs - 1, blks)
      if (rest) return [{ ...head, text: text.slice(bodyStart, end - 2) }, ...rest]
    }
    return null
  }

  const entries = solve(0, messages, blocks)
  if (!entries) {
    throw r.fail(
      `the entries do not match the frontmatter (${messages} message(s)${blocks > 0 ? `, ${blocks} absorbed block(s)` : ''})`,
    )
  }
  return entries
}
