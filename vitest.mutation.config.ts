/**
 * The vitest config of `npm run test:mutation` (stryker.config.mjs): the tests of the module
 * being mutated (scripts/mutation/modules.mjs, NOA_MUTATION_MODULE), in the order listed there
 * (fastest first: a mutant run stops at the first failing test), against the sandbox's dist/,
 * which scripts/mutation/build.mjs builds from the instrumented sources. Stryker's vitest runner
 * runs them in worker threads; test/helpers/mutation-setup.ts carries the active mutant and the
 * coverage across the tests' own worker threads and child processes.
 */
import { relative } from 'node:path'
import { defineConfig } from 'vitest/config'
import { BaseSequencer, type TestSpecification } from 'vitest/node'
import { currentModule } from './scripts/mutation/modules.mjs'

const tests: string[] = currentModule().tests

class ListedOrder extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (f: TestSpecification) => tests.indexOf(relative(process.cwd(), f.moduleId))
    return [...files].sort((a, b) => rank(a) - rank(b))
  }
}

export default defineConfig({
  test: {
    include: tests,
    setupFiles: ['test/helpers/mutation-setup.ts'],
    sequence: { sequencer: ListedOrder },
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
})
