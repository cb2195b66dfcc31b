/**
 * MEMORY.md, the index a runtime puts in its system prompt: Norma's exact text, except that
 * each link names the note's real file (Norma writes slug(name).md, which dangles for a note
 * whose file has another name).
 */
import type { MemoryNote } from './note.js'

/** A file name as a Markdown link target: bytes outside [A-Za-z0-9._~-] percent-encoded. */
export function linkTarget(file: string): string {
  // Files noa writes are [a-z0-9-].md and come out unchanged; a hand-made "My notes.md" would
  // otherwise end the link at the space.
  return /^[A-Za-z0-9._~-]*$/.test(file)
    ? file
    : encodeURIComponent(file).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
}

/** The index text for notes in scan order (newest first). */
export function renderIndex(notes: readonly Pick<MemoryNote, 'name' | 'description' | 'file'>[]): string {
  if (notes.length === 0) return '# Memory\n\n(no memories yet)\n'
  let out = '# Memory\n\n'
  for (const n of notes) out += `- [${n.name}](${linkTarget(n.file)}) — ${n.description}\n`
  return out
}
