/** Shared by the object, snapshot and merge tests. */
import { onTestFinished } from 'vitest'
import { AgentLog, isNoaError, type NoaError, SnapshotEngine } from '../../dist/src/index.js'
import { tempDir } from './index.js'

/** A root with an AgentLog (closed when the test ends) and a SnapshotEngine on it. */
export async function setup() {
  const root = tempDir()
  const log = await AgentLog.open({ root, workers: 1 })
  onTestFinished(() => log.close().then(() => undefined))
  return { root, log, engine: new SnapshotEngine({ log }) }
}

/** A snapshot's files as a plain object, path → blob. */
export async function files(engine: SnapshotEngine, id: string): Promise<Record<string, string>> {
  return Object.fromEntries((await engine.tree(id)).entries())
}

/** The NoaError a promise is refused with (anything else fails the test). */
export async function refusal(p: Promise<unknown>): Promise<NoaError> {
  try {
    await p
  } catch (err) {
    if (isNoaError(err)) return err
    throw err
  }
  throw new Error('expected a refusal')
}
