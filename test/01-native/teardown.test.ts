/**
 * The addon never throws into JavaScript while a thread's environment is being torn down: a
 * worker terminated in the middle of an addon call that fails (here close() of a descriptor that
 * is not open, EBADF) used to abort the whole process (`FATAL ERROR:
 * Error::ThrowAsJavaScriptException napi_throw`, node-addon-api's answer to a napi_throw that
 * can no longer run). Built with NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS, the error is dropped:
 * nothing is left in that thread to catch it.
 */
import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { nativeCandidates } from '../../dist/src/engine/native.js'

const SCRIPT = `
import { Worker } from 'node:worker_threads'
const addon = process.argv[1]
for (let k = 0; k < 40; k++) {
  const w = new Worker(\`
    const native = require('node:module').createRequire(\${JSON.stringify(addon)})(\${JSON.stringify(addon)})
    require('node:worker_threads').parentPort.postMessage('go')
    for (;;) { try { native.close(1 << 20) } catch {} }
  \`, { eval: true, execArgv: [] })
  await new Promise((r) => w.once('message', r))
  await new Promise((r) => setTimeout(r, 2 + (k % 5)))
  await w.terminate()
}
process.stdout.write('survived')
`

describe('the addon during teardown', () => {
  it('a worker terminated while its addon calls fail ends alone; the process goes on', () => {
    const addon = nativeCandidates().find((f) => existsSync(f)) as string
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', SCRIPT, addon], { encoding: 'utf8' })
    expect(r.stderr).not.toContain('FATAL ERROR')
    expect(r.status, r.stderr).toBe(0)
    expect(r.stdout).toBe('survived')
  })
})
