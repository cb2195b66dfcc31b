/**
 * Where a session's transcripts live: `<dir>/<sessionId>.jsonl` for the main conversation and
 * `<dir>/<sessionId>/subagents/agent-<agentId>.jsonl` for each sidechain (Norma's MainPath and
 * AgentPath). Beyond Norma, which takes any id: an id that would leave `dir` is refused.
 */
import type { Dirent } from 'node:fs'
import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { Errors } from '../engine/errors.js'
import { checkDirsBelow } from '../engine/files.js'

/** Refuses ids that are empty, `.`/`..`, or hold a path separator or NUL. */
export function checkTranscriptId(id: unknown, what = 'session id'): string {
  if (typeof id !== 'string' || id === '' || id === '.' || id === '..' || /[/\\\0]/.test(id)) {
    throw Errors.BAD_ARGUMENT(
      `${what} must be a non-empty name without /, \\ or NUL and not . or .., got ${JSON.stringify(id)}`,
      { field: what },
    )
  }
  return id
}

/** The main transcript of a session, or with `agentId` the sidechain of that agent. */
export function transcriptPath(dir: string, sessionId: string, agentId?: string): string {
  checkTranscriptId(sessionId)
  if (agentId === undefined) return join(dir, `${sessionId}.jsonl`)
  checkTranscriptId(agentId, 'agent id')
  return join(dir, sessionId, 'subagents', `agent-${agentId}.jsonl`)
}

export interface SidechainFile {
  agentId: string
  file: string
}

const SIDECHAIN_NAME = /^agent-(.+)\.jsonl$/

/**
 * The sidechain transcripts of a session, by agent id in name order; none when the folder is
 * missing. `<sessionId>/` and `subagents/` must be real folders (a symlink there is
 * NOA_NOT_DIRECTORY); an entry that is not a regular file is listed, so that reading it names
 * the problem instead of hiding the file.
 */
export async function listSidechains(dir: string, sessionId: string): Promise<SidechainFile[]> {
  const folder = join(dir, checkTranscriptId(sessionId), 'subagents')
  if (checkDirsBelow(dir, folder) !== null) return []
  let entries: Dirent[]
  try {
    entries = await readdir(folder, { withFileTypes: true })
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOENT' || code === 'ENOTDIR') return []
    throw err
  }
  const out: SidechainFile[] = []
  for (const e of entries) {
    const m = SIDECHAIN_NAME.exec(e.name)
    if (m) out.push({ agentId: m[1] as string, file: join(folder, e.name) })
  }
  return out.sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : 0))
}
