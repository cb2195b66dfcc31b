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

/** Seconds JavaScript's Date can hold (±100,000,000 days from the epoch). */
const DATE_LIMIT_SECONDS = 8.64e12

/** Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar (H. Hinnant's). */
function civilFromDays(z: bigint): [bigint, number, number] {
  const zz = z + 719468n
  const era = (zz >= 0n ? zz : zz - 146096n) / 146097n
  const doe = zz - era * 146097n
  const yoe = (doe - doe / 1460n + doe / 36524n - doe / 146096n) / 365n
  const doy = doe - (365n * yoe + yoe / 4n - yoe / 100n)
  const mp = (5n * doy + 2n) / 153n
  const d = Number(doy - (153n * mp + 2n) / 5n + 1n)
  const m = Number(mp < 10n ? mp + 3n : mp - 9n)
  return [yoe + era * 400n + (m <= 2 ? 1n : 0n), m, d]
}

/**
 * Go's `time.Unix(sec, 0).In(zone).Format(time.RFC3339)` for any int64 `sec` (a state file can
 * hold any): years past 9999 are written whole, as Go writes them. Beyond what a JS Date holds,
 * the local zone's offset is taken at the nearest date it can hold.
 */
export function formatUnixSeconds(sec: number | bigint, zone: TimeZoneOption = 'local'): string {
  if (typeof sec === 'number' && Math.abs(sec) <= DATE_LIMIT_SECONDS)
    return formatRfc3339(new Date(sec * 1000), zone)
  const s = BigInt(sec)
  const clamped = s > 0n ? DATE_LIMIT_SECONDS : -DATE_LIMIT_SECONDS
  const offset = zoneOffset(new Date(clamped * 1000), zone)
  const local = s + BigInt(offset * 60)
  const days = (local >= 0n ? local : local - 86399n) / 86400n
  const secs = Number(local - days * 86400n)
  const [year, month, day] = civilFromDays(days)
  const y = year < 0n ? `-${(-year).toString().padStart(4, '0')}` : year.toString().padStart(4, '0')
  const base = `${y}-${pad(month)}-${pad(day)}T${pad(Math.floor(secs / 3600))}:${pad(Math.floor(secs / 60) % 60)}:${pad(secs % 60)}`
  if (offset === 0) return `${base}Z`
  const a = Math.abs(offset)
  return `${base}${offset < 0 ? '-' : '+'}${pad(Math.floor(a / 60))}:${pad(a % 60)}`
}
