/**
 * How many log files an AgentLog may keep open: bounded by the process's descriptor limit
 * (RLIMIT_NOFILE), not only by the `maxOpenFiles` option. An open workspace holds one
 * descriptor, its log's (its checksum sidecar is written through short-lived ones); a quarter of
 * the limit (at least 64) is left to everything else the host opens (sockets, journals, object
 * logs, its own files, a sidecar being appended to).
 */
import { readFileSync } from 'node:fs'

/** Descriptors an open workspace holds: its `.log`. */
export const FDS_PER_WORKSPACE = 1

/** The last limit read: what a process out of descriptors (which cannot open /proc) reports. */
let lastRead: number | null = null

/**
 * The soft RLIMIT_NOFILE of this process, from /proc (Linux); when /proc cannot be read (no
 * descriptor left to read it with, say), the one read last; null when none ever was.
 */
export function openFileLimit(): number | null {
  try {
    const line = readFileSync('/proc/self/limits', 'latin1')
      .split('\n')
      .find((l) => l.startsWith('Max open files'))
    const soft = line?.slice('Max open files'.length).trim().split(/\s+/)[0]
    if (soft === undefined) return null
    if (soft === 'unlimited') return Number.POSITIVE_INFINITY
    const n = Number(soft)
    lastRead = Number.isSafeInteger(n) && n > 0 ? n : null
    return lastRead
  } catch {
    return lastRead
  }
}

/** The most open files the descriptor limit leaves room for (at least 1). */
export function openFileBudget(limit = openFileLimit()): number {
  if (limit === null || limit === Number.POSITIVE_INFINITY) return Number.MAX_SAFE_INTEGER
  const headroom = Math.max(64, Math.floor(limit / 4))
  return Math.max(1, Math.floor((limit - headroom) / FDS_PER_WORKSPACE))
}

/** Whether an error is the process (EMFILE) or the system (ENFILE) running out of descriptors. */
export function isOutOfDescriptors(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | null)?.code
  return code === 'EMFILE' || code === 'ENFILE'
}
