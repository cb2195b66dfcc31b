/**
 * The text a Compress call returns to the model (Norma's `FormatPanel`):
 * `▣ noa | A → B tokens (~C reclaimed)\n  b1(T1)=m00002–m00005 → <archivePath>`, then notes,
 * errors and warnings. A rebuild takes a call as succeeded when its result matches
 * `\bb\d+\(T\d+\)=`.
 */
import type { ApplyResult } from './compress.js'
import { refToIndex } from './refs.js'
import { findBlock } from './state.js'
import { formatTokens } from './tokens.js'
import type { CompressionBlock } from './types.js'

export interface PanelInput {
  result: ApplyResult
  beforeTokens: number
  afterTokens: number
}

function spanHasUncovered(blk: CompressionBlock, result: ApplyResult, covered: Set<string>): boolean {
  const lo = refToIndex(blk.startRef)
  const hi = refToIndex(blk.endRef)
  if (lo === undefined || hi === undefined) return false
  for (const [ref, rawId] of result.state.messageRefs.byRef) {
    const n = refToIndex(ref)
    if (n === undefined || n < lo || n > hi) continue
    if (!covered.has(rawId)) return true
  }
  return false
}

export function formatPanel(input: PanelInput): string {
  const r = input.result
  let out = ''
  if (r.blocksCreated.length === 0) {
    out = '▣ noa | 0 blocks created'
    if (r.errors.length > 0) {
      out += '\n'
      for (const e of r.errors) out += `  error: ${e}\n`
    }
    for (const w of r.warnings) out += `  warn: ${w}\n`
    return out.replace(/\n+$/, '')
  }
  const reclaimed = Math.max(input.beforeTokens - input.afterTokens, 0)
  out += `▣ noa | ${formatTokens(input.beforeTokens)} → ${formatTokens(input.afterTokens)} tokens (~${formatTokens(reclaimed)} reclaimed)\n`
  const covered = new Set<string>()
  for (const b of r.blocksCreated) for (const id of b.effectiveMessageIds) covered.add(id)
  for (const b of r.blocksCreated) {
    // A star: the span holds messages the block does not cover (protected or withdrawn ones).
    const star = spanHasUncovered(b, r, covered) ? '*' : ''
    out += `  ${b.blockId}(T${b.tier})=${b.startRef}–${b.endRef}${star} → ${b.archivePath}\n`
  }
  if (r.survivingBlockIds.length > 0) {
    const parts = r.survivingBlockIds.map((id) => {
      const b = findBlock(r.state, id)
      return b ? `${id}(T${b.tier})` : id
    })
    out += `  note: ${parts.join(', ')} was inside the requested range but was not consumed\n`
    out += '        (only the lowest tier present is absorbed). Compress that layer separately.\n'
  }
  for (const e of r.errors) out += `  error: ${e}\n`
  for (const w of r.warnings) out += `  warn: ${w}\n`
  return out.replace(/\n+$/, '')
}

const PANEL_BLOCK = /\bb\d+\(T\d+\)=/g

/** How many blocks a panel reports (a rebuild replays calls whose result reports at least one). */
export function panelBlockCount(panel: string): number {
  return panel.match(PANEL_BLOCK)?.length ?? 0
}
