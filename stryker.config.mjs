// @ts-check
/**
 * One module of `npm run test:mutation` (scripts/mutation/run.mjs runs Stryker with this once
 * per module of scripts/mutation/modules.mjs, naming it in NOA_MUTATION_MODULE): mutation
 * testing of the code that carries noa's guarantees; scores and the surviving mutants judged
 * equivalent in docs/mutation.md.
 *
 * The tests run against dist/, as always, not src/: Stryker instruments the sources in its
 * sandbox with every mutant at once (each behind a switch), scripts/mutation/build.mjs builds
 * that once (`npm run build`, 10 s), and each mutant is then one run of the tests that reach it
 * with its switch on. Building once per run, not once per mutant (a tsc + bundle per mutant
 * would be 10 s each before any test), is also what makes the owner worker threads and the
 * `noa` child processes run the mutant: aliasing dist/ to src/ in vitest would reach neither.
 */
import { currentModule } from './scripts/mutation/modules.mjs'

const m = currentModule()

/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: 'vitest',
  vitest: { configFile: 'vitest.mutation.config.ts', related: false },
  checkers: ['typescript'],
  tsconfigFile: 'tsconfig.json',
  buildCommand: 'node scripts/mutation/build.mjs',
  mutate: m.mutate,
  // Messages, option objects and array literals are left alone: a changed message is not a
  // broken guarantee (the tests that pin messages check them by their words), and those
  // mutants were a third of the count; every operator, condition and block is mutated.
  mutator: { excludedMutations: ['StringLiteral', 'ObjectLiteral', 'ArrayDeclaration'] },
  coverageAnalysis: 'perTest',
  incremental: true,
  incrementalFile: `test/mutation/${m.slug}.json`,
  ignorePatterns: ['dist', 'build', 'bench/peers/node_modules', '.stryker-tmp', 'reports', 'test/mutation'],
  reporters: ['progress-append-only', 'clear-text', 'json', 'html'],
  jsonReporter: { fileName: `reports/mutation/${m.slug}.json` },
  htmlReporter: { fileName: `reports/mutation/${m.slug}.html` },
  clearTextReporter: { allowEmojis: false, logTests: false, reportScoreTable: true, reportMutants: false },
  // Two checker processes and a test runner, then three runners once the checking is done: the
  // tests wait on fdatasync and child processes much of the time (2 cores here).
  concurrency: 3,
  // A mutant that hangs a round or a checkpoint costs this much more than its tests' own time:
  // its tests take 1-2 s, so 10 s is a hang.
  timeoutMS: 10_000,
  timeoutFactor: 2,
  dryRunTimeoutMinutes: 20,
  tempDirName: '.stryker-tmp',
}
