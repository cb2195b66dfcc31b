/**
 * `noa ui`: a read-only web view of a root, served by Node's http module. Every route needs the
 * token (auth.ts), the live stream included; only GET (and HEAD) are answered, and no route
 * writes to the root. The page is the bundle `npm run build` makes (src/ui/web → dist/src/ui/web):
 * no CDN, nothing fetched at run time, a Content-Security-Policy that allows no inline script,
 * no eval and no other origin.
 */
import { existsSync, readFileSync } from 'node:fs'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { isIP } from 'node:net'
import { fileURLToPath } from 'node:url'
import type { Entry } from '../engine/entry.js'
import { checkWorkspace } from '../engine/entry.js'
import { Errors, isNoaError } from '../engine/errors.js'
import { existingLog } from '../engine/logs.js'
import { checkWatchOptions, followLog, type WatchOptions } from '../engine/watch.js'
import { type AgentDirs, agentDirsOf, UiApi } from './api.js'
import { cookieName, makeToken, tokenMatches, tokenOf, type UiToken } from './auth.js'
import { streamEntries } from './live.js'

export const DEFAULT_UI_PORT = 7412

export interface UiOptions {
  root: string
  /** TCP port (0: any free one). Default 7412. */
  port?: number
  /** Address to listen on. Default 127.0.0.1; any other than loopback needs `tokenFile`. */
  listen?: string
  /** A file whose first line is the token (≥ 16 characters, mode 0600), instead of a random one. */
  tokenFile?: string
  /** Where the agent files are (default: transcripts/, memory/, context/ in the root). */
  dirs?: AgentDirs
  /**
   * The live tail (default: the library's follower of the log file, which is what
   * `AgentLog.watch` does for a workspace another process writes). `noa serve --ui` passes its
   * AgentLog's own watch, which also wakes at each of its commits.
   */
  watch?: (workspace: string, options: WatchOptions) => AsyncIterable<Entry>
  /**
   * The workspaces a writer in this process refuses since an fdatasync of theirs failed (only
   * the writing process knows it): `noa serve --ui` passes its AgentLog's, from `status()`.
   */
  poisoned?: () => Promise<{ workspace: string; code: string; message: string }[]>
}

/** Where the built page is: dist/src/ui/web (also from the CLI's bundle in dist/src/cli). */
const WEB = new URL('../ui/web/index.html', import.meta.url)

const ASSETS: Record<string, { file: string; type: string }> = {
  '/': { file: 'index.html', type: 'text/html; charset=utf-8' },
  '/app.js': { file: 'app.js', type: 'text/javascript; charset=utf-8' },
  '/app.css': { file: 'app.css', type: 'text/css; charset=utf-8' },
}

export const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
  "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

const SECURITY_HEADERS = {
  'content-security-policy': CSP,
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-resource-policy': 'same-origin',
  'cache-control': 'no-store',
}

/** JSON for what the readers return: Go-sized integers as numbers, Maps as objects. */
function plain(_key: string, v: unknown): unknown {
  if (typeof v === 'bigint') return Number(v)
  if (v instanceof Map) return Object.fromEntries(v)
  return v
}

/** The host name of a Host header, without its port or IPv6 brackets ('' when there is none). */
export function hostName(header: string | undefined): string {
  if (header === undefined) return ''
  if (header.startsWith('[')) {
    const end = header.indexOf(']')
    return end < 0 ? '' : header.slice(1, end)
  }
  const colon = header.lastIndexOf(':')
  return (colon < 0 ? header : header.slice(0, colon)).toLowerCase()
}

export function isLoopback(host: string): boolean {
  if (host === 'localhost' || host === '::1') return true
  return isIP(host) === 4 && host.startsWith('127.')
}

export class UiServer {
  readonly api: UiApi
  private readonly assets = new Map<string, Buffer>()
  private readonly streams = new Set<AbortController>()

  private constructor(
    readonly root: string,
    private readonly server: Server,
    private readonly token: UiToken,
    readonly host: string,
    public port: number,
    dirs: AgentDirs,
    private readonly watch: NonNullable<UiOptions['watch']>,
    poisoned: UiOptions['poisoned'],
  ) {
    this.api = new UiApi(root, dirs, poisoned)
    for (const { file } of Object.values(ASSETS)) {
      this.assets.set(file, readFileSync(fileURLToPath(new URL(file, WEB))))
    }
  }

  /** The URL to open: with the token when this process made it (print it once). */
  get url(): string {
    const host = this.host.includes(':') ? `[${this.host}]` : this.host
    const base = `http://${host}:${this.port}/`
    return this.token.shown === null ? base : `${base}?token=${this.token.shown}`
  }

  static async start(options: UiOptions): Promise<UiServer> {
    const host = options.listen ?? '127.0.0.1'
    if (host !== 'localhost' && isIP(host) === 0) {
      throw Errors.BAD_OPTION(`--listen: ${JSON.stringify(host)} is not an IP address or localhost`, {
        field: 'listen',
      })
    }
    if (!isLoopback(host) && options.tokenFile === undefined) {
      throw Errors.BAD_OPTION(
        `listening on ${host} (not loopback) needs a token: --token-file FILE (a secret of at least 16 characters, mode 0600)`,
        { field: 'tokenFile' },
      )
    }
    const port = options.port ?? DEFAULT_UI_PORT
    if (!Number.isSafeInteger(port) || port < 0 || port > 65535) {
      throw Errors.BAD_OPTION(`--port must be 0 to 65535, got ${port}`, { field: 'port' })
    }
    if (!existsSync(WEB)) {
      throw Errors.NOT_FOUND(`the UI's page is not built (${fileURLToPath(WEB)}): run npm run build`, {
        file: fileURLToPath(WEB),
      })
    }
    const token = makeToken(options.tokenFile)
    const root = options.root
    const watch =
      options.watch ??
      ((ws: string, o: WatchOptions) => {
        checkWatchOptions(o)
        // No commit of ours to wait for: the file (inotify, else a poll) says when it grew.
        return followLog(existingLog(root, ws), ws, o, {
          nextCommit: () => new Promise<void>(() => {}),
          limit: () => Number.POSITIVE_INFINITY,
        })
      })
    const server = createServer()
    const ui = new UiServer(
      root,
      server,
      token,
      host,
      port,
      options.dirs ?? agentDirsOf(root),
      watch,
      options.poisoned,
    )
    server.on('request', (req, res) => {
      ui.handle(req, res).catch((err: unknown) => ui.fail(res, err))
    })
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(port, host, () => {
        server.off('error', reject)
        resolve()
      })
    })
    const address = server.address()
    if (address && typeof address === 'object') ui.port = address.port
    return ui
  }

  /** Stops listening and ends every live stream. */
  close(): Promise<void> {
    for (const s of this.streams) s.abort()
    return new Promise((resolve) => {
      this.server.close(() => resolve())
      this.server.closeAllConnections()
    })
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { ...SECURITY_HEADERS, allow: 'GET, HEAD', 'content-type': 'text/plain' })
      res.end('noa ui is read-only: only GET\n')
      return
    }
    if (isLoopback(this.host) && !isLoopback(hostName(req.headers.host))) {
      // Listening on loopback, a request must name a loopback host: a page whose own name was
      // made to resolve to 127.0.0.1 (DNS rebinding) gets nothing, even before the token.
      res.writeHead(421, { ...SECURITY_HEADERS, 'content-type': 'text/plain; charset=utf-8' })
      res.end('noa ui listens on loopback: the Host of a request must be localhost, 127.0.0.1 or [::1]\n')
      return
    }
    const url = new URL(req.url ?? '/', 'http://ui.invalid')
    if (!tokenMatches(this.token, tokenOf(req, url, this.port))) {
      res.writeHead(401, { ...SECURITY_HEADERS, 'content-type': 'text/plain; charset=utf-8' })
      res.end('noa ui: this needs the token: open the URL noa ui printed (…/?token=…)\n')
      return
    }
    const path = url.pathname
    if (path === '/' && url.searchParams.has('token')) {
      // The token goes into a cookie and out of the address bar (and of the history).
      res.writeHead(303, {
        ...SECURITY_HEADERS,
        'set-cookie': `${cookieName(this.port)}=${encodeURIComponent(url.searchParams.get('token') as string)}; HttpOnly; SameSite=Strict; Path=/`,
        location: '/',
      })
      res.end()
      return
    }
    if (path === '/favicon.ico') {
      res.writeHead(204, SECURITY_HEADERS)
      res.end()
      return
    }
    const asset = ASSETS[path === '/index.html' ? '/' : path]
    if (asset) {
      res.writeHead(200, { ...SECURITY_HEADERS, 'content-type': asset.type })
      res.end(this.assets.get(asset.file))
      return
    }
    if (path.startsWith('/api/live/')) {
      await this.live(req, res, decodeURIComponent(path.slice('/api/live/'.length)), url.searchParams)
      return
    }
    if (path.startsWith('/api/')) {
      const result = await this.route(path.slice('/api/'.length).split('/').map(decodeURIComponent), url)
      if (result === undefined) {
        this.send(res, 404, { error: { code: 'NOA_NOT_FOUND', message: `no route ${path}` } })
        return
      }
      this.send(res, 200, result)
      return
    }
    this.send(res, 404, { error: { code: 'NOA_NOT_FOUND', message: `no route ${path}` } })
  }

  private route(parts: string[], url: URL): Promise<unknown> | unknown {
    const q = url.searchParams
    const [a, b, c] = parts
    const need = (name: string) => {
      const v = q.get(name)
      if (v === null) throw Errors.BAD_ARGUMENT(`${name} is required`, { field: name })
      return v
    }
    switch (a) {
      case 'info':
        return { root: this.root, dirs: this.api.dirs }
      case 'workspaces':
        return q.get('names') === '1' ? this.api.workspaceNames() : this.api.workspaces()
      case 'ws':
        if (b === undefined) return undefined
        if (c === 'log') return this.api.log(b, q)
        if (c === 'snapshots') return this.api.snapshots(b)
        if (c === 'history') return this.api.history(b)
        if (c === 'langgraph') return this.api.langgraph(b)
        if (c === 'agents') return this.api.agents(b)
        return undefined
      case 'tree':
        return this.api.tree(need('ref'))
      case 'blob':
        return b === undefined ? undefined : this.api.blob(b)
      case 'diff':
        return this.api.diff(need('a'), need('b'))
      case 'transcripts':
        return b === undefined ? this.api.transcripts() : this.api.transcript(b)
      case 'memory':
        return this.api.memory()
      case 'context':
        return b === undefined ? this.api.contexts() : this.api.context(b)
      default:
        return undefined
    }
  }

  /** Server-Sent Events: each batch of entries as they commit, from `from` on. */
  private async live(req: IncomingMessage, res: ServerResponse, ws: string, q: URLSearchParams) {
    const workspace = checkWorkspace(ws)
    const raw = q.get('from') ?? '1'
    const from = Number(raw)
    if (!/^\d+$/.test(raw) || !Number.isSafeInteger(from) || from < 1) {
      throw Errors.BAD_ARGUMENT(`from must be an integer >= 1, got ${JSON.stringify(raw)}`, { field: 'from' })
    }
    existingLog(this.root, workspace) // a missing workspace is a 404 now, not a silent stream
    const stop = new AbortController()
    this.streams.add(stop)
    req.on('close', () => stop.abort())
    res.on('close', () => stop.abort())
    try {
      await streamEntries(res, this.watch(workspace, { fromSeq: from, signal: stop.signal }), stop.signal, {
        ...SECURITY_HEADERS,
      })
    } finally {
      this.streams.delete(stop)
      res.end()
    }
  }

  private send(res: ServerResponse, status: number, value: unknown): void {
    const body = JSON.stringify(value, plain)
    res.writeHead(status, { ...SECURITY_HEADERS, 'content-type': 'application/json; charset=utf-8' })
    res.end(body)
  }

  private fail(res: ServerResponse, err: unknown): void {
    if (res.headersSent) {
      res.destroy()
      return
    }
    const code = isNoaError(err)
      ? err.code
      : err instanceof URIError
        ? 'NOA_BAD_ARGUMENT'
        : ((err as NodeJS.ErrnoException)?.code ?? 'ERROR')
    const status =
      code === 'NOA_NOT_FOUND' || code === 'ENOENT'
        ? 404
        : code.startsWith('NOA_BAD_') || code === 'NOA_NAME_TOO_LONG'
          ? 400
          : 500
    const message = err instanceof Error ? err.message : String(err)
    this.send(res, status, { error: { code, message } })
  }
}
