/**
 * One memory note as Norma v0.4.3 writes and reads it: `---` frontmatter with `name:`,
 * `description:` and an optional `type:` line, a blank line, then the Markdown body. No YAML:
 * nothing is quoted or escaped, so a value cannot hold a line break.
 */
import { Errors } from '../engine/errors.js'
import { goTrimSpace, trimLeftSet, trimRightSet } from '../gocompat/index.js'

/** The type values Norma's tool prompt names; only these are accepted on save. */
export const MEMORY_TYPES = ['user', 'feedback', 'project', 'reference'] as const
export type MemoryType = (typeof MEMORY_TYPES)[number]

/** What a caller saves. Name is required; the rest default to empty (no `type:` line). */
export interface MemoryInput {
  name: string
  description?: string
  type?: string
  content?: string
}

/** The fields a note file holds, as parsed. */
export interface MemoryFields {
  name: string
  description: string
  /** Whatever the file says: reading never validates it, as in Norma. */
  type: string
  content: string
}

/** A note read from a memory directory. */
export interface MemoryNote extends MemoryFields {
  /** File name inside the directory, e.g. `deploy-steps.md`. */
  file: string
  /** The directory joined with `file`. */
  path: string
  /** Modification time; undefined when it could not be read (its age is then "unknown age"). */
  mtime: Date | undefined
}

/** Norma's exact file text. Values are written as given: validate with `checkMemory` first. */
export function renderMemory(m: MemoryInput): string {
  const type = m.type ?? ''
  return (
    `---\nname: ${m.name}\ndescription: ${m.description ?? ''}\n` +
    (type !== '' ? `type: ${type}\n` : '') +
    `---\n\n${trimRightSet(m.content ?? '', '\n')}\n`
  )
}

/**
 * Norma's parser. With no opening `---` or no closing `\n---`, the whole text is the body. Keys
 * are split at the first `:` and trimmed; only name, description and type are read (the last
 * one wins). An empty name falls back to the file stem when `file` is given.
 */
export function parseMemory(text: string, file?: string): MemoryFields {
  const m: MemoryFields = { name: '', description: '', type: '', content: text }
  if (text.startsWith('---')) {
    const rest = trimLeftSet(text.slice(3), '\r\n')
    const end = rest.indexOf('\n---')
    if (end >= 0) {
      m.content = trimLeftSet(trimLeftSet(rest.slice(end + 4), '-'), '\r\n')
      for (const line of rest.slice(0, end).split('\n')) {
        const colon = line.indexOf(':')
        if (colon < 0) continue
        const key = goTrimSpace(line.slice(0, colon))
        const value = goTrimSpace(line.slice(colon + 1))
        if (key === 'name') m.name = value
        else if (key === 'description') m.description = value
        else if (key === 'type') m.type = value
      }
    }
  }
  if (m.name === '' && file !== undefined) m.name = stem(file)
  return m
}

export function stem(file: string): string {
  return file.endsWith('.md') ? file.slice(0, -3) : file
}

/** With the u flag a paired surrogate is one code point, so only an unpaired one matches. */
const LONE_SURROGATE = /[\ud800-\udfff]/u

function refuse(field: string, why: string): never {
  throw Errors.BAD_ARGUMENT(`memory ${field} ${why}; nothing was written`, { field })
}

function checkLine(field: string, value: unknown): string {
  if (typeof value !== 'string') refuse(field, `must be a string, got ${typeof value}`)
  // A line break would end the frontmatter value (or the whole frontmatter) in every reader.
  if (/[\r\n]/.test(value)) refuse(field, `must be one line: ${JSON.stringify(value)} has a line break`)
  if (LONE_SURROGATE.test(value)) refuse(field, 'holds an unpaired UTF-16 surrogate (not encodable as UTF-8)')
  // The parser trims values, so surrounding space could never be read back.
  return goTrimSpace(value)
}

/**
 * Validates what a save would write and returns it normalized (values trimmed as the parser
 * would trim them). Refuses an empty name, a line break in name or description, and a type
 * other than the four Norma names (reading still accepts any type).
 */
export function checkMemory(input: MemoryInput): Required<MemoryInput> {
  if (typeof input !== 'object' || input === null) refuse('note', 'must be an object')
  const name = checkLine('name', input.name)
  if (name === '') refuse('name', 'is empty')
  const description = checkLine('description', input.description ?? '')
  const type = checkLine('type', input.type ?? '')
  if (type !== '' && !(MEMORY_TYPES as readonly string[]).includes(type)) {
    refuse('type', `must be one of ${MEMORY_TYPES.join(', ')} (or empty), got ${JSON.stringify(type)}`)
  }
  const content = input.content ?? ''
  if (typeof content !== 'string') refuse('content', `must be a string, got ${typeof content}`)
  if (LONE_SURROGATE.test(content))
    refuse('content', 'holds an unpaired UTF-16 surrogate (not encodable as UTF-8)')
  return { name, description, type, content }
}
