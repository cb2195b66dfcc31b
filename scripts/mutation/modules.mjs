/**
 * What `npm run test:mutation` mutates, and the tests that must catch it: the modules that
 * carry the guarantees of docs/guarantees.md, each narrowed to the lines that carry them
 * (Stryker's `file:from-to` ranges), each with its own tests, fastest first. Each module is one
 * Stryker run (scripts/mutation/run.mjs), so that a mutant is tried only against the tests of
 * its module: the in-process ones, milliseconds to a second each. The end-to-end tests through
 * commands and killed processes (journal-trust.test.ts, gc-live.test.ts, the crash explorer)
 * stay in `npm test` and `npm run test:crash`; docs/mutation.md has the scores and the
 * survivors judged equivalent.
 */
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

/** The 1-based number of the one line of `file` holding `text` (at or after line `after`). */
function lineOf(file, text, after = 0) {
  const lines = readFileSync(`${ROOT}/${file}`, 'utf8').split('\n')
  const found = []
  lines.forEach((l, i) => {
    if (i + 1 > after && l.includes(text)) found.push(i + 1)
  })
  if (found.length === 0) throw new Error(`scripts/mutation/modules.mjs: no line of ${file} holds ${text}`)
  if (after === 0 && found.length > 1)
    throw new Error(`scripts/mutation/modules.mjs: ${found.length} lines of ${file} hold ${text}, not one`)
  return found[0]
}

/**
 * A Stryker range found by the code it starts at, not by a line number that goes stale when the
 * file changes above it: from the line holding `from` to the line before the next one holding
 * `until` (or, without `until`, to the closing brace of what starts there, at its indentation).
 */
function span(file, from, until) {
  const start = lineOf(file, from)
  if (until) return `${file}:${start}-${lineOf(file, until, start) - 1}`
  const lines = readFileSync(`${ROOT}/${file}`, 'utf8').split('\n')
  const indent = /^\s*/.exec(lines[start - 1])[0]
  for (let i = start; i < lines.length; i++) if (lines[i] === `${indent}}`) return `${file}:${start}-${i + 1}`
  throw new Error(`scripts/mutation/modules.mjs: no end found for ${from} in ${file}`)
}

export const MODULES = [
  {
    slug: 'journal-format',
    name: 'journal format: decodeHeader, newestHeader, decodeFrame (src/engine/journal-format.ts)',
    mutate: [
      span('src/engine/journal-format.ts', 'export function decodeHeader('),
      span('src/engine/journal-format.ts', 'export function newestHeader('),
      span('src/engine/journal-format.ts', 'export const MAX_JOURNAL_SIZE', 'export function decodeFrame('),
      span('src/engine/journal-format.ts', 'export function decodeFrame('),
    ],
    tests: ['test/02-engine/journal-format.test.ts', 'test/02-engine/journal-trust-checks.test.ts'],
  },
  {
    slug: 'journal-trust',
    name: "journal trust: the file's rules, each log's records (checkLog, linesProblem) (src/engine/journal-trust.ts)",
    mutate: [
      span('src/engine/journal-trust.ts', 'export function journalFileProblem('),
      span('src/engine/journal-trust.ts', 'export function checkLog('),
      span('src/engine/journal-trust.ts', 'function linesProblem('),
    ],
    tests: ['test/02-engine/journal-trust-checks.test.ts', 'test/02-engine/journal-trust-mutants.test.ts'],
  },
  {
    slug: 'journal-recovery',
    name: 'journal replay: checking every dead journal together (checkJournals) (src/engine/journal-recovery.ts)',
    mutate: [span('src/engine/journal-recovery.ts', 'export function checkJournals(')],
    tests: [
      'test/02-engine/journal-trust-checks.test.ts',
      'test/02-engine/journal-trust-mutants.test.ts',
      'test/02-engine/journal.test.ts',
    ],
  },
  {
    slug: 'owner-journal',
    name: "owner's journal space: used, place, written, reclaimable, reclaimed (src/workers/journal.ts)",
    mutate: [span('src/workers/journal.ts', '  headerBytes(): Buffer {', '  remove(): void {')],
    tests: [
      'test/02-engine/journal-space.test.ts',
      'test/02-engine/journal-space-mutants.test.ts',
      'test/02-engine/journal-acks.test.ts',
      'test/02-engine/journal.test.ts',
    ],
  },
  {
    slug: 'owner-commit',
    name: "owner's commit: inlineRound, roundDone, and the checkpoint's header (writeHeader, headerDone) (src/workers/owner-commit.ts)",
    mutate: [
      span('src/workers/owner-commit.ts', 'protected inlineRound(', 'protected committedUnwritten('),
      span('src/workers/owner-commit.ts', 'protected override writeHeader(', 'protected checkpointDone('),
    ],
    tests: [
      'test/02-engine/journal-acks.test.ts',
      'test/02-engine/faults.test.ts',
      'test/02-engine/owner-commit-mutants.test.ts',
      'test/02-engine/journal.test.ts',
      'test/02-engine/append-files.test.ts',
    ],
  },
  {
    slug: 'gc',
    name: 'gc: logs read again, the sweep (src/store/gc.ts), and freshening (src/store/object-files.ts)',
    // A getter: stryker.config.mjs reads it in the checkout; the vitest config in Stryker's sandbox
    // reads only the tests, and there the files are instrumented: the spans' lines are gone.
    get mutate() {
      return [
        span('src/store/gc.ts', 'const refresh = async () => {', '/** The object-log part of a sweep'),
        span('src/store/object-blobs.ts', "id = hash.digest('hex')", 'async getBlob('),
        span(
          'src/store/object-files.ts',
          'async write(objects: readonly StoredObject[])',
          'const temps: string[]',
        ),
        span('src/store/object-files.ts', 'protected freshen(id: string)'),
      ]
    },
    tests: ['test/03-store/gc-sweep.test.ts', 'test/03-store/gc.test.ts', 'test/03-store/objects.test.ts'],
  },
  {
    slug: 'langgraph-commit',
    name: "NoaSaver's commit: attempt (src/langgraph/thread.ts)",
    // A getter: stryker.config.mjs reads it in the checkout; the vitest config in Stryker's sandbox
    // reads only the tests, and there the files are instrumented: the spans' lines are gone.
    get mutate() {
      return [span('src/langgraph/thread.ts', 'private async attempt(batch: Op[])', '/**')]
    },
    tests: [
      'test/10-adapters/langgraph-commit.test.ts',
      'test/10-adapters/langgraph-unstorable.test.ts',
      'test/10-adapters/langgraph-saver.test.ts',
    ],
  },
  {
    slug: 'openai-agents-commit',
    name: "NoaSession's commit: write (src/openai-agents/session.ts)",
    // A getter: stryker.config.mjs reads it in the checkout; the vitest config in Stryker's sandbox
    // reads only the tests, and there the files are instrumented: the spans' lines are gone.
    get mutate() {
      return [
        span(
          'src/openai-agents/session.ts',
          '  private async write(',
          '/** Brings the items up to date with the log',
        ),
      ]
    },
    tests: [
      'test/10-adapters/openai-agents-commit.test.ts',
      'test/10-adapters/openai-agents-unstorable.test.ts',
      'test/10-adapters/openai-agents.test.ts',
    ],
  },
  {
    slug: 'serve-session',
    name: "the daemon's per-connection limits: --max-in-flight, --max-pending-bytes, the unread-answer bound, the hello timeout (src/serve/session.ts, daemon.ts)",
    // A getter: stryker.config.mjs reads it in the checkout; the vitest config in Stryker's sandbox
    // reads only the tests, and there the files are instrumented: the spans' lines are gone.
    get mutate() {
      return [
        span(
          'src/serve/session.ts',
          'const helloMs = host.limits.helloTimeoutMs',
          '  get requests(): number {',
        ),
        span(
          'src/serve/session.ts',
          "throw Errors.UNAUTHORIZED(given === ''",
          'this.reader.max = this.host.limits.maxLineBytes',
        ),
        span('src/serve/session.ts', '  private onData(chunk: Buffer): void {'),
        span(
          'src/serve/session.ts',
          'const bytes = line.length + REQUEST_OVERHEAD',
          'if (this.host.draining || this.ending) {',
        ),
        span('src/serve/session.ts', '  private settle(id: number, r: InFlight'),
        span(
          'src/serve/session.ts',
          '  private push(line: string, bytes: number): void {',
          '  private fatal(err: unknown): void {',
        ),
        span('src/serve/daemon.ts', '  released(): void {'),
      ]
    },
    tests: ['test/10-serve/session-limits.test.ts', 'test/10-serve/backpressure.test.ts'],
  },
]

/** The module a run is for: NOA_MUTATION_MODULE (its slug), set by scripts/mutation/run.mjs. */
export function currentModule() {
  const slug = process.env.NOA_MUTATION_MODULE
  const m = MODULES.find((x) => x.slug === slug)
  if (!m)
    throw new Error(
      `NOA_MUTATION_MODULE must be one of ${MODULES.map((x) => x.slug).join(', ')} (got ${slug}): run npm run test:mutation`,
    )
  return m
}
