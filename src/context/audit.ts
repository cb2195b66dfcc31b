/**
 * The host audit Norma leaves undone (beyond Norma): a session's state.json checked against its
 * archives and, when given, its transcript.
 * - state: loads; its refs map both ways; block ids unique and below nextBlockId; absorbed
 *   blocks exist, are inactive and belong to one block; no message is covered by two active
 *   blocks; each block's range is the span of its messages' refs;
 * - archives: every block's archive is inside the session root (or the root of the session it
 *   was inherited from), at the path its tier, id and range give, exists and parses, and its
 *   frontmatter, summary, messages and absorbed blocks agree with the state; child links resolve;
 * - transcript: each archived message is the transcript's message with that ref, byte for byte.
 * With `repair`, what can be derived is restored: a missing archive of the session's own root is
 * rendered again from the transcript and the state. Nothing else is ever rewritten.
 */
import { closeSync, type Dirent, existsSync, readdirSync, readFileSync } from 'node:fs'
import { dirname, isAbsolute, join, relative, resolve, sep } from 'node:path'
import { NoaError } from '../engine/errors.js'
import { checkDirsBelow, openFileSync, READ } from '../engine/files.js'
import { decodeBytes, type GoInt, goIntAdd, goIntText } from '../gocompat/index.js'
import type { Message } from '../transcript/types.js'
import {
  type ArchiveDocument,
  type ArchiveMessageEntry,
  type ArchiveSource,
  archiveDocument,
  archiveRel,
  blockEntry,
  FileArchiver,
  messageEntry,
  relLink,
  renderArchiveUnchecked,
  renderBlockEntry,
  renderMessageEntry,
} from './archive.js'
import { parseArchive } from './archive-reader.js'
import { type ContextConfig, resolveConfig } from './config.js'
import { project } from './project.js'
import { blockNumber, indexToRef, refToIndex } from './refs.js'
import { findBlock } from './state.js'
import { loadStateFile, STATE_FILE, sessionRoot, stateFileOf } from './state-file.js'
import { checkZone, formatUnixSeconds, type TimeZoneOption } from './time.js'
import { BLOCKED_REF, type CompressionBlock, type CompressionState, type CoreMessage } from './types.js'

export type AuditCode =
  | 'state-unreadable'
  | 'state-session'
  | 'refs'
  | 'block-id'
  | 'absorbed'
  | 'covered-twice'
  | 'range'
  | 'outside-root'
  | 'archive-path'
  | 'archive-missing'
  | 'archive-unreadable'
  | 'archive-disagrees'
  | 'child-link'
  | 'transcript'
  | 'archive-orphan'

export interface AuditProblem {
  /** The file the problem is in (state.json or an archive). */
  file: string
  /** The block concerned, if any. */
  block?: string
  code: AuditCode
  reason: string
  /** Set when `repair` fixed it. */
  repaired?: boolean
}

export interface AuditOptions {
  baseDir: string
  sessionId: string
  /** The session's transcript messages, for the content checks and repairs. */
  messages?: readonly Message[]
  /** Restore what is derivable (a missing archive of the session's own root). */
  repair?: boolean
  config?: Partial<ContextConfig>
  /** Zone of the `created:` line of a restored archive (default `'local'`, as Norma). */
  zone?: TimeZoneOption
}

export interface AuditReport {
  root: string
  stateFile: string
  /** False when there is no state.json (nothing to check). */
  exists: boolean
  blocks: number
  archives: number
  /** Problems still there (repaired ones are in `repaired`). */
  problems: AuditProblem[]
  repaired: AuditProblem[]
  /**
   * Archives in the session's `tier<N>/` folders that no block points at (code `archive-orphan`).
   * Not counted against `ok`: a compression killed between its archive and its state leaves one.
   */
  orphans: AuditProblem[]
  ok: boolean
}

const MAX_ANCESTORS = 8

/** The `tier<N>/*.md` files in the session's root (folders and symlinks are not followed). */
function archiveFiles(root: string): string[] {
  const out: string[] = []
  let dirs: Dirent[]
  try {
    dirs = readdirSync(root, { withFileTypes: true })
  } catch {
    return out
  }
  for (const d of dirs) {
    if (!d.isDirectory() || !/^tier\d+$/.test(d.name)) continue
    let files: Dirent[]
    try {
      files = readdirSync(join(root, d.name), { withFileTypes: true })
    } catch {
      continue
    }
    for (const f of files) if (f.isFile() && f.name.endsWith('.md')) out.push(join(root, d.name, f.name))
  }
  return out.sort()
}

/** Archives in the session's root that no block of the state points at. */
function findOrphans(root: string, state: CompressionState | undefined): AuditProblem[] {
  const referenced = new Set(state?.blocks.map((b) => b.archivePath) ?? [])
  return archiveFiles(root)
    .filter((file) => !referenced.has(file))
    .map((file) => ({
      file,
      code: 'archive-orphan' as const,
      reason: state
        ? 'archive of no block in state.json (a block a rebuild or an edit dropped, or a compression killed before its state was saved)'
        : 'archive of no block: there is no state.json',
    }))
}

function isInside(root: string, file: string): boolean {
  const rel = relative(root, file)
  return rel !== '' && !rel.startsWith(`..${sep}`) && rel !== '..' && !isAbsolute(rel)
}

/** The session's root, then the roots of the sessions it was (transitively) inherited from. */
function allowedRoots(
  base: string,
  root: string,
  state: CompressionState,
): Array<{ root: string; sessionId: string }> {
  const out = [{ root, sessionId: state.sessionId }]
  let from = state.derivedFrom
  const seen = new Set([root])
  for (let i = 0; i < MAX_ANCESTORS && from !== '' && !/[/\\\0]/.test(from) && from !== '..'; i++) {
    const r = join(base, from)
    if (seen.has(r)) break
    seen.add(r)
    out.push({ root: r, sessionId: from })
    const load = loadStateFile(join(r, STATE_FILE), from, r)
    from = load.error ? '' : load.state.derivedFrom
  }
  return out
}

function refSpanOf(ids: readonly string[], state: CompressionState): [string, string] | undefined {
  let lo = Number.POSITIVE_INFINITY
  let hi = -1
  for (const id of ids) {
    const ref = state.messageRefs.byRaw.get(id)
    if (ref === undefined || ref === BLOCKED_REF) continue
    const n = refToIndex(ref)
    if (n === undefined) continue
    lo = Math.min(lo, n)
    hi = Math.max(hi, n)
  }
  return hi < 0 ? undefined : [indexToRef(lo), indexToRef(hi)]
}

class Audit {
  readonly problems: AuditProblem[] = []
  constructor(readonly stateFile: string) {}

  add(code: AuditCode, reason: string, file = this.stateFile, block?: string): AuditProblem {
    const p: AuditProblem = { file, code, reason }
    if (block !== undefined) p.block = block
    this.problems.push(p)
    return p
  }
}

function checkRefs(a: Audit, state: CompressionState): void {
  for (const [ref, raw] of state.messageRefs.byRef) {
    const n = refToIndex(ref)
    if (n === undefined || indexToRef(n) !== ref)
      a.add('refs', `byRef key ${JSON.stringify(ref)} is not a ref (m00001…m99999)`)
    const back = state.messageRefs.byRaw.get(raw)
    if (back !== ref)
      a.add('refs', `byRef[${ref}] = ${raw} but byRaw[${raw}] = ${back === undefined ? '(none)' : back}`)
  }
  for (const [raw, ref] of state.messageRefs.byRaw) {
    if (ref === BLOCKED_REF) continue
    const back = state.messageRefs.byRef.get(ref)
    if (back !== raw)
      a.add('refs', `byRaw[${raw}] = ${ref} but byRef[${ref}] = ${back === undefined ? '(none)' : back}`)
  }
}

function checkBlocks(a: Audit, state: CompressionState, cfg: ContextConfig): void {
  const seen = new Set<string>()
  const owner = new Map<string, string>()
  for (const b of state.blocks) {
    const id = b.blockId
    if (seen.has(id)) a.add('block-id', `block ${id} appears twice`, undefined, id)
    seen.add(id)
    const n = blockNumber(id)
    if (Number.isNaN(n)) a.add('block-id', `block id ${JSON.stringify(id)} is not b<N>`, undefined, id)
    else if (n >= state.nextBlockId)
      a.add('block-id', `nextBlockId ${state.nextBlockId} would allocate ${id} again`, undefined, id)
    if (!(b.tier >= 1 && b.tier <= cfg.maxTier))
      a.add('block-id', `block ${id} has tier ${b.tier}`, undefined, id)
    for (const childId of b.directBlockIds) {
      const child = findBlock(state, childId)
      if (!child) {
        a.add('absorbed', `block ${id} absorbed ${childId}, which is not in the state`, undefined, id)
        continue
      }
      const prev = owner.get(childId)
      if (prev !== undefined)
        a.add('absorbed', `block ${childId} is absorbed by both ${prev} and ${id}`, undefined, childId)
      owner.set(childId, id)
      if (child.active)
        a.add('absorbed', `block ${childId} was absorbed by ${id} but is still active`, undefined, childId)
      if (!(goIntAdd(child.tier, 1) === b.tier || (child.tier === b.tier && b.tier === cfg.maxTier)))
        a.add(
          'absorbed',
          `block ${id} (tier ${b.tier}) absorbed ${childId} of tier ${child.tier}`,
          undefined,
          id,
        )
      for (const mid of child.effectiveMessageIds)
        if (!b.effectiveMessageIds.includes(mid)) {
          a.add(
            'absorbed',
            `block ${id} absorbed ${childId} but does not cover its message ${mid}`,
            undefined,
            id,
          )
          break
        }
    }
    const effective = new Set(b.effectiveMessageIds)
    const stray = b.directMessageIds.find((m) => !effective.has(m))
    if (stray !== undefined)
      a.add('range', `block ${id} lists ${stray} as a direct message but not as covered`, undefined, id)
    const span = refSpanOf(b.effectiveMessageIds, state)
    if (span && (span[0] !== b.startRef || span[1] !== b.endRef))
      a.add(
        'range',
        `block ${id} says ${b.startRef}–${b.endRef} but its messages span ${span[0]}–${span[1]}`,
        undefined,
        id,
      )
  }
  const coveredBy = new Map<string, string>()
  for (const b of state.blocks) {
    if (!b.active) continue
    for (const mid of b.effectiveMessageIds) {
      const other = coveredBy.get(mid)
      const ref = state.messageRefs.byRaw.get(mid) ?? mid
      if (other !== undefined && other !== b.blockId)
        a.add(
          'covered-twice',
          `message ${ref} is covered by both ${other} and ${b.blockId}`,
          undefined,
          b.blockId,
        )
      else coveredBy.set(mid, b.blockId)
    }
  }
}

interface ArchiveCheck {
  block: CompressionBlock
  file: string
  ownRoot: boolean
  sessionId: string
}

function compareDoc(a: Audit, c: ArchiveCheck, doc: ArchiveDocument, state: CompressionState): void {
  const b = c.block
  const shown = (v: string | GoInt) => (typeof v === 'string' ? JSON.stringify(v) : goIntText(v))
  const differ = (what: string, inFile: string | GoInt, inState: string | GoInt) =>
    a.add(
      'archive-disagrees',
      `${what} is ${shown(inFile)} in the archive but ${shown(inState)} in state.json`,
      c.file,
      b.blockId,
    )
  if (doc.blockId !== b.blockId) differ('block', doc.blockId, b.blockId)
  if (doc.tier !== b.tier) differ('tier', doc.tier, b.tier)
  if (doc.startRef !== b.startRef || doc.endRef !== b.endRef)
    differ('range', `${doc.startRef}-${doc.endRef}`, `${b.startRef}-${b.endRef}`)
  if (doc.originalTokens !== b.compressedTokens)
    differ('original_tokens', doc.originalTokens, b.compressedTokens)
  if (doc.topic !== b.topic) differ('topic', doc.topic, b.topic)
  if (doc.summary !== blockEntry(b).summary) differ('summary', doc.summary, blockEntry(b).summary)
  if (doc.session !== '' && doc.session !== c.sessionId) differ('session', doc.session, c.sessionId)
  const children = doc.entries.filter((e) => e.kind === 'block').map((e) => e.blockId)
  if (children.join(',') !== b.directBlockIds.join(','))
    differ('consumed_blocks', `[${children.join(', ')}]`, `[${b.directBlockIds.join(', ')}]`)
  const refs = doc.entries.filter((e): e is ArchiveMessageEntry => e.kind === 'message').map((e) => e.ref)
  const want = b.directMessageIds.map((id) => state.messageRefs.byRaw.get(id) ?? '')
  if ([...refs].sort().join(',') !== [...want].sort().join(','))
    differ('messages', refs.join(', '), want.join(', '))
  for (const e of doc.entries) {
    if (e.kind !== 'block') continue
    const child = findBlock(state, e.blockId)
    if (child) {
      const expected = renderBlockEntry(blockEntry(child))
      if (renderBlockEntry(e) !== expected)
        a.add(
          'archive-disagrees',
          `the section of absorbed block ${e.blockId} does not match that block in state.json`,
          c.file,
          b.blockId,
        )
    }
    if (e.childRel === '') continue
    if (e.childLink !== relLink(e.childRel))
      a.add('child-link', `child link ${e.childLink} does not match ${e.childRel}`, c.file, b.blockId)
    const target = resolve(dirname(c.file), e.childLink)
    if (!existsSync(target))
      a.add(
        'child-link',
        `child link ${e.childLink} (block ${e.blockId}) points to a missing file ${target}`,
        c.file,
        b.blockId,
      )
  }
}

function compareWithTranscript(
  a: Audit,
  c: ArchiveCheck,
  doc: ArchiveDocument,
  state: CompressionState,
  byId: Map<string, CoreMessage>,
): void {
  const level = doc.entries.some((e) => e.kind === 'block') ? '###' : '##'
  for (const e of doc.entries) {
    if (e.kind !== 'message') continue
    const raw = state.messageRefs.byRef.get(e.ref)
    if (raw === undefined) {
      a.add(
        'transcript',
        `archived message ${e.ref || '(unaddressed)'} has no ref in state.json`,
        c.file,
        c.block.blockId,
      )
      continue
    }
    const m = byId.get(raw)
    if (!m) continue // no longer in the transcript's view (a compaction dropped it): nothing to compare
    if (renderMessageEntry(messageEntry(m, e.ref), level) !== renderMessageEntry(e, level))
      a.add('transcript', `archived message ${e.ref} differs from the transcript`, c.file, c.block.blockId)
  }
}

/** The archive of `b` rendered again from the transcript and the state, or why it cannot be. */
function rerender(
  b: CompressionBlock,
  state: CompressionState,
  cores: readonly CoreMessage[],
  zone: TimeZoneOption,
): string | { reason: string } {
  const index = new Map<string, number>()
  cores.forEach((m, i) => {
    if (!index.has(m.id)) index.set(m.id, i)
  })
  const items: Array<{ at: number; order: number; num: number; source: ArchiveSource }> = []
  for (const id of b.directMessageIds) {
    const at = index.get(id)
    if (at === undefined)
      return { reason: `message ${state.messageRefs.byRaw.get(id) ?? id} is not in the transcript` }
    items.push({
      at,
      order: 1,
      num: 0,
      source: { message: cores[at] as CoreMessage, ref: state.messageRefs.byRaw.get(id) ?? '' },
    })
  }
  for (const childId of b.directBlockIds) {
    const child = findBlock(state, childId)
    if (!child) return { reason: `absorbed block ${childId} is not in state.json` }
    let at = -1
    for (const id of child.effectiveMessageIds) {
      const i = index.get(id)
      if (i !== undefined && (at < 0 || i < at)) at = i
    }
    if (at < 0) return { reason: `the messages of absorbed block ${childId} are not in the transcript` }
    items.push({ at, order: 0, num: blockNumber(childId) || 0, source: { block: child } })
  }
  items.sort((x, y) => x.at - y.at || x.order - y.order || x.num - y.num)
  return renderArchiveUnchecked(
    archiveDocument({
      blockId: b.blockId,
      tier: b.tier,
      sessionId: state.sessionId,
      created: b.createdAt !== 0 ? formatUnixSeconds(b.createdAt, zone) : '',
      startRef: b.startRef,
      endRef: b.endRef,
      topic: b.topic,
      summary: b.summary,
      entries: items.map((i) => i.source),
      originalTokens: b.compressedTokens,
    }),
  )
}

export function auditSession(options: AuditOptions): AuditReport {
  const root = sessionRoot(options.baseDir, options.sessionId)
  const base = dirname(root)
  const stateFile = stateFileOf(root)
  const cfg = resolveConfig(options.config)
  const zone = checkZone(options.zone ?? 'local')
  const a = new Audit(stateFile)
  const report: AuditReport = {
    root,
    stateFile,
    exists: false,
    blocks: 0,
    archives: 0,
    problems: a.problems,
    repaired: [],
    orphans: [],
    ok: true,
  }
  try {
    // A session folder that is a symlink or a file is never read through.
    checkDirsBelow(base, root)
  } catch (err) {
    if (!(err instanceof NoaError)) throw err
    a.add('state-unreadable', err.message)
    report.ok = false
    return report
  }
  const load = loadStateFile(stateFile, options.sessionId, root)
  report.exists = load.exists
  if (load.error) {
    a.add('state-unreadable', (load.error.details.reason as string | undefined) ?? load.error.message)
    report.ok = false
    return report
  }
  if (!load.exists) {
    report.orphans = findOrphans(root, undefined)
    return report
  }
  const state = load.state
  report.blocks = state.blocks.length
  if (state.sessionId !== options.sessionId)
    a.add(
      'state-session',
      `sessionId is ${JSON.stringify(state.sessionId)} but the folder is session ${options.sessionId}`,
    )
  checkRefs(a, state)
  checkBlocks(a, state, cfg)

  const roots = allowedRoots(base, root, state)
  const projection = options.messages ? project(options.messages) : undefined
  const byId = new Map<string, CoreMessage>()
  for (const m of projection?.messages ?? []) if (!byId.has(m.id)) byId.set(m.id, m)

  for (const b of state.blocks) {
    if (b.archivePath === '' && b.archiveRel === '') {
      if (b.active) a.add('archive-path', `block ${b.blockId} has no archive`, undefined, b.blockId)
      continue
    }
    let rel: string | undefined
    try {
      rel = archiveRel(b.tier, b.blockId, b.startRef, b.endRef)
    } catch {
      rel = undefined
    }
    if (b.archiveRel !== rel)
      a.add(
        'archive-path',
        `block ${b.blockId}: archiveRel ${JSON.stringify(b.archiveRel)} does not match its tier, id and range (${rel ?? 'none'})`,
        undefined,
        b.blockId,
      )
    const file = b.archivePath
    const home = isAbsolute(file) ? roots.find((r) => isInside(r.root, file)) : undefined
    if (!home) {
      a.add(
        'outside-root',
        `block ${b.blockId}: archivePath ${JSON.stringify(file)} is outside the session root ${root}${roots.length > 1 ? ' and the roots it inherited from' : ''}`,
        undefined,
        b.blockId,
      )
      continue // never read a file the state should not point at
    }
    if (file !== join(home.root, b.archiveRel))
      a.add(
        'archive-path',
        `block ${b.blockId}: archivePath ${file} is not ${join(home.root, b.archiveRel)}`,
        undefined,
        b.blockId,
      )
    const check: ArchiveCheck = { block: b, file, ownRoot: home.root === root, sessionId: home.sessionId }
    let text: string
    try {
      // Below real folders only, and never through a symlink or into a FIFO.
      checkDirsBelow(dirname(home.root), dirname(file))
      const fd = openFileSync(file, READ, { what: 'archive' })
      try {
        text = decodeBytes(readFileSync(fd))
      } finally {
        closeSync(fd)
      }
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code !== 'ENOENT') {
        a.add(
          'archive-unreadable',
          `archive of block ${b.blockId} cannot be read: ${(err as Error).message}`,
          file,
          b.blockId,
        )
        continue
      }
      const p = a.add('archive-missing', `archive of block ${b.blockId} is missing`, file, b.blockId)
      if (options.repair && check.ownRoot && projection) {
        const content = rerender(b, state, projection.messages, zone)
        if (typeof content === 'string' && rel !== undefined && file === join(root, rel)) {
          new FileArchiver(root).write(b.tier, b.blockId, b.startRef, b.endRef, content)
          p.repaired = true
          p.reason += ' (rendered again from the transcript)'
        } else if (typeof content !== 'string') {
          p.reason += ` and cannot be rendered again: ${content.reason}`
        }
      } else if (options.repair) {
        p.reason += check.ownRoot
          ? ' (give the transcript to render it again)'
          : ' (it belongs to an ancestor session)'
      }
      continue
    }
    report.archives++
    let doc: ArchiveDocument
    try {
      doc = parseArchive(text, { file })
    } catch (err) {
      a.add(
        'archive-unreadable',
        `archive does not parse: ${(err as { details?: { reason?: string } }).details?.reason ?? (err as Error).message}`,
        file,
        b.blockId,
      )
      continue
    }
    compareDoc(a, check, doc, state)
    if (projection) compareWithTranscript(a, check, doc, state, byId)
  }
  report.orphans = findOrphans(root, state)
  report.repaired = a.problems.filter((p) => p.repaired)
  report.problems = a.problems.filter((p) => !p.repaired)
  report.ok = report.problems.length === 0
  return report
}
