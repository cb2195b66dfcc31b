#!/usr/bin/env node
import { loadBundle } from './launch.js'

// The bundle the build made (see launch.ts); the modules themselves when there is none.
const url = process.getBuiltinModule('node:url')
const bundle = loadBundle(url.fileURLToPath(new URL('.', import.meta.url)))
const { main } = bundle ?? (await import('./main.js'))
process.exitCode = await main(process.argv.slice(2))
