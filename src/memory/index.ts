/**
 * `noa/memory`: Norma-compatible memory notes. MemoryStore saves, lists, recalls and injects
 * them; the note format, the index file and recall's scoring are here for tools that read the
 * same folder.
 */
export { renderIndex } from './index-file.js'
export {
  checkMemory,
  MEMORY_TYPES,
  type MemoryFields,
  type MemoryInput,
  type MemoryNote,
  type MemoryType,
  parseMemory,
  renderMemory,
} from './note.js'
export {
  age,
  type RecallHit,
  relevant,
  renderForInjection,
  STALE_NOTE,
  score,
  stalenessNote,
  tokenize,
} from './recall.js'
export { INDEX_FILE, readNote, type ScanResult, type SkippedFile, scanDir } from './scan.js'
export { slug } from './slug.js'
export { DEFAULT_INJECT_LIMIT, type InjectOptions, MemoryStore } from './store.js'
