/**
 * A parsed line to a typed record, with the checks Go's `json.Unmarshal` into Norma's structs
 * makes: a known field of the wrong JSON type is an error (Norma then fails the whole load),
 * `null` leaves a field at its zero value, unknown keys are ignored by Go and kept here.
 *
 * `input` is a `json.RawMessage` in Go, kept byte for byte; JSON.parse cannot give the text of
 * a value, so when a line has any `input`, a small scanner walks the line to the content blocks
 * and takes the exact text of each `input` value (the last one when a key repeats, as both Go
 * and JSON.parse keep the last).
 */
import type { BoundaryMeta, ContentBlock, Message, TranscriptRecord, Usage } from './types.js'

/** What is wrong with a line, without the file and line (the loader adds those). */
export class DecodeError extends Error {
  override name = 'DecodeError'
}

function kind(v: unknown): string {
  if (v === null) return 'null'
  if (Array.isArray(v)) return 'array'
  return typeof v
}

function wrongType(field: string, want: string, v: unknown): DecodeError {
  return new DecodeError(`${field}: expected ${want}, got ${kind(v)}`)
}

type Obj = Record<string, unknown>

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/** A string field always written by Go: null or missing is ''. */
function str(o: Obj, key: string, field: string): void {
  const v = o[key]
  if (v === undefined || v === null) o[key] = ''
  else if (typeof v !== 'string') throw wrongType(`${field}${key}`, 'a string', v)
}

/** An omitempty string field: null is dropped. */
function optStr(o: Obj, key: string, field: string): void {
  const v = o[key]
  if (v === null) delete o[key]
  else if (v !== undefined && typeof v !== 'string') throw wrongType(`${field}${key}`, 'a string', v)
}

function optBool(o: Obj, key: string, field: string): void {
  const v = o[key]
  if (v === null) delete o[key]
  else if (v !== undefined && typeof v !== 'boolean') throw wrongType(`${field}${key}`, 'a boolean', v)
}

/** Go's `int`: within JavaScript's exact range here. */
function int(o: Obj, key: string, field: string, always: boolean): void {
  const v = o[key]
  if (v === undefined || v === null) {
    if (always) o[key] = 0
    else if (v === null) delete o[key]
  } else if (typeof v !== 'number' || !Number.isSafeInteger(v)) {
    throw wrongType(`${field}${key}`, 'an integer', v)
  }
}

/** Exact text of the `input` values of content blocks, mirroring the content tree. */
export interface RawBlock {
  input?: string
  content?: RawBlock[]
}

/** Walks JSON text that JSON.parse has already accepted, so it need not check anything. */
class Walker {
  i = 0
  constructor(readonly s: string) {}

  ws(): void {
    const s = this.s
    for (;;) {
      const c = s.charCodeAt(this.i)
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) this.i++
      else return
    }
  }

  skipString(): void {
    const s = this.s
    let q = s.indexOf('"', this.i + 1)
    for (;;) {
      let k = q - 1
      while (s.charCodeAt(k) === 0x5c) k--
      if ((q - 1 - k) % 2 === 0) break
      q = s.indexOf('"', q + 1)
    }
    this.i = q + 1
  }

  key(): string {
    const start = this.i
    this.skipString()
    const text = this.s.slice(start, this.i)
    return text.includes('\\') ? (JSON.parse(text) as string) : text.slice(1, -1)
  }

  skipValue(): void {
    this.ws()
    const s = this.s
    const c = s.charCodeAt(this.i)
    if (c === 0x22) {
      this.skipString()
      return
    }
    if (c === 0x7b || c === 0x5b) {
      let depth = 0
      for (;;) {
        const d = s.charCodeAt(this.i)
        if (d === 0x22) {
          this.skipString()
          continue
        }
        if (d === 0x7b || d === 0x5b) depth++
        else if (d === 0x7d || d === 0x5d) depth--
        this.i++
        if (depth === 0) return
      }
    }
    // number or literal
    for (;;) {
      const d = s.charCodeAt(this.i)
      if (
        Number.isNaN(d) ||
        d === 0x2c ||
        d === 0x5d ||
        d === 0x7d ||
        d === 0x20 ||
        d === 0x0a ||
        d === 0x0d ||
        d === 0x09
      )
        return
      this.i++
    }
  }

  /** At a value: if it is an object, calls `fn` per key with the position at the value (fn consumes it). */
  object(fn: (key: string) => void): boolean {
    this.ws()
    if (this.s.charCodeAt(this.i) !== 0x7b) {
      this.skipValue()
      return false
    }
    this.i++
    this.ws()
    if (this.s.charCodeAt(this.i) === 0x7d) {
      this.i++
      return true
    }
    for (;;) {
      this.ws()
      const k = this.key()
      this.ws()
      this.i++ // ':'
      this.ws()
      fn(k)
      this.ws()
      const c = this.s.charCodeAt(this.i++) // ',' or '}'
      if (c !== 0x2c) return true
    }
  }

  array(fn: () => void): boolean {
    this.ws()
    if (this.s.charCodeAt(this.i) !== 0x5b) {
      this.skipValue()
      return false
    }
    this.i++
    this.ws()
    if (this.s.charCodeAt(this.i) === 0x5d) {
      this.i++
      return true
    }
    for (;;) {
      this.ws()
      fn()
      this.ws()
      const c = this.s.charCodeAt(this.i++) // ',' or ']'
      if (c !== 0x2c) return true
    }
  }

  blocks(): RawBlock[] | undefined {
    const out: RawBlock[] = []
    const isArray = this.array(() => {
      const raw: RawBlock = {}
      this.object((k) => {
        if (k === 'input') {
          const start = this.i
          this.skipValue()
          raw.input = this.s.slice(start, this.i)
        } else if (k === 'content') {
          raw.content = this.blocks()
        } else {
          this.skipValue()
        }
      })
      out.push(raw)
    })
    return isArray ? out : undefined
  }
}

/**
 * The raw `input` texts of the content blocks found at `path` (keys from the top object, e.g.
 * `['message', 'content']` for a record line, `['content']` for a bare message).
 */
export function rawContentInputs(text: string, path: readonly string[]): RawBlock[] | undefined {
  const w = new Walker(text)
  let found: RawBlock[] | undefined
  const descend = (depth: number): void => {
    if (depth === path.length - 1) {
      w.object((k) => {
        if (k === path[depth]) found = w.blocks()
        else w.skipValue()
      })
      return
    }
    w.object((k) => {
      if (k === path[depth]) descend(depth + 1)
      else w.skipValue()
    })
  }
  descend(0)
  return found
}

function hasInput(blocks: unknown): boolean {
  if (!Array.isArray(blocks)) return false
  for (const b of blocks) {
    if (!isObj(b)) continue
    if (b.input !== undefined || hasInput(b.content)) return true
  }
  return false
}

function decodeBlocks(list: unknown[], raws: RawBlock[] | undefined, field: string): ContentBlock[] {
  for (let i = 0; i < list.length; i++) {
    const b = list[i]
    const f = `${field}[${i}]`
    if (b === null) list[i] = { type: '' }
    else if (!isObj(b)) throw wrongType(f, 'a content block object', b)
    else decodeBlock(b, raws?.[i], `${f}.`)
  }
  return list as ContentBlock[]
}

function decodeBlock(b: Obj, raw: RawBlock | undefined, field: string): void {
  str(b, 'type', field)
  for (const key of ['text', 'thinking', 'signature', 'id', 'name', 'tool_use_id']) optStr(b, key, field)
  optBool(b, 'is_error', field)
  if (b.input !== undefined) {
    // `input: null` is the RawMessage "null", not an absent input.
    b.input = raw?.input ?? JSON.stringify(b.input)
  }
  const content = b.content
  if (content === null) delete b.content
  else if (content !== undefined) {
    if (!Array.isArray(content)) throw wrongType(`${field}content`, 'an array', content)
    decodeBlocks(content, raw?.content, `${field}content`)
  }
  // Go writes an empty string field as nothing; the typed view gives it back as ''.
  switch (b.type) {
    case 'text':
      b.text ??= ''
      break
    case 'thinking':
      b.thinking ??= ''
      break
    case 'tool_use':
      b.id ??= ''
      b.name ??= ''
      break
    case 'tool_result':
      b.tool_use_id ??= ''
      break
  }
}

/**
 * A message object (from a record, or a bare one): checks and normalizes it in place. `line`
 * and `path` locate the content array in the text when raw `input` texts are needed.
 */
export function decodeMessage(m: Obj, line: string, path: readonly string[], field = 'message.'): Message {
  str(m, 'role', field)
  const content = m.content
  if (content === undefined || content === null) m.content = null
  else if (!Array.isArray(content)) throw wrongType(`${field}content`, 'an array', content)
  else decodeBlocks(content, hasInput(content) ? rawContentInputs(line, path) : undefined, `${field}content`)
  return m as unknown as Message
}

function decodeUsage(u: Obj): Usage {
  for (const key of ['input_tokens', 'output_tokens', 'cache_read_tokens', 'cache_write_tokens']) {
    int(u, key, 'usage.', true)
  }
  return u as unknown as Usage
}

function decodeMeta(m: Obj): BoundaryMeta {
  optStr(m, 'trigger', 'boundary.')
  int(m, 'pre_tokens', 'boundary.', true)
  int(m, 'messages_summarized', 'boundary.', false)
  const skills = m.active_skills
  if (skills === null) delete m.active_skills
  else if (skills !== undefined) {
    if (!Array.isArray(skills)) throw wrongType('boundary.active_skills', 'an array of strings', skills)
    for (let i = 0; i < skills.length; i++) {
      if (skills[i] === null) skills[i] = ''
      else if (typeof skills[i] !== 'string')
        throw wrongType(`boundary.active_skills[${i}]`, 'a string', skills[i])
    }
  }
  return m as unknown as BoundaryMeta
}

function optObj(o: Obj, key: string): Obj | undefined {
  const v = o[key]
  if (v === null) {
    delete o[key]
    return undefined
  }
  if (v === undefined) return undefined
  if (!isObj(v)) throw wrongType(key, 'an object', v)
  return v
}

/** The record of one parsed line (`line` is its text). Mutates and returns `value`. */
export function decodeRecord(value: unknown, line: string): TranscriptRecord {
  if (value === null) return { uuid: '', session_id: '', timestamp: '', type: '' }
  if (!isObj(value)) throw new DecodeError(`a record must be a JSON object, got ${kind(value)}`)
  const r = value
  str(r, 'uuid', '')
  optStr(r, 'parent_uuid', '')
  str(r, 'session_id', '')
  optStr(r, 'agent_id', '')
  optBool(r, 'is_sidechain', '')
  str(r, 'timestamp', '')
  str(r, 'type', '')
  const message = optObj(r, 'message')
  if (message) decodeMessage(message, line, ['message', 'content'])
  const usage = optObj(r, 'usage')
  if (usage) decodeUsage(usage)
  const boundary = optObj(r, 'boundary')
  if (boundary) decodeMeta(boundary)
  return r as unknown as TranscriptRecord
}
