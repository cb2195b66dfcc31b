/**
 * noa ui's server without a browser: every route, the live stream included, answers 401
 * without the token (or with a wrong one); only GET is answered (a POST: 405); the headers
 * forbid inline script and sniffing; names and refs from the request are checked as the CLI
 * checks them, so nothing outside the root is read; the live stream delivers what is appended;
 * a non-loopback address needs a token file; `noa serve --ui` serves the same beside the daemon.
 */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { request as httpRequest } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TranscriptWriter } from '../../dist/src/entries/transcript.js'
import { AgentLog, ObjectStore, SnapshotEngine } from '../../dist/src/index.js'
import { saveCheckpoint } from '../../dist/src/replicate/checkpoint.js'
import { UiServer } from '../../dist/src/ui/server.js'
import { startUi, type UiProcess } from '../helpers/browser.js'
import { runCli, tempDir } from '../helpers/index.js'
import { startDaemon } from '../helpers/serve.js'

/** Reads a Server-Sent Events body until `done` says it has what it waits for. */
async function readEvents(res: Response, done: (text: string) => boolean): Promise<string> {
  const reader = (res.body as ReadableStream<Uint8Array>).getReader()
  const decoder = new TextDecoder()
  let text = ''
  while (!done(text)) {
    const { value, done: end } = await reader.read()
    if (end) break
    text += decoder.decode(value, { stream: true })
  }
  await reader.cancel()
  return text
}

describe('noa ui: the server', () => {
  let root: string
  let ui: UiProcess
  let snapshot: string
  let blob: string
  const auth = () => ({ authorization: `Bearer ${ui.token}` })

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'noa-ui-server-'))
    const store = new ObjectStore(root)
    const log = await AgentLog.open({ root, objects: store })
    blob = await store.putBlob('hello\n')
    await log.append('main', { op: 'write', path: 'a.txt', blob })
    snapshot = (await new SnapshotEngine({ log, store }).snapshot('main', { message: 'one' }))
      .snapshotId as string
    await log.close()
    ui = await startUi(['ui', '--root', root, '--port', '0'])
  })
  afterAll(async () => {
    await ui?.stop()
    rmSync(root, { recursive: true, force: true })
  })

  const ROUTES = () => [
    '/',
    '/index.html',
    '/app.js',
    '/app.css',
    '/api/info',
    '/api/workspaces',
    '/api/ws/main/log',
    '/api/ws/main/snapshots',
    '/api/ws/main/history',
    `/api/tree?ref=${snapshot}`,
    `/api/blob/${blob}`,
    `/api/diff?a=${snapshot}&b=main`,
    '/api/transcripts',
    '/api/memory',
    '/api/context',
    '/api/live/main',
    '/api/nothing',
  ]

  it('every route, the live stream included, answers 401 without the token or with a wrong one', async () => {
    for (const path of ROUTES()) {
      const none = await fetch(`${ui.base}${path}`)
      expect(none.status, path).toBe(401)
      expect(none.headers.get('content-type'), path).not.toContain('event-stream')
      const wrong = await fetch(`${ui.base}${path}`, { headers: { authorization: 'Bearer not-the-token' } })
      expect(wrong.status, path).toBe(401)
      const cookie = await fetch(`${ui.base}${path}`, {
        headers: { cookie: `noa-ui-${new URL(ui.base).port}=nope` },
      })
      expect(cookie.status, path).toBe(401)
    }
    // With it, each is served (the stream is cut once it answered).
    for (const path of ROUTES().filter((p) => p !== '/api/nothing')) {
      const ac = new AbortController()
      const ok = await fetch(`${ui.base}${path}`, { headers: auth(), signal: ac.signal })
      expect(ok.status, path).toBe(200)
      ac.abort()
    }
  })

  it('the printed URL sets an HttpOnly, SameSite cookie and takes the token out of the address', async () => {
    const res = await fetch(ui.url, { redirect: 'manual' })
    expect(res.status).toBe(303)
    expect(res.headers.get('location')).toBe('/')
    const cookie = res.headers.get('set-cookie') ?? ''
    expect(cookie).toContain(`noa-ui-${new URL(ui.base).port}=${ui.token}`)
    expect(cookie).toContain('HttpOnly')
    expect(cookie).toContain('SameSite=Strict')
    const page = await fetch(`${ui.base}/`, { headers: { cookie: cookie.split(';')[0] as string } })
    expect(page.status).toBe(200)
  })

  it('is read-only: POST, PUT, DELETE and PATCH answer 405 and change nothing', async () => {
    const before = runCli(['log', 'main', '--root', root]).stdout
    for (const method of ['POST', 'PUT', 'DELETE', 'PATCH']) {
      const res = await fetch(`${ui.base}/api/ws/main/log`, { method, headers: auth(), body: '{}' })
      expect(res.status, method).toBe(405)
      expect(res.headers.get('allow')).toBe('GET, HEAD')
    }
    expect(runCli(['log', 'main', '--root', root]).stdout).toBe(before)
  })

  it('sends a CSP without inline script or eval, and nosniff', async () => {
    const res = await fetch(`${ui.base}/`, { headers: auth() })
    const csp = res.headers.get('content-security-policy') ?? ''
    expect(csp).toContain("default-src 'none'")
    expect(csp).toContain("script-src 'self'")
    expect(csp).not.toContain('unsafe-inline')
    expect(csp).not.toContain('unsafe-eval')
    expect(res.headers.get('x-content-type-options')).toBe('nosniff')
    const html = await res.text()
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/)
    expect(html).not.toMatch(/https?:\/\//)
  })

  it('checks names and refs as the CLI does: nothing outside the root is read', async () => {
    // What ../outside names from agent-logs/: a file a name must never reach.
    writeFileSync(join(root, 'outside.log'), '{"seq":1,"op":"delete","path":"x","ts":1}\n')
    const cases: [string, number][] = [
      ['/api/ws/..%2Foutside/log', 400],
      ['/api/ws/..%2F..%2Fetc%2Fpasswd/log', 400],
      ['/api/ws/nope/log', 404],
      ['/api/tree?ref=..%2F..%2Fetc', 400],
      ['/api/blob/..%2F..%2Fetc%2Fpasswd', 400],
      ['/api/blob/0000000000000000000000000000000000000000000000000000000000000000', 404],
      ['/api/transcripts/..%2F..%2Fetc%2Fpasswd', 400],
      ['/api/context/..%2F..%2Fetc', 400],
      ['/api/live/..%2Foutside', 400],
      ['/api/ws/main/log?from=-1', 400],
      ['/api/ws/main/log?limit=100000000', 400],
      ['/api/ws/%E0%A4%A/log', 400],
    ]
    for (const [path, status] of cases) {
      const res = await fetch(`${ui.base}${path}`, { headers: auth() })
      expect(res.status, path).toBe(status)
      const body = (await res.json()) as { error: { code: string; message: string } }
      expect(body.error.code, path).toMatch(/^NOA_/)
    }
  })

  it('the listing is noa workspaces --json, again after a log grew (a quiet log is not read again)', async () => {
    const listing = async () =>
      (
        (await (await fetch(`${ui.base}/api/workspaces`, { headers: auth() })).json()) as {
          workspaces: unknown[]
        }
      ).workspaces
    const cli = () =>
      (JSON.parse(runCli(['workspaces', '--root', root, '--json']).stdout) as object[]).map((w) => ({
        ...w,
        locked: false,
      }))
    expect(await listing()).toEqual(cli())
    const log = await AgentLog.open({ root })
    await log.append('main', { op: 'delete', path: 'nothing-here' })
    await log.append('other', { op: 'delete', path: 'x' })
    await log.close()
    expect(await listing()).toEqual(cli())
  })

  it('an agent folder that is a symlink out of the root is refused, not followed', async () => {
    const outside = mkdtempSync(join(tmpdir(), 'noa-ui-outside-'))
    try {
      writeFileSync(
        join(outside, 'secret.md'),
        '---\nname: secret\ndescription: outside the root\ntype: project\n---\nnot for the page\n',
      )
      writeFileSync(join(outside, 's.jsonl'), '')
      symlinkSync(outside, join(root, 'memory'))
      symlinkSync(outside, join(root, 'transcripts'))
      for (const path of ['/api/memory', '/api/transcripts', '/api/transcripts/s']) {
        const res = await fetch(`${ui.base}${path}`, { headers: auth() })
        const text = await res.text()
        expect(res.status, path).not.toBe(200)
        expect(text, path).toContain('NOA_NOT_DIRECTORY')
        expect(text, path).not.toContain('not for the page')
      }
    } finally {
      rmSync(join(root, 'memory'), { force: true })
      rmSync(join(root, 'transcripts'), { force: true })
      rmSync(outside, { recursive: true, force: true })
    }
  })

  it('listening on loopback, a request naming another host answers 421, token or not (DNS rebinding)', async () => {
    const port = Number(new URL(ui.base).port)
    const get = (host: string) =>
      new Promise<number>((resolve, reject) => {
        const req = httpRequest(
          { host: '127.0.0.1', port, path: '/api/info', headers: { ...auth(), host } },
          (res) => {
            res.resume()
            resolve(res.statusCode ?? 0)
          },
        )
        req.on('error', reject)
        req.end()
      })
    expect(await get(`evil.example:${port}`)).toBe(421)
    expect(await get('attacker.test')).toBe(421)
    expect(await get(`127.0.0.1.evil.example:${port}`)).toBe(421)
    expect(await get(`127.0.0.1:${port}`)).toBe(200)
    expect(await get(`localhost:${port}`)).toBe(200)
    expect(await get(`[::1]:${port}`)).toBe(200)
  })

  it('a blob too large to show is named by its size and not read; a diff of large or far-apart texts is bounded', async () => {
    const store = new ObjectStore(root)
    // Over 2 MiB (stored in chunks): the answer gives its size without reading it, so even a
    // damaged chunk does not matter to it.
    const large = await store.putBlob(Buffer.alloc(3 << 20, 'a'))
    const res = await fetch(`${ui.base}/api/blob/${large}`, { headers: auth() })
    expect(res.status).toBe(200)
    expect(await res.json()).toEqual({ blob: large, bytes: 3 << 20, binary: false, text: null })
    const chunk = store.chunksOf(large)?.chunks[0]?.id as string
    writeFileSync(join(root, 'objects', chunk.slice(0, 2), chunk.slice(2)), 'damaged')
    expect((await fetch(`${ui.base}/api/blob/${large}`, { headers: auth() })).status).toBe(200)
    // 30,000 lines on each side, every one different: past the view's edit bound, so the file is
    // listed as too large to diff and the small file beside it still has its patch.
    const lines = (tag: string) =>
      Array.from({ length: 30_000 }, (_, i) => `${tag} line ${i} ${(i * 7919) % 30_011}`).join('\n')
    const [a, b, s1, s2] = await Promise.all([
      store.putBlob(lines('left')),
      store.putBlob(lines('right')),
      store.putBlob('one\n'),
      store.putBlob('two\n'),
    ])
    const log = await AgentLog.open({ root, objects: store })
    await log.append('big', { op: 'write', path: 'f.txt', blob: a })
    await log.append('big', { op: 'write', path: 's.txt', blob: s1 })
    await log.append('big', { op: 'write', path: 'f.txt', blob: b })
    await log.append('big', { op: 'write', path: 's.txt', blob: s2 })
    await log.close()
    const d = await fetch(`${ui.base}/api/diff?a=big@2&b=big@4`, { headers: auth() })
    expect(d.status).toBe(200)
    const body = (await d.json()) as { changes: { path: string; tooLarge?: boolean; patch: string }[] }
    const f = body.changes.find((c) => c.path === 'f.txt')
    expect(f?.tooLarge).toBe(true)
    expect(f?.patch).toContain('not diffed here')
    const small = body.changes.find((c) => c.path === 's.txt')
    expect(small?.tooLarge).toBeUndefined()
    expect(small?.patch).toContain('-one')
    expect(small?.patch).toContain('+two')
  }, 120_000)

  it("a workspace its writer refuses after a failed fdatasync is shown poisoned (the writer's own view, as noa serve --ui has)", async () => {
    const r = mkdtempSync(join(tmpdir(), 'noa-ui-poison-'))
    const log = await AgentLog.open({
      root: r,
      workers: 1,
      durability: 'fdatasync',
      ioModule: new URL('../fixtures/faulty-io.mjs', import.meta.url).href,
      ioOptions: { failSyncAt: 2, code: 'EIO' },
    })
    const view = await UiServer.start({
      root: r,
      port: 0,
      poisoned: async () => (await log.status()).flatMap((s) => s.poisoned),
    })
    try {
      await log.append('w', { op: 'delete', path: 'a' })
      expect(await log.append('w', { op: 'delete', path: 'b' }).catch((e) => e.code)).toBe('EIO')
      await log.append('ok', { op: 'delete', path: 'a' })
      const listing = async () => {
        const res = await fetch(`http://127.0.0.1:${view.port}/api/workspaces`, {
          headers: { authorization: `Bearer ${new URL(view.url).searchParams.get('token')}` },
        })
        return (await res.json()) as { workspaces: { workspace: string; poisoned?: { code: string } }[] }
      }
      const rows = (await listing()).workspaces
      expect(rows.find((w) => w.workspace === 'w')?.poisoned?.code).toBe('NOA_WORKSPACE_POISONED')
      expect(rows.find((w) => w.workspace === 'ok')?.poisoned).toBeUndefined()
      await log.recover('w')
      expect((await listing()).workspaces.find((w) => w.workspace === 'w')?.poisoned).toBeUndefined()
    } finally {
      await view.close()
      await log.close()
      rmSync(r, { recursive: true, force: true })
    }
  })

  it('a sidechain that cannot be read is named with its error; the conversation is still shown', async () => {
    const dir = join(root, 'transcripts')
    const log = await AgentLog.open({ root })
    const w = new TranscriptWriter({ dir, sessionId: 'side', log })
    await w.recordMessage({ role: 'user', content: [{ type: 'text', text: 'hello' }] })
    await w.close()
    await log.close()
    const outside = mkdtempSync(join(tmpdir(), 'noa-ui-outside-'))
    try {
      writeFileSync(join(outside, 'x.jsonl'), '')
      mkdirSync(join(dir, 'side', 'subagents'), { recursive: true })
      symlinkSync(join(outside, 'x.jsonl'), join(dir, 'side', 'subagents', 'agent-x.jsonl'))
      const res = await fetch(`${ui.base}/api/transcripts/side`, { headers: auth() })
      expect(res.status).toBe(200)
      const t = (await res.json()) as {
        records: unknown[]
        sidechains: { agentId: string; records: unknown[]; error?: { code: string } }[]
      }
      expect(t.records.length).toBeGreaterThan(0)
      expect(t.sidechains).toEqual([
        { agentId: 'x', records: [], error: expect.objectContaining({ code: 'NOA_NOT_REGULAR_FILE' }) },
      ])
    } finally {
      rmSync(dir, { recursive: true, force: true })
      rmSync(outside, { recursive: true, force: true })
    }
  })

  it('a workspace a push checkpoint covers says how far behind it the log is', async () => {
    const before = runCli(['log', 'main', '--root', root]).stdout.trim().split('\n')
    const seq = (JSON.parse(before.at(-1) as string) as { seq: number }).seq
    saveCheckpoint(root, {
      version: 1,
      kind: 'push',
      prefix: 'noa',
      stream: 'NOA',
      streamCreated: '2026-12-07T00:00:00Z',
      savedAt: '2026-12-07T00:00:00Z',
      workspaces: { main: { seq: seq - 1, ts: 1, offset: 0, streamSeq: 1 } },
    })
    try {
      const res = await fetch(`${ui.base}/api/workspaces`, { headers: auth() })
      const { workspaces } = (await res.json()) as {
        workspaces: { workspace: string; replication?: { kind: string; seq: number; behind: number }[] }[]
      }
      const main = workspaces.find((w) => w.workspace === 'main')
      expect(main?.replication).toEqual([{ kind: 'push', prefix: 'noa', seq: seq - 1, behind: 1 }])
      expect(workspaces.filter((w) => w.replication !== undefined).map((w) => w.workspace)).toEqual(['main'])
    } finally {
      rmSync(join(root, 'replication'), { recursive: true, force: true })
    }
  })

  it('the live stream delivers each entry as it commits, from the seq asked for', async () => {
    const log = await AgentLog.open({ root })
    await log.append('tail', { op: 'delete', path: 'first' })
    const res = await fetch(`${ui.base}/api/live/tail?from=2`, { headers: auth() })
    expect(res.headers.get('content-type')).toContain('text/event-stream')
    await log.appendMany('tail', [
      { op: 'delete', path: 'a.txt' },
      { op: 'delete', path: 'b.txt' },
    ])
    await log.append('tail', { op: 'delete', path: 'c.txt' })
    await log.close()
    const text = await readEvents(res, (t) => t.includes('"seq":4'))
    const seqs = [...text.matchAll(/^data: (.*)$/gm)].flatMap((m) =>
      (JSON.parse(m[1] as string) as { seq: number }[]).map((e) => e.seq),
    )
    expect(seqs).toEqual([2, 3, 4])
  })

  it('a non-loopback address needs --token-file, as noa serve does', () => {
    const r = runCli(['ui', '--root', root, '--listen', '0.0.0.0', '--port', '0'])
    expect(r.status).toBe(1)
    expect(r.stderr).toContain('needs a token: --token-file FILE')
    const loose = join(root, 'token')
    writeFileSync(loose, 'a-secret-of-more-than-16\n', { mode: 0o644 })
    const r2 = runCli(['ui', '--root', root, '--listen', '0.0.0.0', '--port', '0', '--token-file', loose])
    expect(r2.status).toBe(1)
    expect(r2.stderr).toContain('others can read it')
  })

  it('noa serve --ui: the same view beside the daemon, its live stream fed by the daemon', async () => {
    const served = tempDir('noa-ui-serve-')
    const daemon = await startDaemon(served, ['--ui', '--ui-port', '0'])
    try {
      const url = new URL(String((daemon.info as Record<string, unknown>).ui))
      const base = `${url.protocol}//${url.host}`
      const token = url.searchParams.get('token') as string
      expect((await fetch(`${base}/api/workspaces`)).status).toBe(401)
      const log = await AgentLog.open({ root: served }) // through the daemon
      await log.append('w', { op: 'delete', path: 'a' })
      const res = await fetch(`${base}/api/live/w`, { headers: { authorization: `Bearer ${token}` } })
      await log.append('w', { op: 'delete', path: 'b' })
      const text = await readEvents(res, (t) => t.includes('"seq":2'))
      expect(text).toContain('"path":"a"')
      expect(text).toContain('"path":"b"')
      await log.close()
    } finally {
      await daemon.stop()
    }
  })
})
