#!/usr/bin/env node
/**
 * Stryker's buildCommand (stryker.config.mjs), run once per mutation run in its sandbox after
 * it has instrumented the sources: `npm run build` of the instrumented sources. Every mutant is
 * in that one build, switched on at run time by __STRYKER_ACTIVE_MUTANT__, so the tests run
 * against dist/ as they always do, owner worker threads and `noa` child processes included.
 */
import { execFileSync } from 'node:child_process'
import { chmodSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { join } from 'node:path'

const t0 = performance.now()
// Stryker makes its sandbox 0700; the tests that run a check as another user (test/helpers/users.ts)
// need to enter it to load dist/.
chmodSync('.', 0o755)
rmSync('dist', { recursive: true, force: true })
const run = (args) => execFileSync(process.execPath, args, { stdio: 'inherit' })
// The sandbox is inside the checkout and has no node_modules of its own: packages resolve from
// the checkout's, as Node walks up.
run([createRequire(join(process.cwd(), 'x.js')).resolve('typescript/bin/tsc'), '-p', 'tsconfig.json'])
run([join('scripts', 'bundle-cli.mjs')])
console.log(`mutation build of ${process.cwd()}: ${((performance.now() - t0) / 1000).toFixed(1)} s`)
