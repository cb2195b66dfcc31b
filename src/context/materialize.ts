/**
 * What the model is shown for a session (Norma's `Materialize`): each active block's messages
 * replaced by one user message `[Compressed conversation section] — <topic>\n<summary>\n\n<noa-archive …/>`,
 * the first user message always kept, no ref tags added. Only the state is used: archives are
 * never read.
 */
import type { Message } from '../transcript/types.js'
import type { ContextConfig } from './config.js'
import { pruneOnly } from './pipeline.js'
import { project, reassemble } from './project.js'
import { activeBlocks } from './state.js'
import type { CompressionState } from './types.js'

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
