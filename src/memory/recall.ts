/**
 * Norma's recall (`Relevant`) and auto-inject rendering. Scores are plain substring counts over
 * ASCII query tokens; lowercasing is Go's, so `İstanbul` matches `istanbul` as in Norma.
 */
import { goToLower, goTrimSpace } from '../gocompat/index.js'
import type { MemoryFields, MemoryNote } from './note.js'
import { mtimeNs, newerFirst } from './scan.js'

/** Norma's stop words: dropped from queries. */
export const STOP_WORDS: ReadonlySet<string> = new Set([
  'the',
  'a',
  'an',
  'and',
  'or',
  'of',
  'to',
  'in',
  'is',
  'it',
  'for',
  'on',
  'do',
  'i',
  'you',
  'my',
  'me',
  'what',
  'how',
  'can',
  'with',
  'this',
  'that',
])

/** Query tokens: `[a-z0-9_]+` of the lowercased query, at least 2 long, stop words dropped, duplicates kept. */
export function tokenize(query: string): string[] {
  return (goToLower(query).match(/[a-z0-9_]+/g) ?? []).filter((t) => t.length >= 2 && !STOP_WORDS.has(t))
}

/** Per token: +3 if in name + " " + type, +2 if in description, +1 if in the body. */
export function score(note: MemoryFields, tokens: readonly string[]): number {
  const head = goToLower(`${note.name} ${note.type}`)
  const desc = goToLower(note.description)
  const body = goToLower(note.content)
  let s = 0
  for (const t of tokens) {
    if (head.includes(t)) s += 3
    if (desc.includes(t)) s += 2
    if (body.includes(t)) s += 1
  }
  return s
}

export interface RecallHit {
  note: MemoryNote
  score: number
}

/**
 * Notes scoring above 0 for the query, best first, newer first among equal scores (and scan
 * order among equal mtimes: pass notes in scan order). `limit` ≤ 0 means no limit.
 */
export function relevant(notes: readonly MemoryNote[], query: string, limit = 0): RecallHit[] {
  const tokens = tokenize(query)
  if (tokens.length === 0) return []
  const hits: RecallHit[] = []
  for (const note of notes) {
    const s = score(note, tokens)
    if (s > 0) hits.push({ note, score: s })
  }
  hits.sort((a, b) => b.score - a.score || newerFirst(a.note, b.note))
  return limit > 0 ? hits.slice(0, limit) : hits
}

const DAY_NS = 86_400_000_000_000n
const STALE_NS = 2n * DAY_NS

function elapsedNs(note: MemoryNote, now: Date): bigint | undefined {
  const t = mtimeNs(note)
  return t === undefined ? undefined : BigInt(now.getTime()) * 1_000_000n - t
}

/** "today" (also for a future mtime), "yesterday", "N days ago", or "unknown age". */
export function age(note: MemoryNote, now: Date = new Date()): string {
  const ns = elapsedNs(note, now)
  if (ns === undefined) return 'unknown age'
  const days = ns / DAY_NS // truncates toward zero, as Go's int() of the float does
  if (days <= 0n) return 'today'
  if (days === 1n) return 'yesterday'
  return `${days} days ago`
}

export const STALE_NOTE =
  '(This memory is a point-in-time note, not live state — verify claims about code against the current source before relying on them.)'

/** The stale note for a memory at least 48 h old; empty otherwise. */
export function stalenessNote(note: MemoryNote, now: Date = new Date()): string {
  const ns = elapsedNs(note, now)
  return ns === undefined || ns < STALE_NS ? '' : STALE_NOTE
}

/** Norma's text for a prompt; empty when there are no notes. */
export function renderForInjection(notes: readonly MemoryNote[], now: Date = new Date()): string {
  if (notes.length === 0) return ''
  let out = 'Relevant memories (saved earlier):\n'
  for (const n of notes) {
    out += `\n--- ${n.name} (saved ${age(n, now)}) ---\n`
    const stale = stalenessNote(n, now)
    if (stale !== '') out += `${stale}\n`
    out += `${goTrimSpace(n.content)}\n`
  }
  return out
}
