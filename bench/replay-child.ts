/**
 * One timed replay in a fresh process, with its peak RSS: `node dist/bench/replay-child.js <noa|read|verify|baseline>
 * <root> <workspace>`. Prints `{"maxRssMB","ms","entries"}`.
 */
import { createReadStream } from 'node:fs'
import { join } from 'node:path'
import { readEntryBatches } from '../src/engine/reader.js'
import { verifyLog } from '../src/engine/recovery.js'
import { SnapshotEngine } from '../src/store/snapshot.js'

/** The baseline: a bare line reader and a JSON.parse per line, nothing kept. */
export async function lineReaderParse(file: string): Promise<number> {
  const stream = createReadStream(file, { highWaterMark: 1 << 20, encoding: 'utf8' })
  let carry = ''
  let n = 0
  for await (const chunk of stream) {
    const lines = (carry + (chunk as string)).split('\n')
    carry = lines.pop() as string
    for (const line of lines) {
      if (line.length > 0) {
        JSON.parse(line)
        n++
      }
    }
  }
  return n
}

/** noa's validated reading alone: every entry parsed and checked, nothing kept. */
export async function noaRead(file: string): Promise<number> {
  let n = 0
  for await (const batch of readEntryBatches(file)) n += batch.length
  return n
}

/** noa: the workspace's files from an empty tree through its last entry (the tree id computed). */
export async function noaReplay(root: string, workspace: string): Promise<number> {
  const state = await new SnapshotEngine({ root }).replay(workspace, { fromScratch: true })
  return state.seq
}

async function main(): Promise<void> {
  const [mode, root, workspace] = process.argv.slice(2) as [string, string, string]
  const started = performance.now()
  const entries =
    mode === 'noa'
      ? await noaReplay(root, workspace)
      : mode === 'read'
        ? await noaRead(join(root, 'agent-logs', `${workspace}.log`))
        : mode === 'verify'
          ? (await verifyLog(join(root, 'agent-logs', `${workspace}.log`))).entries
          : await lineReaderParse(join(root, 'agent-logs', `${workspace}.log`))
  const ms = performance.now() - started
  const maxRssMB = process.resourceUsage().maxRSS / 1024
  process.stdout.write(`${JSON.stringify({ maxRssMB, ms, entries })}\n`)
}

if (import.meta.url === `file://${process.argv[1]}`) await main()
