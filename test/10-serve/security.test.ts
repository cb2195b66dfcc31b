/**
 * Who may talk to the daemon: its socket is 0600 whatever the umask, and no other user gets
 * through it, whether the daemon runs as root or as an unprivileged user; a connection has
 * --hello-timeout-ms to say hello; TCP exists only with a
 * token, from a file only its owner can read, and a connection without the right token, or with
 * a malformed or oversized first frame, is refused and changes nothing; files outside the root
 * are written only for clients on the unix socket.
 */
import { spawn, spawnSync } from 'node:child_process'
import { chmodSync, chownSync, existsSync, readdirSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { CLI, ROOT_DIR, tempDir } from '../helpers/index.js'
import { LineClient, startDaemon, within } from '../helpers/serve.js'

const TOKEN = 'a-long-enough-secret-token-4f9c2e'
const SERVE_AS_USER = join(ROOT_DIR, 'test', 'fixtures', 'serve-as-user.mjs')
/** An unprivileged uid (and gid) for the checks as another user; no such user needs to exist. */
const OTHER_UID = 4242
const isRoot = process.getuid?.() === 0

/**
 * Connects to `socket` as `uid` (its own gid, no other groups) and says hello: 'hello' when the
 * daemon answered, else the connection's error code. The child loads nothing but Node's own
 * modules, so it runs from a checkout other users cannot enter.
 */
function connectAs(uid: number, socket: string): string {
  const script = `const s = require('node:net').connect(${JSON.stringify(socket)})
s.on('error', (e) => { process.stdout.write(e.code); process.exit(0) })
s.on('connect', () => s.write('{"id":0,"op":"hello","v":1}\\n'))
s.on('data', (d) => { process.stdout.write(JSON.parse(d).ok ? 'hello' : String(d)); process.exit(0) })`
  const r = spawnSync(
    'setpriv',
    [`--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', process.execPath, '-e', script],
    { encoding: 'utf8', cwd: '/' },
  )
  expect(r.status, r.stderr).toBe(0)
  return r.stdout
}

/** test/fixtures/serve-as-user.mjs serving `root` as `uid`; resolves with its socket once it listens. */
function startAsUser(uid: number, root: string): Promise<string> {
  const child = spawn(process.execPath, [SERVE_AS_USER, String(uid), String(uid), root], {
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const exited = new Promise((resolve) => child.on('exit', resolve))
  onTestFinished(async () => {
    child.kill('SIGTERM')
    await exited
  })
  let out = ''
  let err = ''
  child.stderr.on('data', (b) => {
    err += b
  })
  return new Promise((resolve, reject) => {
    child.stdout.on('data', (b) => {
      out += b
      if (out.includes('\n')) {
        const info = JSON.parse(out) as { socket: string; euid: number }
        expect(info.euid).toBe(uid)
        resolve(info.socket)
      }
    })
    exited.then((code) => reject(new Error(`the daemon as uid ${uid} exited (${code}): ${err}`)))
  })
}

function tokenFile(mode = 0o600, text = `${TOKEN}\n`): string {
  const file = join(tempDir(), 'token')
  writeFileSync(file, text)
  chmodSync(file, mode)
  return file
}

const del = (path: string) => ({ op: 'delete' as const, path })

describe('noa serve security', () => {
  it('creates its socket 0600 even under umask 000', async () => {
    const root = tempDir()
    const d = await startDaemon(root, [], { umask: 0 })
    expect(statSync(d.info.socket).mode & 0o777).toBe(0o600)
    expect(statSync(d.info.socket).isSocket()).toBe(true)
  })

  // Only root can act as other users: run as anyone else, this is skipped (and says so).
  it.runIf(isRoot)(
    "refuses every other user on the socket, a root daemon's and an unprivileged user's (as root: other uids through setpriv)",
    async () => {
      expect(spawnSync('setpriv', ['--version']).status).toBe(0) // util-linux: needed, not optional
      // A root daemon: another user is refused by the socket's own mode (its folder lets them in).
      const root = tempDir()
      chmodSync(root, 0o755)
      const d = await startDaemon(root, [], { umask: 0 })
      expect(connectAs(OTHER_UID, d.info.socket)).toBe('EACCES')
      // A daemon run by an unprivileged user: that user is served, another one is refused.
      const theirs = tempDir()
      chownSync(theirs, OTHER_UID, OTHER_UID)
      chmodSync(theirs, 0o755)
      const socket = await startAsUser(OTHER_UID, theirs)
      expect(statSync(socket)).toMatchObject({ uid: OTHER_UID, gid: OTHER_UID })
      expect(statSync(socket).mode & 0o777).toBe(0o600)
      expect(connectAs(OTHER_UID, socket)).toBe('hello')
      expect(connectAs(OTHER_UID + 1, socket)).toBe('EACCES')
    },
  )

  it('refuses a TCP client without the token, with a wrong one, or with a bad first frame; nothing changes', async () => {
    const root = tempDir()
    const d = await startDaemon(root, ['--listen', '0', '--token-file', tokenFile()])
    const [host, port] = (d.info.tcp as string).split(':') as [string, string]
    expect(host).toBe('127.0.0.1') // loopback unless told otherwise
    const tcp = { host, port: Number(port) }
    const cases: Array<[string, object | string, string]> = [
      ['no hello', { id: 1, op: 'append', ws: 'w', entry: del('a') }, 'NOA_UNAUTHORIZED'],
      ['no token', { id: 0, op: 'hello', v: 1 }, 'NOA_UNAUTHORIZED'],
      ['wrong token', { id: 0, op: 'hello', v: 1, token: `${TOKEN}x` }, 'NOA_UNAUTHORIZED'],
      ['token of another type', { id: 0, op: 'hello', v: 1, token: 42 }, 'NOA_UNAUTHORIZED'],
      ['malformed', '{"id":0,"op":"hello",\n', 'NOA_PROTOCOL'],
      ['oversized', `{"id":0,"op":"hello","v":1,"token":"${'x'.repeat(100_000)}"}\n`, 'NOA_TOO_LARGE'],
      ['no newline, too long', 'y'.repeat(70_000), 'NOA_TOO_LARGE'],
    ]
    for (const [name, msg, code] of cases) {
      const c = await LineClient.open(tcp)
      c.send(msg)
      const r = await c.next()
      expect({ name, code: r?.error?.code, id: r?.id }).toEqual({ name, code, id: null })
      expect(await c.next()).toBeNull() // closed
    }
    expect(readdirSync(root).sort()).toEqual(['noa.serve.lock', 'noa.sock'])
    // The right token works, and appendToFile (a file outside the root) is the unix socket's only.
    const ok = await LineClient.open(tcp)
    await ok.hello(TOKEN)
    expect((await ok.call({ id: 1, op: 'append', ws: 'w', entry: del('a') })).result.seq).toBe(1)
    const outside = join(tempDir(), 'x.jsonl')
    const refused = await ok.call({ id: 2, op: 'appendToFile', file: outside, data: 'x\n' })
    expect(refused.error.code).toBe('NOA_UNAUTHORIZED')
    expect(existsSync(outside)).toBe(false)
    const local = await LineClient.open(d.info.socket)
    await local.hello() // no token on the socket
    expect((await local.call({ id: 1, op: 'appendToFile', file: outside, data: 'x\n' })).ok).toBe(true)
  })

  it('closes a connection that sends no hello within --hello-timeout-ms, having changed nothing; one that did is kept', async () => {
    const root = tempDir()
    const hello = ['--hello-timeout-ms', '300']
    const d = await startDaemon(root, ['--listen', '0', '--token-file', tokenFile(), ...hello])
    const [host, port] = (d.info.tcp as string).split(':') as [string, string]
    const tcp = { host, port: Number(port) }
    // Opened first, so its timer, were it not stopped by the hello, would fire before the others'.
    const kept = await LineClient.open(tcp)
    await kept.hello(TOKEN)
    const silent = await LineClient.open(tcp)
    const partial = await LineClient.open(tcp)
    partial.send(`{"id":0,"op":"hello","v":1,"token":"${TOKEN.slice(0, 8)}`) // and no more
    const local = await LineClient.open(d.info.socket) // the unix socket has the same timer
    for (const c of [silent, partial, local]) {
      expect(await within(10_000, 'the refusal', c.next())).toMatchObject({
        id: null,
        ok: false,
        error: {
          code: 'NOA_PROTOCOL',
          message: 'no hello within 300 ms (noa serve --hello-timeout-ms)',
          details: { limit: 300 },
        },
      })
      expect(await c.next()).toBeNull() // closed
    }
    expect(readdirSync(root).sort()).toEqual(['noa.serve.lock', 'noa.sock'])
    expect((await kept.call({ id: 1, op: 'append', ws: 'w', entry: del('a') })).result.seq).toBe(1)
  })

  it('refuses to listen on TCP without a proper token file', () => {
    const root = tempDir()
    const cases: Array<[string[], RegExp]> = [
      [['--listen', '7000'], /a TCP listener needs a token: --token-file FILE/],
      [
        ['--listen', '7000', '--token-file', tokenFile(0o644)],
        /has mode 0644: others can read it; chmod 600 it/,
      ],
      [
        ['--listen', '7000', '--token-file', tokenFile(0o600, 'short\n')],
        /is 5 characters: at least 16 are needed/,
      ],
      [['--listen', '7000', '--token-file', join(root, 'missing')], /cannot read the token file/],
      [['--listen', 'host:port', '--token-file', tokenFile()], /--listen takes PORT or HOST:PORT/],
      [['--token-file', tokenFile()], /a token file is for the TCP listener: give --listen too/],
    ]
    for (const [args, message] of cases) {
      // A daemon that took the file would serve on: ended after 30 s (a failure bound), it fails.
      const r = spawnSync(process.execPath, [CLI, 'serve', '--root', root, ...args], {
        encoding: 'utf8',
        timeout: 30_000,
      })
      expect({ status: r.status, stderr: r.stderr }).toMatchObject({
        status: 1,
        stderr: expect.stringMatching(message),
      })
    }
    expect(readdirSync(root)).toEqual([])
  })
})
