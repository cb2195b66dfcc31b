import { defineConfig } from 'vitest/config'

/**
 * Suites of real processes that take tens of seconds each: SIGKILLed writers and gc, the
 * packed tarball installed in a fresh project, processes through the daemon. `npm test` leaves
 * them out to stay under five minutes on two cores; `npm run test:long` runs them, and so does
 * CI (`.ci/run`, after `npm test`). The crash-state explorer's quick mode and the journal's
 * trust suite stay in `npm test`.
 */
export const LONG = [
  'test/02-engine/journal-crash.test.ts',
  'test/03-store/compact-crash.test.ts',
  'test/03-store/compact-explorer.test.ts',
  'test/03-store/gc-live.test.ts',
  'test/07-replicate/crash.test.ts',
  'test/07-replicate/shared-chaos.test.ts',
  'test/09-package/pack.test.ts',
  'test/10-adapters/langgraph-crash.test.ts',
  'test/10-serve/processes.test.ts',
]

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // Most of a test's time is waiting: on fdatasync, on child processes, on nats-server. Two
    // files at once on two cores (vitest's default is one fewer than the cores).
    maxWorkers: 2,
    projects: [
      { extends: true, test: { name: 'quick', include: ['test/**/*.test.ts'], exclude: LONG } },
      { extends: true, test: { name: 'long', include: LONG } },
    ],
  },
})
