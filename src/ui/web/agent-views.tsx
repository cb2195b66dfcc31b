/**
 * The agent files: a transcript as a conversation (tool calls and results, thinking folded,
 * sidechains, usage), memory notes with MEMORY.md, the context state's tiers, a LangGraph
 * thread's checkpoints and an Agents session's items. Everything is shown as text.
 */
import type { ComponentChildren } from 'preact'
import { useEffect, useState } from 'preact/hooks'
import { enc, getJson, time } from './data.js'

function useJson<T>(path: string): [T | null, string | null] {
  const [v, setV] = useState<T | null>(null)
  const [error, setError] = useState<string | null>(null)
  useEffect(() => {
    setV(null)
    setError(null)
    getJson<T>(path).then(setV, (err: Error) => setError(err.message))
  }, [path])
  return [v, error]
}

function Loading({ error, what }: { error: string | null; what: string }) {
  return error ? <div class="error">{error}</div> : <div class="muted">reading {what}…</div>
}

interface Block {
  type: string
  text?: string
  thinking?: string
  name?: string
  id?: string
  input?: string
  tool_use_id?: string
  content?: Block[] | null
  is_error?: boolean
}

interface TRecord {
  uuid: string
  type: string
  timestamp: string
  message?: { role: string; content: Block[] | null }
  usage?: Record<string, number>
  boundary?: unknown
}

function BlockView({ b }: { b: Block }): ComponentChildren {
  switch (b.type) {
    case 'text':
      return <div class="text">{b.text ?? ''}</div>
    case 'thinking':
      return (
        <details class="thinking">
          <summary>thinking</summary>
          <div class="text">{b.thinking ?? ''}</div>
        </details>
      )
    case 'tool_use':
      return (
        <div class="tool" data-testid="tool-use">
          <b>tool call {b.name}</b> <span class="muted mono">{b.id}</span>
          <pre>{b.input ?? ''}</pre>
        </div>
      )
    case 'tool_result':
      return (
        <div class="tool" data-testid="tool-result">
          <b>tool result{b.is_error ? ' (error)' : ''}</b> <span class="muted mono">{b.tool_use_id}</span>
          {(b.content ?? []).map((c, i) =>
            c.type === 'text' ? <pre key={i}>{c.text ?? ''}</pre> : <BlockView key={i} b={c} />,
          )}
        </div>
      )
    default:
      return <pre>{JSON.stringify(b, null, 2)}</pre>
  }
}

function Conversation({ records }: { records: TRecord[] }) {
  return (
    <div class="conv">
      {records.map((r) =>
        r.message ? (
          <div class={`msg ${r.message.role}`} key={r.uuid} data-testid="message">
            <div class="role">
              {r.message.role} <span class="muted">{r.timestamp}</span>
              {r.usage ? (
                <span class="muted">
                  {' '}
                  ·{' '}
                  {Object.entries(r.usage)
                    .filter(([, v]) => v)
                    .map(([k, v]) => `${k} ${v}`)
                    .join(', ')}
                </span>
              ) : null}
            </div>
            {(r.message.content ?? []).map((b, i) => (
              <BlockView key={i} b={b} />
            ))}
          </div>
        ) : (
          <div class="card muted" key={r.uuid}>
            {r.type} record {r.timestamp}
          </div>
        ),
      )}
    </div>
  )
}

export function TranscriptList() {
  const [t, error] = useJson<{ dir: string; sessions: string[] }>('/api/transcripts')
  const [m] = useJson<{ notes: unknown[] }>('/api/memory')
  const [c] = useJson<{ sessions: string[] }>('/api/context')
  if (!t) return <Loading error={error} what="the transcripts" />
  return (
    <div>
      <h1>Agent files</h1>
      <h2>Transcripts</h2>
      <p class="muted mono">{t.dir}</p>
      {t.sessions.length === 0 ? <p class="muted">none</p> : null}
      <ul>
        {t.sessions.map((s) => (
          <li key={s}>
            <a href={`#/transcript/${enc(s)}`}>{s}</a>
          </li>
        ))}
      </ul>
      <h2>Memory</h2>
      <p>
        <a href="#/memory">{m ? `${m.notes.length} notes` : 'notes'} and MEMORY.md</a>
      </p>
      <h2>Context</h2>
      <ul>
        {(c?.sessions ?? []).map((s) => (
          <li key={s}>
            <a href={`#/context/${enc(s)}`}>{s}</a>
          </li>
        ))}
      </ul>
    </div>
  )
}

export function TranscriptView({ id }: { id: string }) {
  const [t, error] = useJson<{
    sessionId: string
    file: string
    records: TRecord[]
    totalRecords?: number
    messages: number
    usage: Record<string, number>
    tornTail: boolean
    sidechains: { agentId: string; records: TRecord[]; error?: { code: string; message: string } }[]
  }>(`/api/transcripts/${enc(id)}`)
  if (!t) return <Loading error={error} what="the transcript" />
  return (
    <div>
      <h1>
        <a href="#/agents">agent files</a> / transcript <span data-testid="session">{t.sessionId}</span>
      </h1>
      <p class="muted">
        {t.totalRecords ?? t.records.length} records
        {t.totalRecords !== undefined && t.totalRecords > t.records.length
          ? ` (the newest ${t.records.length} shown)`
          : ''}
        , {t.messages} messages · usage{' '}
        {Object.entries(t.usage)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ')}
        {t.tornTail ? ' · a torn last line' : ''}
      </p>
      <Conversation records={t.records} />
      {t.sidechains.map((s) => (
        <details key={s.agentId} class="card">
          <summary>
            sidechain agent {s.agentId} (
            {s.error ? `unreadable: ${s.error.code}` : `${s.records.length} records`})
          </summary>
          {s.error ? <p class="error">{s.error.message}</p> : <Conversation records={s.records} />}
        </details>
      ))}
    </div>
  )
}

export function MemoryView() {
  const [m, error] = useJson<{
    dir: string
    index: string
    notes: { name: string; description: string; type: string; file: string; content: string }[]
  }>('/api/memory')
  if (!m) return <Loading error={error} what="the memory notes" />
  return (
    <div>
      <h1>
        <a href="#/agents">agent files</a> / memory
      </h1>
      <p class="muted mono">{m.dir}</p>
      <h2>MEMORY.md</h2>
      <pre data-testid="memory-index">{m.index}</pre>
      <h2>{m.notes.length} notes</h2>
      {m.notes.map((n) => (
        <div class="card" key={n.file} data-testid="note">
          <div>
            <b>{n.name}</b> <span class="badge">{n.type}</span> <span class="muted">{n.file}</span>
          </div>
          <div class="muted">{n.description}</div>
          <pre>{n.content}</pre>
        </div>
      ))}
    </div>
  )
}

interface ContextBlock {
  blockId: string
  tier: number
  topic: string
  summary: string
  startRef: string
  endRef: string
  compressedTokens: number
  archiveRel?: string
  active: boolean
}

export function ContextView({ id }: { id: string }) {
  const [c, error] = useJson<{
    sessionId: string
    file: string
    exists: boolean
    error: string | null
    state: { blocks?: ContextBlock[]; [k: string]: unknown }
  }>(`/api/context/${enc(id)}`)
  if (!c) return <Loading error={error} what="the context state" />
  const blocks = c.state.blocks ?? []
  const tiers = [...new Set(blocks.map((b) => b.tier))].sort()
  return (
    <div>
      <h1>
        <a href="#/agents">agent files</a> / context of {c.sessionId}
      </h1>
      <p class="muted mono">{c.file}</p>
      {c.error ? <div class="error">{c.error}</div> : null}
      {!c.exists ? <p class="muted">no state.json: the initial state</p> : null}
      {tiers.map((t) => (
        <div key={t}>
          <h2>tier {t}</h2>
          {blocks
            .filter((b) => b.tier === t)
            .map((b) => (
              <div class="card" key={b.blockId} data-testid="context-block">
                <div>
                  <b>{b.blockId}</b> {b.startRef}–{b.endRef} · {b.compressedTokens} tokens{' '}
                  {b.active ? <span class="badge">active</span> : <span class="badge">absorbed</span>}{' '}
                  <span class="muted">{b.archiveRel}</span>
                </div>
                {b.topic ? <div class="muted">{b.topic}</div> : null}
                <div class="text">{b.summary}</div>
              </div>
            ))}
        </div>
      ))}
      <details>
        <summary>state.json</summary>
        <pre>{JSON.stringify(c.state, null, 2)}</pre>
      </details>
    </div>
  )
}

export function LangGraphView({ ws }: { ws: string }) {
  const [g, error] = useJson<{
    total: number
    checkpoints: {
      seq: number
      ts: number
      ns: string
      id: string
      record: { parent_checkpoint_id?: string; metadata: unknown; channels: Record<string, unknown> }
    }[]
  }>(`/api/ws/${enc(ws)}/langgraph`)
  if (!g) return <Loading error={error} what="the checkpoints" />
  return (
    <div>
      <p class="muted">
        {g.total} checkpoints{g.total > g.checkpoints.length ? ` (the newest ${g.checkpoints.length})` : ''},
        oldest first
      </p>
      {g.checkpoints.map((c) => (
        <div class="card" key={`${c.seq}`} data-testid="checkpoint">
          <div>
            <b class="mono">{c.id}</b> {c.ns ? <span class="badge">{c.ns}</span> : null}{' '}
            <a href={`#/ws/${enc(ws)}/seq/${c.seq}`}>seq {c.seq}</a> <span class="muted">{time(c.ts)}</span>
            {c.record.parent_checkpoint_id ? (
              <span class="muted"> · parent {c.record.parent_checkpoint_id}</span>
            ) : null}
          </div>
          <details>
            <summary>{Object.keys(c.record.channels).length} channels</summary>
            <pre>{JSON.stringify(c.record.channels, null, 2)}</pre>
          </details>
          <details>
            <summary>metadata</summary>
            <pre>{JSON.stringify(c.record.metadata, null, 2)}</pre>
          </details>
        </div>
      ))}
    </div>
  )
}

export function AgentsView({ ws }: { ws: string }) {
  const [s, error] = useJson<{ total: number; items: { path: string; item: unknown }[] }>(
    `/api/ws/${enc(ws)}/agents`,
  )
  if (!s) return <Loading error={error} what="the session items" />
  return (
    <div>
      <p class="muted">{s.total} items</p>
      {s.items.map((it) => (
        <div class="card" key={it.path} data-testid="item">
          <div class="muted mono">{it.path}</div>
          <pre>{JSON.stringify(it.item, null, 2)}</pre>
        </div>
      ))}
    </div>
  )
}
