/** Words for what the store reports, shared by the store commands. */
import type { NoEffect, Skipped } from '../../store/replay.js'
import { quoteField } from '../progress.js'

const WHY: Record<NoEffect['reason'], string> = {
  'delete-missing': 'delete of a path not in the tree',
  'rename-missing': 'rename of a path not in the tree',
  'unknown-snapshot': 'snapshot entry naming no snapshot record',
  'foreign-snapshot': "snapshot entry naming another workspace's snapshot (not a fork)",
}

const SKIP_WHY: Record<Skipped['reason'], string> = {
  'corrupt-line': 'damaged line',
  'seq-order': 'entry out of seq order',
  'damaged-block': 'block that does not match its checksum',
}

/** `seq 3 (bytes 262-393): damaged line, left out` or `bytes 262-393 (seq unknown): …` */
export function describeSkipped(k: Skipped): string {
  const seqs =
    k.firstSeq === undefined
      ? undefined
      : k.lastSeq !== undefined && k.lastSeq !== k.firstSeq
        ? `seqs ${k.firstSeq}-${k.lastSeq}`
        : `seq ${k.firstSeq}`
  const bytes =
    k.offset !== undefined && k.length !== undefined ? `bytes ${k.offset}-${k.offset + k.length}` : undefined
  const where = seqs && bytes ? `${seqs} (${bytes})` : seqs ? seqs : `${bytes} (seq unknown)`
  return `${where}: ${SKIP_WHY[k.reason]}, left out`
}

/** `seq 3: delete of a path not in the tree ("src/zzz.ts"): no effect` */
export function describeNoEffect(n: NoEffect): string {
  const what = n.path !== undefined ? ` (${quoteField(n.path)})` : n.snapshotId ? ` (${n.snapshotId})` : ''
  return `seq ${n.seq}: ${WHY[n.reason]}${what}: no effect`
}
