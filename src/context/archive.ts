/**
 * The archive of a block (formats.md §d): `<root>/tier<N>/<blockId>_<startRef>-<endRef>.md`, the
 * raw content a compression took out of the context, byte for byte as Norma's `RenderArchive`
 * writes it. Text and thinking are written as they are; tool input and output go in fences that
 * grow by one backtick until the body does not contain them; nothing is truncated.
 *
 * The text is built in two steps: `archiveDocument` turns a compression (the block, its
 * messages and absorbed blocks) into an `ArchiveDocument`, and `renderArchiveUnchecked` writes a
 * document. `parseArchive` (archive-reader.ts) reads a file back into a document that renders to
 * the same text, for every file Norma or noa writes; `renderArchive` refuses the documents it
 * would not read back whole.
 */
import { rmSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { writeFileAtomic } from '../engine/atomic.js'
import { Errors } from '../engine/errors.js'
import { checkDirsBelow, statFile } from '../engine/files.js'
import { encodeBytes, type GoInt, goTrimSpace } from '../gocompat/index.js'
import { mkdirSessionDir } from './state-file.js'
import type { CompressionBlock, CoreMessage } from './types.js'

/** An absorbed block's section in a tier 2 or 3 archive. */
export interface ArchiveBlockEntry {
  kind: 'block'
  blockId: string
  tier: GoInt
  startRef: string
  endRef: string
  /** '' when the block has none. */
  topic: string
  /** The block's summary, trimmed; '' when empty. */
  summary: string
  /** The child's `archiveRel`; '' when it had none. */
  childRel: string
  /** The link target as written: `../<childRel>` when childRel holds a `/`, else childRel. */
  childLink: string
  /** The child's `archivePath`; '' when it had none. */
  absolutePath: string
}

export type ArchiveEntryType = 'text' | 'thinking' | 'tool_use' | 'tool_result'

/** One compressed message. */
export interface ArchiveMessageEntry {
  kind: 'message'
  /** The message's ref; '' is written `(unaddressed)`. */
  ref: string
  /** user, assistant or tool (not written for tool results). */
  role: string
  type: ArchiveEntryType
  /** tool_use: the tool's name; tool_result: the name written (`tool` when unknown); else ''. */
  toolName: string
  /**
   * The body. Fenced bodies (tool_use, tool_result) are written with a final `\n` added when
   * they lack one, so a parsed fenced body always ends with `\n`.
   */
  text: string
}

export type ArchiveEntry = ArchiveBlockEntry | ArchiveMessageEntry

export interface ArchiveDocument {
  blockId: string
  tier: GoInt
  /** '' = no `session:` line. */
  session: string
  /** '' = no `created:` line. */
  created: string
  startRef: string
  endRef: string
  originalTokens: GoInt
  /** '' = no `topic:` line. */
  topic: string
  /** The active summary, trimmed; '' = no summary section. */
  summary: string
  /** In view order. */
  entries: ArchiveEntry[]
}

export const SUMMARY_INTRO = '**Summary** (the version currently active in context):'
export const ARCHIVE_TEMP_PREFIX = '.noa-'

/** The link Norma writes for a child archive. */
export function relLink(rel: string): string {
  return rel.includes('/') ? `../${rel}` : rel
}

/** The shortest run of backticks (at least 3) that the body does not contain. */
export function fenceFor(body: string): string {
  let fence = '```'
  while (body.includes(fence)) fence += '`'
  return fence
}

function fenced(body: string, lang: string): string {
  const fence = fenceFor(body)
  return `${fence}${lang}\n${body}${body.endsWith('\n') ? '' : '\n'}${fence}\n\n`
}

/** The heading line of a message entry (without the `##` and the newline). */
export function messageLabel(e: ArchiveMessageEntry): string {
  const label = e.ref === '' ? '(unaddressed)' : e.ref
  switch (e.type) {
    case 'thinking':
      return `${label} · ${e.role} · thinking`
    case 'tool_use':
      return `${label} · ${e.role} · tool_use · ${e.toolName}`
    case 'tool_result':
      return `${label} · tool_result · ${e.toolName}`
    default:
      return `${label} · ${e.role}`
  }
}

export function renderMessageEntry(e: ArchiveMessageEntry, level: '##' | '###'): string {
  const head = `${level} ${messageLabel(e)}\n\n`
  if (e.type === 'tool_use') return head + fenced(e.text, 'json')
  if (e.type === 'tool_result') return head + fenced(e.text, '')
  return `${head}${e.text}\n\n`
}

export function renderBlockEntry(e: ArchiveBlockEntry): string {
  let out = `## ${e.blockId} · Tier ${e.tier} · ${e.startRef}–${e.endRef}\n\n`
  if (e.topic !== '') out += `**${e.topic}**\n\n`
  if (e.summary !== '') out += `${e.summary}\n\n`
  if (e.childRel !== '') out += `> Child archive: [\`${e.childRel}\`](${e.childLink})\n`
  if (e.absolutePath !== '') out += `> Absolute path: \`${e.absolutePath}\`\n`
  return `${out}\n`
}

/** The frontmatter and header, up to and including the `---` line after the summary. */
export function renderArchiveHead(doc: ArchiveDocument): string {
  const blocks = doc.entries.filter((e): e is ArchiveBlockEntry => e.kind === 'block')
  const loose = doc.entries.length - blocks.length
  let out = `---\nblock: ${doc.blockId}\ntier: ${doc.tier}\n`
  if (doc.session !== '') out += `session: ${doc.session}\n`
  if (doc.created !== '') out += `created: ${doc.created}\n`
  out += `range: ${doc.startRef}-${doc.endRef}\n`
  if (blocks.length > 0) {
    out += `consumed_blocks: [${blocks.map((b) => b.blockId).join(', ')}]\nloose_messages: ${loose}\n`
  } else {
    out += `message_count: ${loose}\n`
  }
  out += `original_tokens: ${doc.originalTokens}\n`
  if (doc.topic !== '') out += `topic: ${doc.topic}\n`
  out += `---\n\n# Archive ${doc.blockId} · Tier ${doc.tier} · ${doc.startRef}–${doc.endRef}\n\n`
  const summary = goTrimSpace(doc.summary)
  if (summary !== '') {
    out += `${SUMMARY_INTRO}\n\n`
    for (const line of summary.split('\n')) out += `> ${line}\n`
    out += '\n'
  }
  return `${out}---\n\n`
}

/**
 * The archive's text, byte for byte Norma's `RenderArchive`, for any document (what a
 * compression writes). `renderArchive` (archive-writer.ts) is the same text for the documents
 * the reader gives back whole, and refuses the others.
 */
export function renderArchiveUnchecked(doc: ArchiveDocument): string {
  const level = doc.entries.some((e) => e.kind === 'block') ? '###' : '##'
  let out = renderArchiveHead(doc)
  for (const e of doc.entries) out += e.kind === 'block' ? renderBlockEntry(e) : renderMessageEntry(e, level)
  return out
}

/** What a compression archives: a message with its ref, or an absorbed block. */
export type ArchiveSource = { message: CoreMessage; ref: string } | { block: CompressionBlock }

export interface ArchiveInput {
  blockId: string
  tier: GoInt
  sessionId: string
  /** The `created:` value ('' for none). */
  created: string
  startRef: string
  endRef: string
  topic: string
  summary: string
  entries: ArchiveSource[]
  originalTokens: GoInt
}

/** A fenced body as the document holds it: with the final `\n` the fence adds when it lacks one. */
function fencedText(text: string): string {
  return text.endsWith('\n') ? text : `${text}\n`
}

export function messageEntry(m: CoreMessage, ref: string): ArchiveMessageEntry {
  switch (m.contentType) {
    case 'reasoning':
      return { kind: 'message', ref, role: m.role, type: 'thinking', toolName: '', text: m.text }
    case 'tool-call':
      return {
        kind: 'message',
        ref,
        role: m.role,
        type: 'tool_use',
        toolName: m.toolName,
        text: fencedText(m.text),
      }
    case 'tool-result':
      return {
        kind: 'message',
        ref,
        role: m.role,
        type: 'tool_result',
        toolName: m.toolName || 'tool',
        text: fencedText(m.text),
      }
    default:
      return { kind: 'message', ref, role: m.role, type: 'text', toolName: '', text: m.text }
  }
}

export function blockEntry(b: CompressionBlock): ArchiveBlockEntry {
  return {
    kind: 'block',
    blockId: b.blockId,
    tier: b.tier,
    startRef: b.startRef,
    endRef: b.endRef,
    topic: b.topic,
    summary: goTrimSpace(b.summary),
    childRel: b.archiveRel,
    childLink: relLink(b.archiveRel),
    absolutePath: b.archivePath,
  }
}

/** Norma's `ArchiveRenderInput` as a document. */
export function archiveDocument(input: ArchiveInput): ArchiveDocument {
  return {
    blockId: input.blockId,
    tier: input.tier,
    session: input.sessionId,
    created: input.created,
    startRef: input.startRef,
    endRef: input.endRef,
    originalTokens: input.originalTokens,
    topic: input.topic,
    summary: goTrimSpace(input.summary),
    entries: input.entries.map((e) => ('block' in e ? blockEntry(e.block) : messageEntry(e.message, e.ref))),
  }
}

/** `tier<N>/<blockId>_<startRef>-<endRef>.md` (always with `/`). */
export function archiveRel(tier: GoInt, blockId: string, startRef: string, endRef: string): string {
  const name = `${blockId}_${startRef}-${endRef}.md`
  // Refs can come from the model's own words when a range has none; never let them leave the folder.
  if (/[/\\\0]/.test(name) || name.startsWith('..')) {
    throw Errors.COMPRESS(`archive name ${JSON.stringify(name)} would leave the tier folder`, {
      field: 'archive',
    })
  }
  return `tier${tier}/${name}`
}

/** Where compressions put their archives. */
export interface Archiver {
  /** Writes (or adopts) the archive and returns its absolute and relative paths. */
  write(
    tier: GoInt,
    blockId: string,
    startRef: string,
    endRef: string,
    content: string,
  ): { abs: string; rel: string }
  /** Takes back an archive written by a compression that failed later. */
  remove(abs: string): void
}

/**
 * Norma's file archiver, made durable: the archive is written to `.noa-*.tmp` in its tier
 * folder, fsynced (0666 before the umask) and renamed into place, and the folder is fsynced.
 */
export class FileArchiver implements Archiver {
  constructor(readonly root: string) {}

  pathsOf(tier: GoInt, blockId: string, startRef: string, endRef: string): { abs: string; rel: string } {
    const rel = archiveRel(tier, blockId, startRef, endRef)
    return { abs: join(this.root, rel), rel }
  }

  write(tier: GoInt, blockId: string, startRef: string, endRef: string, content: string) {
    const p = this.pathsOf(tier, blockId, startRef, endRef)
    mkdirSessionDir(this.root, join(this.root, `tier${tier}`))
    // A tool input that held bytes that are not UTF-8 holds them as lone surrogates (utf8.ts).
    writeFileAtomic(p.abs, encodeBytes(content), {
      tempPrefix: ARCHIVE_TEMP_PREFIX,
      tempSuffix: '.tmp',
      what: 'archive',
    })
    return p
  }

  remove(abs: string): void {
    try {
      rmSync(abs)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
    }
  }
}

/**
 * Norma's replay archiver: an archive already at the expected path is adopted as it is (not
 * read, not rewritten), so a rebuild keeps the archives of the live compressions.
 */
export class ReuseArchiver extends FileArchiver {
  /** Paths adopted rather than written. */
  readonly reused: string[] = []

  override write(tier: GoInt, blockId: string, startRef: string, endRef: string, content: string) {
    const p = this.pathsOf(tier, blockId, startRef, endRef)
    // Adopted only when it is a regular file in a real tier folder: a symlink there is refused.
    checkDirsBelow(dirname(resolve(this.root)), dirname(p.abs))
    if (statFile(p.abs, 'archive') !== undefined) {
      this.reused.push(p.abs)
      return p
    }
    return super.write(tier, blockId, startRef, endRef, content)
  }

  override remove(): void {}
}
