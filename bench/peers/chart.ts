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

export interface Series {
  label: string
  kind: Kind
  /** One point per x with a measured value, in x order. */
  points: readonly { x: number; y: number }[]
}

export interface LineChartSpec {
  title: string
  subtitle: string
  footer: string
  /** Under the x axis. */
  xLabel: string
  /** Every x the panels mark, in order (ticks on a log scale). */
  xs: readonly number[]
  xTick(x: number): string
  panels: readonly { title: string; unit: string; log: boolean; series: readonly Series[] }[]
}

/** Peers' lines: muted hues and dash patterns, so that they stay apart in print too. */
const LINE_STYLES: readonly { color: string; dash: string }[] = [
  { color: '#64748b', dash: '' },
  { color: '#0d9488', dash: '6 3' },
  { color: '#a855f7', dash: '2 3' },
  { color: '#ea580c', dash: '8 3 2 3' },
  { color: '#78716c', dash: '4 4' },
  { color: '#be185d', dash: '1 2' },
]

/** Log-scale gridlines: 1, 2, 5 × 10^k within [lo, hi], or powers of ten when those are many. */
function logTicks(lo: number, hi: number): number[] {
  const out: number[] = []
  const from = Math.floor(Math.log10(lo))
  const to = Math.ceil(Math.log10(hi))
  const steps = to - from > 3 ? [1] : [1, 2, 5]
  for (let e = from; e <= to; e++) for (const m of steps) out.push(m * 10 ** e)
  return out.filter((t) => t >= lo * 0.999 && t <= hi * 1.001)
}

/** A compact axis label: 2k, 50k, 1.5M. */
function shortValue(v: number): string {
  if (v >= 1e6) return `${+(v / 1e6).toFixed(1)}M`
  if (v >= 1e3) return `${+(v / 1e3).toFixed(1)}k`
  return Number.isInteger(v) ? String(v) : formatValue(v)
}

/**
 * Panels side by side, each a line per contender against a log x axis (the number of
 * workspaces), y linear or log; noa's line drawn last, thicker, its values written at its
 * points. The same fonts, colours and layout as barChart.
 */
export function lineChart(spec: LineChartSpec): string {
  const panelW = 420
  const panelH = 260
  const gap = 90
  const left = 70
  const top = 84
  const n = spec.panels.length
  const width = left + n * panelW + (n - 1) * gap + 40
  const styleOf = new Map<string, { color: string; dash: string }>()
  const labels = [...new Set(spec.panels.flatMap((p) => p.series.map((s) => s.label)))]
  let peer = 0
  for (const p of spec.panels)
    for (const s of p.series) {
      if (styleOf.has(s.label)) continue
      styleOf.set(
        s.label,
        s.kind === 'noa'
          ? { color: COLORS.noa, dash: '' }
          : (LINE_STYLES[peer++ % LINE_STYLES.length] as { color: string; dash: string }),
      )
    }
  const legendY = top + panelH + 58
  const legendRows = Math.ceil(labels.length / 3)
  const height = legendY + legendRows * 20 + 30
  const xLo = Math.log10(spec.xs[0] as number)
  const xHi = Math.log10(spec.xs[spec.xs.length - 1] as number)
  const out: string[] = []
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-labelledby="t d" font-family="system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif">`,
    `<title id="t">${escapeXml(spec.title)}</title>`,
    `<desc id="d">${escapeXml(
      spec.panels
        .map(
          (p) =>
            `${p.title}: ${p.series
              .map(
                (s) =>
                  `${s.label} ${s.points.map((q) => `${spec.xTick(q.x)}: ${formatValue(q.y)}`).join(', ')}`,
              )
              .join('; ')}`,
        )
        .join(' | '),
    )}</desc>`,
    `<rect width="${width}" height="${height}" fill="#ffffff"/>`,
    `<text x="16" y="26" font-size="17" font-weight="600" fill="#111827">${escapeXml(spec.title)}</text>`,
    `<text x="16" y="46" font-size="12" fill="#4b5563">${escapeXml(spec.subtitle)}</text>`,
  )
  spec.panels.forEach((p, pi) => {
    const x0 = left + pi * (panelW + gap)
    const ys = p.series.flatMap((s) => s.points.map((q) => q.y)).filter((y) => y > 0)
    const yMaxRaw = Math.max(...ys, 1)
    let yTicks: number[]
    let y: (v: number) => number
    if (p.log) {
      const lo = 10 ** Math.floor(Math.log10(Math.min(...ys, yMaxRaw)))
      const hi = 10 ** Math.ceil(Math.log10(yMaxRaw))
      yTicks = logTicks(lo, hi)
      y = (v) =>
        top +
        panelH -
        ((Math.log10(Math.max(v, lo)) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * panelH
    } else {
      yTicks = ticks(yMaxRaw)
      const hi = yTicks[yTicks.length - 1] as number
      y = (v) => top + panelH - (Math.max(0, v) / hi) * panelH
    }
    const x = (v: number) => x0 + ((Math.log10(v) - xLo) / (xHi - xLo || 1)) * panelW
    out.push(
      `<text x="${x0}" y="${top - 16}" font-size="13.5" font-weight="600" fill="#111827">${escapeXml(p.title)}</text>`,
    )
    for (const t of yTicks) {
      const gy = y(t).toFixed(1)
      out.push(
        `<line x1="${x0}" y1="${gy}" x2="${x0 + panelW}" y2="${gy}" stroke="#e5e7eb" stroke-width="1"/>`,
        `<text x="${x0 - 8}" y="${(+gy + 4).toFixed(1)}" font-size="11" fill="#6b7280" text-anchor="end">${escapeXml(shortValue(t))}</text>`,
      )
    }
    for (const t of spec.xs) {
      const gx = x(t).toFixed(1)
      out.push(
        `<line x1="${gx}" y1="${top}" x2="${gx}" y2="${top + panelH}" stroke="#e5e7eb" stroke-width="1"/>`,
        `<text x="${gx}" y="${top + panelH + 16}" font-size="11" fill="#6b7280" text-anchor="middle">${escapeXml(spec.xTick(t))}</text>`,
      )
    }
    out.push(
      `<text x="${x0 + panelW}" y="${top + panelH + 32}" font-size="11" fill="#6b7280" text-anchor="end">${escapeXml(spec.xLabel)}</text>`,
      `<text x="${x0}" y="${top - 3}" font-size="11" fill="#6b7280">${escapeXml(`${p.unit}${p.log ? ' (log scale)' : ''}`)}</text>`,
    )
    const ordered = [...p.series].sort((a, b) => (a.kind === 'noa' ? 1 : 0) - (b.kind === 'noa' ? 1 : 0))
    for (const s of ordered) {
      const st = styleOf.get(s.label) ?? { color: COLORS.peer, dash: '' }
      const noa = s.kind === 'noa'
      const pts = s.points.map((q) => `${x(q.x).toFixed(1)},${y(q.y).toFixed(1)}`)
      if (pts.length > 1)
        out.push(
          `<polyline points="${pts.join(' ')}" fill="none" stroke="${st.color}" stroke-width="${noa ? 3 : 1.8}"${st.dash ? ` stroke-dasharray="${st.dash}"` : ''}/>`,
        )
      for (const q of s.points) {
        out.push(
          `<circle cx="${x(q.x).toFixed(1)}" cy="${y(q.y).toFixed(1)}" r="${noa ? 4 : 3}" fill="${st.color}"/>`,
        )
        if (noa)
          out.push(
            `<text x="${x(q.x).toFixed(1)}" y="${(y(q.y) - 9).toFixed(1)}" font-size="11" font-weight="600" fill="${st.color}" text-anchor="middle">${escapeXml(shortValue(q.y))}</text>`,
          )
      }
    }
  })
  labels.forEach((label, i) => {
    const st = styleOf.get(label) ?? { color: COLORS.peer, dash: '' }
    const lx = 16 + (i % 3) * 330
    const ly = legendY + Math.floor(i / 3) * 20
    out.push(
      `<line x1="${lx}" y1="${ly - 4}" x2="${lx + 28}" y2="${ly - 4}" stroke="${st.color}" stroke-width="${st.color === COLORS.noa ? 3 : 1.8}"${st.dash ? ` stroke-dasharray="${st.dash}"` : ''}/>`,
      `<text x="${lx + 34}" y="${ly}" font-size="11.5" fill="#374151"${st.color === COLORS.noa ? ' font-weight="600"' : ''}>${escapeXml(label)}</text>`,
    )
  })
  out.push(
    `<text x="${width - 16}" y="${height - 10}" font-size="10.5" fill="#6b7280" text-anchor="end">${escapeXml(spec.footer)}</text>`,
    '</svg>',
  )
  return `${out.join('\n')}\n`
}
