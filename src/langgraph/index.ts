export type { CheckpointRecord, StoredChannel, StoredWrite, WritesRecord } from './layout.js'
export { NoaSaver, type NoaSaverOptions } from './saver.js'
