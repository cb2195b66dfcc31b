/**
 * Turns the runs into figures (median, min–max, noa's advantage) and writes bench/RESULTS.md
 * and one chart per figure.
 */
import type { CaseResult } from '../cases.js'
import { median } from '../run.js'
import { type Bar, barChart, formatValue, lineChart, type Series } from './chart.js'
import type { Kind } from './common.js'
import type { DurabilityFile } from './strace.js'
import { type Figure, PROC_WORKLOADS, SCALING, type Workload, type WorkloadId } from './suite.js'

export interface Contender {
  id: string
  label: string
  kind: Kind
  how: string
}

export interface Stat extends Contender {
  /** One value per round (scaled to the figure's unit); undefined where that trial failed. */
  values: (number | undefined)[]
  median: number
  min: number
  max: number
  /**
   * How many times better noa is (> 1: noa ahead): the median over rounds of the ratio between
   * noa's and this contender's trials of the same round, which ran minutes apart at most.
   */
  ahead: number
}

export interface FigureResult {
  figure: Figure
  workload: Workload
  stats: Stat[]
}

export interface Prepared {
  ms: number
  entries: number
  bytes: number
  apparent: number
}

export interface RunInfo {
  date: Date
  command: string
  quick: boolean
  rounds: number
  seconds: number
  entries: number
  machine: string
  disk: string
  versions: string
  prepared: Record<string, Prepared>
  failures: string[]
}

export function summarize(
  figure: Figure,
  workload: Workload,
  contenders: readonly Contender[],
  results: Map<string, CaseResult[]>,
): FigureResult {
  const valuesOf = (id: string) =>
    (results.get(id) ?? []).map((r) => {
      const v = r[figure.metric]
      return typeof v === 'number' && Number.isFinite(v) ? v * figure.scale : undefined
    })
  const noaValues = valuesOf('noa')
  const stats = contenders.map((c): Stat => {
    const values = valuesOf(c.id)
    const ok = values.filter((v): v is number => v !== undefined)
    const ratios: number[] = []
    values.forEach((v, r) => {
      const n = noaValues[r]
      if (v === undefined || n === undefined || v <= 0 || n <= 0) return
      ratios.push(figure.higherIsBetter ? n / v : v / n)
    })
    return {
      ...c,
      values,
      median: ok.length ? median(ok) : Number.NaN,
      min: ok.length ? Math.min(...ok) : Number.NaN,
      max: ok.length ? Math.max(...ok) : Number.NaN,
      ahead: ratios.length ? median(ratios) : Number.NaN,
    }
  })
  return { figure, workload, stats }
}

/** One workload of the scaling chart: its rate and peak RSS figures, every contender. */
export interface ScalingPoint {
  workspaces: number
  workload: Workload
  rate: Stat[]
  rss: Stat[]
}

/**
 * Entries/s and peak RSS against the number of workspaces, from the SCALING workloads that ran:
 * noa and the durable peers (noa's other modes, the floors and hypercore are in the figures).
 */
export function scalingOf(
  workloads: readonly Workload[],
  byWorkload: Map<WorkloadId, Map<string, CaseResult[]>>,
  contenderOf: (workload: WorkloadId, id: string) => Contender,
): ScalingPoint[] {
  const out: ScalingPoint[] = []
  for (const { workload, workspaces } of SCALING) {
    const w = workloads.find((x) => x.id === workload)
    const results = byWorkload.get(workload)
    if (!w || !results) continue
    const contenders = w.contenders
      .map((id) => contenderOf(workload, id))
      .filter((c) => c.id === 'noa' || c.kind === 'peer')
    const figure = (metric: 'rate' | 'maxRssMB'): Figure => ({
      id: `scaling-${workload}-${metric}`,
      workload,
      metric,
      title: w.title,
      unit: metric === 'rate' ? 'entries/s' : 'MB',
      scale: 1,
      higherIsBetter: metric === 'rate',
    })
    out.push({
      workspaces,
      workload: w,
      rate: summarize(figure('rate'), w, contenders, results).stats,
      rss: summarize(figure('maxRssMB'), w, contenders, results).stats,
    })
  }
  return out
}

function countLabel(n: number): string {
  return n >= 1000 ? `${n / 1000}k` : String(n)
}

export function scalingChart(points: ScalingPoint[], info: RunInfo): string {
  const ids = [...new Set(points.flatMap((p) => p.rate.map((s) => s.id)))]
  const seriesOf = (pick: (p: ScalingPoint) => Stat[]): Series[] =>
    ids.map((id) => {
      const first = points.flatMap(pick).find((s) => s.id === id) as Stat
      return {
        label: first.label,
        kind: first.kind,
        points: points.flatMap((p) => {
          const s = pick(p).find((x) => x.id === id)
          return s && Number.isFinite(s.median) && s.median > 0 ? [{ x: p.workspaces, y: s.median }] : []
        }),
      }
    })
  const runs = info.rounds === 1 ? '1 run' : `medians of ${info.rounds} interleaved runs`
  return lineChart({
    title: 'Entries/s and peak RSS against the number of workspaces',
    subtitle: `noa and each durable peer · ${runs}, each a fresh process · submitters: 100 up to 100 workspaces, one per workspace at 1k and 10k, 1,000 at 100k (4 appends to each workspace in turn)`,
    footer: `${info.date.toISOString().slice(0, 10)} · ${info.machine} · ${runKind(info)} · npm run bench:peers`,
    xLabel: 'workspaces (log scale)',
    xs: points.map((p) => p.workspaces),
    xTick: countLabel,
    panels: [
      {
        title: 'Throughput',
        unit: 'entries/s, higher is better',
        log: true,
        series: seriesOf((p) => p.rate),
      },
      {
        title: 'Peak RSS of the process',
        unit: 'MB, lower is better',
        log: false,
        series: seriesOf((p) => p.rss),
      },
    ],
  })
}

function scalingSection(points: ScalingPoint[]): string {
  const ids = [...new Set(points.flatMap((p) => p.rate.map((s) => s.id)))]
  const head = `| contender | ${points.map((p) => `${countLabel(p.workspaces)} ws`).join(' | ')} |\n|---|${points.map(() => '---:|').join('')}\n`
  const rows = ids.map((id) => {
    const label = points.flatMap((p) => p.rate).find((s) => s.id === id)?.label ?? id
    const cells = points.map((p) => {
      const r = p.rate.find((s) => s.id === id)
      const m = p.rss.find((s) => s.id === id)
      if (!r || !Number.isFinite(r.median)) return '–'
      return `${formatValue(r.median)}/s · ${m && Number.isFinite(m.median) ? `${formatValue(m.median)} MB` : '–'}`
    })
    return `| ${id === 'noa' ? `**${label}**` : label} | ${cells.join(' | ')} |`
  })
  const best = (stats: Stat[], higher: boolean) =>
    stats
      .filter((s) => s.kind === 'peer' && Number.isFinite(s.median))
      .sort((a, b) => (higher ? b.median - a.median : a.median - b.median))[0]
  const vs = points.map((p) => {
    const r = best(p.rate, true)
    const m = best(p.rss, false)
    return `| ${countLabel(p.workspaces)} (${p.workload.id}) | ${r ? `${r.label}: ${ahead(r.ahead)}` : '–'} | ${m ? `${m.label}: ${ahead(m.ahead)}` : '–'} |`
  })
  const shapes = points.map(
    (p) => `- **${countLabel(p.workspaces)}** (\`${p.workload.id}\`): ${p.workload.what}.`,
  )
  return `Each point is its workload's median entries/s and peak RSS (the rows of the figures below: the same trials). The workloads differ in more than the number of workspaces:\n\n${shapes.join('\n')}\n\n![Entries/s and peak RSS against the number of workspaces](charts/scaling.svg)\n\n${head}${rows.join('\n')}\n\nnoa against the best durable peer at each size (median of the per-round ratios):\n\n| workspaces | entries/s | peak RSS |\n|---|---|---|\n${vs.join('\n')}\n`
}

/** noa's advantage in words: "3.10× ahead" or "2.86× behind" (never a ratio below 1). */
export function ahead(x: number): string {
  if (!Number.isFinite(x) || x <= 0) return '–'
  return x >= 1 ? `${x.toFixed(2)}× ahead` : `${(1 / x).toFixed(2)}× behind`
}

function direction(f: Figure): string {
  return f.higherIsBetter ? 'higher is better' : 'lower is better'
}

function runKind(info: RunInfo): string {
  return info.quick ? 'QUICK RUN (smoke test, not figures to quote)' : 'full run'
}

export function chartFor(result: FigureResult, info: RunInfo): string {
  const { figure } = result
  const bars: Bar[] = result.stats
    .filter((s) => Number.isFinite(s.median))
    .map((s) => ({
      label: s.kind === 'not-durable' && !s.label.includes('NOT') ? `${s.label} (NOT durable)` : s.label,
      kind: s.kind,
      median: s.median,
      min: s.min,
      max: s.max,
      note: s.kind === 'noa' || !Number.isFinite(s.ahead) ? undefined : `(noa ${ahead(s.ahead)})`,
    }))
  const runs =
    info.rounds === 1 ? '1 run (no whiskers)' : `median of ${info.rounds} interleaved runs, whiskers min–max`
  return barChart({
    title: figure.title,
    subtitle: `${figure.unit}, ${direction(figure)} · ${runs} · each run a fresh process · “noa N× ahead”: noa is N times better`,
    footer: `${info.date.toISOString().slice(0, 10)} · ${info.machine} · ${runKind(info)} · npm run bench:peers`,
    unit: figure.unit,
    bars,
  })
}

function syncCell(d: DurabilityFile | null, id: string): string {
  const p = d?.peers[id]
  if (!p) return '–'
  return `${p.syncsPerEntry.serial} / ${p.syncsPerEntry.grouped}`
}

function statTable(result: FigureResult, d: DurabilityFile | null): string {
  const { figure } = result
  // The strace counts are of the in-process writers: the many-process contenders are others.
  const write = !['replay', 'open'].includes(figure.workload) && !PROC_WORKLOADS.has(figure.workload)
  const head = `| contender | what it does | median ${figure.unit} | min–max | noa vs this |${write ? ' fsync-family calls / entry (serial / 100 submitters) |' : ''}\n|---|---|---:|---:|---:|${write ? '---:|' : ''}\n`
  const rows = result.stats.map((s) => {
    const name = s.kind === 'noa' ? `**${s.label}**` : s.kind === 'not-durable' ? `${s.label} ⚠` : s.label
    const range = s.values.length > 1 ? `${formatValue(s.min)}–${formatValue(s.max)}` : '–'
    const cells = [
      name,
      s.how,
      `**${formatValue(s.median)}**`,
      range,
      // noa's own modes are rows of their own: a ratio to noa is only for peers and floors
      s.kind === 'noa' ? '—' : ahead(s.ahead),
    ]
    if (write) cells.push(syncCell(d, s.id))
    return `| ${cells.join(' | ')} |`
  })
  return head + rows.join('\n')
}

function find(results: FigureResult[], figure: string, id: string): Stat | undefined {
  return results.find((r) => r.figure.id === figure)?.stats.find((s) => s.id === id)
}

function v(results: FigureResult[], figure: string, id: string, unit = ''): string {
  const s = find(results, figure, id)
  return s && Number.isFinite(s.median) ? `${formatValue(s.median)}${unit}` : 'not measured'
}

function seedTable(results: FigureResult[], info: RunInfo): string {
  const noaBytes = info.prepared.noa
  const perMillion = noaBytes ? (noaBytes.apparent / noaBytes.entries) * 1_000_000 : Number.NaN
  const mb = (b: number) => (Number.isFinite(b) ? `${(b / 1e6).toFixed(0)} MB` : 'not measured')
  const floorP50 = find(results, 'serial-p50', 'disk')
  const rows = [
    [
      'single write latency (append + fdatasync)',
      '~0.05 ms',
      v(results, 'serial-p50', 'noa', ' ms'),
      `${v(results, 'serial-p50', 'disk', ' ms')} (write + fdatasync)`,
    ],
    [
      'throughput, 1 workspace',
      '~20,000 writes/s',
      v(results, '1ws', 'noa', '/s'),
      `${v(results, '1ws', 'disk', '/s')} one fdatasync per entry; ${v(results, '1ws', 'disk-batched', '/s')} with group commit on one thread`,
    ],
    [
      'throughput, 100 workspaces',
      '~10,000+ writes/s',
      v(results, '100ws', 'noa', '/s'),
      `${v(results, '100ws', 'disk', '/s')} one fdatasync at a time; ${v(results, '100ws', 'disk-parallel', '/s')} with every fdatasync in flight`,
    ],
    [
      'file size per 1M entries',
      '~200 MB (~200 B/entry)',
      `${mb(perMillion)} (${formatValue(perMillion / 1e6)} B/entry${noaBytes && noaBytes.entries !== 1_000_000 ? `, scaled from ${noaBytes.entries.toLocaleString('en-US')} entries` : ''})`,
      'the same bytes (plain JSONL)',
    ],
  ]
  const table = `| | seed (ext4, SSD, its own figures) | noa, this run | disk floor, this run |\n|---|---:|---:|---|\n${rows.map((r) => `| ${r.join(' | ')} |`).join('\n')}\n`
  const floor =
    floorP50 && Number.isFinite(floorP50.median) ? `${formatValue(floorP50.median)} ms` : 'the floor'
  return `${table}
The seed's ~0.05 ms for one append + fdatasync is not reachable on this disk by any durable
log: the floor itself, a bare write + fdatasync of one ~180-byte line through noa's addon on
the caller's thread, with no worker and no message, takes ${floor} at the median here.
fdatasync returns only once the (virtual) disk has acknowledged the data, and because every
append grows the file, ext4 must also commit the new size through its journal and flush the
device cache each time. A figure like 0.05 ms needs a device that acknowledges flushes from a
volatile or battery-backed cache, or a loop that skips the flush; noa does not chase it by
skipping fdatasync.
`
}

function gaps(results: FigureResult[], d: DurabilityFile | null): string {
  const out: string[] = []
  const explained = new Set<string>()
  for (const r of results) {
    const noa = r.stats.find((s) => s.id === 'noa')
    if (!noa) continue
    const behind = r.stats.filter((s) => s.kind === 'peer' && Number.isFinite(s.ahead) && s.ahead < 1)
    if (behind.length === 0) continue
    // p50 and p99 come from the same trials and have the same causes: explain them once.
    // Memory has causes of its own.
    const key = r.figure.metric === 'maxRssMB' ? 'rss' : r.figure.workload
    const reason = explained.has(key) ? 'The same causes as above.' : why(r, behind, d)
    explained.add(key)
    const list = behind
      .map(
        (s) =>
          `${s.label} ${formatValue(s.median)} ${r.figure.unit} (noa ${formatValue(noa.median)}, ${ahead(s.ahead)})`,
      )
      .join('; ')
    out.push(`- **${r.figure.title}**: ${list}. ${reason}`)
  }
  if (out.length === 0) return 'In this run noa is ahead of every durable peer on every figure.\n'
  return `${out.join('\n')}\n`
}

/** Why a durable peer can be ahead of noa on a figure: the mechanism, with this run's figures. */
function why(r: FigureResult, behind: Stat[], d: DurabilityFile | null): string {
  const grouped = (id: string) => d?.peers[id]?.syncsPerEntry.grouped
  const noa = r.stats.find((s) => s.id === 'noa')
  const own = (id: string) => {
    const x = r.stats.find((s) => s.id === id)
    return x && Number.isFinite(x.median) ? x : undefined
  }
  const unit = r.figure.unit === 'entries/s' ? '/s' : ` ${r.figure.unit}`
  const inThread = own('noa-inthread')
  if (r.figure.metric === 'maxRssMB')
    return "The figure is the peak resident set of the trial's whole process, submitters and their promises included, which every contender's process holds alike. noa's process also holds its owner worker threads, each a V8 isolate with its own heap, and per workspace its state in the owner (open log, queue, buffers); SQLite and lmdb-js hold one database's page cache or memory map, sonic-boom one small object per file."
  switch (r.figure.workload) {
    case 'serial': {
      const floor = r.stats.find((s) => s.id === 'disk')
      const spread =
        floor && Number.isFinite(floor.min) && floor.max > floor.min
          ? ` Gaps inside the spread of the floor's own runs (${formatValue(floor.min)}–${formatValue(floor.max)} ms here) are this disk's noise, not a difference.`
          : ''
      const hop =
        inThread && noa
          ? ` The same round with the owner on the caller's thread (\`workers: 0\`, no hop) took ${formatValue(inThread.median)} ms here, so the hop to the owner worker and back costs about ${formatValue(Math.max(0, noa.median - inThread.median))} ms: a message each way, each waking a sleeping thread, which on a virtual machine's idle vCPU costs tens of µs.`
          : ''
      return `A serial append in noa is one pwrite + fdatasync of the worker's preallocated journal (an overwrite, no size change to commit), one write to the log, and the hand-off to the owner worker and back; sonic-boom and SQLite sync on the caller's thread, blocking its event loop for the whole flush, and pay no hop.${hop}${spread}`
    }
    case '1ws':
      return `Every contender here group-commits into one file with one sync per batch; what differs is the cost around the batch: noa's batch crosses to the owner thread and back (one message each way), a batched SQLite commit happens on the caller's thread between event-loop turns.${inThread ? ` With the owner on the caller's thread (\`workers: 0\`) noa took ${formatValue(inThread.median)}${unit}.` : ''}`
    case '100kws':
      return "A trial starts with every log closed (the store was written before, as after a restart), and each loop moves to another workspace every few appends, so in noa about one append in four first opens a workspace's log on its owner (the file, its lock and a read of its tail for the last seq), and past the open-file bound closing another makes room. SQLite and lmdb-js keep one file open, and a row for a workspace idle until now costs what a row for a busy one does."
    case '10ws':
    case '100ws':
    case '1000ws':
    case '10kws': {
      const syncs = behind
        .map((s) => s.id)
        .map((id) => (grouped(id) === undefined ? '' : `${id} ${grouped(id)}`))
        .filter(Boolean)
      const noaSyncs = grouped('noa')
      const fdatasync = own('noa-fdatasync')
      const modes = [
        fdatasync
          ? `one fdatasync per workspace file (\`durability: 'fdatasync'\`) ${formatValue(fdatasync.median)}${unit}`
          : '',
        inThread
          ? `the owner on the caller's thread (\`workers: 0\`) ${formatValue(inThread.median)}${unit}`
          : '',
      ].filter(Boolean)
      return `With the journal a round costs one fdatasync for every workspace of a worker, as a WAL does${noaSyncs !== undefined ? ` (strace: noa ${noaSyncs} fsync-family calls per entry with 100 submitters${syncs.length ? `; ${syncs.join(', ')}` : ''})` : ''}. What a round still pays that a single-file store does not: one write to each active workspace's \`.log\` before the round's acks (the logs stay the seed's JSONL and hold only journal-covered bytes, so readers and replication never see an unacknowledged entry), and the hop to the owner worker and back. With one submitter per workspace, each awaiting its ack, every workspace's next entry waits for the round before it, so the rounds run in lockstep and the length of one round sets the rate.${modes.length ? ` noa's other modes in this run: ${modes.join('; ')}.` : ''}`
    }
    case 'create':
      return "A new workspace in noa is a new file in the root's log folder (a file creation, which this ext4 disk makes at a fraction of a millisecond each), the files an owner creates in one pass sharing one fsync of that folder, and then its first entry goes through a journal round like any append; a first row for a new ws in SQLite or lmdb-js is an insert into pages the database already has, inside the same commit as the other rows of its turn."
    case '8proc':
    case '8proc-shared':
      return "Every process's append crosses the daemon's socket twice (request, answer) before and after the commit, where SQLite and lmdb commit in the calling process; the daemon wins only by committing many processes' entries in one fdatasync."
    case 'replay':
      return "noa's reader validates every entry (every field rule, as `verify` does) while it parses it, and builds every entry as an object; a short log stays on one thread (a scanning thread pays off from 32 MB) and pays the start of a fresh process's JIT, which a C++ JSON.parse or a native B-tree read does not; the SQLite and lmdb replays decode rows already in the page cache without any check."
    case 'open':
      return "`AgentLog.open` starts no worker; `recover` takes the root's lock, replays any journal whose owner is gone, locks the log and reads its tail; opening SQLite or lmdb is a file open and a read of a few pages on the caller's thread."
  }
}

export function renderResults(
  results: FigureResult[],
  info: RunInfo,
  d: DurabilityFile | null,
  scaling: ScalingPoint[] = [],
): string {
  const parts: string[] = []
  parts.push('# noa against its peers\n')
  if (info.quick) {
    parts.push(
      `> **Quick run.** \`--quick\`: ${info.rounds} round, ${info.seconds} s per timed case, ${info.entries.toLocaleString('en-US')}-entry logs, on a machine shared with other builds. It shows the harness works; it is not a set of figures to quote. A full run (\`npm run bench:peers\`) replaces this file.\n`,
    )
  }
  parts.push(
    `Measured ${info.date.toISOString().slice(0, 16).replace('T', ' ')} UTC on ${info.machine}; ${info.disk}. ${info.versions}.\n\nCommand: \`${info.command}\` — ${info.rounds} interleaved round(s) (every contender of a workload once per round, A B C … A B C …), each trial in a fresh process, ${info.seconds} s per timed write case; figures are medians over the rounds, ranges min–max, and "noa vs this" is the median of the per-round ratios between noa and that contender ("2.00× ahead": noa twice as good). Every append is durable before it is acknowledged, except hypercore's (⚠, see the strace check). Entries are the engine bench's \`{"seq":…,"op":"write","path":…,"blob":<64 hex>,"ts":…}\`, about 180 bytes as a JSON line (see the bytes per entry under the replay figure).\n`,
  )
  if (info.failures.length) {
    parts.push(
      `**Failed trials** (left out of the figures):\n\n${info.failures.map((f) => `- ${f}`).join('\n')}\n`,
    )
  }
  parts.push('## Summary\n')
  const summary = results.map((r) => {
    const noa = r.stats.find((s) => s.id === 'noa')
    const peers = r.stats.filter((s) => s.kind === 'peer' && Number.isFinite(s.median))
    const best = peers.sort((a, b) =>
      r.figure.higherIsBetter ? b.median - a.median : a.median - b.median,
    )[0]
    const floor = r.stats.find((s) => s.id === 'disk')
    const hc = r.stats.find((s) => s.kind === 'not-durable')
    const u = r.figure.unit
    return `| ${r.figure.title} (${u}, ${direction(r.figure)}) | **${noa ? formatValue(noa.median) : '–'}** | ${best ? `${best.label}: ${formatValue(best.median)}` : '–'} | ${best ? ahead(best.ahead) : '–'} | ${floor ? formatValue(floor.median) : '–'} | ${hc ? formatValue(hc.median) : '–'} |`
  })
  parts.push(
    `| figure | noa | best durable peer | noa vs it | disk floor | hypercore ⚠ (not durable) |\n|---|---:|---|---:|---:|---:|\n${summary.join('\n')}\n`,
  )
  if (scaling.length >= 2) {
    parts.push('## Entries/s and peak RSS against the number of workspaces\n')
    parts.push(scalingSection(scaling))
  }
  for (const r of results) {
    parts.push(`## ${r.figure.title}\n`)
    parts.push(`${r.workload.what}.\n`)
    parts.push(`![${r.figure.title}](charts/${r.figure.id}.svg)\n`)
    parts.push(`${statTable(r, d)}\n`)
    if (r.figure.workload === 'replay') {
      const rows = Object.entries(info.prepared).map(
        ([id, p]) =>
          `| ${id} | ${formatValue(p.apparent / p.entries)} B | ${formatValue(p.bytes / p.entries)} B | ${formatValue(p.ms / 1000)} s |`,
      )
      parts.push(
        `On disk after ${info.entries.toLocaleString('en-US')} entries (prepared once per run, outside the timed part):\n\n| store | file sizes / entry | allocated / entry | time to prepare |\n|---|---:|---:|---:|\n${rows.join('\n')}\n`,
      )
    }
  }
  parts.push('## Durability check (strace)\n')
  if (d) {
    const rows = Object.entries(d.peers).map(([id, p]) => {
      const fmt = (x: Record<string, number>) =>
        Object.entries(x)
          .map(([k, n]) => `${k} ${n}`)
          .join(', ') || 'none'
      return `| ${p.label} (\`${id}\`) | ${fmt(p.serial)} | ${fmt(p.grouped)} | ${p.durable ? 'yes: ≥ 1 sync per entry' : '**no: no sync per entry**'} |`
    })
    parts.push(
      `From \`bench/peers/durability.json\`, measured ${d.measured} with \`${d.command}\` (${d.strace}, ${d.kernel}, Node ${d.node}). ${d.method} strace counts calls, not their order: that each ack waits for its sync is what each peer documents (see "what it does").\n\n| writer | system calls per entry, 1 submitter | per entry, 100 submitters | a sync per entry? |\n|---|---|---|---|\n${rows.join('\n')}\n`,
    )
  } else {
    parts.push(
      'Not measured yet: run `npm run bench:peers -- --strace` (needs strace) to write `bench/peers/durability.json`.\n',
    )
  }
  parts.push("## The seed's performance table, beside noa and the disk floor\n")
  parts.push(seedTable(results, info))
  parts.push('## Where noa is behind a durable peer\n')
  parts.push(gaps(results, d))
  return parts.join('\n')
}
