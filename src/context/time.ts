/**
 * The clock of compressions: `createdAt` (Unix seconds) in the state and the `created:` line of
 * an archive, which Norma writes as Go's `time.Now().Format(time.RFC3339)`, i.e. in the local
 * zone (`2024-06-05T14:03:09+02:00`, or `Z` when the offset is zero).
 */
import { NoaError } from '../engine/errors.js'

/**
 * `'local'` (the process's zone, as Norma), `'utc'`, or a fixed offset in minutes east of UTC.
 */
export type TimeZoneOption = 'local' | 'utc' | number

export interface ClockOptions {
  /** The time of a compression (default: now). */
  now?: () => Date
  /** The zone of the archive's `created:` line (default `'local'`). */
  zone?: TimeZoneOption
}

export function checkZone(zone: unknown): TimeZoneOption {
  if (zone === 'local' || zone === 'utc') return zone
  if (typeof zone === 'number' && Number.isInteger(zone) && Math.abs(zone) < 24 * 60) return zone
  throw new NoaError(
    'NOA_BAD_OPTION',
    `zone must be 'local', 'utc' or an offset in minutes east of UTC (-1439..1439), got ${JSON.stringify(zone)}`,
    { field: 'zone' },
  )
}

function pad(n: number, width = 2): string {
  return String(n).padStart(width, '0')
}

/** Offset of `zone` at `date`, in minutes east of UTC. */
export function zoneOffset(date: Date, zone: TimeZoneOption): number {
  if (zone === 'utc') return 0
  if (zone === 'local') return -date.getTimezoneOffset()
  return zone
}

/** Go's `t.In(zone).Format(time.RFC3339)` (whole seconds). */
export function formatRfc3339(date: Date, zone: TimeZoneOption = 'local'): string {
  const offset = zoneOffset(date, zone)
  const t = new Date(Math.floor(date.getTime() / 1000) * 1000 + offset * 60_000)
  const year = t.getUTCFullYear()
  const y = year < 0 ? `-${pad(-year, 4)}` : pad(year, 4)
  const base = `${y}-${pad(t.getUTCMonth() + 1)}-${pad(t.getUTCDate())}T${pad(t.getUTCHours())}:${pad(t.getUTCMinutes())}:${pad(t.getUTCSeconds())}`
  if (offset === 0) return `${base}Z`
  const a = Math.abs(offset)
  return `${base}${offset < 0 ? '-' : '+'}${pad(Math.floor(a / 60))}:${pad(a % 60)}`
}

/** Go's `t.Unix()`. */
export function unixSeconds(date: Date): number {
  return Math.floor(date.getTime() / 1000)
}
