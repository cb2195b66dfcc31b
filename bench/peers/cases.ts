/**
 * One trial per process, like bench/cases.ts: `node dist/bench/peers/cases.js <command> …` prints
 * one JSON line. Commands:
 *   write <serial|1ws|10ws|100ws|1000ws|10kws|100kws|create> <peer> <dir> <seconds>
 *                                                              a timed write workload
 *   replay <store> <dir> <_>  |  open <store> <dir> <_>        a one-shot read of a prepared log
 *   prepare <store> <dir> <entries>                            fill a log (not timed by the run)
 *   fill <workload> <peer> <dir>                               fill a prefilled workload's store
 *   count <peer> <submitters> <dir> <entries>                  exactly that many appends (strace)
 *   proc <peer> <dir> <k> <own|shared>                          worker k of a many-process trial
 */
import { fileURLToPath } from 'node:url'
import type { CaseResult } from '../cases.js'
import { diskUsage } from './common.js'
import { procWorker } from './procs.js'
import {
  peerById,
  runCount,
  runFill,
  runOpen,
  runReplay,
  runWrite,
  storeById,
  type WorkloadId,
} from './suite.js'

/** A prepared log: `bytes` allocated on disk (du), `apparent` the files' sizes. */
export interface Prepared extends CaseResult {
  ms: number
  entries: number
  bytes: number
  apparent: number
}

async function run(argv: string[]): Promise<CaseResult | Prepared> {
  const [command, a, b, c] = argv
  switch (command) {
    case 'write':
      return runWrite(a as WorkloadId, peerById(b as string), c as string, Number(argv[4]))
    case 'replay':
      return runReplay(storeById(a as string), b as string)
    case 'open':
      return runOpen(storeById(a as string), b as string)
    case 'prepare': {
      const store = storeById(a as string)
      store.load()
      const entries = Number(c)
      const start = performance.now()
      await store.prepare(b as string, entries)
      const { apparent, allocated } = diskUsage(b as string)
      return { ms: performance.now() - start, entries, bytes: allocated, apparent }
    }
    case 'fill':
      return runFill(a as WorkloadId, peerById(b as string), c as string)
    case 'proc':
      return procWorker(a as string, b as string, Number(c), argv[4] === 'shared')
    case 'count':
      return runCount(peerById(a as string), c as string, Number(b), Number(argv[4]))
    default:
      throw new Error(`usage: node ${process.argv[1]} <write|replay|open|prepare|fill|count|proc> …`)
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const result = await run(process.argv.slice(2))
  process.stdout.write(`${JSON.stringify(result)}\n`)
}
