/**
 * noa ui's page: a hash router over the views, so every view has a URL to share:
 *   #/                         the workspaces (?filter=&sort=&desc=1)
 *   #/ws/<ws>                  its log, live       #/ws/<ws>/seq/<n>   the log at seq n
 *   #/ws/<ws>/history          snapshots, forks and merges as a graph
 *   #/ws/<ws>/langgraph        a LangGraph thread's checkpoints    #/ws/<ws>/agents  an Agents session
 *   #/tree/<ref>[/<path>]      a snapshot's (ws's, ws@seq's) files, and one file
 *   #/diff/<a>/<b>             the diff of two refs
 *   #/agents, #/transcript/<id>, #/memory, #/context/<id>   the agent files
 */
import { render } from 'preact'
import { useEffect, useState } from 'preact/hooks'
import {
  AgentsView,
  ContextView,
  LangGraphView,
  MemoryView,
  TranscriptList,
  TranscriptView,
} from './agent-views.js'
import { getJson } from './data.js'
import { Overview } from './overview.js'
import { DiffView, TreeView } from './store-views.js'
import { HistoryView, LogView, WorkspaceTabs } from './workspace.js'

function useHash(): string {
  const [hash, setHash] = useState(location.hash)
  useEffect(() => {
    const on = () => setHash(location.hash)
    window.addEventListener('hashchange', on)
    return () => window.removeEventListener('hashchange', on)
  }, [])
  return hash
}

function Route({ hash }: { hash: string }) {
  const [path, query = ''] = hash.replace(/^#/, '').split('?') as [string, string?]
  const q = new URLSearchParams(query)
  const parts = path
    .split('/')
    .filter((p) => p !== '')
    .map(decodeURIComponent)
  const [a, b, c, d] = parts
  if (a === 'ws' && b !== undefined) {
    const tab = c === 'seq' || c === undefined ? 'log' : c
    return (
      <div>
        <WorkspaceTabs ws={b} tab={tab} />
        {tab === 'log' ? <LogView key={b} ws={b} seq={c === 'seq' && d ? Number(d) : null} /> : null}
        {tab === 'history' ? <HistoryView ws={b} /> : null}
        {tab === 'langgraph' ? <LangGraphView ws={b} /> : null}
        {tab === 'agents' ? <AgentsView ws={b} /> : null}
      </div>
    )
  }
  if (a === 'tree' && b !== undefined) return <TreeView refName={b} path={c ?? null} />
  if (a === 'diff' && b !== undefined && c !== undefined) return <DiffView a={b} b={c} />
  if (a === 'agents') return <TranscriptList />
  if (a === 'transcript' && b !== undefined) return <TranscriptView id={b} />
  if (a === 'memory') return <MemoryView />
  if (a === 'context' && b !== undefined) return <ContextView id={b} />
  const sort = q.get('sort')
  const keys = ['workspace', 'entries', 'lastSeq', 'lastTs', 'bytes', 'rate'] as const
  return (
    <Overview
      filter={q.get('filter') ?? ''}
      sort={keys.find((k) => k === sort) ?? 'workspace'}
      desc={q.get('desc') === '1'}
    />
  )
}

function App() {
  const hash = useHash()
  const [root, setRoot] = useState('')
  useEffect(() => {
    getJson<{ root: string }>('/api/info').then(
      (i) => setRoot(i.root),
      () => undefined,
    )
  }, [])
  return (
    <div>
      <header class="top">
        <span class="brand">noa</span>
        <nav>
          <a href="#/">workspaces</a>
          <a href="#/agents">agent files</a>
        </nav>
        <span class="root">{root}</span>
      </header>
      <main>
        <Route hash={hash} />
      </main>
    </div>
  )
}

render(<App />, document.getElementById('app') as HTMLElement)
