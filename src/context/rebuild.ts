/**
 * Rebuilding a state from the transcript alone (Norma's `RebuildStateFromLog`): every Compress
 * call whose result reported a block is replayed in order, on the messages up to the call, with
 * the same rules as a live compression; archives already at the expected path are adopted as
 * they are. Calls that fail now are skipped; the state changes only on success.
 *
 * Beyond Norma, which stamps every rebuilt block with the time of the rebuild: a block whose
 * archive was adopted takes its `createdAt` from the archive's `created:` line, so that the
 * rebuilt state is the one the live compressions saved, and agrees with its archives.
 */
import { closeSync, readSync } from 'node:fs'
import { openFileSync, READ } from '../engine/files.js'
import { type Archiver, ReuseArchiver } from './archive.js'
import { applyCompression } from './compress.js'
import { parseCompressArgs } from './compress-args.js'
import type { ContextConfig } from './config.js'
import { panelBlockCount } from './panel.js'
import { processTurn } from './pipeline.js'
import { createInitialState } from './state.js'
import { COMPRESS_TOOL_NAME, type CompressionState, type CoreMessage } from './types.js'

export interface RebuildInput {
  /** The projected messages (`project(messages).messages`). */
  messages: readonly CoreMessage[]
  config: ContextConfig
  sessionId: string
  archiveRoot: string
  /** Default: a ReuseArchiver on archiveRoot. */
  archiver?: Archiver
  /** `created:` of archives written anew. */
  created: string
  /** Unix seconds: createdAt of the blocks. */
  now: number
}

export interface RebuildResult {
  state: CompressionState
  replayed: number
  skipped: number
  warnings: string[]
}

/** The ids of Compress calls whose result reported a block (the last result of an id counts). */
export function succeededCalls(messages: readonly CoreMessage[]): Map<string, boolean> {
  const ok = new Map<string, boolean>()
  for (const m of messages) {
    if (m.contentType !== 'tool-result' || m.toolName !== COMPRESS_TOOL_NAME || m.toolCallId === '') continue
    ok.set(m.toolCallId, panelBlockCount(m.text) > 0)
  }
  return ok
}

/** The `created:` time of an archive (Unix seconds), read from its frontmatter; undefined if none. */
export function archiveCreatedAt(file: string): number | undefined {
  let head: string
  try {
    const fd = openFileSync(file, READ, { what: 'archive' })
    try {
      const buf = Buffer.alloc(4096)
      head = buf.toString('utf8', 0, readSync(fd, buf, 0, buf.length, 0))
    } finally {
      closeSync(fd)
    }
  } catch {
    return undefined
  }
  const end = head.indexOf('\n---\n')
  const m = /\ncreated: (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d))\n/.exec(
    head.slice(0, end < 0 ? 0 : end + 1),
  )
  if (!head.startsWith('---\n') || !m) return undefined
  const t = Date.parse(m[1] as string)
  return Number.isNaN(t) ? undefined : Math.floor(t / 1000)
}

export function rebuildState(input: RebuildInput): RebuildResult {
  const archiver = input.archiver ?? new ReuseArchiver(input.archiveRoot)
  const res: RebuildResult = {
    state: createInitialState(input.sessionId, input.archiveRoot),
    replayed: 0,
    skipped: 0,
    warnings: [],
  }
  const succeeded = succeededCalls(input.messages)
  input.messages.forEach((m, i) => {
    if (m.contentType !== 'tool-call' || m.toolName !== COMPRESS_TOOL_NAME || m.toolCallId === '') return
    if (!succeeded.get(m.toolCallId)) {
      res.skipped++
      return
    }
    const parsed = parseCompressArgs(m.text)
    if (parsed.ranges.length === 0) {
      res.skipped++
      return
    }
    const turn = processTurn(input.messages.slice(0, i + 1), res.state, input.config)
    const applied = applyCompression({
      ranges: parsed.ranges,
      messages: turn.messages,
      state: turn.state,
      config: input.config,
      callId: m.toolCallId,
      archiver,
      created: input.created,
      now: input.now,
    })
    if (applied.errors.length > 0 || applied.blocksCreated.length === 0) {
      res.skipped++
      res.warnings.push(...applied.errors)
      return
    }
    res.state = applied.state
    if (archiver instanceof ReuseArchiver) {
      for (const b of applied.blocksCreated) {
        if (!archiver.reused.includes(b.archivePath)) continue
        const t = archiveCreatedAt(b.archivePath)
        const mine = t === undefined ? undefined : res.state.blocks.find((x) => x.blockId === b.blockId)
        if (mine && t !== undefined) mine.createdAt = t
      }
    }
    res.replayed++
  })
  return res
}
