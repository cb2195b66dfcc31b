/**
 * The addon against the interface it is typed by: every function `NativeIo` declares
 * (src/engine/native.ts) is exported by the prebuilt addon that ships in the package, and the
 * addon exports nothing the interface does not declare. The addon is loaded the way the engine
 * loads it (loadNative), in a child with NOA_NATIVE_PATH naming the prebuild, so a build/ folder
 * cannot stand in for it; the copy this process loaded is held to the same list.
 */
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'
import { loadNative } from '../../dist/src/engine/index.js'
import { DIST, ROOT_DIR } from '../helpers/index.js'

const PREBUILD = join(ROOT_DIR, 'prebuilds', `${process.platform}-${process.arch}`, 'noa_io.node')

/** The members of `interface NativeIo`, as the source declares them. */
function declaredMembers(): { name: string; method: boolean }[] {
  const file = join(ROOT_DIR, 'src', 'engine', 'native.ts')
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true)
  const decl = source.statements.find(
    (s): s is ts.InterfaceDeclaration => ts.isInterfaceDeclaration(s) && s.name.text === 'NativeIo',
  )
  if (!decl) throw new Error('no interface NativeIo in src/engine/native.ts')
  return decl.members.map((m) => ({
    name: (m.name as ts.Identifier).text,
    method:
      ts.isMethodSignature(m) || (ts.isPropertySignature(m) && !!m.type && ts.isFunctionTypeNode(m.type)),
  }))
}

/** Each export of an addon: its name and typeof. */
function shape(io: object): Record<string, string> {
  return Object.fromEntries(Object.keys(io).map((k) => [k, typeof (io as Record<string, unknown>)[k]]))
}

describe('the addon and NativeIo', () => {
  const members = declaredMembers()
  const expected = Object.fromEntries(members.map((m) => [m.name, 'function']))

  it('declares functions only, and a dozen of them at least', () => {
    expect(members.filter((m) => !m.method)).toEqual([])
    expect(members.length).toBeGreaterThanOrEqual(12)
  })

  it('the prebuild exports every declared function and nothing else', () => {
    const script = `import(${JSON.stringify(pathToFileURL(join(DIST, 'engine', 'native.js')).href)}).then((m) => {
      const io = m.loadNative()
      const out = {}
      for (const k of Object.keys(io)) out[k] = typeof io[k]
      console.log(JSON.stringify({ from: m.nativePath(), shape: out }))
    })`
    const r = spawnSync(process.execPath, ['-e', script], {
      env: { ...process.env, NOA_NATIVE_PATH: PREBUILD },
      encoding: 'utf8',
    })
    expect(r.stderr).toBe('')
    const got = JSON.parse(r.stdout) as { from: string; shape: Record<string, string> }
    expect(got.from).toBe(PREBUILD)
    expect(Object.keys(got.shape).sort()).toEqual(Object.keys(expected).sort())
    expect(got.shape).toEqual(expected)
  })

  it('so does the addon this process loaded', () => {
    expect(shape(loadNative())).toEqual(expected)
  })
})
