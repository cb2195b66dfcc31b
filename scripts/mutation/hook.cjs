/**
 * Preloaded (`--require`, through NODE_OPTIONS, which scripts/mutation/run.mjs sets) into every
 * process and thread of a mutation run. Stryker records which mutants each test reaches only
 * in the thread the test runs in, but noa's tests run most of the engine elsewhere: in owner
 * worker threads (piscina) and in `noa` commands and fixture scripts as child processes.
 * Without this, a mutant reached only there would count as covered by no test and never run.
 *
 * - In a worker thread started (at any depth) by a test's thread or by a test's child process,
 *   the mutants it reaches are added to a SharedArrayBuffer that the starting thread handed
 *   down as environment data (test/helpers/mutation-setup.ts makes the test thread's).
 * - In a child process started by a test (NOA_MUTATION_TEST_ID in its environment), the same,
 *   and at its exit the reached mutants are written to NOA_MUTATION_COVERAGE_DIR for the test's
 *   thread to add to that test. A process that is SIGKILLed reports nothing: its mutants stay
 *   as covered as the rest of the run found them.
 *
 * Which mutant is active needs nothing here: Stryker's instrumented code reads
 * __STRYKER_ACTIVE_MUTANT__ from the environment, which the setup sets in the test's thread,
 * and threads and processes copy it when they start.
 */
// CommonJS, preloaded with --require: an --import preload makes the worker threads of a process
// started with `node --input-type=module -e …` (a test's child) fail to start.
const { writeFileSync } = require('node:fs')
const { join } = require('node:path')
const { getEnvironmentData, isMainThread, setEnvironmentData } = require('node:worker_threads')

const KEY = 'noa-mutation-hits'
const HITS_SIZE = 1 << 17

function recordInto(hits) {
  const counts = new Proxy(
    {},
    {
      get: (_, k) => (typeof k === 'string' ? hits[Number(k)] || undefined : undefined),
      set: (_, k, _v) => {
        const i = Number(k)
        if (Number.isInteger(i) && i >= 0 && i < hits.length) Atomics.add(hits, i, 1)
        return true
      },
    },
  )
  globalThis.__stryker__ ??= {}
  const ns = globalThis.__stryker__
  // Everything here counts for the test that started this thread or process: no test id of its
  // own, so Stryker's helper records into `static`, which is this table.
  ns.mutantCoverage = { static: counts, perTest: {} }
}

const inherited = isMainThread ? undefined : getEnvironmentData(KEY)
if (inherited instanceof SharedArrayBuffer) {
  recordInto(new Int32Array(inherited))
} else if (isMainThread && process.env.NOA_MUTATION_TEST_ID && process.env.NOA_MUTATION_COVERAGE_DIR) {
  const testId = process.env.NOA_MUTATION_TEST_ID
  const dir = process.env.NOA_MUTATION_COVERAGE_DIR
  const hits = new Int32Array(new SharedArrayBuffer(4 * HITS_SIZE))
  setEnvironmentData(KEY, hits.buffer)
  recordInto(hits)
  process.on('exit', () => {
    const ids = []
    for (let i = 0; i < hits.length; i++) if (hits[i] > 0) ids.push(i)
    if (ids.length === 0) return
    try {
      writeFileSync(join(dir, `${process.pid}-${Date.now()}.json`), JSON.stringify({ testId, ids }))
    } catch {
      // The run's folder is gone (the test file ended): nothing to report to.
    }
  })
}
