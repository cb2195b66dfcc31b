/**
 * LangGraph's own conformance suite for checkpoint savers, unmodified, against NoaSaver. The
 * suite's files use vitest's globals; they are handed over here instead of turning globals on
 * for every test of the repository.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import * as vitest from 'vitest'
import { NoaSaver } from '../../dist/src/langgraph/index.js'

const { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } = vitest
Object.assign(globalThis, { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it })

const { validate } = await import('@langchain/langgraph-checkpoint-validation')

const roots = new Map<NoaSaver, string>()

validate<NoaSaver>({
  checkpointerName: 'noa',
  async createCheckpointer() {
    // A root of its own per saver: the suite requires that savers do not see each other's threads.
    const root = mkdtempSync(join(tmpdir(), 'noa-lg-validate-'))
    // One owner worker: the suite opens a saver per test, and never needs two threads writing.
    const saver = await NoaSaver.open({ root, workers: 1 })
    roots.set(saver, root)
    return saver
  },
  async destroyCheckpointer(saver) {
    await saver.close()
    rmSync(roots.get(saver) as string, { recursive: true, force: true })
    roots.delete(saver)
  },
})
