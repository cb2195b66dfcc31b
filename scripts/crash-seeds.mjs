#!/usr/bin/env node
/**
 * The long crash seeds CI runs for a commit (`.ci/run`): `npm run test:crash` has 24 long seeds
 * (about 12 minutes each on the 2-core CI machine), too many for every run, so each run takes
 * K of them (NOA_CRASH_CI_SEEDS, default 2) by the commit's number N (`git rev-list --count
 * HEAD`): seeds (N*K + i) mod 24 + 1 for i < K. Consecutive commits take consecutive slices, so
 * every 24/K commits run all 24 seeds (each over every crash point of its workload), and a rerun
 * of one commit runs the same ones. Prints the seeds comma-separated, for NOA_CRASH_SEED_LIST.
 *
 *   node scripts/crash-seeds.mjs [N]     (N defaults to the checkout's commit count)
 */
import { execFileSync } from 'node:child_process'

export const LONG_SEEDS = 24

export function seedsFor(commit, k = 2, total = LONG_SEEDS) {
  if (!Number.isSafeInteger(commit) || commit < 0)
    throw new Error(`commit number must be an integer >= 0, got ${commit}`)
  if (!Number.isSafeInteger(k) || k < 1 || k > total)
    throw new Error(`NOA_CRASH_CI_SEEDS must be 1 to ${total}, got ${k}`)
  return Array.from({ length: k }, (_, i) => ((commit * k + i) % total) + 1)
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const n =
    process.argv[2] !== undefined
      ? Number(process.argv[2])
      : Number(execFileSync('git', ['rev-list', '--count', 'HEAD'], { encoding: 'utf8' }).trim())
  const k = Number(process.env.NOA_CRASH_CI_SEEDS ?? 2)
  process.stdout.write(`${seedsFor(n, k).join(',')}\n`)
}
