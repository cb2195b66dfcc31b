/**
 * Setup of the mutation runs (vitest.mutation.config.ts, after Stryker's own setup file), for
 * the tests' worker threads and child processes; see scripts/mutation/hook.cjs.
 *
 * - A mutant run: the active mutant goes into the environment, so the owner threads and the
 *   `noa` commands a test starts run the same mutant as the test's thread.
 * - The dry run (coverage): each test is credited with the mutants its worker threads and child
 *   processes reached, as Stryker credits it with those its own thread reached. What they reach
 *   between tests (an AgentLog closed in onTestFinished, a checkpoint timer) is credited to the
 *   test before it, which started them.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { isMainThread, setEnvironmentData } from 'node:worker_threads'
import { afterAll, afterEach, beforeAll, beforeEach, inject } from 'vitest'

interface StrykerNamespace {
  activeMutant?: string
  currentTestId?: string
  mutantCoverage?: { static: Record<string, number>; perTest: Record<string, Record<string, number>> }
}

declare module 'vitest' {
  export interface ProvidedContext {
    mode: 'mutant' | 'dry-run'
    globalNamespace: string
  }
}

const ACTIVE = '__STRYKER_ACTIVE_MUTANT__'
const HITS_SIZE = 1 << 17
const ns = (): StrykerNamespace => {
  const g = globalThis as unknown as Record<string, StrykerNamespace | undefined>
  const name = inject('globalNamespace')
  g[name] ??= {}
  return g[name] as StrykerNamespace
}

function publishActive(): void {
  const id = ns().activeMutant
  if (id === undefined) delete process.env[ACTIVE]
  else process.env[ACTIVE] = String(id)
}

// Stryker's vitest runner runs the tests in worker threads, where process.umask(mask) throws
// ("not supported in workers"); a daemon started in the test's own thread (Daemon.start, the
// fast way to test the daemon's session limits) sets its umask around bind(). Here the mask is
// kept and given back but not applied: the modes those tests' files get are not what they check
// (the socket's mode is checked through `noa serve` processes, security.test.ts).
if (!isMainThread) {
  const current = process.umask.bind(process)
  let mask: number | null = null
  process.umask = ((set?: number | string) => {
    const was = mask ?? current()
    if (set !== undefined) mask = typeof set === 'string' ? Number.parseInt(set, 8) : set
    return was
  }) as typeof process.umask
}

if (inject('mode') === 'mutant') {
  publishActive() // static activation: Stryker set it as its setup file loaded
  beforeAll(publishActive) // runtime activation: Stryker sets it in its own beforeAll, before this one
} else {
  delete process.env[ACTIVE]
  const hits = new Int32Array(new SharedArrayBuffer(4 * HITS_SIZE))
  setEnvironmentData('noa-mutation-hits', hits.buffer)
  const dir = mkdtempSync(join(tmpdir(), 'noa-mutation-coverage-'))
  process.env.NOA_MUTATION_COVERAGE_DIR = dir
  let previous: string | undefined

  const credit = (testId: string | undefined, ids: Iterable<number>) => {
    const s = ns()
    s.mutantCoverage ??= { static: {}, perTest: {} }
    if (testId !== undefined) s.mutantCoverage.perTest[testId] ??= {}
    const table =
      testId === undefined
        ? s.mutantCoverage.static
        : (s.mutantCoverage.perTest[testId] as Record<string, number>)
    for (const i of ids) table[i] = (table[i] ?? 0) + 1
  }
  const collect = (testId: string | undefined) => {
    const reached: number[] = []
    for (let i = 0; i < hits.length; i++) {
      if (hits[i] !== 0) {
        reached.push(i)
        hits[i] = 0
      }
    }
    credit(testId, reached)
    for (const f of readdirSync(dir)) {
      const report = JSON.parse(readFileSync(join(dir, f), 'utf8')) as { testId: string; ids: number[] }
      credit(report.testId, report.ids)
      rmSync(join(dir, f))
    }
  }

  beforeEach(() => {
    collect(previous)
    previous = ns().currentTestId
    process.env.NOA_MUTATION_TEST_ID = previous
  })
  // Runs before Stryker's afterEach (hooks run in reverse order), while the test's id is set.
  afterEach(() => {
    collect(ns().currentTestId)
  })
  afterAll(() => {
    collect(previous)
    delete process.env.NOA_MUTATION_TEST_ID
    rmSync(dir, { recursive: true, force: true })
  })
}
