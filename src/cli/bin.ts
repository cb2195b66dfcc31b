#!/usr/bin/env node
import { loadBundle } from './launch.js'

// The bundle the build made (see launch.ts); the modules themselves when there is none. No
// top-level await: the build also makes this file into bin.cjs, the command's CommonJS entry.
const url = process.getBuiltinModule('node:url')
const bundle = loadBundle(url.fileURLToPath(new URL('.', import.meta.url)))
void (bundle ? Promise.resolve(bundle) : import('./main.js')).then(async ({ main }) => {
  process.exitCode = await main(process.argv.slice(2))
})
