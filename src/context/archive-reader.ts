/**
 * Reading an archive back (beyond Norma, which has no reader). The layout is Norma's
 * (archive.ts); the reader accepts exactly the files `renderArchive` can write and guarantees
 * `renderArchive(parseArchive(text)) === text`, refusing anything else with the line and reason.
 *
 * Text and thinking bodies are not fenced, so a body may itself hold a line that looks like
 * the next entry's heading. Entries are therefore split so that their number matches the
 * frontmatter's counts, preferring the shortest body when several splits fit.
 */
import { NoaError } from '../engine/errors.js'
import {
  type ArchiveBlockEntry,
  type ArchiveDocument,
  type ArchiveEntry,
  type ArchiveMessageEntry,
  renderArchive,
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
    return new NoaError('NOA_BAD_ARCHIVE', `${this.file}:${line}: ${reason}`, {
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

  int(name: string): number {
    const v = this.key(name)
    if (!/^-?\d+$/.test(v) || !Number.isSafeInteger(Number(v)))
      throw this.fail(`${name} must be an integer, got ${JSON.stringify(v)}`, this.line - 1)
    return Number(v)
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
    tier: Number(h[2]),
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

/** Reads an archive's text into its document. Throws NOA_BAD_ARCHIVE naming the line and reason. */
export function parseArchive(text: string, options: ParseArchiveOptions = {}): ArchiveDocument {
  const r = new Reader(text, options.file ?? '<archive>')
  r.expect('---', 'the opening `---`')
  const blockId = r.key('block')
  const tier = r.int('tier')
  const session = r.optionalKey('session')
  const created = r.optionalKey('created')
  const range = r.key('range')
  let messageCount: number
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
  // `range: <start>-<end>`: split where the heading (`<start>–<end>`) agrees.
  const prefix = `# Archive ${blockId} · Tier ${tier} · `
  const gotHeading = r.next('the `# Archive` heading')
  let startRef: string | undefined
  let endRef = ''
  for (let i = range.indexOf('-'); i >= 0; i = range.indexOf('-', i + 1)) {
    if (gotHeading === `${prefix}${range.slice(0, i)}–${range.slice(i + 1)}`) {
      startRef = range.slice(0, i)
      endRef = range.slice(i + 1)
      break
    }
  }
  if (startRef === undefined)
    throw r.fail(
      `heading ${JSON.stringify(gotHeading)} does not match the frontmatter (block ${blockId}, tier ${tier}, range ${range})`,
      r.line - 1,
    )
  const doc: ArchiveDocument = {
    blockId,
    tier,
    session,
    created,
    startRef,
    endRef,
    originalTokens,
    topic,
    summary: '',
    entries: [],
  }
  r.expect('', 'a blank line')
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
  doc.entries = parseEntries(r, messageCount, consumed.length)
  const again = renderArchive(doc)
  if (again !== text) {
    let i = 0
    while (i < again.length && again[i] === text[i]) i++
    throw r.fail(
      'not in Norma’s archive layout (the text differs from its re-rendering here)',
      lineNumber(text, i),
    )
  }
  return doc
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
