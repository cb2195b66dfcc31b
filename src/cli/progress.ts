/**
 * Progress of long commands, on stderr only (stdout carries the command's data), and only when
 * stderr is a terminal: piped or redirected, a command prints nothing but its output and its
 * errors. The line is drawn once the command has run for a moment (a quick one shows nothing),
 * redrawn at most 10 times a second and erased at the end. `NOA_PROGRESS_DELAY_MS` sets the
 * moment (default 300 ms; 0 draws from the first update), as GIT_PROGRESS_DELAY does for git.
 */
import type { ReplayProgress } from '../store/replay.js'
import type { CliIo } from './io.js'

const DEFAULT_DELAY_MS = 300
const INTERVAL_MS = 100

export interface Meter {
  /** Cheap to call often: `line` is only computed when the line is drawn. */
  update(line: () => string): void
  /** Erases the line, if one was drawn; safe to call more than once. */
  done(): void
}

const SILENT: Meter = { update() {}, done() {} }

function delayOf(io: CliIo): number {
  const v = io.env.NOA_PROGRESS_DELAY_MS
  const n = v === undefined || v === '' ? Number.NaN : Number(v)
  return Number.isFinite(n) && n >= 0 ? n : DEFAULT_DELAY_MS
}

/** The line drawn on each terminal, so that an error printed by main erases it first. */
const drawnOn = new WeakMap<NodeJS.WritableStream, Meter>()

export function meter(io: CliIo): Meter {
  if (!io.isTTY) return SILENT
  const started = performance.now()
  const delay = delayOf(io)
  let lastDraw = Number.NEGATIVE_INFINITY
  let drawn = false
  const m: Meter = {
    update(line) {
      const now = performance.now()
      if (now - started < delay || now - lastDraw < INTERVAL_MS) return
      lastDraw = now
      io.stderr.write(`\r\x1b[K${line()}`)
      drawn = true
      drawnOn.set(io.stderr, m)
    },
    done() {
      if (drawn) io.stderr.write('\r\x1b[K')
      drawn = false
      if (drawnOn.get(io.stderr) === m) drawnOn.delete(io.stderr)
    },
  }
  return m
}

/** Erases whatever progress line is on `io`'s terminal (before an error message). */
export function clearProgress(io: CliIo): void {
  drawnOn.get(io.stderr)?.done()
}

/** `12%`, or '' when the total is unknown. */
export function percent(done: number, total: number | undefined): string {
  if (total === undefined || total <= 0) return ''
  return `${Math.min(100, Math.floor((done / total) * 100))}%`
}

/** Per second since `since` (a performance.now() value). */
export function rate(count: number, since: number): number {
  const s = (performance.now() - since) / 1000
  return s > 0 ? Math.round(count / s) : 0
}

export interface Progress {
  onProgress(p: ReplayProgress): void
  done(): void
}

/** A replay's progress (snapshot, merge): workspace, seq reached of the last, entries per second. */
export function progress(io: CliIo, label: string): Progress {
  const m = meter(io)
  const started = performance.now()
  return {
    onProgress(p) {
      m.update(() => {
        const total = p.last !== undefined ? p.last - p.first + 1 : undefined
        const pct = percent(p.seq - p.first + 1, total)
        return `${label}: ${p.workspace} seq ${p.seq}${p.last !== undefined ? `/${p.last}` : ''}${pct ? ` ${pct}` : ''}, ${count(p.entries, 'entry', 'entries')} (${rate(p.entries, started)}/s)`
      })
    },
    done: () => m.done(),
  }
}

/** `1 entry`, `2 entries`: a count with its noun in the right number. */
export function count(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`
}

/** A string as is, or JSON-quoted when it could break a line-oriented listing. */
export function quoteField(s: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is looked for
  return /[\u0000-\u001f\u007f]/.test(s) || s.startsWith('"') ? JSON.stringify(s) : s
}
