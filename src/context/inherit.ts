/**
 * A new session taking over the compression state of an ancestor (Norma's `InheritState`):
 * when the session has no blocks of its own, the host's list of ancestor ids (nearest first) is
 * walked, at most 8 entries (skipped ones count), and the first one with a loadable state that
 * has blocks is cloned: new session id and root, nudge and stats reset, archive paths still
 * pointing into the ancestor's folder. noa records the ancestor in `derivedFrom`.
 */
import { lstatSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { checkDirsBelow } from '../engine/files.js'
import { cloneState } from './state.js'
import { loadStateFile, STATE_FILE } from './state-file.js'
import type { CompressionState } from './types.js'

export const MAX_INHERIT_DEPTH = 8

export interface InheritOptions {
  baseDir: string
  sessionId: string
  /** Ancestor session ids, nearest first. */
  parentSessionIds: readonly string[]
}

export interface InheritCandidate {
  sessionId: string
  /** Why it was not used ('' for the one cloned). */
  skipped: string
}

export interface InheritResult {
  /** The clone, or undefined when no ancestor was usable. */
  state?: CompressionState
  /** The ancestor cloned. */
  from?: string
  /** Every entry looked at, in order. */
  candidates: InheritCandidate[]
}

/** Norma's `DeriveChildState`, with `derivedFrom` set to the parent's id. */
export function deriveChildState(
  parent: CompressionState,
  childSessionId: string,
  childRoot: string,
): CompressionState {
  const child = cloneState(parent)
  child.sessionId = childSessionId
  child.archiveRoot = childRoot
  child.nudge = { lastPerMessageNudgeTokens: 0, lastNudgeShownTokens: 0, lastShownByTier: new Map() }
  child.stats = { tokensCompressed: 0, compressionCount: 0 }
  child.derivedFrom = parent.sessionId
  return child
}

const SAFE_ID = /^(?!\.\.?$)[^/\\\0]+$/

export function inheritState(options: InheritOptions): InheritResult {
  const base = resolve(options.baseDir)
  const root = join(base, options.sessionId)
  const out: InheritResult = { candidates: [] }
  const ids = options.parentSessionIds.slice(0, MAX_INHERIT_DEPTH)
  for (const id of ids) {
    const skip = (skipped: string) => out.candidates.push({ sessionId: id, skipped })
    if (id === '') skip('empty id')
    else if (id === options.sessionId) skip('the session itself')
    else if (!SAFE_ID.test(id)) skip('not a session id (it would leave the base directory)')
    else {
      const parentRoot = join(base, id)
      const file = join(parentRoot, STATE_FILE)
      try {
        // The ancestor's folder must be a real one: a symlink there is never read through.
        if (checkDirsBelow(base, parentRoot) !== null || !lstatSync(file, { throwIfNoEntry: false })) {
          skip('no state.json')
          continue
        }
      } catch (err) {
        skip(`unusable state: ${(err as Error).message}`)
        continue
      }
      const load = loadStateFile(file, id, parentRoot)
      if (load.error) skip(`unusable state: ${load.error.message}`)
      else if (load.state.blocks.length === 0) skip('no blocks')
      else {
        out.candidates.push({ sessionId: id, skipped: '' })
        out.state = deriveChildState({ ...load.state, sessionId: id }, options.sessionId, root)
        out.from = id
        return out
      }
    }
  }
  return out
}
