/** Shared by the replication tests: filling roots, reading logs, checking what the stream holds. */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { jetstreamManager } from '@nats-io/jetstream'
import { expect } from 'vitest'
import { AgentLog, type EntryInput } from '../../dist/src/index.js'
import { blobOf, runCliAsync } from './index.js'
import { streamContents, withConnection } from './nats.js'

export const NS = 1_000_000

/** Entries of every op but snapshot/merge, with non-ASCII paths (byte equality covers UTF-8). */
export function entries(ws: string, from: number, n: number): EntryInput[] {
  const out: EntryInput[] = []
  for (let i = from; i < from + n; i++) {
    if (i % 7 === 3) out.push({ op: 'delete', path: `${ws}/gone-${i}` })
    else if (i % 7 === 5) out.push({ op: 'rename', from: `${ws}/a-${i}`, to: `${ws}/b-${i}` })
    else out.push({ op: 'write', path: `${ws}/ファイル-${i}.ts`, blob: blobOf(i) })
  }
  return out
}

/** Appends `n` entries (numbered from `from`) to each workspace of the plan. */
export async function fill(root: string, plan: Record<string, [number, number]>): Promise<void> {
  const log = await AgentLog.open({ root, workers: 1 })
  try {
    await Promise.all(Object.entries(plan).map(([ws, [from, n]]) => log.appendMany(ws, entries(ws, from, n))))
  } finally {
    await log.close()
  }
}

export function logBytes(root: string, ws: string): Buffer {
  return readFileSync(join(root, 'agent-logs', `${ws}.log`))
}

/** The log up to its last newline (a writer killed mid-write may leave a partial line). */
export function completeLines(root: string, ws: string): Buffer {
  const b = logBytes(root, ws)
  return b.subarray(0, b.lastIndexOf(0x0a) + 1)
}

export function lineCount(root: string, ws: string): number {
  const b = completeLines(root, ws)
  let n = 0
  for (let i = b.indexOf(0x0a); i >= 0; i = b.indexOf(0x0a, i + 1)) n++
  return n
}

/** Creates the stream through the CLI, as an operator would. */
export async function initStreamCli(url: string, prefix: string, stream: string): Promise<void> {
  const r = await runCliAsync(['replicate', 'init', '--nats', url, '--prefix', prefix, '--stream', stream])
  expect(r.stderr).toBe('')
  expect(r.status).toBe(0)
}

export async function dropStream(url: string, stream: string): Promise<void> {
  await withConnection(url, async (nc) => {
    const jsm = await jetstreamManager(nc)
    await jsm.streams.delete(stream).catch(() => {})
  })
}

/** Messages in the stream now, or null while the server cannot be reached. */
export async function messageCount(url: string, stream: string): Promise<number | null> {
  try {
    return await withConnection(url, async (nc) => {
      const jsm = await jetstreamManager(nc)
      return (await jsm.streams.info(stream)).state.messages
    })
  } catch {
    return null
  }
}

/** Each workspace subject holds seq 1..n exactly once, in order, with Nats-Msg-Id ws:seq. */
export async function expectExactlyOnce(
  url: string,
  stream: string,
  prefix: string,
  counts: Record<string, number>,
): Promise<void> {
  const contents = await streamContents(url, stream, prefix)
  for (const [ws, n] of Object.entries(counts)) {
    const list = contents.get(`${prefix}.${ws}`) ?? []
    expect(
      list.map((e) => JSON.parse(e.line).seq),
      ws,
    ).toEqual(Array.from({ length: n }, (_, i) => i + 1))
    expect(list.map((e) => e.msgId)).toEqual(Array.from({ length: n }, (_, i) => `${ws}:${i + 1}`))
  }
}
