/**
 * The rules a compression is checked against. Norma's `noa.Config` has many more knobs (nudges,
 * truncation); only those that decide whether a compression is accepted and what it covers are
 * here.
 *
 * noa's defaults are Norma's for the rules that judge the files alone (the 5,000-character size
 * gate, tiers up to 3, Compress calls never compressed) and leave out two of Norma's defaults that depend on the
 * live conversation rather than on the files: the protected "recent zone" (the last 5 messages,
 * the last 5,000 tokens and the latest user message) and the 50-character minimum summary.
 * `NORMA_CONFIG` restores them, for a host that wants exactly what Norma accepts.
 */
import { Errors, type NoaError } from '../engine/errors.js'

export interface ContextConfig {
  /** Smallest total size (characters) of the messages a compression may take; 0 = no gate. */
  minCompressRange: number
  /** Shortest accepted summary (characters, after trimming); an empty summary is always refused. */
  minSummaryLength: number
  /** Longest accepted summary, unless the call passes `summaryMaxChars`. */
  maxSummaryLength: number
  /** Highest tier (2 or 3). */
  maxTier: number
  /** More tools whose calls and results are never compressed (`Name` or `Prefix*`, any case). */
  protectedTools: string[]
  /** A predicate for the same purpose. */
  isToolProtected?: (toolName: string) => boolean
  /** Protect the last N visible messages and the latest user message from compression. */
  preserveRecentMessages: number
  /** Protect the most recent messages up to this many tokens. */
  preserveRecentTokens: number
}

export const DEFAULT_MIN_COMPRESS_RANGE = 5000

export const DEFAULT_CONFIG: Readonly<ContextConfig> = Object.freeze({
  minCompressRange: DEFAULT_MIN_COMPRESS_RANGE,
  minSummaryLength: 0,
  maxSummaryLength: 20000,
  maxTier: 3,
  protectedTools: [],
  preserveRecentMessages: 0,
  preserveRecentTokens: 0,
})

/** Norma v0.4.3's `DefaultConfig` for these rules. */
export const NORMA_CONFIG: Readonly<ContextConfig> = Object.freeze({
  ...DEFAULT_CONFIG,
  minSummaryLength: 50,
  preserveRecentMessages: 5,
  preserveRecentTokens: 5000,
})

const INT_KEYS = [
  'minCompressRange',
  'minSummaryLength',
  'maxSummaryLength',
  'maxTier',
  'preserveRecentMessages',
  'preserveRecentTokens',
] as const
const KEYS = new Set<string>([...INT_KEYS, 'protectedTools', 'isToolProtected'])

function bad(field: string, rule: string): NoaError {
  return Errors.BAD_OPTION(`context config ${field} ${rule}`, { field })
}

/** The defaults overridden by `partial`; unknown keys and wrong types are refused. */
export function resolveConfig(partial: Partial<ContextConfig> = {}, base = DEFAULT_CONFIG): ContextConfig {
  if (typeof partial !== 'object' || partial === null) throw bad('', 'must be an object')
  for (const key of Object.keys(partial)) {
    if (!KEYS.has(key)) throw bad(key, `is not an option (known: ${[...KEYS].join(', ')})`)
  }
  const out: ContextConfig = { ...base, protectedTools: [...base.protectedTools] }
  for (const key of INT_KEYS) {
    const v = partial[key]
    if (v === undefined) continue
    if (!Number.isSafeInteger(v) || v < 0) throw bad(key, `must be an integer >= 0, got ${String(v)}`)
    out[key] = v
  }
  if (out.maxTier !== 2 && out.maxTier !== 3) throw bad('maxTier', `must be 2 or 3, got ${out.maxTier}`)
  if (partial.protectedTools !== undefined) {
    const p = partial.protectedTools
    if (!Array.isArray(p) || p.some((t) => typeof t !== 'string'))
      throw bad('protectedTools', 'must be an array of tool names')
    out.protectedTools = [...p]
  }
  if (partial.isToolProtected !== undefined) {
    if (typeof partial.isToolProtected !== 'function') throw bad('isToolProtected', 'must be a function')
    out.isToolProtected = partial.isToolProtected
  }
  return out
}
