/**
 * Transparent forwarding against a real daemon process: AgentLog.open and the noa commands on a
 * served root talk to the daemon and get what they would get in process, named errors included;
 * a stale socket (its daemon killed) is removed and the root is used in process again; nothing
 * that is not a socket is ever followed or removed.
 */

import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { existsSync, lstatSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { AgentLog, type EntryInput } from '../../dist/src/index.js'
import { connectDaemon, Daemon, RemoteAgentLog } from '../../dist/src/serve/index.js'
import { BLOB, blobOf, runCli, runCliAsync, tempDir } from '../helpers/index.js'
import { commitGate, startDaemon, until } from '../helpers/serve.js'

const del = (path: string): EntryInput => ({ op: 'delete', path })
const write = (i: number): EntryInput => ({ op: 'write', path: `src/f${i}.ts`, blob: blobOf(i) })

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = []
  for await (const x of it) out.push(x)
  return out
}

/** Results with what differs between two roots taken out: the root's path and the clock. */
function normalize(value: unknown, roots: string[]): unknown {
  if (typeof value === 'string') {
    let s = value
    for (const r of roots) s = s.split(r).join('<root>')
    return s.replace(/"ts":\d+/g, '"ts":T')
  }
  if (Array.isArray(value)) return value.map((v) => normalize(v, roots))
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {}
    for (const [k, v] of Object.entries(value)) {
      out[k] = /^(ts|lastTs|firstTs)$/.test(k) ? typeof v : normalize(v, roots)
    }
    return out
  }
  return value
}

/** The same calls, on any AgentLog: every result and every error (code, message, details). */
async function scenario(log: AgentLog, root: string, outside: string): Promise<unknown[]> {
  const out: unknown[] = []
  const rec = async (name: string, f: () => Promise<unknown>) => {
    try {
      out.push([name, await f()])
    } catch (err) {
      const e = err as { code?: string; message: string; details?: unknown; name: string }
      out.push([name, { error: e.name, code: e.code, message: e.message, details: e.details }])
    }
  }
  await rec('append', () => log.append('a', del('x')))
  await rec('appendMany', () => log.appendMany('a', [write(1), del('y'), write(2)]))
  await rec('appendMany empty', () => log.appendMany('a', []))
  await rec('bad entry', () => log.append('a', { op: 'write', path: '../x', blob: BLOB }))
  await rec('bad op', () => log.append('a', { op: 'drop' } as unknown as EntryInput))
  await rec('bad workspace', () => log.append('../x', del('x')))
  await rec('a record entry from a caller', () =>
    log.append('a', { op: 'snapshot', snapshot_id: `noa_${'0'.repeat(64)}`, message: 'forged' }),
  )
  await rec('checkBlobs without objects', () => log.append('a', write(7), { checkBlobs: true }))
  await rec('an unknown append option', () =>
    log.append('a', write(7), { ifLastseq: 1 } as unknown as { ifLastSeq: number }),
  )
  await rec('ifLastSeq, stale', () => log.append('a', del('stale'), { ifLastSeq: 0 }))
  await rec('appendMany not an array', () => log.appendMany('a', 'x' as unknown as EntryInput[]))
  await rec('appendMany bad second', () =>
    log.appendMany('a', [del('ok'), { op: 'nope' } as unknown as EntryInput]),
  )
  await rec('appendAtomic', () => log.appendAtomic({ a: [del('z')], b: [del('z'), write(3)] }))
  await rec('appendAtomic bad', () => log.appendAtomic({ a: 'x' } as unknown as Record<string, EntryInput[]>))
  const lines = [1, 2].map(
    (s) => `{"seq":${s},"op":"delete","path":"r${s}","ts":${1_700_000_000_000_000 + s}}`,
  )
  await rec('appendReplicated', () => log.appendReplicated('c', lines))
  await rec('appendReplicated gap', () =>
    log.appendReplicated('c', ['{"seq":9,"op":"delete","path":"r9","ts":1700000000000009}']),
  )
  await rec('read', () => collect(log.read('a')))
  await rec('read from', () => collect(log.read('a', { fromSeq: 3 })))
  await rec('readBatches', async () => (await collect(log.readBatches('b'))).flat())
  await rec('readBytes', async () => Buffer.concat(await collect(log.readBytes('a', 2))).toString())
  await rec('read missing', () => collect(log.read('missing')))
  await rec('read bad name', () => collect(log.read('a/b')))
  await rec('verify', () => log.verify('a'))
  await rec('verify missing', () => log.verify('missing'))
  await rec('workspaces', () => log.workspaces())
  await rec('recover', () => log.recover('a'))
  await rec('recover missing', () => log.recover('missing'))
  await rec('openWorkspace', () => log.openWorkspace('d'))
  await rec('release', () => log.release('d'))
  await rec('appendToFile relative', () => log.appendToFile('rel.jsonl', 'x\n'))
  await rec('appendToFile', () => log.appendToFile(join(outside, 't.jsonl'), 'line\n'))
  await rec('appendToFile into the logs', () => log.appendToFile(join(root, 'agent-logs', 'z.log'), 'bad\n'))
  await rec('releaseFile', () => log.releaseFile(join(outside, 't.jsonl')))
  await rec('read after', () => collect(log.read('b')))
  return out
}

describe('transparent forwarding to noa serve', () => {
  it('gives AgentLog.open on a served root the same results and named errors as in process', async () => {
    const served = tempDir()
    const plain = tempDir()
    const [outA, outB] = [tempDir(), tempDir()]
    const d = await startDaemon(served)
    const remote = await AgentLog.open({ root: served })
    expect(remote).toBeInstanceOf(RemoteAgentLog)
    expect(remote).toBeInstanceOf(AgentLog)
    expect(remote.root).toBe(served)
    const local = await AgentLog.open({ root: plain })
    expect(local).not.toBeInstanceOf(RemoteAgentLog)
    try {
      const viaDaemon = normalize(await scenario(remote, served, outA), [served, outA])
      const inProcess = normalize(await scenario(local, plain, outB), [plain, outB])
      expect(viaDaemon).toEqual(inProcess)
      expect(readFileSync(join(outA, 't.jsonl'), 'utf8')).toBe('line\n')
      const status = await remote.status()
      expect(status.length).toBeGreaterThan(0)
      expect(status[0]).toHaveProperty('commits')
    } finally {
      await remote.close()
      await local.close()
    }
    // The daemon's logs and the in-process ones hold the same lines but for the clock.
    for (const ws of ['a', 'b', 'c']) {
      const strip = (r: string) =>
        readFileSync(join(r, 'agent-logs', `${ws}.log`), 'utf8').replace(/"ts":\d+/g, '')
      expect(strip(served)).toBe(strip(plain))
    }
    expect((await d.stop()).code).toBe(0)
  })

  it('writes the files of an append (option files) on a served root before the daemon commits it', async () => {
    const served = tempDir()
    const d = await startDaemon(served)
    const remote = await AgentLog.open({ root: served })
    expect(remote).toBeInstanceOf(RemoteAgentLog)
    try {
      const data = Buffer.from('object bytes')
      const sha = createHash('sha256').update(data).digest('hex')
      const path = `objects/${sha.slice(0, 2)}/${sha.slice(2)}`
      const [ack] = await remote.appendMany('f', [{ op: 'write', path: 'a', blob: BLOB }], {
        files: [{ path, data, readOnly: true }],
      })
      expect(ack?.seq).toBe(1)
      const file = join(served, path)
      expect(readFileSync(file).equals(data)).toBe(true)
      expect(lstatSync(file).mode & 0o222).toBe(0)
      await remote.append('f', { op: 'write', path: 'b', blob: BLOB }, { files: [{ path: 'x/y', data }] })
      expect(readFileSync(join(served, 'x', 'y')).equals(data)).toBe(true)
      const bad = await remote
        .append('f', { op: 'write', path: 'c', blob: BLOB }, { files: [{ path: '../out', data }] })
        .catch((e) => e)
      expect(bad.code).toBe('NOA_BAD_OPTION')
      expect((await remote.workspaces()).find((w) => w.workspace === 'f')?.lastSeq).toBe(2)
    } finally {
      await remote.close()
    }
    expect((await d.stop()).code).toBe(0)
  })

  it('runs every noa command on a served root through the daemon, which holds the locks', async () => {
    const root = tempDir()
    await startDaemon(root)
    // Blobs first, as noa append wants them stored (through the object store, which needs no daemon).
    const blobs = ['one', 'two', 'nine'].map((text) => {
      const file = join(tempDir(), text)
      writeFileSync(file, text)
      return runCli(['blob', 'put', file, '--root', root]).stdout.trim()
    })
    const put = (i: number, blob: string) => JSON.stringify({ op: 'write', path: `src/f${i}.ts`, blob })
    const input = `${put(1, blobs[0] as string)}\n${put(2, blobs[1] as string)}\n`
    // Many appenders at once on one workspace: without the daemon they would contend for its lock.
    const runs = await Promise.all(
      Array.from({ length: 6 }, () => runCliAsync(['append', 'main', '--root', root], input)),
    )
    for (const r of runs) expect(r).toMatchObject({ status: 0, stderr: '' })
    const seqs = runs
      .flatMap((r) =>
        r.stdout
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l).seq),
      )
      .sort((a, b) => a - b)
    expect(seqs).toEqual(Array.from({ length: 12 }, (_, i) => i + 1))
    const snap = runCli(['snapshot', 'main', '--root', root, '-m', 'first'])
    expect(snap).toMatchObject({ status: 0, stderr: '' })
    const id = snap.stdout.trim()
    expect(runCli(['fork', 'feature', '--from', id, '--root', root]).status).toBe(0)
    expect(
      runCli(['append', 'feature', '--root', root], { input: `${put(9, blobs[2] as string)}\n` }).status,
    ).toBe(0)
    const merged = runCli(['merge', 'main', 'feature', '--root', root])
    expect(merged).toMatchObject({ status: 0, stderr: '' })
    expect(runCli(['recover', '--root', root]).stdout).toMatch(/feature: nothing to repair; consistent/)
    expect(runCli(['verify', '--root', root]).status).toBe(0)
    const ws = JSON.parse(runCli(['workspaces', '--root', root, '--json']).stdout)
    expect(ws.map((w: { workspace: string }) => w.workspace)).toEqual(['feature', 'main'])
    const log = runCli(['log', 'main', '--root', root])
    expect(log.stdoutBytes.equals(readFileSync(join(root, 'agent-logs', 'main.log')))).toBe(true)
    // The store's commands beside a live daemon: they read the logs and objects, no lock needed.
    expect(runCli(['history', 'main', '--root', root]).stdout).toMatch(/snapshot main@12 .* first/)
    expect(runCli(['diff', id, 'feature', '--root', root]).stdout).toBe('A\tsrc/f9.ts\n')
    const out = join(tempDir(), 'out')
    expect(runCli(['checkout', id, out, '--root', root]).status).toBe(0)
    expect(readFileSync(join(out, 'src', 'f2.ts'), 'utf8')).toBe('two')
    expect(runCli(['gc', '--yes', '--grace', '0s', '--root', root])).toMatchObject({ status: 0, stderr: '' })
    expect(runCli(['verify', '--root', root]).status).toBe(0)
  })

  it('removes the socket of a killed daemon and opens the root in process, never hanging', async () => {
    const root = tempDir()
    const d = await startDaemon(root)
    expect(runCli(['append', 'w', '--root', root], { input: `${JSON.stringify(del('a'))}\n` }).status).toBe(0)
    await d.stop('SIGKILL')
    expect(lstatSync(join(root, 'noa.sock')).isSocket()).toBe(true) // left behind
    const log = await AgentLog.open({ root, workers: 1 })
    expect(log).not.toBeInstanceOf(RemoteAgentLog)
    expect(existsSync(join(root, 'noa.sock'))).toBe(false)
    expect((await log.append('w', del('b'))).seq).toBe(2) // the dead daemon's journal was replayed
    await log.close()
    // The CLI the same way, on a fresh stale socket.
    const d2 = await startDaemon(root)
    await d2.stop('SIGKILL')
    const r = runCli(['append', 'w', '--root', root], { input: `${JSON.stringify(del('c'))}\n` })
    expect(r).toMatchObject({ status: 0, stderr: '' })
    expect(JSON.parse(r.stdout).seq).toBe(3)
    expect(existsSync(join(root, 'noa.sock'))).toBe(false)
  })

  it('opens the root in process when its daemon goes away during the hello', async () => {
    const root = tempDir()
    // What a daemon killed right after accepting looks like: the connection is cut, unanswered,
    // and the serve lock the daemon held (its file stays) is free.
    writeFileSync(join(root, 'noa.serve.lock'), '')
    const dying = createServer((socket) => socket.destroy())
    await new Promise<void>((resolve) => dying.listen(join(root, 'noa.sock'), resolve))
    try {
      const log = await AgentLog.open({ root, workers: 1 })
      expect(log).not.toBeInstanceOf(RemoteAgentLog)
      expect(existsSync(join(root, 'noa.sock'))).toBe(false) // nobody held the serve lock: removed
      expect((await log.append('w', del('a'))).seq).toBe(1)
      await log.close()
    } finally {
      dying.close()
    }
  })

  it('waits for a draining daemon, then appends in process', async () => {
    const root = tempDir()
    const gate = commitGate()
    const d = await Daemon.start({ root, log: gate.log })
    onTestFinished(gate.release)
    const client = await connectDaemon({ root })
    gate.hold()
    const first = client.append('w', del('first'))
    await until('the append to be in flight', () => d.stats().requests === 1)
    // The drain cannot end while that append's commit is held: it refuses new connections.
    const drained = d.drain()
    const cli = runCliAsync(['append', 'w', '--root', root], `${JSON.stringify(del('second'))}\n`)
    await until('the command to be refused by the draining daemon', () => d.stats().refused > 0)
    gate.release()
    expect((await first).seq).toBe(1)
    await drained
    const r = await cli
    expect(r).toMatchObject({ status: 0, stderr: '' })
    expect(JSON.parse(r.stdout).seq).toBe(2)
    await client.close()
  })

  it('gives up on a daemon that does not answer with NOA_DAEMON_UNAVAILABLE', async () => {
    const root = tempDir()
    const d = await startDaemon(root)
    process.kill(d.pid, 'SIGSTOP')
    try {
      await expect(connectDaemon({ root, timeoutMs: 300 })).rejects.toMatchObject({
        code: 'NOA_DAEMON_UNAVAILABLE',
      })
    } finally {
      process.kill(d.pid, 'SIGCONT')
    }
  })

  it('refuses, and neither follows nor removes, anything but a socket where the socket goes', async () => {
    const root = tempDir()
    const other = tempDir()
    const elsewhere = await startDaemon(other)
    // A symlink to another root's live socket would send this root's appends there.
    symlinkSync(elsewhere.info.socket, join(root, 'noa.sock'))
    await expect(AgentLog.open({ root })).rejects.toMatchObject({ code: 'NOA_BAD_SOCKET' })
    const r = runCli(['append', 'w', '--root', root], { input: `${JSON.stringify(del('a'))}\n` })
    expect(r.status).toBe(1)
    expect(r.stderr).toMatch(/noa\.sock is a symlink, not a socket/)
    const serve = runCli(['serve', '--root', root])
    expect(serve.status).toBe(1)
    expect(serve.stderr).toMatch(/NOA_BAD_SOCKET|is a symlink, not a socket/)
    expect(lstatSync(join(root, 'noa.sock')).isSymbolicLink()).toBe(true)
    expect(existsSync(join(other, 'agent-logs'))).toBe(false) // nothing reached the other daemon
    const root2 = tempDir()
    writeFileSync(join(root2, 'noa.sock'), 'mine')
    await expect(AgentLog.open({ root: root2 })).rejects.toMatchObject({ code: 'NOA_BAD_SOCKET' })
    expect(readFileSync(join(root2, 'noa.sock'), 'utf8')).toBe('mine')
  })

  it('serves a root whose socket path is too long for sun_path (through /proc/self/fd)', async () => {
    const root = join(tempDir(), 'r'.repeat(120))
    const d = await Daemon.start({ root })
    try {
      expect(Buffer.byteLength(d.socketPath)).toBeGreaterThan(108)
      // Another process (this one serves): it must reach the daemon through the long path too.
      const r = await runCliAsync(['append', 'w', '--root', root], `${JSON.stringify(del('a'))}\n`)
      expect(r).toMatchObject({ status: 0, stderr: '' })
      const log = await connectDaemon({ root })
      expect((await log.append('w', del('b'))).seq).toBe(2)
      await log.close()
    } finally {
      await d.drain()
    }
    expect(existsSync(join(root, 'noa.sock'))).toBe(false) // removed at the end, though bound through /proc
  })

  it('refuses a planted serve lock instead of following it', () => {
    const root = tempDir()
    const outside = tempDir()
    writeFileSync(join(outside, 'target'), 'keep\n')
    symlinkSync(join(outside, 'target'), join(root, 'noa.serve.lock'))
    const r = runCli(['serve', '--root', root])
    expect(r.status).toBe(1)
    expect(r.stderr).toMatch(/noa\.serve\.lock is a symlink/)
    expect(readFileSync(join(outside, 'target'), 'utf8')).toBe('keep\n')
  })

  it('refuses planted symlinks and FIFOs through the daemon exactly as in process', async () => {
    const root = tempDir()
    const outside = tempDir()
    mkdirSync(join(root, 'agent-logs'))
    writeFileSync(join(outside, 'target.log'), 'outside\n')
    symlinkSync(join(outside, 'target.log'), join(root, 'agent-logs', 'linked.log'))
    execFileSync('mkfifo', [join(root, 'agent-logs', 'fifo.log')])
    const plain = tempDir()
    mkdirSync(join(plain, 'agent-logs'))
    symlinkSync(join(outside, 'target.log'), join(plain, 'agent-logs', 'linked.log'))
    execFileSync('mkfifo', [join(plain, 'agent-logs', 'fifo.log')])
    await startDaemon(root)
    const remote = await AgentLog.open({ root })
    const local = await AgentLog.open({ root: plain, workers: 1 })
    try {
      for (const ws of ['linked', 'fifo']) {
        const errs = await Promise.all(
          [remote, local].map((log) =>
            log.append(ws, del('a')).then(
              () => null,
              (e) => ({ code: e.code, message: e.message.replace(root, '<root>').replace(plain, '<root>') }),
            ),
          ),
        )
        expect(errs[0]).toMatchObject({ code: 'NOA_NOT_REGULAR_FILE' })
        expect(errs[0]).toEqual(errs[1])
        await expect(collect(remote.read(ws))).rejects.toMatchObject({ code: 'NOA_NOT_REGULAR_FILE' })
      }
    } finally {
      await remote.close()
      await local.close()
    }
    expect(readFileSync(join(outside, 'target.log'), 'utf8')).toBe('outside\n')
  })
})
