/** The in-memory compression state and the small queries on it (Norma's `noa/state.go`). */
import { goIntAdd, goIntCompare, goIntText } from '../gocompat/index.js'
import { emptyRefs } from './refs.js'
import { type CompressionBlock, type CompressionState, SUMMARY_ID_PREFIX } from './types.js'

/** Norma's `CreateInitialState`: no blocks, empty maps, next block `b1`. */
export function createInitialState(sessionId: string, archiveRoot: string): CompressionState {
  return {
    sessionId,
    archiveRoot,
    nextBlockId: 1,
    blocks: [],
    messageRefs: emptyRefs(),
    tokenSnapshot: new Map(),
    nudge: { lastPerMessageNudgeTokens: 0, lastNudgeShownTokens: 0, lastShownByTier: new Map() },
    stats: { tokensCompressed: 0, compressionCount: 0 },
    derivedFrom: '',
  }
}

export function cloneBlock(b: CompressionBlock): CompressionBlock {
  return {
    ...b,
    directMessageIds: [...b.directMessageIds],
    effectiveMessageIds: [...b.effectiveMessageIds],
    directBlockIds: [...b.directBlockIds],
  }
}

export function cloneState(s: CompressionState): CompressionState {
  return {
    ...s,
    blocks: s.blocks.map(cloneBlock),
    messageRefs: { byRaw: new Map(s.messageRefs.byRaw), byRef: new Map(s.messageRefs.byRef) },
    tokenSnapshot: new Map(s.tokenSnapshot),
    nudge: { ...s.nudge, lastShownByTier: new Map(s.nudge.lastShownByTier) },
    stats: { ...s.stats },
  }
}

export function findBlock(s: CompressionState, blockId: string): CompressionBlock | undefined {
  return s.blocks.find((b) => b.blockId === blockId)
}

export function activeBlocks(s: CompressionState): CompressionBlock[] {
  return s.blocks.filter((b) => b.active)
}

/** Ids of the messages some active block covers. */
export function coveredMessageIds(s: CompressionState): Set<string> {
  const covered = new Set<string>()
  for (const b of s.blocks) if (b.active) for (const id of b.effectiveMessageIds) covered.add(id)
  return covered
}

/** Takes the next block id (`b<nextBlockId>`). */
export function allocateBlockId(s: CompressionState): string {
  const id = goIntCompare(s.nextBlockId, 1) < 0 ? 1 : s.nextBlockId
  s.nextBlockId = goIntAdd(id, 1)
  return `b${goIntText(id)}`
}

/** The id of the summary message that stands in for a block in a view. */
export function summaryMessageId(blockId: string): string {
  return SUMMARY_ID_PREFIX + blockId
}

export function blockIdFromSummaryId(id: string): string | undefined {
  return id.startsWith(SUMMARY_ID_PREFIX) ? id.slice(SUMMARY_ID_PREFIX.length) : undefined
}

/** Go's zero block. */
export function emptyBlock(): CompressionBlock {
  return {
    blockId: '',
    tier: 0,
    topic: '',
    summary: '',
    directMessageIds: [],
    effectiveMessageIds: [],
    directBlockIds: [],
    archivePath: '',
    archiveRel: '',
    compressedTokens: 0,
    startRef: '',
    endRef: '',
    createdAt: 0,
    active: false,
    compressCallId: '',
  }
}
