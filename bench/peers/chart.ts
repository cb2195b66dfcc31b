/**
 * One hand-written SVG per figure: a horizontal bar per contender at its median, a whisker from
 * the smallest to the largest of its runs, the median written beside it. No charting library:
 * the file is small, diffable and renders the same on GitHub and in a browser.
 */
import type { Kind } from './common.js'

export interface Bar {
  label: string
  kind: Kind
  median: number
  min: number
  max: number
  /** Appended to the value, e.g. "noa 2.1× ahead". */
  note?: string
}

export interface ChartSpec {
  title: string
  /** Under the title: unit, direction, what the whiskers are. */
  subtitle: string
  /** Bottom line: date, run kind. */
  footer: string
  unit: string
  bars: readonly Bar[]
}

const COLORS: Record<Kind, string> = {
  noa: '#2563eb',
  peer: '#64748b',
  floor: '#10b981',
  'not-durable': '#f59e0b',
}

const LEGEND: Record<Kind, string> = {
  noa: 'noa',
  peer: 'durable peer',
  floor: 'floor (no library)',
  'not-durable': 'NOT durable per append',
}

export function escapeXml(s: string): string {
  return s.replace(/[<>&"']/g, (c) => `&#${c.charCodeAt(0)};`)
}

/** A readable number: thousands grouped, about three significant digits below 1,000. */
export function formatValue(n: number): string {
  if (!Number.isFinite(n)) return '–'
  const a = Math.abs(n)
  if (a >= 1000) return Math.round(n).toLocaleString('en-US')
  if (a >= 100) return n.toFixed(0)
  if (a >= 10) return n.toFixed(1)
  if (a >= 1) return n.toFixed(2)
  return n.toFixed(3)
}

/** Gridline positions: 4–8 steps of 1, 2 or 5 × 10^k covering [0, max]. */
function ticks(max: number): number[] {
  if (!(max > 0)) return [0]
  const raw = max / 5
  const pow = 10 ** Math.floor(Math.log10(raw))
  const step = ([1, 2, 5, 10].map((m) => m * pow).find((s) => max / s <= 8) ?? 10 * pow) as number
  const out: number[] = []
  const last = Math.ceil(max / step - 1e-9)
  for (let k = 0; k <= last; k++) out.push(k * step)
  return out
}

/** A gridline label with only the decimals its step needs: 0, 50, 100 or 0.2, 0.4. */
function tickLabel(v: number, step: number): string {
  const decimals = step >= 1 ? 0 : Math.min(6, Math.ceil(-Math.log10(step) - 1e-9))
  return v.toLocaleString('en-US', { minimumFractionDigits: decimals, maximumFractionDigits: decimals })
}

export function barChart(spec: ChartSpec): string {
  const left = 300
  const plot = 380
  const valueText = (b: Bar) => `${formatValue(b.median)}${b.note ? `  ${b.note}` : ''}`
  // Room right of the plot for the longest value label (about 6.8 px a character at 12 px).
  const right = Math.max(120, 24 + Math.max(0, ...spec.bars.map((b) => valueText(b).length)) * 6.8)
  const width = Math.ceil(left + plot + right)
  const rowH = 30
  const top = 64
  const n = spec.bars.length
  const plotBottom = top + n * rowH
  const legendY = plotBottom + 40
  const height = legendY + 34
  const domain = Math.max(...spec.bars.map((b) => Math.max(b.max, b.median)), 0)
  const grid = ticks(domain)
  const maxTick = grid[grid.length - 1] as number
  const step = grid[1] ?? 1
  const scale = maxTick > 0 ? plot / maxTick : 0
  const x = (v: number) => left + Math.max(0, v) * scale
  const out: string[] = []
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-labelledby="t d" font-family="system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif">`,
    `<title id="t">${escapeXml(spec.title)}</title>`,
    `<desc id="d">${escapeXml(
      spec.bars
        .map(
          (b) =>
            `${b.label}: ${formatValue(b.median)} ${spec.unit} (${formatValue(b.min)}–${formatValue(b.max)})`,
        )
        .join('; '),
    )}</desc>`,
    '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#fde68a"/><line x1="0" y1="0" x2="0" y2="6" stroke="#f59e0b" stroke-width="3"/></pattern></defs>',
    `<rect width="${width}" height="${height}" fill="#ffffff"/>`,
    `<text x="16" y="26" font-size="17" font-weight="600" fill="#111827">${escapeXml(spec.title)}</text>`,
    `<text x="16" y="46" font-size="12" fill="#4b5563">${escapeXml(spec.subtitle)}</text>`,
  )
  for (const t of grid) {
    const gx = x(t).toFixed(1)
    out.push(
      `<line x1="${gx}" y1="${top - 6}" x2="${gx}" y2="${plotBottom}" stroke="#e5e7eb" stroke-width="1"/>`,
      `<text x="${gx}" y="${plotBottom + 16}" font-size="11" fill="#6b7280" text-anchor="middle">${escapeXml(tickLabel(t, step))}</text>`,
    )
  }
  out.push(
    `<text x="${left + plot}" y="${plotBottom + 30}" font-size="11" fill="#6b7280" text-anchor="end">${escapeXml(spec.unit)}</text>`,
  )
  spec.bars.forEach((b, i) => {
    const y = top + i * rowH
    const cy = y + rowH / 2
    const fill = b.kind === 'not-durable' ? 'url(#hatch)' : COLORS[b.kind]
    const weight = b.kind === 'noa' ? ' font-weight="600"' : ''
    out.push(
      `<text x="${left - 10}" y="${cy + 4}" font-size="12.5" fill="#111827" text-anchor="end"${weight}>${escapeXml(b.label)}</text>`,
      `<rect x="${left}" y="${y + 6}" width="${Math.max(1, x(b.median) - left).toFixed(1)}" height="${rowH - 12}" rx="2" fill="${fill}"${b.kind === 'not-durable' ? ' stroke="#f59e0b"' : ''}/>`,
    )
    if (b.max > b.min) {
      const x1 = x(b.min).toFixed(1)
      const x2 = x(b.max).toFixed(1)
      out.push(
        `<line x1="${x1}" y1="${cy}" x2="${x2}" y2="${cy}" stroke="#111827" stroke-width="1.2"/>`,
        `<line x1="${x1}" y1="${cy - 5}" x2="${x1}" y2="${cy + 5}" stroke="#111827" stroke-width="1.2"/>`,
        `<line x1="${x2}" y1="${cy - 5}" x2="${x2}" y2="${cy + 5}" stroke="#111827" stroke-width="1.2"/>`,
      )
    }
    const vx = Math.max(x(b.median), x(b.max)) + 8
    const text = `${formatValue(b.median)}${b.note ? `  ${b.note}` : ''}`
    out.push(
      `<text x="${vx.toFixed(1)}" y="${cy + 4}" font-size="12" fill="#111827"${weight}>${escapeXml(text)}</text>`,
    )
  })
  let lx = 16
  for (const kind of Object.keys(LEGEND) as Kind[]) {
    if (!spec.bars.some((b) => b.kind === kind)) continue
    const fill = kind === 'not-durable' ? 'url(#hatch)' : COLORS[kind]
    out.push(
      `<rect x="${lx}" y="${legendY - 10}" width="12" height="12" rx="2" fill="${fill}"/>`,
      `<text x="${lx + 17}" y="${legendY}" font-size="11.5" fill="#374151">${escapeXml(LEGEND[kind])}</text>`,
    )
    lx += 30 + LEGEND[kind].length * 6.3
  }
  out.push(
    `<text x="${width - 16}" y="${legendY + 20}" font-size="10.5" fill="#6b7280" text-anchor="end">${escapeXml(spec.footer)}</text>`,
    '</svg>',
  )
  return `${out.join('\n')}\n`
}
