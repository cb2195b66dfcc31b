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
export const MODULES = [
  {
    slug: 'journal-format',
    name: 'journal format: decodeHeader, newestHeader, decodeFrame (src/engine/journal-format.ts)',
    mutate: ['src/engine/journal-format.ts:79-101', 'src/engine/journal-format.ts:228-281'],
    tests: ['test/02-engine/journal-format.test.ts', 'test/02-engine/journal-trust-checks.test.ts'],
  },
  {
    slug: 'journal-trust',
    name: "journal trust: the file's rules, each log's records (checkLog, linesProblem) (src/engine/journal-trust.ts)",
    mutate: [
      'src/engine/journal-trust.ts:119-134',
      'src/engine/journal-trust.ts:287-358',
      'src/engine/journal-trust.ts:382-405',
    ],
    tests: ['test/02-engine/journal-trust-checks.test.ts'],
  },
  {
    slug: 'journal-recovery',
    name: 'journal replay: checking every dead journal together (checkJournals) (src/engine/journal-recovery.ts)',
    mutate: ['src/engine/journal-recovery.ts:158-222'],
    tests: ['test/02-engine/journal-trust-checks.test.ts', 'test/02-engine/journal.test.ts'],
  },
  {
    slug: 'owner-journal',
    name: "owner's journal space: used, place, written, reclaimable, reclaimed (src/workers/journal.ts)",
    mutate: ['src/workers/journal.ts:136-220'],
    tests: [
      'test/02-engine/journal-space.test.ts',
      'test/02-engine/journal-acks.test.ts',
      'test/02-engine/journal.test.ts',
    ],
  },
  {
    slug: 'owner-commit',
    name: "owner's commit: inlineRound, roundDone, and the checkpoint's header (writeHeader, headerDone) (src/workers/owner.ts)",
    mutate: ['src/workers/owner.ts:931-1005', 'src/workers/owner.ts:1193-1226'],
    tests: [
      'test/02-engine/journal-acks.test.ts',
      'test/02-engine/faults.test.ts',
      'test/02-engine/journal.test.ts',
      'test/02-engine/append-files.test.ts',
    ],
  },
  {
    slug: 'gc',
    name: 'gc: logs read again, the sweep (src/store/gc.ts), and freshening (src/store/objects.ts)',
    mutate: [
      'src/store/gc.ts:180-294',
      'src/store/objects.ts:480-500',
      'src/store/objects.ts:575-600',
      'src/store/objects.ts:1140-1152',
    ],
    tests: ['test/03-store/gc.test.ts', 'test/03-store/objects.test.ts'],
  },
  {
    slug: 'langgraph-commit',
    name: "NoaSaver's commit: attempt (src/langgraph/saver.ts)",
    mutate: ['src/langgraph/saver.ts:376-475'],
    tests: ['test/10-adapters/langgraph-saver.test.ts'],
  },
  {
    slug: 'openai-agents-commit',
    name: "NoaSession's commit: write (src/openai-agents/session.ts)",
    mutate: ['src/openai-agents/session.ts:205-262'],
    tests: ['test/10-adapters/openai-agents.test.ts'],
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
