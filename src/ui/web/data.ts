/** Fetching the API (same origin, the cookie carries the token) and formatting what it returns. */

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message)
  }
}

export async function getJson<T>(path: string, signal?: AbortSignal): Promise<T> {
  const res = await fetch(path, { credentials: 'same-origin', ...(signal ? { signal } : {}) })
  const body = (await res.json().catch(() => null)) as { error?: { code: string; message: string } } | null
  if (!res.ok) {
    throw new ApiError(
      res.status,
      body?.error?.code ?? String(res.status),
      body?.error?.message ?? res.statusText,
    )
  }
  return body as T
}

export const enc = encodeURIComponent

/** A log entry as stored: seq, ts (µs) and the op's fields. */
export interface Entry {
  seq: number
  ts: number
  op: string
  path?: string
  blob?: string
  from?: string
  to?: string
  snapshot_id?: string
  message?: string
  from_workspace?: string
  from_snapshot?: string
  [key: string]: unknown
}

export interface WorkspaceInfo {
  workspace: string
  entries: number
  bytes: number
  lastSeq: number
  lastTs: number
  tornTailBytes: number
  locked: boolean
  /** Refused by its writer since an fdatasync failed (`noa serve --ui` only). */
  poisoned?: { code: string; message: string }
  /** From a replication checkpoint: how far push published (pull applied) it when it saved. */
  replication?: { kind: 'push' | 'pull'; prefix: string; seq: number; behind: number }[]
}

export interface HistoryNode {
  snapshotId: string
  kind: 'snapshot' | 'fork' | 'merge'
  workspace: string
  parents: string[]
  base: string | null
  conflicts: { path: string; winner: string }[]
  seq: number
  message: string
  ts: number
  pruned: boolean
  missing?: boolean
}

export function time(tsMicros: number): string {
  if (!tsMicros) return ''
  return new Date(tsMicros / 1000).toISOString().replace('T', ' ').replace('Z', '')
}

export function age(tsMicros: number, now: number): string {
  if (!tsMicros) return '–'
  const s = Math.max(0, (now - tsMicros / 1000) / 1000)
  if (s < 60) return `${s.toFixed(0)} s`
  if (s < 3600) return `${(s / 60).toFixed(0)} min`
  if (s < 86400) return `${(s / 3600).toFixed(1)} h`
  return `${(s / 86400).toFixed(1)} d`
}

export function bytes(n: number): string {
  if (n < 1024) return `${n} B`
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`
  if (n < 1 << 30) return `${(n / (1 << 20)).toFixed(1)} MiB`
  return `${(n / (1 << 30)).toFixed(2)} GiB`
}

export const short = (id: string | null | undefined) => (id ? id.slice(0, 16) : '')

/** What an entry did, in a few words (the log table's last column). */
export function summary(e: Entry): string {
  switch (e.op) {
    case 'write':
      return `${e.path ?? ''}  ${short(e.blob)}`
    case 'delete':
      return e.path ?? ''
    case 'rename':
      return `${e.from ?? ''} → ${e.to ?? ''}`
    case 'snapshot':
      return `${short(e.snapshot_id)}${e.message ? `  ${e.message}` : ''}`
    case 'merge':
      return `from ${e.from_workspace ?? ''} ${short(e.from_snapshot)}`
    default: {
      const { seq: _s, ts: _t, op: _o, ...rest } = e
      return JSON.stringify(rest)
    }
  }
}
