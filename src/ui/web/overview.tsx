/**
 * Every workspace of the root: entries, last seq, age, bytes, state, and entries/s over the last
 * minute as a sparkline (from the last seqs of successive polls). Sortable, filterable, and
 * virtualized, so 10,000 workspaces are 40-odd rows in the DOM.
 */
import { useEffect, useMemo, useState } from 'preact/hooks'
import { age, bytes, getJson, type WorkspaceInfo } from './data.js'
import { VirtualList } from './virtual.js'

type Key = 'workspace' | 'entries' | 'lastSeq' | 'lastTs' | 'bytes' | 'rate'
const WINDOW_MS = 60_000
const BUCKETS = 12

/** Samples of each workspace's last seq, kept across visits of the overview. */
const samples = new Map<string, [number, number][]>()

function record(list: WorkspaceInfo[], now: number) {
  for (const w of list) {
    let s = samples.get(w.workspace)
    if (!s) {
      s = []
      samples.set(w.workspace, s)
    }
    s.push([now, w.lastSeq])
    while (s.length > 2 && (s[0] as [number, number])[0] < now - WINDOW_MS) s.shift()
  }
}

/** Entries/s in BUCKETS slices of the last minute. */
function rates(ws: string, now: number): number[] {
  const out = new Array<number>(BUCKETS).fill(0)
  const s = samples.get(ws) ?? []
  for (let i = 1; i < s.length; i++) {
    const [t0, q0] = s[i - 1] as [number, number]
    const [t1, q1] = s[i] as [number, number]
    const b = Math.floor((t1 - (now - WINDOW_MS)) / (WINDOW_MS / BUCKETS))
    if (b >= 0 && b < BUCKETS && t1 > t0) out[b] = Math.max(out[b] as number, ((q1 - q0) * 1000) / (t1 - t0))
  }
  return out
}

function Spark({ values }: { values: number[] }) {
  const max = Math.max(1, ...values)
  const pts = values.map((v, i) => `${(i * 60) / (values.length - 1)},${14 - (v / max) * 12}`).join(' ')
  return (
    <svg class="spark" width="62" height="16" viewBox="-1 0 62 16" aria-hidden="true">
      <polyline points={pts} />
    </svg>
  )
}

export function Overview({ filter, sort, desc }: { filter: string; sort: Key; desc: boolean }) {
  const [list, setList] = useState<WorkspaceInfo[] | null>(null)
  const [problems, setProblems] = useState<{ file: string; message: string }[]>([])
  const [error, setError] = useState<string | null>(null)
  const [now, setNow] = useState(Date.now())
  const [text, setText] = useState(filter)
  const [counted, setCounted] = useState(false)

  useEffect(() => {
    let stop = false
    let timer = 0
    // The names first (one readdir on the server): a root of many workspaces paints at once,
    // and the figures fill in when the full listing (every log's tail and count) arrives.
    getJson<{ workspaces: string[] }>('/api/workspaces?names=1').then(
      (r) => {
        if (!stop)
          setList(
            (l) =>
              l ??
              r.workspaces.map((workspace) => ({
                workspace,
                entries: Number.NaN,
                bytes: Number.NaN,
                lastSeq: Number.NaN,
                lastTs: 0,
                tornTailBytes: 0,
                locked: false,
              })),
          )
      },
      () => undefined,
    )
    const poll = async () => {
      const t0 = performance.now()
      try {
        const r = await getJson<{
          workspaces: WorkspaceInfo[]
          problems: { file: string; message: string }[]
        }>('/api/workspaces')
        if (stop) return
        const t = Date.now()
        record(r.workspaces, t)
        setList(r.workspaces)
        setCounted(true)
        setProblems(r.problems)
        setNow(t)
        setError(null)
      } catch (err) {
        if (!stop) setError((err as Error).message)
      }
      // A large root is polled less often: at most a third of the time goes to listing it.
      if (!stop) timer = window.setTimeout(poll, Math.max(2000, 3 * (performance.now() - t0)))
    }
    void poll()
    return () => {
      stop = true
      clearTimeout(timer)
    }
  }, [])

  const shown = useMemo(() => {
    if (!list) return []
    const f = text.trim().toLowerCase()
    const out = f ? list.filter((w) => w.workspace.toLowerCase().includes(f)) : list.slice()
    const rate = (w: WorkspaceInfo) => rates(w.workspace, now).at(-1) ?? 0
    const val = (w: WorkspaceInfo) => (sort === 'rate' ? rate(w) : w[sort])
    out.sort((a, b) => {
      const x = val(a)
      const y = val(b)
      const c = x < y ? -1 : x > y ? 1 : 0
      return desc ? -c : c
    })
    return out
  }, [list, text, sort, desc, now])

  const setQuery = (k: Key, d: boolean, f: string) => {
    const q = new URLSearchParams()
    if (f) q.set('filter', f)
    if (k !== 'workspace') q.set('sort', k)
    if (d) q.set('desc', '1')
    history.replaceState(null, '', `#/${q.toString() ? `?${q}` : ''}`)
  }
  const sortBy = (k: Key) => {
    const d = sort === k ? !desc : k !== 'workspace'
    setQuery(k, d, text)
    window.dispatchEvent(new HashChangeEvent('hashchange'))
  }
  const head = (k: Key, label: string, cls: string) => (
    <button type="button" class={`cell sort ${cls}`} data-sort={k} onClick={() => sortBy(k)}>
      {label}
      {sort === k ? (desc ? ' ▾' : ' ▴') : ''}
    </button>
  )
  if (error && !list) return <div class="error">{error}</div>
  if (!list) return <div class="muted">listing the workspaces…</div>
  return (
    <div>
      <div class="toolbar">
        <h1 style={{ margin: 0 }}>Workspaces</h1>
        <input
          type="search"
          placeholder="filter by name"
          value={text}
          aria-label="filter"
          onInput={(e) => {
            const v = (e.currentTarget as HTMLInputElement).value
            setText(v)
            setQuery(sort, desc, v)
          }}
        />
        <span class="muted" data-testid="ws-count">
          {shown.length} of {list.length} workspaces
        </span>
        {counted ? null : <span class="muted">counting entries…</span>}
        {error ? <span class="bad">{error}</span> : null}
      </div>
      <div class="grid">
        <div class="head">
          {head('workspace', 'workspace', 'grow')}
          {head('entries', 'entries', 'num w90')}
          {head('lastSeq', 'last seq', 'num w90')}
          {head('lastTs', 'age', 'num w70')}
          {head('bytes', 'bytes', 'num w90')}
          {head('rate', 'entries/s (1 min)', 'w150')}
          <div class="cell w200">state</div>
        </div>
        <VirtualList
          count={shown.length}
          rowHeight={22}
          height={Math.max(240, window.innerHeight - 150)}
          className="overview"
          row={(i) => {
            const w = shown[i] as WorkspaceInfo
            const r = rates(w.workspace, now)
            return (
              <div class="row" key={w.workspace} data-ws={w.workspace}>
                <div class="cell grow">
                  <a href={`#/ws/${encodeURIComponent(w.workspace)}`}>{w.workspace}</a>
                </div>
                <div class="cell num w90">{counted ? w.entries : '…'}</div>
                <div class="cell num w90">{counted ? w.lastSeq : '…'}</div>
                <div class="cell num w70">{counted ? age(w.lastTs, now) : '…'}</div>
                <div class="cell num w90">{counted ? bytes(w.bytes) : '…'}</div>
                <div class="cell w150">
                  <Spark values={r} /> <span class="muted">{(r.at(-1) ?? 0).toFixed(0)}</span>
                </div>
                <div class="cell w200">
                  {w.locked ? <span class="badge locked">writing</span> : null}
                  {w.poisoned ? (
                    <span class="badge torn" title={w.poisoned.message} data-testid="poisoned">
                      poisoned
                    </span>
                  ) : null}
                  {w.tornTailBytes > 0 ? <span class="badge torn">torn tail</span> : null}
                  {(w.replication ?? []).map((r) => (
                    <span
                      class={`badge ${r.kind === 'push' && r.behind > 0 ? 'locked' : ''}`}
                      key={`${r.kind}.${r.prefix}`}
                      title={`${r.kind} ${r.prefix}: seq ${r.seq}`}
                      data-replication={`${r.kind}.${r.prefix}`}
                    >
                      {r.kind === 'pull'
                        ? `pulled to ${r.seq}`
                        : r.behind > 0
                          ? `push ${r.behind} behind`
                          : 'pushed'}
                    </span>
                  ))}
                </div>
              </div>
            )
          }}
        />
      </div>
      {problems.length > 0 ? (
        <div class="error">
          {problems.length} log{problems.length === 1 ? '' : 's'} could not be listed:{'\n'}
          {problems.map((p) => `${p.message}\n`)}
        </div>
      ) : null}
    </div>
  )
}
