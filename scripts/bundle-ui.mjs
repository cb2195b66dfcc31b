#!/usr/bin/env node
/**
 * Part of `npm run build`, before bundle-cli.mjs: bundles noa ui's page (src/ui/web, Preact)
 * with esbuild into dist/src/ui/web (app.js, app.css, index.html), where src/ui/server.ts serves
 * it from. Everything the page runs is in app.js: no CDN, nothing fetched at run time, no inline
 * script (the server's Content-Security-Policy allows none).
 */
import { copyFileSync, mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'

const root = fileURLToPath(new URL('..', import.meta.url))
const src = join(root, 'src', 'ui', 'web')
const out = join(root, 'dist', 'src', 'ui', 'web')
mkdirSync(out, { recursive: true })

await build({
  entryPoints: [join(src, 'main.tsx')],
  outfile: join(out, 'app.js'),
  bundle: true,
  format: 'iife',
  platform: 'browser',
  target: ['chrome111', 'firefox115', 'safari16.4'],
  jsx: 'automatic',
  jsxImportSource: 'preact',
  tsconfig: join(src, 'tsconfig.json'),
  minify: true,
  legalComments: 'none',
  logLevel: 'warning',
})
for (const f of ['index.html', 'app.css']) copyFileSync(join(src, f), join(out, f))
