/** One measured figure beside its baseline from the same run. */
export interface BenchRow {
  /** What was run, e.g. "serial append latency p50". */
  workload: string
  unit: string
  noa: number
  baseline: number
  baselineName: string
  /** true for throughput, false for latency, time and memory. */
  higherIsBetter: boolean
  note?: string
}

/** noa relative to its baseline, as "how many times better" (> 1 means noa is ahead). */
export function advantage(row: BenchRow): number {
  if (row.noa === 0 || row.baseline === 0) return Number.NaN
  return row.higherIsBetter ? row.noa / row.baseline : row.baseline / row.noa
}

function fmt(n: number): string {
  if (!Number.isFinite(n)) return '–'
  if (Math.abs(n) >= 1000) return Math.round(n).toLocaleString('en-US')
  if (Math.abs(n) >= 10) return n.toFixed(1)
  return n.toFixed(3)
}

export function markdownTable(rows: readonly BenchRow[]): string {
  const head =
    '| workload | noa | baseline | baseline value | noa / baseline | noa ahead by |\n|---|---:|---|---:|---:|---:|\n'
  return (
    head +
    rows
      .map((r) => {
        const ratio = r.noa / r.baseline
        const ahead = advantage(r)
        // A goal such as "under 1%" needs the digits that 0.00× would hide.
        const shown =
          ratio < 0.1 ? `${ratio.toPrecision(2)}× (${(ratio * 100).toPrecision(2)}%)` : `${ratio.toFixed(2)}×`
        return `| ${r.workload} | ${fmt(r.noa)} ${r.unit} | ${r.baselineName} | ${fmt(r.baseline)} ${r.unit} | ${shown} | ${ahead.toFixed(2)}×${r.note ? ` (${r.note})` : ''} |`
      })
      .join('\n') +
    '\n'
  )
}
