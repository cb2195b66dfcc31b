/**
 * `noa context state|compress|view|rebuild|archive|audit`: Noa context compression (Norma's
 * state.json v1 and tiered Markdown archive). A bad state.json: `state` prints the error on
 * stderr and the initial state, exit 3; the other commands warn and go on from the initial
 * state, as Norma does. `audit` exits 1 with one `<file>: <reason>` line per problem.
 */
import { closeSync, readFileSync } from 'node:fs'
import type { ArchiveDocument } from '../../context/archive.js'
import { parseArchive } from '../../context/archive-reader.js'
import { auditSession } from '../../context/audit.js'
import { type ContextConfig, DEFAULT_CONFIG, NORMA_CONFIG } from '../../context/config.js'
import { refToIndex } from '../../context/refs.js'
import { ContextSession, withSessionLock } from '../../context/session.js'
import { encodeState, loadState, sessionRoot } from '../../context/state-file.js'
import { BLOCKED_REF, type CompressionState } from '../../context/types.js'
import { NoaError } from '../../engine/errors.js'
import { openFileSync, READ } from '../../engine/files.js'
import {
  decodeBytes,
  type GoInt,
  goIntCompare,
  goTrimSpace,
  stringifyWithInts,
} from '../../gocompat/index.js'
import { loadTranscript } from '../../transcript/loader.js'
import type { ContentBlock, Message } from '../../transcript/types.js'
import { messages as conversation } from '../../transcript/view.js'
import {
  type GroupSpec,
  intOption,
  JSON_OPTION,
  type OptionDef,
  parseCommand,
  runSubcommand,
  subcommand,
  UsageError,
} from '../args.js'
import { type CliIo, write } from '../io.js'

const STATE = 'usage: noa context state <baseDir> <sessionId> [--norma] [--json]'
const COMPRESS =
  'usage: noa context compress <baseDir> <sessionId> --transcript <file> --from <ref|block> --to <ref|block> --summary <text> [--topic T] [--min-chars N] [--norma] [--utc] [--parent <id>]… [--json]\n' +
  '    or noa context compress <baseDir> <sessionId> --transcript <file> --call <toolUseId> [same options]  (a Compress call recorded in the transcript)'
const VIEW =
  'usage: noa context view <baseDir> <sessionId> --transcript <file> [--parent <id>]… [--norma] [--json]'
const REBUILD =
  'usage: noa context rebuild <baseDir> <sessionId> --transcript <file> [--keep-existing] [--min-chars N] [--norma] [--utc] [--json]'
const ARCHIVE = 'usage: noa context archive <file.md> [--json]'
const AUDIT =
  'usage: noa context audit <baseDir> <sessionId> [--transcript <file>] [--repair] [--utc] [--json]'
const ALL = `usage: noa context <state|compress|view|rebuild|archive|audit> …\n  ${[
  STATE,
  COMPRESS,
  VIEW,
  REBUILD,
  ARCHIVE,
  AUDIT,
]
  .map((u) => u.replace('usage: ', ''))
  .join(
    '\n  ',
  )}\n  --norma: Norma's full default rules (protected recent zone, 50-character summaries), state.json read as Norma reads it\n  --utc: archive \`created:\` lines in UTC instead of the local zone`

/** Exit code of `state` when state.json is unusable (the initial state is printed). */
export const EXIT_BAD_STATE = 3

const SESSION_ARGS = { positionals: [2, 2], complete: ['dir'] } as const

const TRANSCRIPT = {
  type: 'string',
  value: 'FILE',
  description: "the session's transcript (Norma JSONL)",
  complete: 'file',
} as const satisfies OptionDef
const MIN_CHARS = {
  type: 'string',
  value: 'N',
  description: 'refuse a message range shorter than this (characters)',
  defaultText: '5000',
} as const satisfies OptionDef
const NORMA = {
  type: 'boolean',
  description:
    "Norma's full default rules (protected recent zone, 50-character summaries), state.json read as Norma reads it",
} as const satisfies OptionDef
const UTC = {
  type: 'boolean',
  description: 'archive `created:` lines in UTC instead of the local zone',
} as const satisfies OptionDef
const PARENT = {
  type: 'string',
  multiple: true,
  value: 'ID',
  description: 'an ancestor session to inherit blocks from',
} as const satisfies OptionDef

const SPECS = {
  state: subcommand({
    summary: "a session's blocks and refs (--json: state.json as noa writes it)",
    usage: STATE,
    options: {
      norma: { type: 'boolean', description: 'state.json as Norma loads and saves it (no derivedFrom)' },
      ...JSON_OPTION,
    },
    ...SESSION_ARGS,
    examples: ['noa context state ./sessions sid-1'],
    exitCodes: {
      [EXIT_BAD_STATE]: 'state.json is unusable (the error on stderr, the initial state printed)',
    },
  }),
  compress: subcommand({
    summary: 'compress a range of messages or blocks into a summary block, archiving the originals',
    usage: COMPRESS,
    options: {
      transcript: { ...TRANSCRIPT, required: true },
      from: {
        type: 'string',
        value: 'REF',
        description: 'first message ref (m00002) or block id (b1)',
        required: 'unless --call',
      },
      to: {
        type: 'string',
        value: 'REF',
        description: 'last message ref or block id',
        required: 'unless --call',
      },
      summary: {
        type: 'string',
        value: 'TEXT',
        description: 'the summary that replaces the range',
        required: 'unless --call',
      },
      topic: { type: 'string', value: 'T', description: "the block's topic", defaultText: 'none' },
      'min-chars': MIN_CHARS,
      norma: NORMA,
      utc: UTC,
      parent: PARENT,
      call: {
        type: 'string',
        value: 'TOOL_USE_ID',
        description:
          'process the Compress call recorded in the transcript (instead of --from/--to/--summary)',
      },
      ...JSON_OPTION,
    },
    ...SESSION_ARGS,
    examples: [
      "noa context compress ./sessions sid-1 --transcript sid-1.jsonl --from m00002 --to m00005 --summary 'set up the build'",
    ],
    exitCodes: { 1: "the compression is refused (Norma's panel on stderr) or the transcript is missing" },
  }),
  view: subcommand({
    summary: 'the messages the model is shown: summaries in place of active blocks',
    usage: VIEW,
    options: { transcript: { ...TRANSCRIPT, required: true }, parent: PARENT, norma: NORMA, ...JSON_OPTION },
    ...SESSION_ARGS,
    examples: ['noa context view ./sessions sid-1 --transcript sid-1.jsonl'],
  }),
  rebuild: subcommand({
    summary: 'rebuild state.json by replaying the Compress calls recorded in the transcript',
    usage: REBUILD,
    options: {
      transcript: { ...TRANSCRIPT, required: true },
      'min-chars': MIN_CHARS,
      'keep-existing': {
        type: 'boolean',
        description:
          "keep the blocks the transcript's recorded calls do not produce (else the rebuild is refused)",
      },
      norma: NORMA,
      utc: UTC,
      ...JSON_OPTION,
    },
    ...SESSION_ARGS,
    exitCodes: {
      1: 'refused: the state holds blocks the transcript does not produce (named; nothing changed)',
    },
    examples: ['noa context rebuild ./sessions sid-1 --transcript sid-1.jsonl'],
  }),
  archive: subcommand({
    summary: 'read a tier archive back (refused with file:line: reason if Norma would not write it)',
    usage: ARCHIVE,
    options: JSON_OPTION,
    positionals: [1, 1],
    complete: ['file'],
    examples: ['noa context archive ./sessions/sid-1/tier1/b1_m00002-m00005.md'],
    exitCodes: { 1: 'the archive is missing or malformed' },
  }),
  audit: subcommand({
    summary: "check a session's state.json and archives against each other (and the transcript)",
    usage: AUDIT,
    options: {
      transcript: { ...TRANSCRIPT, description: 'also check every archived message against this transcript' },
      repair: {
        type: 'boolean',
        description: 'render missing archives again from the transcript and the state',
      },
      utc: UTC,
      ...JSON_OPTION,
    },
    ...SESSION_ARGS,
    examples: ['noa context audit ./sessions sid-1 --transcript sid-1.jsonl --repair'],
    exitCodes: { 0: 'clean (or repaired)', 1: 'problems, one "<file>: <reason>" line each' },
  }),
}

export const spec: GroupSpec = {
  usage: ALL,
  subcommands: {
    state: { spec: SPECS.state, run: stateCmd },
    compress: { spec: SPECS.compress, run: compressCmd },
    view: { spec: SPECS.view, run: viewCmd },
    rebuild: { spec: SPECS.rebuild, run: rebuildCmd },
    archive: { spec: SPECS.archive, run: archiveCmd },
    audit: { spec: SPECS.audit, run: auditCmd },
  },
}

export function run(args: string[], io: CliIo): Promise<number> {
  return runSubcommand(args, io, spec)
}

function warnTo(io: CliIo): (message: string) => void {
  return (message) => io.stderr.write(`${message}\n`)
}

function configOf(values: { norma?: boolean; 'min-chars'?: string }, usage: string): Partial<ContextConfig> {
  const base = values.norma ? NORMA_CONFIG : DEFAULT_CONFIG
  const min = intOption(values['min-chars'], 'min-chars', usage)
  return {
    ...base,
    protectedTools: [...base.protectedTools],
    ...(min !== undefined ? { minCompressRange: min } : {}),
  }
}

async function transcriptMessages(file: string | undefined, usage: string, io: CliIo): Promise<Message[]> {
  if (file === undefined) throw new UsageError('--transcript is required', usage)
  const t = await loadTranscript(file)
  if (!t.exists) throw new NoaError('NOA_NOT_FOUND', `${file}: no such transcript`, { file })
  if (t.tornTail)
    io.stderr.write(`noa context: ${file}: torn last line ${t.tornTail.line} ignored: ${t.tornTail.reason}\n`)
  // Norma's view: blocks of every type, as the runtime's Project sees them.
  return conversation(t.records, { strict: true }).messages
}

/** Output with ints past 2^53 exact. */
function json(value: unknown): string {
  return `${stringifyWithInts(value)}\n`
}

function plural(n: GoInt, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`
}

function describeState(s: CompressionState, file: string, exists: boolean): string {
  const active = s.blocks.filter((b) => b.active).length
  let blocked = 0
  let highest = 0
  for (const ref of s.messageRefs.byRaw.values()) {
    if (ref === BLOCKED_REF) blocked++
    else highest = Math.max(highest, refToIndex(ref) ?? 0)
  }
  let out = `session ${s.sessionId} (${file}${exists ? '' : ', not written yet'})\n`
  out += `${plural(s.blocks.length, 'block')} (${active} active), next b${goIntCompare(s.nextBlockId, 1) < 0 ? 1 : s.nextBlockId}; `
  out += `${plural(s.messageRefs.byRef.size, 'ref')}${highest > 0 ? ` up to m${String(highest).padStart(5, '0')}` : ''}, ${blocked} blocked; `
  out += `${plural(s.stats.compressionCount, 'compression')}, ${s.stats.tokensCompressed} tokens compressed`
  if (s.derivedFrom !== '') out += `; inherited from ${s.derivedFrom}`
  out += '\n'
  if (s.blocks.length === 0) return out
  const rows = s.blocks.map((b) => [
    b.blockId,
    `T${b.tier}`,
    `${b.startRef}–${b.endRef}`,
    b.active ? 'active' : 'inactive',
    `${b.compressedTokens} tokens`,
    b.topic,
  ])
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] as string).length))) ?? []
  for (const r of rows)
    out += `  ${r
      .map((c, i) => c.padEnd(widths[i] as number))
      .join('  ')
      .trimEnd()}\n`
  return out
}

async function stateCmd(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, SPECS.state)
  const [baseDir, sessionId] = positionals as [string, string]
  const load = loadState(baseDir, sessionId, { strict: values.norma ?? false })
  if (load.error) io.stderr.write(`noa context: ${load.error.message}; showing the initial state\n`)
  await write(
    io.stdout,
    values.json ? `${encodeState(load.state)}\n` : describeState(load.state, load.file, load.exists),
  )
  return load.error ? EXIT_BAD_STATE : 0
}

async function compressCmd(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, SPECS.compress)
  const [baseDir, sessionId] = positionals as [string, string]
  const call = values.call
  for (const key of ['from', 'to', 'summary', 'topic'] as const) {
    if (call !== undefined && values[key] !== undefined)
      throw new UsageError(`--${key} cannot go with --call (the call holds the ranges)`, COMPRESS)
    if (call === undefined && key !== 'topic' && values[key] === undefined)
      throw new UsageError(`--${key} is required`, COMPRESS)
  }
  const config = configOf(values, COMPRESS)
  const msgs = await transcriptMessages(values.transcript, COMPRESS, io)
  const opened = {
    baseDir,
    sessionId,
    config,
    zone: values.utc ? ('utc' as const) : ('local' as const),
    onWarn: warnTo(io),
    strict: values.norma ?? false,
  }
  const outcome = withSessionLock(sessionRoot(baseDir, sessionId), () => {
    const session = ContextSession.open({ ...opened, parentSessionIds: values.parent ?? [] })
    if (call !== undefined) return session.compressCall(msgs, call)
    return session.compress(msgs, [
      {
        startRef: goTrimSpace(values.from as string),
        endRef: goTrimSpace(values.to as string),
        summary: goTrimSpace(values.summary as string),
        topic: goTrimSpace(values.topic ?? ''),
      },
    ])
  })
  const ok = outcome.result.blocksCreated.length > 0
  if (values.json) {
    await write(
      io.stdout,
      json({
        ok,
        panel: outcome.panel,
        blocks: outcome.result.blocksCreated.map((b) => ({
          blockId: b.blockId,
          tier: b.tier,
          startRef: b.startRef,
          endRef: b.endRef,
          compressedTokens: b.compressedTokens,
          archivePath: b.archivePath,
        })),
        errors: outcome.result.errors,
        warnings: outcome.result.warnings,
      }),
    )
  } else {
    await write(ok ? io.stdout : io.stderr, `${outcome.panel}\n`)
  }
  return ok ? 0 : 1
}

function blockLine(b: ContentBlock): string {
  switch (b.type) {
    case 'text':
      return b.text ?? ''
    case 'thinking':
      return `(thinking) ${b.thinking ?? ''}`
    case 'tool_use':
      return `(tool_use ${b.name ?? ''} ${b.id ?? ''}) ${b.input ?? ''}`
    case 'tool_result':
      return `(tool_result ${b.tool_use_id ?? ''}${b.is_error ? ', error' : ''}) ${(b.content ?? []).map(blockLine).join('\n')}`
    default:
      return `(${b.type})`
  }
}

async function viewCmd(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, SPECS.view)
  const [baseDir, sessionId] = positionals as [string, string]
  const msgs = await transcriptMessages(values.transcript, VIEW, io)
  const session = ContextSession.open({
    baseDir,
    sessionId,
    config: configOf(values, VIEW),
    parentSessionIds: values.parent ?? [],
    onWarn: warnTo(io),
    strict: values.norma ?? false,
  })
  const { messages: view, refs } = session.viewWithRefs(msgs)
  if (values.json) {
    await write(io.stdout, json(view))
    return 0
  }
  // Each message with the refs of its blocks: what --from/--to take (a summary: its block).
  let out = ''
  view.forEach((m, i) => {
    const own = (m.content ?? []).map((b) => refs.get(b)).filter((r): r is string => r !== undefined)
    const shown = own.map((r) => {
      const b = session.state.blocks.find((x) => x.blockId === r)
      return b ? `${r} (T${b.tier}, ${b.startRef}–${b.endRef})` : r === BLOCKED_REF ? 'protected' : r
    })
    out += `── ${i + 1} ${m.role}${shown.length > 0 ? ` · ${[...new Set(shown)].join(', ')}` : ''}\n`
    for (const b of m.content ?? []) out += `${blockLine(b)}\n`
  })
  await write(io.stdout, out)
  return 0
}

async function rebuildCmd(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, SPECS.rebuild)
  const [baseDir, sessionId] = positionals as [string, string]
  const config = configOf(values, REBUILD)
  const msgs = await transcriptMessages(values.transcript, REBUILD, io)
  const opened = {
    baseDir,
    sessionId,
    config,
    zone: values.utc ? ('utc' as const) : ('local' as const),
    strict: values.norma ?? false,
  }
  const { session, res } = withSessionLock(sessionRoot(baseDir, sessionId), () => {
    const session = ContextSession.open({ ...opened, onWarn: warnTo(io) })
    return { session, res: session.rebuild(msgs, { keepExisting: values['keep-existing'] ?? false }) }
  })
  if (values.json) {
    await write(
      io.stdout,
      json({ ...res, stateFile: session.stateFile, blocks: session.state.blocks.length }),
    )
    return 0
  }
  let out = `replayed ${res.replayed}, skipped ${res.skipped}: ${plural(session.state.blocks.length, 'block')}, ${res.reused.length} archive(s) reused, saved to ${session.stateFile}\n`
  if (res.kept.length > 0)
    out += `kept ${res.kept.join(', ')} from the previous state (the transcript does not produce ${res.kept.length === 1 ? 'it' : 'them'})\n`
  if (res.previous) out += `previous state kept as ${res.previous}\n`
  await write(io.stdout, out)
  return 0
}

function summaryLine(s: string): string {
  const first = s.split('\n')[0] ?? ''
  return first.length > 100 ? `${first.slice(0, 99)}…` : first
}

function describeArchive(doc: ArchiveDocument, file: string): string {
  let out = `${file}\n${doc.blockId} · tier ${doc.tier} · ${doc.startRef}–${doc.endRef} · ${doc.originalTokens} tokens`
  if (doc.session !== '') out += ` · session ${doc.session}`
  if (doc.created !== '') out += ` · created ${doc.created}`
  if (doc.topic !== '') out += ` · topic ${doc.topic}`
  out += '\n'
  if (doc.summary !== '') out += `summary: ${summaryLine(doc.summary)}\n`
  for (const e of doc.entries) {
    if (e.kind === 'block') {
      out += `  ${e.blockId} · Tier ${e.tier} · ${e.startRef}–${e.endRef}${e.childRel ? ` → ${e.childRel}` : ''}\n`
    } else {
      const what = e.type === 'tool_use' || e.type === 'tool_result' ? `${e.type} ${e.toolName}` : e.type
      out += `  ${e.ref || '(unaddressed)'} · ${e.role} · ${what} (${[...e.text].length} chars)\n`
    }
  }
  return out
}

async function archiveCmd(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, SPECS.archive)
  const file = positionals[0] as string
  let text: string
  try {
    // Not through a symlink and never blocking on a FIFO, as every archive read.
    const fd = openFileSync(file, READ, { what: 'archive' })
    try {
      text = decodeBytes(readFileSync(fd))
    } finally {
      closeSync(fd)
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT')
      throw new NoaError('NOA_NOT_FOUND', `${file}: no such archive`, { file })
    throw err
  }
  const doc = parseArchive(text, { file })
  await write(io.stdout, values.json ? json(doc) : describeArchive(doc, file))
  return 0
}

async function auditCmd(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommand(args, SPECS.audit)
  const [baseDir, sessionId] = positionals as [string, string]
  const msgs =
    values.transcript !== undefined ? await transcriptMessages(values.transcript, AUDIT, io) : undefined
  const options = {
    baseDir,
    sessionId,
    repair: values.repair ?? false,
    zone: values.utc ? ('utc' as const) : ('local' as const),
    ...(msgs ? { messages: msgs } : {}),
  }
  const report = values.repair
    ? withSessionLock(sessionRoot(baseDir, sessionId), () => auditSession(options))
    : auditSession(options)
  if (values.json) {
    await write(io.stdout, json(report))
    return report.ok ? 0 : 1
  }
  let out = ''
  for (const p of report.repaired) out += `${p.file}: repaired: ${p.reason}\n`
  for (const p of report.problems) out += `${p.file}: ${p.reason}\n`
  for (const p of report.orphans) out += `${p.file}: ${p.reason}\n`
  if (report.ok) {
    const orphans = report.orphans.length > 0 ? `; ${plural(report.orphans.length, 'orphan archive')}` : ''
    out += report.exists
      ? `ok: ${plural(report.blocks, 'block')}, ${plural(report.archives, 'archive')} checked${msgs ? ' against the transcript' : ''}${orphans}\n`
      : `ok: no state.json in ${report.root}${orphans}\n`
  }
  await write(io.stdout, out)
  return report.ok ? 0 : 1
}
