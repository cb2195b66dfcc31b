/** Words for what the store reports, shared by the store commands. */
import type { NoEffect } from '../../store/replay.js'
import { quoteField } from '../progress.js'

const WHY: Record<NoEffect['reason'], string> = {
  'delete-missing': 'delete of a path not in the tree',
  'rename-missing': 'rename of a path not in the tree',
  'unknown-snapshot': 'snapshot entry naming no snapshot record',
  'foreign-snapshot': "snapshot entry naming another workspace's snapshot (not a fork)",
}

/** `seq 3: delete of a path not in the tree ("src/zzz.ts"): no effect` */
export function describeNoEffect(n: NoEffect): string {
  const what = n.path !== undefined ? ` (${quoteField(n.path)})` : n.snapshotId ? ` (${n.snapshotId})` : ''
  return `seq ${n.seq}: ${WHY[n.reason]}${what}: no effect`
}
