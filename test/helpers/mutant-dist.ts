/**
 * A copy of dist/ with a mutation (one or more exact edits of its code), runnable in place: its
 * package.json, node_modules and the addon this package loads. For the mutant suites, which show
 * that a rule's test fails once the rule is broken.
 */
import { cpSync, existsSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { nativeCandidates } from '../../dist/src/engine/native.js'
import { ROOT_DIR } from './index.js'

export interface Edit {
  /** Below dist/src. */
  file: string
  from: string
  to: string
}

export function mutantDist(name: string, edits: readonly Edit[]): { dist: string; dir: string } {
  const dir = mkdtempSync(join(tmpdir(), 'noa-mutant-'))
  cpSync(join(ROOT_DIR, 'dist'), join(dir, 'dist'), { recursive: true })
  cpSync(join(ROOT_DIR, 'src'), join(dir, 'src'), { recursive: true }) // what the source maps name
  writeFileSync(join(dir, 'package.json'), readFileSync(join(ROOT_DIR, 'package.json')))
  symlinkSync(join(ROOT_DIR, 'node_modules'), join(dir, 'node_modules'))
  for (const e of edits) {
    const file = join(dir, 'dist', 'src', e.file)
    const text = readFileSync(file, 'utf8')
    if (text.split(e.from).length !== 2) {
      throw new Error(`mutant "${name}": its code is not found once in ${e.file}`)
    }
    writeFileSync(file, text.replace(e.from, e.to))
  }
  return { dist: join(dir, 'dist'), dir }
}

/** The addon this package loads, for copies of dist/ to load too (NOA_NATIVE_PATH). */
export function useThisAddon(): void {
  const addon = nativeCandidates().find((f) => existsSync(f))
  if (addon) process.env.NOA_NATIVE_PATH = addon
}
