/**
 * The UI's JSON API: each route is one of the library's read functions, the ones the CLI's
 * `--json` outputs print, so what the page shows is what `noa … --json` prints. Nothing here
 * writes: names and refs from the request are checked by the same functions the CLI uses
 * (checkWorkspace, SnapshotEngine.resolve, checkObjectId, checkTranscriptId), so no path leaves
 * the root or the agent folders under it.
 */
import { readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { encodeState, loadState } from '../context/state-file.js'
import { checkWorkspace } from '../engine/entry.js'
import { Errors, isNoaError } from '../engine/errors.js'
import { checkDirsBelow } from '../engine/files.js'
import { journalDir } from '../engine/journal-recovery.js'
import { readThroughJournals } from '../engine/journal-view.js'
import {
  existingLog,
  logPath,
  problemOf,
  scanLogDir,
  type WorkspaceInfo,
  workspaceInfo,
} from '../engine/logs.js'
import { readEntryBatches } from '../engine/reader.js'
import { parseCheckpointRecord, parsePath } from '../langgraph/layout.js'
import { MemoryStore } from '../memory/store.js'
import { type Checkpoint, loadCheckpoint, replicationDir } from '../replicate/checkpoint.js'
import { type DiffLimits, type FileDiff, fileDiff } from '../store/diff.js'
import { checkObjectId } from '../store/objects.js'
import { lastSeqOf } from '../store/records.js'
import { SnapshotEngine } from '../store/snapshot.js'
import { loadTranscript } from '../transcript/loader.js'
import { checkTranscriptId, listSidechains, transcriptPath } from '../transcript/paths.js'
import { messages } from '../transcript/view.js'
import { lockedFiles } from './locks.js'

/** Most entries one log request returns. */
export const MAX_LOG_LIMIT = 2000
/** A blob larger than this is named, not shown. */
export const MAX_SHOWN_BYTES = 2 << 20
/** Most checkpoints or items one agent-file request returns (the newest). */
const MAX_ITEMS = 500
/** The workspaces a writer in this process refuses since an fdatasync failed (UiOptions.poisoned). */
type PoisonedOf = () => Promise<{ workspace: string; code: string; message: string }[]>
/** A transcript's records sent to the page: the newest this many (each sidechain's too). */
const MAX_RECORDS = 5_000
/** One file's diff in the view: a side over 2 MiB is not read, the line diff gives up past these. */
const DIFF_LIMITS: DiffLimits = { maxBytes: MAX_SHOWN_BYTES, maxEditLength: 20_000, timeoutMs: 500 }
/** The whole diff of two trees in the view: files past this are listed without their patch. */
const DIFF_BUDGET_MS = 2_000

/** Where the agent files of a root are (the demo's layout: transcripts/, memory/, context/). */
export interface AgentDirs {
  transcripts: string
  memory: string
  context: string
}

export function agentDirsOf(root: string): AgentDirs {
  return {
    transcripts: join(root, 'transcripts'),
    memory: join(root, 'memory'),
    context: join(root, 'context'),
  }
}

export class UiApi {
  readonly engine: SnapshotEngine
  /** The last listing of each workspace, with the file's stamp it was made at. */
  private listed = new Map<string, { key: string; info: WorkspaceInfo }>()

  constructor(
    readonly root: string,
    readonly dirs: AgentDirs,
    private readonly poisonedOf: PoisonedOf = async () => [],
  ) {
    this.engine = new SnapshotEngine({ root })
  }

  /**
   * The names alone (one readdir): what the overview paints first on a root of many workspaces,
   * before the full listing (which reads each log's tail and counts its entries) arrives.
   */
  workspaceNames() {
    return { workspaces: scanLogDir(this.root).workspaces }
  }

  /**
   * `noa workspaces --json` (scanWorkspaces' listing), plus each log's lock holder (a writer has
   * it open). The overview asks again every few seconds: a log whose file (inode, size, mtime)
   * and the root's journals are as they were is not read again, so a poll of 10,000 quiet
   * workspaces costs a readdir and 10,000 stats instead of reading every log.
   */
  async workspaces() {
    const { workspaces: names, problems } = scanLogDir(this.root)
    readThroughJournals(this.root)
    const journals = stamp(journalDir(this.root))
    const workspaces: WorkspaceInfo[] = []
    const seen = new Map<string, { key: string; info: WorkspaceInfo }>()
    for (const ws of names) {
      const file = logPath(this.root, ws)
      try {
        const key = `${journals}/${stamp(file)}`
        const hit = this.listed.get(ws)
        const info = hit?.key === key ? hit.info : await workspaceInfo(this.root, ws)
        seen.set(ws, { key, info })
        workspaces.push(info)
      } catch (err) {
        problems.push(problemOf(err, file))
      }
    }
    this.listed = seen
    problems.sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : 0))
    const locked = lockedFiles(workspaces.map((w) => w.file))
    const checkpoints = this.replication()
    const poisoned = new Map(
      (await this.poisonedOf()).map((p) => [p.workspace, { code: p.code, message: p.message }]),
    )
    return {
      workspaces: workspaces.map((w) => {
        const replication = checkpoints.flatMap((c) => {
          const at = c.workspaces[w.workspace]
          return at
            ? [{ kind: c.kind, prefix: c.prefix, seq: at.seq, behind: Math.max(0, w.lastSeq - at.seq) }]
            : []
        })
        const poison = poisoned.get(w.workspace)
        return {
          ...w,
          locked: locked.has(w.file),
          ...(replication.length > 0 ? { replication } : {}),
          ...(poison ? { poisoned: poison } : {}),
        }
      }),
      problems,
    }
  }

  /**
   * The replication checkpoints of the root (`replication/push.<prefix>.json`, `pull.…`): how
   * far push published, or pull applied, each workspace when it last saved. A checkpoint that
   * cannot be used is left out, as push and pull leave it.
   */
  private replication(): Checkpoint[] {
    const dir = replicationDir(this.root)
    if (checkDirsBelow(this.root, dir) !== null) return []
    const out: Checkpoint[] = []
    for (const name of filesIn(dir, '.json')) {
      const m = /^(push|pull)\.(.+)$/.exec(name)
      if (!m) continue
      try {
        const c = loadCheckpoint(this.root, m[1] as Checkpoint['kind'], m[2] as string)
        if (c) out.push(c)
      } catch {
        // not a regular file: replicate status names it; the overview shows no lag from it
      }
    }
    return out
  }

  /**
   * Entries from seq `from` (at most `limit`), or the last `tail` ones: what `noa log --from`
   * prints. With the log's first and last seq, so a view can size itself.
   */
  async log(ws: string, q: URLSearchParams) {
    const workspace = checkWorkspace(ws)
    const file = existingLog(this.root, workspace)
    const lastSeq = lastSeqOf(this.root, workspace)
    const limit = intParam(q, 'limit', 1, MAX_LOG_LIMIT) ?? 200
    const tail = intParam(q, 'tail', 1, MAX_LOG_LIMIT)
    const firstSeq = await firstSeqOf(file)
    let from = intParam(q, 'from', 1, Number.MAX_SAFE_INTEGER) ?? firstSeq
    if (tail !== undefined) from = Math.max(firstSeq, lastSeq - tail + 1)
    from = Math.max(from, firstSeq)
    const n = tail ?? limit
    const entries: unknown[] = []
    if (from <= lastSeq) {
      for await (const batch of readEntryBatches(file, { fromSeq: from }, { threads: false })) {
        for (const e of batch) {
          if (entries.length >= n) break
          entries.push(e)
        }
        if (entries.length >= n) break
      }
    }
    return { workspace, firstSeq, lastSeq, entries }
  }

  /** `noa snapshots <ws> --json` */
  snapshots(ws: string) {
    return this.engine.listSnapshots(checkWorkspace(ws))
  }

  /** `noa history <ws> --json` */
  history(ws: string) {
    return this.engine.history(checkWorkspace(ws))
  }

  /** `noa tree <ref> --json`, as one object: the ref resolved and its files. */
  async tree(ref: string) {
    const r = await this.engine.resolve(ref)
    const files: { path: string; blob: string }[] = []
    for (const [path, blob] of r.tree.entries()) files.push({ path, blob })
    return { ref: r.ref, snapshotId: r.snapshotId, workspace: r.workspace, seq: r.seq, files }
  }

  /** `noa blob get`: text shown (when UTF-8 and not too large), binary named by its size. */
  async blob(id: string) {
    const blob = checkObjectId(id, 'blob')
    // Sized before it is read: a blob too large to show is named by its size, never loaded
    // (a compressible blob of gigabytes costs the store little and this process as much).
    const size = this.engine.store.blobSize(blob)
    if (size > MAX_SHOWN_BYTES) return { blob, bytes: size, binary: false, text: null }
    const bytes = await this.engine.store.getBlob(blob)
    const binary = bytes.includes(0) || !isUtf8(bytes)
    const shown = !binary && bytes.length <= MAX_SHOWN_BYTES
    return { blob, bytes: bytes.length, binary, text: shown ? bytes.toString('utf8') : null }
  }

  /** `noa diff a b --json --patch` */
  async diff(a: string, b: string) {
    const r = await this.engine.diff(a, b)
    // One file at a time, each bounded, and the whole within DIFF_BUDGET_MS: the patches are
    // computed on this thread, which beside `noa serve --ui` is the daemon's.
    const files: (FileDiff | undefined)[] = []
    const until = performance.now() + DIFF_BUDGET_MS
    for (const c of r.changes) {
      if (performance.now() > until) break
      files.push(await fileDiff(this.engine.store, c, DIFF_LIMITS))
    }
    const changes = r.changes.map((c, i) => {
      const f = files[i]
      if (!f)
        return {
          ...c,
          tooLarge: true,
          patch: '(not diffed here: the diff took its time budget before this file)\n',
        }
      return {
        ...c,
        ...(f.tooLarge ? { tooLarge: true } : {}),
        binary: f.binary,
        insertions: f.insertions,
        deletions: f.deletions,
        ...(f.missing.length > 0 ? { missing: f.missing } : {}),
        patch: f.patch,
      }
    })
    return { ...r, changes }
  }

  /**
   * Whether an agent folder is there, each part of it below the root a real folder: a symlink
   * (to somewhere outside the root) is refused (NOA_NOT_DIRECTORY), never followed.
   */
  private present(dir: string): boolean {
    return checkDirsBelow(this.root, dir) === null
  }

  /** The sessions with a transcript (`<id>.jsonl`) in the transcripts folder. */
  transcripts() {
    const dir = this.dirs.transcripts
    return { dir, sessions: this.present(dir) ? filesIn(dir, '.jsonl') : [] }
  }

  /** A transcript's records and the conversation `noa transcript show` summarises. */
  async transcript(id: string) {
    const sessionId = checkTranscriptId(id)
    const file = transcriptPath(this.dirs.transcripts, sessionId)
    const t = this.present(this.dirs.transcripts)
      ? await loadTranscript(file)
      : { exists: false, records: [], tornTail: null }
    if (!t.exists) throw Errors.NOT_FOUND(`${file}: no such transcript`, { file })
    const conv = messages(t.records)
    const sidechains = []
    for (const s of await listSidechains(this.dirs.transcripts, sessionId)) {
      // One unreadable sidechain (a symlink, a folder) is named with its error; the main
      // conversation and the other sidechains are still shown.
      try {
        const side = await loadTranscript(s.file)
        sidechains.push({ agentId: s.agentId, records: side.records.slice(-MAX_RECORDS) })
      } catch (err) {
        if (!isNoaError(err)) throw err
        sidechains.push({ agentId: s.agentId, records: [], error: { code: err.code, message: err.message } })
      }
    }
    return {
      sessionId,
      file,
      records: t.records.slice(-MAX_RECORDS),
      totalRecords: t.records.length,
      messages: conv.messages.length,
      usage: conv.usage,
      tornTail: t.tornTail !== null,
      sidechains,
    }
  }

  /** `noa memory list --json` with each note's content, and MEMORY.md as stored. */
  memory() {
    const store = new MemoryStore(this.dirs.memory)
    if (!this.present(store.dir)) return { dir: store.dir, notes: [], index: '' }
    let report: ReturnType<MemoryStore['scanReport']>
    try {
      report = store.scanReport()
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { dir: store.dir, notes: [], index: '' }
      throw err
    }
    const notes = report.notes.map((n) => ({
      name: n.name,
      description: n.description,
      type: n.type,
      file: n.file,
      content: n.content,
    }))
    return { dir: store.dir, notes, index: store.index(), skipped: report.skipped }
  }

  /** The sessions with a context folder. */
  contexts() {
    const dir = this.dirs.context
    return { dir, sessions: this.present(dir) ? dirsIn(dir) : [] }
  }

  /** `noa context state <dir> <session> --json`: state.json as loaded, with its tiers and archives. */
  context(id: string) {
    const sessionId = checkTranscriptId(id)
    if (!this.present(this.dirs.context)) {
      throw Errors.NOT_FOUND(`no context folder ${this.dirs.context}`, { file: this.dirs.context })
    }
    const load = loadState(this.dirs.context, sessionId)
    return {
      sessionId,
      file: load.file,
      exists: load.exists,
      error: load.error?.message ?? null,
      state: JSON.parse(encodeState(load.state)) as unknown,
    }
  }

  /**
   * A LangGraph thread's checkpoint timeline (its workspace `lg.…`): each checkpoint record the
   * log wrote, oldest first (the newest MAX_ITEMS), with its channel values.
   */
  async langgraph(ws: string) {
    const workspace = checkWorkspace(ws)
    if (!workspace.startsWith('lg.') && !workspace.startsWith('lgh.')) {
      throw Errors.BAD_ARGUMENT(`${workspace} is not a LangGraph thread's workspace (lg.…)`, { workspace })
    }
    const file = existingLog(this.root, workspace)
    const found: { seq: number; ts: number; blob: string; ns: string; id: string }[] = []
    for await (const batch of readEntryBatches(file, {}, { threads: false })) {
      for (const e of batch) {
        if (e.op !== 'write') continue
        const p = parsePath(e.path)
        if (p?.kind === 'checkpoint') found.push({ seq: e.seq, ts: e.ts, blob: e.blob, ns: p.ns, id: p.id })
      }
    }
    const checkpoints = []
    for (const c of found.slice(-MAX_ITEMS)) {
      const record = parseCheckpointRecord(await this.engine.store.getBlob(c.blob), c.blob)
      checkpoints.push({ ...c, record })
    }
    return { workspace, checkpoints, total: found.length }
  }

  /** An Agents session's items (its workspace `oa.…`): the `items/` files of its tree now. */
  async agents(ws: string) {
    const workspace = checkWorkspace(ws)
    if (!workspace.startsWith('oa.') && !workspace.startsWith('oah.')) {
      throw Errors.BAD_ARGUMENT(`${workspace} is not an Agents session's workspace (oa.…)`, { workspace })
    }
    const { tree } = await this.engine.resolve(workspace)
    const paths: [string, string][] = []
    for (const [path, blob] of tree.entries()) if (path.startsWith('items/')) paths.push([path, blob])
    const items = []
    for (const [path, blob] of paths.slice(-MAX_ITEMS)) {
      items.push({ path, item: JSON.parse((await this.engine.store.getBlob(blob)).toString('utf8')) })
    }
    return { workspace, items, total: paths.length }
  }
}

/** What changes when a file or folder does (its inode, size, mtime); '-' when it is not there. */
function stamp(path: string): string {
  try {
    const st = statSync(path, { bigint: true })
    return `${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`
  } catch {
    return '-'
  }
}

function isUtf8(bytes: Buffer): boolean {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(bytes)
    return true
  } catch {
    return false
  }
}

/** The seq of a log's first entry (past a compacted log's base), or 1 for an empty log. */
async function firstSeqOf(file: string): Promise<number> {
  for await (const batch of readEntryBatches(file, {}, { threads: false, chunkSize: 1 << 14 })) {
    const first = batch[0]
    if (first) return first.seq
  }
  return 1
}

function intParam(q: URLSearchParams, name: string, min: number, max: number): number | undefined {
  const v = q.get(name)
  if (v === null) return undefined
  const n = Number(v)
  if (!/^\d+$/.test(v) || !Number.isSafeInteger(n) || n < min || n > max) {
    throw Errors.BAD_ARGUMENT(`${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(v)}`, {
      field: name,
    })
  }
  return n
}

/** Names of the regular files in `dir` ending with `ext` (without it), sorted; none when missing. */
function filesIn(dir: string, ext: string): string[] {
  return listDir(dir)
    .filter((d) => d.isFile() && d.name.endsWith(ext))
    .map((d) => d.name.slice(0, -ext.length))
    .sort()
}

function dirsIn(dir: string): string[] {
  return listDir(dir)
    .filter((d) => d.isDirectory())
    .map((d) => d.name)
    .sort()
}

function listDir(dir: string) {
  try {
    return readdirSync(dir, { withFileTypes: true })
  } catch {
    return []
  }
}
