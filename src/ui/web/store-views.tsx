/** A snapshot's (or ws, ws@seq's) files, one file's contents, and the diff of two refs. */
import { useEffect, useState } from 'preact/hooks'
import { bytes, enc, getJson, short } from './data.js'
import { VirtualList } from './virtual.js'

interface TreeResult {
  ref: string
  snapshotId: string | null
  workspace: string
  seq: number
  files: { path: string; blob: string }[]
}

interface BlobResult {
  blob: string
  bytes: number
  binary: boolean
  text: string | null
}

export function TreeView({ refName, path }: { refName: string; path: string | null }) {
  const [tree, setTree] = useState<TreeResult | null>(null)
  const [error, setError] = useState<string | null>(null)
  useEffect(() => {
    setTree(null)
    setError(null)
    getJson<TreeResult>(`/api/tree?ref=${enc(refName)}`).then(setTree, (err: Error) => setError(err.message))
  }, [refName])
  if (error) return <div class="error">{error}</div>
  if (!tree) return <div class="muted">reading the tree…</div>
  const file = path === null ? undefined : tree.files.find((f) => f.path === path)
  return (
    <div>
      <h1>
        <a href={`#/ws/${enc(tree.workspace)}`}>{tree.workspace}</a> / files of{' '}
        <span class="mono">{refName}</span>
      </h1>
      <p class="muted">
        {tree.snapshotId ? `snapshot ${short(tree.snapshotId)}, ` : ''}
        {tree.workspace}@{tree.seq}, {tree.files.length} file{tree.files.length === 1 ? '' : 's'}
        {tree.snapshotId ? (
          <>
            {' '}
            · <a href={`#/diff/${enc(tree.snapshotId)}/${enc(tree.workspace)}`}>diff to the workspace now</a>
          </>
        ) : null}
      </p>
      <div class="split">
        <div class="grid" data-testid="tree">
          <VirtualList
            count={tree.files.length}
            rowHeight={22}
            height={Math.max(200, Math.min(window.innerHeight - 170, tree.files.length * 22 + 2))}
            row={(i) => {
              const f = tree.files[i] as { path: string; blob: string }
              return (
                <div class={`row ${f.path === path ? 'sel' : ''}`} key={f.path}>
                  <div class="cell grow">
                    <a href={`#/tree/${enc(refName)}/${enc(f.path)}`} data-path={f.path}>
                      {f.path}
                    </a>
                  </div>
                </div>
              )
            }}
          />
        </div>
        <div>
          {path !== null && !file ? <div class="error">no file {path} in this tree</div> : null}
          {file ? <BlobView path={file.path} blob={file.blob} /> : <p class="muted">pick a file</p>}
        </div>
      </div>
    </div>
  )
}

function BlobView({ path, blob }: { path: string; blob: string }) {
  const [b, setB] = useState<BlobResult | null>(null)
  const [error, setError] = useState<string | null>(null)
  useEffect(() => {
    setB(null)
    setError(null)
    getJson<BlobResult>(`/api/blob/${enc(blob)}`).then(setB, (err: Error) => setError(err.message))
  }, [blob])
  return (
    <div data-testid="blob">
      <div class="toolbar">
        <b>{path}</b>
        <span class="mono muted">{short(blob)}</span>
        {b ? <span class="muted">{bytes(b.bytes)}</span> : null}
      </div>
      {error ? <div class="error">{error}</div> : null}
      {b && b.text !== null ? <pre data-testid="blob-text">{b.text}</pre> : null}
      {b && b.text === null ? (
        <p data-testid="blob-binary">
          {b.binary ? 'binary' : 'too large to show'}: {b.bytes} bytes
        </p>
      ) : null}
    </div>
  )
}

interface DiffResult {
  added: number
  removed: number
  changed: number
  changes: {
    path: string
    status: 'added' | 'removed' | 'changed'
    binary?: boolean
    tooLarge?: boolean
    insertions?: number
    deletions?: number
    patch?: string
  }[]
}

export function DiffView({ a, b }: { a: string; b: string }) {
  const [d, setD] = useState<DiffResult | null>(null)
  const [error, setError] = useState<string | null>(null)
  useEffect(() => {
    setD(null)
    setError(null)
    getJson<DiffResult>(`/api/diff?a=${enc(a)}&b=${enc(b)}`).then(setD, (err: Error) => setError(err.message))
  }, [a, b])
  if (error) return <div class="error">{error}</div>
  if (!d) return <div class="muted">comparing…</div>
  const letter = { added: 'A', removed: 'D', changed: 'M' } as const
  return (
    <div class="diff">
      <h1>
        diff <a href={`#/tree/${enc(a)}`}>{short(a)}</a> → <a href={`#/tree/${enc(b)}`}>{short(b)}</a>
      </h1>
      <p class="muted" data-testid="diff-summary">
        {d.added} added, {d.removed} removed, {d.changed} changed
      </p>
      {d.changes.map((c) => (
        <div class="file" key={c.path} data-path={c.path}>
          <div class="toolbar">
            <span class="badge">{letter[c.status]}</span>
            <b>{c.path}</b>
            <span class="muted">
              {c.binary
                ? 'binary'
                : c.tooLarge
                  ? 'too large to diff here'
                  : `+${c.insertions ?? 0} −${c.deletions ?? 0}`}
            </span>
          </div>
          {c.patch ? (
            <pre>
              {c.patch.split('\n').map((line, i) => (
                <span
                  key={i}
                  class={
                    line.startsWith('+') && !line.startsWith('+++')
                      ? 'line-add'
                      : line.startsWith('-') && !line.startsWith('---')
                        ? 'line-del'
                        : line.startsWith('@@')
                          ? 'line-hunk'
                          : 'line'
                  }
                >
                  {line || ' '}
                </span>
              ))}
            </pre>
          ) : null}
        </div>
      ))}
    </div>
  )
}
