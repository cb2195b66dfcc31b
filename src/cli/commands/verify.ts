import { untrustedJournals } from '../../engine/journal-view.js'
import { type LogProblem, logPath, problemOf, scanLogDir, verifyWorkspace } from '../../engine/logs.js'
import type { VerifyReport } from '../../engine/recovery.js'
import type { Skipped } from '../../store/replay.js'
import { SnapshotEngine } from '../../store/snapshot.js'
import { type StoreProblem, verifyStore } from '../../store/verify.js'
import { command, existingRootOf, JSON_OPTION, parseCommand, ROOT_OPTION } from '../args.js'
import { type CliIo, json, write } from '../io.js'
import { reportProblems } from '../problems.js'
import { count, meter, percent } from '../progress.js'
import { describeSkipped } from './describe.js'

export const spec = command({
  usage: 'usage: noa verify [workspace…] [--objects] [--root DIR] [--json]',
  options: {
    ...ROOT_OPTION,
    ...JSON_OPTION,
    objects: {
      type: 'boolean',
      description:
        'also check that every object the logs reach is stored (missing blobs named with their seq)',
    },
  },
  positionals: [0, Number.POSITIVE_INFINITY],
  details:
    'Reads every line of each log (all workspaces when none is named) without changing anything\n' +
    '(entries a dead process left only in its commit journal are read from there), then checks\n' +
    'that every snapshot and merge entry names a record of that workspace (one that does not,\n' +
    'which a later snapshot has recorded as without effect, is a note, not a failure). One log\n' +
    'that fails does not stop the others; every failure, every entry of agent-logs/ that is not\n' +
    'a regular log, and every commit journal that is not trusted is named again at the end.',
  examples: ['noa verify agent-1 agent-2', 'noa verify --objects'],
  exitCodes: {
    0: 'every log is consistent',
    1: 'a log has a problem or cannot be read (file:line: reason on stderr), or a commit journal is not trusted',
  },
})

/** Bytes as MB with one decimal (progress lines). */
export function mb(bytes: number): string {
  return `${(bytes / 1e6).toFixed(1)} MB`
}

export function describe(r: VerifyReport): string {
  if (r.problem) return `${r.file}:${r.problem.line}: ${r.problem.reason}`
  const base = r.base ? `, after base seq ${r.base.seq} (snapshot ${r.base.snapshotId})` : ''
  return `${count(r.entries, 'entry', 'entries')}, seq ${r.firstSeq}..${r.lastSeq}${base}, ${r.bytes} bytes`
}

function storeLine(p: StoreProblem): string {
  const seq = p.seq !== undefined && !p.reason.includes(`seq ${p.seq}`) ? `seq ${p.seq}: ` : ''
  const next =
    p.kind === 'unknown-snapshot' || p.kind === 'foreign-snapshot'
      ? '; the next noa snapshot records it as no effect'
      : ''
  return `${seq}${p.reason}${next}`
}

/**
 * Verifies each workspace in full, going on past one that fails (corrupt, unreadable, not a
 * regular file); every failure is named again at the end and the exit code is 1. Without
 * names: every entry of `agent-logs/`, what is not a regular log included. On top of the
 * engine's line scan, the store's checks of what each log names (records, and with --objects
 * every object it reaches).
 */
export async function run(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, spec)
  const root = existingRootOf(values)
  const scan = positionals.length > 0 ? { workspaces: positionals, problems: [] } : scanLogDir(root)
  const engine = new SnapshotEngine({ root })
  const problems: LogProblem[] = journalProblems(root)
  for (const p of scan.problems) {
    problems.push(p)
    if (values.json && p.code !== 'NOA_BAD_WORKSPACE') {
      await write(io.stdout, json({ file: p.file, ok: false, code: p.code, error: p.message }))
    }
  }
  const shown = meter(io)
  const n = scan.workspaces.length
  for (const [i, ws] of scan.workspaces.entries()) {
    let report: VerifyReport
    let found: StoreProblem[] = []
    try {
      report = await verifyWorkspace(root, ws, {
        onProgress: (bytes, size) =>
          shown.update(() => `verifying ${ws} (${i + 1}/${n}): ${percent(bytes, size)} of ${mb(size)}`),
      })
      if (report.ok) found = await verifyStore(engine, ws, { objects: values.objects ?? false })
    } catch (err) {
      shown.done()
      const p = problemOf(err, safeLogPath(root, ws))
      problems.push(p)
      if (values.json)
        await write(
          io.stdout,
          json({ workspace: ws, file: p.file, ok: false, code: p.code, error: p.message }),
        )
      else await write(io.stderr, `${ws}: ${p.message}\n`)
      continue
    }
    shown.done()
    const skipped = await skippedBy(engine, ws)
    const failures = found.filter((p) => p.recordedBy === undefined)
    const notes =
      found
        .filter((p) => p.recordedBy !== undefined)
        .map((p) => `  note: seq ${p.seq}: ${p.reason}; recorded as no effect by ${p.recordedBy}\n`)
        .join('') +
      skipped.map((k) => `  note: snapshot ${k.snapshot} skipped ${describeSkipped(k)}\n`).join('')
    if (!report.ok) problems.push({ file: report.file, code: 'NOA_CORRUPT_LOG', message: describe(report) })
    for (const p of failures)
      problems.push({ file: report.file, code: 'NOA_BAD_RECORD', message: `${report.file}: ${storeLine(p)}` })
    const good = report.ok && failures.length === 0
    if (values.json) {
      await write(io.stdout, json({ workspace: ws, ...report, ok: good, store: found, skipped }))
    } else if (!report.ok) {
      await write(io.stderr, `${ws}: ${describe(report)}\n${notes}`)
    } else if (good) {
      await write(
        io.stdout,
        `${ws}: ok, ${describe(report)}${values.objects ? ', every object it reaches stored' : ''}\n${notes}`,
      )
    } else {
      await write(
        io.stderr,
        `${ws}: ${describe(report)}; ${failures.length} problem${failures.length === 1 ? '' : 's'} with what it names:\n${failures
          .map((p) => `  ${storeLine(p)}\n`)
          .join('')}${notes}`,
      )
    }
  }
  return reportProblems(io, 'verify', problems, 'failed verification')
}

/**
 * What the workspace's snapshots left out of the log (`--skip-damaged`), oldest first: the
 * damage verify finds may already be accounted for. Nothing when the snapshots cannot be read
 * (the failure is reported by the checks above).
 */
async function skippedBy(engine: SnapshotEngine, ws: string): Promise<Array<Skipped & { snapshot: string }>> {
  try {
    const out: Array<Skipped & { snapshot: string }> = []
    for (const s of (await engine.listSnapshots(ws)).reverse()) {
      for (const k of s.skipped) out.push({ snapshot: s.snapshotId, ...k })
    }
    return out
  } catch {
    return []
  }
}

/**
 * Commit journals of the root that are not trusted (quarantined, or found so by this read): each
 * a problem naming the journal, why, and the workspaces it keeps refused.
 */
export function journalProblems(root: string): LogProblem[] {
  return untrustedJournals(root).map((q) => {
    const n = q.workspaces.length
    const refused =
      n > 0 ? `; workspace${n === 1 ? '' : 's'} ${q.workspaces.join(', ')} refused until it is removed` : ''
    const where = q.journal === q.found ? '' : ` (found as ${q.found})`
    return {
      file: q.journal,
      code: 'NOA_JOURNAL',
      message: `${q.journal}${where}: a commit journal that is not trusted, not replayed: ${q.reason}${refused}`,
    }
  })
}

/** The log's path for a report; a name that is not a workspace name has none. */
export function safeLogPath(root: string, ws: string): string {
  try {
    return logPath(root, ws)
  } catch {
    return ws
  }
}
