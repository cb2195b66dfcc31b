/**
 * Progress of long replays, on stderr only (stdout carries the command's data). On a terminal
 * the line is redrawn at most 10 times a second and erased at the end; otherwise a plain line is
 * printed every 5 s, and nothing at all for a replay that ends within the first 2 s.
 */
import type { ReplayProgress } from '../store/replay.js'
import type { CliIo } from './io.js'

export interface Progress {
  onProgress(p: ReplayProgress): void
  done(): void
}

export function progress(io: CliIo, label: string): Progress {
  const started = performance.now()
  const interval = io.isTTY ? 100 : 5000
  const quiet = io.isTTY ? 300 : 2000
  let lastDraw = 0
  let drawn = false
  return {
    onProgress(p) {
      const now = performance.now()
      if (now - started < quiet || now - lastDraw < interval) return
      lastDraw = now
      const total = p.last !== undefined ? p.last - p.first + 1 : undefined
      const done = p.seq - p.first + 1
      const pct = total && total > 0 ? ` ${Math.min(100, Math.floor((done / total) * 100))}%` : ''
      const rate = Math.round(p.entries / ((now - started) / 1000))
      const line = `${label}: ${p.workspace} seq ${p.seq}${p.last !== undefined ? `/${p.last}` : ''}${pct}, ${p.entries} entries (${rate}/s)`
      if (io.isTTY) io.stderr.write(`\r\x1b[K${line}`)
      else io.stderr.write(`${line}\n`)
      drawn = true
    },
    done() {
      if (drawn && io.isTTY) io.stderr.write('\r\x1b[K')
    },
  }
}

/** A string as is, or JSON-quoted when it could break a line-oriented listing. */
export function quoteField(s: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is looked for
  return /[\u0000-\u001f\u007f]/.test(s) || s.startsWith('"') ? JSON.stringify(s) : s
}
