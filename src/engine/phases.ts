/**
 * Where one serial append's time goes, for `npm run bench`'s per-phase breakdown: with
 * NOA_PHASES=1 in the environment, the caller's thread and the owner (in a worker or in the same
 * thread) stamp the moments of the last commit into one array of shared memory, as epoch
 * milliseconds (`performance.timeOrigin + performance.now()`, comparable across threads to a
 * fraction of a microsecond). Off (the default), a stamp is one null check. Only a lone append
 * at a time reads true: the stamps are those of the last commit, whichever it was.
 */

/** The moments stamped, in the order a serial append passes them. */
export const PHASES = [
  'call', // the caller, just before append() (stamped by the bench)
  'queued', // append() returned: entry validated, rendered and in the owner's outbox
  'posted', // the outbox handed to the owner's port (end of the caller's turn)
  'received', // the owner took the message from its port
  'built', // the owner built the batch (seq, ts, the log line bytes)
  'framed', // the round's journal frame encoded (record headers, CRC32C)
  'pwritten', // the frame written to the journal (pwritev)
  'synced', // the journal's fdatasync returned
  'logged', // the round's lines written to their .log files
  'finished', // the round settled: state, checksum sidecar, acks queued
  'ackPosted', // the acks posted to the caller's port
  'ackReceived', // the caller took the acks from its port
  'resolved', // the caller's await resumed (stamped by the bench)
] as const

export type PhaseName = (typeof PHASES)[number]

export const PHASE: { readonly [K in PhaseName]: number } = Object.fromEntries(
  PHASES.map((name, i) => [name, i]),
) as { [K in PhaseName]: number }

let stamps: Float64Array | null = null

/** The caller's thread: the shared stamps when NOA_PHASES=1 (made once), else null. */
export function phaseStamps(): Float64Array | null {
  if (stamps === null && process.env.NOA_PHASES === '1') {
    stamps = new Float64Array(new SharedArrayBuffer(PHASES.length * 8))
  }
  return stamps
}

/** An owner's thread: stamps into the caller's array (undefined: not measuring). */
export function usePhaseStamps(shared: Float64Array | undefined): void {
  if (shared !== undefined) stamps = shared
}

export function stamp(phase: number): void {
  if (stamps !== null) stamps[phase] = performance.timeOrigin + performance.now()
}
