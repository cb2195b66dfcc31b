/**
 * The prebuilt addon that ships in the package (prebuilds/linux-x64/) is in step with the
 * sources: its manifest names, by SHA-256, every file of native/ and binding.gyp as they are in
 * the tree (and the node-addon-api it was compiled with), and the binary is the one the manifest
 * describes. A change to native/ without `npm run build:prebuild` fails here. It also loads
 * wherever Node 20 does: it needs no newer glibc or libstdc++ than Node itself.
 */
import { spawnSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { compareVersions, highestNeeds } from '../helpers/elf.js'
import { ROOT_DIR } from '../helpers/index.js'

const DIR = join(ROOT_DIR, 'prebuilds', 'linux-x64')
const BINARY = join(DIR, 'noa_io.node')
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex')

interface Manifest {
  file: string
  platform: string
  arch: string
  napi: number
  sha256: string
  inputs: Record<string, string>
  needs: Record<string, string>
}

function manifest(): Manifest {
  return JSON.parse(readFileSync(join(DIR, 'noa_io.json'), 'utf8')) as Manifest
}

/** The oldest runtime Node 20 supports on linux-x64 (RHEL 8: glibc 2.28, GCC 8's libstdc++ and libgcc_s). */
const FLOOR: Record<string, string> = { GLIBC: '2.28', GLIBCXX: '3.4.25', CXXABI: '1.3.11', GCC: '7.0.0' }

describe('the linux-x64 prebuild', () => {
  it('was built from the sources in the tree (run `npm run build:prebuild` after changing native/)', () => {
    const m = manifest()
    const files = ['binding.gyp', ...readdirSync(join(ROOT_DIR, 'native')).map((f) => `native/${f}`)].sort()
    const now: Record<string, string> = {}
    for (const f of files) now[f] = sha256(readFileSync(join(ROOT_DIR, f)))
    now['node-addon-api'] = JSON.parse(
      readFileSync(join(ROOT_DIR, 'node_modules', 'node-addon-api', 'package.json'), 'utf8'),
    ).version
    expect(m.inputs).toEqual(now)
    expect(m).toMatchObject({ file: 'noa_io.node', platform: 'linux', arch: 'x64', napi: 8 })
  })

  it('is the binary its manifest describes', () => {
    expect(sha256(readFileSync(BINARY))).toBe(manifest().sha256)
  })

  it('needs no newer glibc or libstdc++ than Node 20 itself', () => {
    const needs = highestNeeds(BINARY)
    expect(Object.keys(needs).sort()).toEqual(['CXXABI', 'GCC', 'GLIBC', 'GLIBCXX'])
    for (const [ns, version] of Object.entries(needs)) {
      const floor = FLOOR[ns] as string
      expect(compareVersions(version, floor), `${ns}_${version} > ${ns}_${floor}`).toBeLessThanOrEqual(0)
    }
    expect(manifest().needs).toEqual(needs)
  })

  it('loads and exports what a build from the sources exports', () => {
    const keys = (file: string) => {
      const r = spawnSync(
        process.execPath,
        ['-e', `console.log(JSON.stringify(Object.keys(require(${JSON.stringify(file)})).sort()))`],
        { encoding: 'utf8' },
      )
      expect(r.stderr).toBe('')
      return JSON.parse(r.stdout) as string[]
    }
    const prebuilt = keys(BINARY)
    expect(prebuilt).toContain('commit')
    expect(prebuilt).toContain('openAppend')
    const built = join(ROOT_DIR, 'build', 'Release', 'noa_io.node')
    if (existsSync(built)) expect(prebuilt).toEqual(keys(built))
  })
})
