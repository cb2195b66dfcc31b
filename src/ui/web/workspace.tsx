/**
 * One workspace: its log as a live virtualized table (pages fetched as they come into sight, new
 * entries from the live stream, jump to a seq), and its snapshot, fork and merge graph.
 */
import { useEffect, useMemo, useRef, useState } from 'preact/hooks'
import { type Entry, enc, getJson, type HistoryNode, short, summary, time } from './data.js'
import { VirtualList } from './virtual.js'

const PAGE = 200
/** Pages kept: the tab's memory stays bounded however long the log or the session. */
const MAX_PAGES = 60

interface LogPage {
  workspace: string
  firstSeq: number
  lastSeq: number
  entries: Entry[]
}

export function WorkspaceTabs({ ws, tab }: { ws: string; tab: string }) {
  const link = (t: string, label: string) => (
    <a class={tab === t ? 'on' : ''} href={`#/ws/${enc(ws)}${t === 'log' ? '' : `/${t}`}`}>
      {label}
    </a>
  )
  return (
    <div>
      <h1>
        <a href="#/">workspaces</a> / <span data-testid="ws-name">{ws}</span>
      </h1>
      <div class="tabs">
        {link('log', 'log')}
        {link('history', 'snapshots & history')}
        <a href={`#/tree/${enc(ws)}`}>files now</a>
        {ws.startsWith('lg.') || ws.startsWith('lgh.') ? link('langgraph', 'LangGraph checkpoints') : null}
        {ws.startsWith('oa.') || ws.startsWith('oah.') ? link('agents', 'Agents session') : null}
      </div>
    </div>
  )
}

export function LogView({ ws, seq }: { ws: string; seq: number | null }) {
  const [first, setFirst] = useState(1)
  const [last, setLast] = useState(0)
  const [error, setError] = useState<string | null>(null)
  const [live, setLive] = useState(false)
  const [follow, setFollow] = useState(seq === null)
  const [selected, setSelected] = useState<number | null>(seq)
  const [jump, setJump] = useState<{ index: number; key: number } | null>(null)
  const [, setVersion] = useState(0)
  const pages = useRef(new Map<number, Entry[]>())
  const loading = useRef(new Set<number>())
  const lastRef = useRef(0)
  const firstRef = useRef(1)
  const redraw = useRef(0)
  const bump = () => {
    if (redraw.current) return
    redraw.current = requestAnimationFrame(() => {
      redraw.current = 0
      setVersion((v) => v + 1)
    })
  }

  const keep = (page: number, entries: Entry[]) => {
    const m = pages.current
    m.delete(page)
    m.set(page, entries)
    while (m.size > MAX_PAGES) m.delete(m.keys().next().value as number)
  }
  const pageOf = (s: number) => Math.floor((s - firstRef.current) / PAGE)

  const load = async (page: number) => {
    const have = pages.current.get(page)
    const start = firstRef.current + page * PAGE
    // A page fetched or filled while entries were still arriving may lack some: fetch it again.
    if ((have && have.length >= Math.min(PAGE, lastRef.current - start + 1)) || loading.current.has(page))
      return
    loading.current.add(page)
    try {
      const r = await getJson<LogPage>(`/api/ws/${enc(ws)}/log?from=${start}&limit=${PAGE}`)
      // Live entries may have filled the page further meanwhile: keep the longer.
      if ((pages.current.get(page)?.length ?? 0) < r.entries.length) keep(page, r.entries)
      bump()
    } catch (err) {
      setError((err as Error).message)
    } finally {
      loading.current.delete(page)
    }
  }

  // Open: the tail (or the page of the seq asked for), then the live stream from past the last seq.
  useEffect(() => {
    let source: EventSource | null = null
    let stop = false
    pages.current.clear()
    const open = async () => {
      try {
        const r = await getJson<LogPage>(`/api/ws/${enc(ws)}/log?tail=${PAGE}`)
        if (stop) return
        firstRef.current = r.firstSeq
        lastRef.current = r.lastSeq
        setFirst(r.firstSeq)
        setLast(r.lastSeq)
        const fresh = new Map<number, Entry[]>()
        for (const e of r.entries) {
          const p = pageOf(e.seq)
          const got = fresh.get(p) ?? []
          fresh.set(p, got)
          got.push(e)
        }
        for (const [p, got] of fresh) if ((pages.current.get(p)?.length ?? 0) < got.length) keep(p, got)
        // A tail that starts mid-page leaves that page incomplete: fetch it whole when it is seen.
        const head = r.entries[0]
        if (head && (head.seq - r.firstSeq) % PAGE !== 0) pages.current.delete(pageOf(head.seq))
        if (seq !== null) setJump({ index: Math.max(0, seq - r.firstSeq), key: Date.now() })
        source = new EventSource(`/api/live/${enc(ws)}?from=${r.lastSeq + 1}`)
        source.onopen = () => setLive(true)
        source.onerror = () => setLive(false)
        source.addEventListener('entries', (ev) => {
          const batch = JSON.parse((ev as MessageEvent<string>).data) as Entry[]
          for (const e of batch) {
            if (e.seq <= lastRef.current) continue
            lastRef.current = e.seq
            const p = pageOf(e.seq)
            const got = pages.current.get(p)
            if (got && got.length === e.seq - (firstRef.current + p * PAGE)) got.push(e)
            else if (!got && (e.seq - firstRef.current) % PAGE === 0) keep(p, [e])
          }
          setLast(lastRef.current)
          bump()
        })
      } catch (err) {
        if (!stop) setError((err as Error).message)
      }
    }
    void open()
    return () => {
      stop = true
      source?.close()
    }
  }, [ws])

  useEffect(() => {
    if (seq !== null && lastRef.current > 0) {
      setFollow(false)
      setSelected(seq)
      setJump({ index: Math.max(0, seq - firstRef.current), key: Date.now() })
    }
  }, [seq])

  const count = last >= first ? last - first + 1 : 0
  const entryAt = (i: number): Entry | undefined => {
    const s = first + i
    return pages.current.get(pageOf(s))?.[(s - first) % PAGE]
  }
  const pick = (s: number) => {
    setSelected(s)
    history.replaceState(null, '', `#/ws/${enc(ws)}/seq/${s}`)
  }
  const sel = selected === null ? undefined : entryAt(selected - first)
  const [jumpText, setJumpText] = useState('')
  return (
    <div>
      <div class="toolbar">
        <span>
          <span class={`live ${live ? 'on' : ''}`} data-testid="live" />
          {live ? 'live' : 'not live'}
        </span>
        <span class="muted" data-testid="log-range">
          seq {first}–{last} ({count} entries)
        </span>
        <label>
          <input
            type="checkbox"
            checked={follow}
            onChange={(e) => setFollow((e.currentTarget as HTMLInputElement).checked)}
          />{' '}
          follow new entries
        </label>
        <form
          onSubmit={(e) => {
            e.preventDefault()
            const n = Number(jumpText)
            if (Number.isSafeInteger(n) && n >= 1) location.hash = `#/ws/${enc(ws)}/seq/${n}`
          }}
        >
          <input
            type="text"
            inputMode="numeric"
            placeholder="jump to seq"
            aria-label="jump to seq"
            value={jumpText}
            onInput={(e) => setJumpText((e.currentTarget as HTMLInputElement).value)}
          />{' '}
          <button type="submit">go</button> <a href={`#/ws/${enc(ws)}/seq/${last}`}>last</a>
        </form>
        {error ? <span class="bad">{error}</span> : null}
      </div>
      <div class="grid">
        <div class="head">
          <div class="cell num w90">seq</div>
          <div class="cell w200">time (UTC)</div>
          <div class="cell w80">op</div>
          <div class="cell grow">what</div>
        </div>
        <VirtualList
          count={count}
          rowHeight={22}
          height={Math.max(200, window.innerHeight - (sel ? 330 : 190))}
          follow={follow}
          scrollTo={jump}
          className="log"
          onRange={(a, b) => {
            for (let p = pageOf(first + a); p <= pageOf(first + Math.max(a, b)); p++) void load(p)
          }}
          onScrollUp={() => setFollow(false)}
          row={(i) => {
            const s = first + i
            const e = entryAt(i)
            return (
              // biome-ignore lint/a11y/useSemanticElements: a virtualized row of block cells, not a table's
              <div
                class={`row ${selected === s ? 'sel' : ''}`}
                key={s}
                data-seq={s}
                role="button"
                tabIndex={-1}
                onClick={() => pick(s)}
                onKeyDown={(e) => {
                  if (e.key === 'Enter') pick(s)
                }}
              >
                <div class="cell num w90">{s}</div>
                <div class="cell w200">{e ? time(e.ts) : ''}</div>
                <div class="cell w80">{e?.op ?? '…'}</div>
                <div class="cell grow">{e ? summary(e) : ''}</div>
              </div>
            )
          }}
        />
      </div>
      {sel ? <EntryDetail ws={ws} e={sel} /> : null}
    </div>
  )
}

function EntryDetail({ ws, e }: { ws: string; e: Entry }) {
  return (
    <div class="card" data-testid="entry-detail" style={{ marginTop: '8px' }}>
      <div class="toolbar">
        <b>seq {e.seq}</b>
        <a href={`#/tree/${enc(`${ws}@${e.seq}`)}`}>files after this entry</a>
        {e.op === 'write' && e.blob && e.path ? (
          <a href={`#/tree/${enc(`${ws}@${e.seq}`)}/${enc(e.path)}`}>this file</a>
        ) : null}
        {e.op === 'snapshot' && e.snapshot_id ? (
          <a href={`#/tree/${enc(e.snapshot_id)}`}>snapshot {short(e.snapshot_id)}</a>
        ) : null}
        {e.op === 'merge' && e.from_snapshot ? (
          <a href={`#/tree/${enc(e.from_snapshot)}`}>merged {short(e.from_snapshot)}</a>
        ) : null}
      </div>
      <pre>{JSON.stringify(e, null, 2)}</pre>
    </div>
  )
}

const LANE = 18
const ROW = 30

/**
 * The history as a graph, newest first: one lane per workspace, a dot per snapshot, a line to
 * its previous snapshot and a dashed one to each merged source, as `git log --graph` draws.
 */
export function HistoryView({ ws }: { ws: string }) {
  const [nodes, setNodes] = useState<HistoryNode[] | null>(null)
  const [error, setError] = useState<string | null>(null)
  const [a, setA] = useState<string | null>(null)
  useEffect(() => {
    setNodes(null)
    getJson<HistoryNode[]>(`/api/ws/${enc(ws)}/history`).then(setNodes, (err: Error) => setError(err.message))
  }, [ws])
  const layout = useMemo(() => {
    if (!nodes) return null
    const list = nodes.slice().reverse()
    const lanes: string[] = []
    const row = new Map<string, number>()
    for (const [i, n] of list.entries()) row.set(n.snapshotId, i)
    const laneOf = (w: string) => {
      let i = lanes.indexOf(w)
      if (i < 0) i = lanes.push(w) - 1
      return i
    }
    laneOf(ws)
    const pos = list.map((n) => laneOf(n.workspace))
    return { list, row, pos, lanes }
  }, [nodes])
  if (error) return <div class="error">{error}</div>
  if (!layout) return <div class="muted">reading the history…</div>
  const { list, row, pos, lanes } = layout
  const width = lanes.length * LANE + 10
  return (
    <div>
      <p class="muted">
        {list.length} snapshots over {lanes.length} workspace{lanes.length === 1 ? '' : 's'}, newest first.
        Click an id for its files; pick A, then B, for a diff.
      </p>
      <div class="graph" style={{ display: 'flex' }}>
        <svg width={width} height={list.length * ROW} aria-hidden="true">
          {list.map((n, i) =>
            n.parents.map((p, k) => {
              const j = row.get(p)
              if (j === undefined) return null
              const x1 = (pos[i] as number) * LANE + 10
              const x2 = (pos[j] as number) * LANE + 10
              const y1 = i * ROW + ROW / 2
              const y2 = j * ROW + ROW / 2
              return (
                <path
                  key={`${n.snapshotId}-${p}`}
                  class={k === 0 ? 'edge' : 'merge-edge'}
                  d={`M${x1},${y1} C${x1},${y1 + ROW / 2} ${x2},${y2 - ROW / 2} ${x2},${y2}`}
                />
              )
            }),
          )}
          {list.map((n, i) => (
            <circle
              key={n.snapshotId}
              cx={(pos[i] as number) * LANE + 10}
              cy={i * ROW + ROW / 2}
              r={n.kind === 'merge' ? 6 : 5}
              fill={n.kind === 'merge' ? '#c27c2c' : n.kind === 'fork' ? '#2e7d32' : '#2f6fb3'}
            />
          ))}
        </svg>
        <div style={{ flex: 1 }}>
          {list.map((n) => (
            <div class="graph-row mono" key={n.snapshotId} data-snapshot={n.snapshotId}>
              <a href={`#/tree/${enc(n.snapshotId)}`}>{short(n.snapshotId)}</a>
              <span class="badge">{n.kind}</span>
              <span>
                {n.workspace}@{n.seq}
              </span>
              <span class="muted">{time(n.ts)}</span>
              {n.pruned ? <span class="badge">pruned</span> : null}
              {n.conflicts.length > 0 ? (
                <span class="badge conflict">
                  {n.conflicts.length} conflict{n.conflicts.length === 1 ? '' : 's'}
                </span>
              ) : null}
              <span>{n.message}</span>
              {n.parents[0] ? (
                <a href={`#/diff/${enc(n.parents[0])}/${enc(n.snapshotId)}`}>diff to parent</a>
              ) : null}
              <button
                type="button"
                onClick={() => {
                  if (a === null) setA(n.snapshotId)
                  else {
                    location.hash = `#/diff/${enc(a)}/${enc(n.snapshotId)}`
                    setA(null)
                  }
                }}
              >
                {a === null ? 'A' : a === n.snapshotId ? 'A ✓' : 'B'}
              </button>
            </div>
          ))}
        </div>
      </div>
    </div>
  )
}
