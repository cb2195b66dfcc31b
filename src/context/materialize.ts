/**
 * What the model is shown for a session (Norma's `Materialize`): each active block's messages
 * replaced by one user message `[Compressed conversation section] — <topic>\n<summary>\n\n<noa-archive …/>`,
 * the first user message always kept, no ref tags added. Only the state is used: archives are
 * never read.
 */
import type { ContentBlock, Message } from '../transcript/types.js'
import type { ContextConfig } from './config.js'
import { pruneOnly } from './pipeline.js'
import { project, reassemble } from './project.js'
import { activeBlocks, blockIdFromSummaryId } from './state.js'
import { BLOCKED_REF, type CompressionState } from './types.js'

/**
 * Norma's `Materialize`: with no active block the messages come back unchanged (markers and
 * all); otherwise the messages after the last compaction marker, pruned and rebuilt.
 */
export function materialize(
  messages: readonly Message[],
  state: CompressionState,
  config: ContextConfig,
): Message[] {
  if (activeBlocks(state).length === 0) return [...messages]
  const p = project(messages)
  return reassemble(pruneOnly(p.messages, state, config).messages, p)
}

/** What each block of a view stands for: a message ref, `BLOCKED`, or the block a summary replaces. */
export interface ViewRefs {
  messages: Message[]
  /** By block object of `messages`: `m00003`, `BLOCKED`, or `b1` for a summary; absent when none. */
  refs: Map<ContentBlock, string>
}

/**
 * `materialize` with the ref of each block, as the next compression assigns them (refs are
 * assigned as Norma assigns them each turn; the state itself is not changed), so that a range
 * can be typed for `compress --from/--to`.
 */
export function materializeWithRefs(
  messages: readonly Message[],
  state: CompressionState,
  config: ContextConfig,
): ViewRefs {
  const p = project(messages)
  const turn = pruneOnly(p.messages, state, config)
  const ids = new Map<ContentBlock, string>()
  let out: Message[]
  if (activeBlocks(state).length === 0) {
    out = [...messages]
    for (const [id, o] of p.origins) {
      const b = p.source[o.message]?.content?.[o.block]
      if (b) ids.set(b, id)
    }
  } else out = reassemble(turn.messages, p, ids)
  const refs = new Map<ContentBlock, string>()
  for (const [b, id] of ids) {
    const ref = turn.state.messageRefs.byRaw.get(id) ?? blockIdFromSummaryId(id)
    if (ref !== undefined) refs.set(b, ref === BLOCKED_REF ? BLOCKED_REF : ref)
  }
  return { messages: out, refs }
}
