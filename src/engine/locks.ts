/**
 * Who holds the flock on a file, read from /proc/locks (Linux): a "locked" error can then say
 * whether the holder is this very process (another AgentLog on the same root, or a file opened
 * twice) or another one, and which. And the one way a folder is locked across processes.
 */
import { closeSync, constants, openSync, readFileSync, statSync } from 'node:fs'
import { loadNative } from './native.js'

/**
 * Runs fn holding the exclusive flock on folder `dir` (taken blocking: meant for brief work, as
 * the root lock's opens and replays, or a small file read, changed and replaced under it). Not
 * reentrant: a second take in the same process, on another descriptor, waits for the first.
 * `hook` is told of the descriptor (an owner worker closes what its dead thread held).
 */
export function withFolderLock<T>(
  dir: string,
  fn: () => T,
  hook?: ((fd: number, open: boolean) => void) | null,
): T {
  const native = loadNative()
  const fd = openSync(dir, constants.O_RDONLY | constants.O_DIRECTORY)
  hook?.(fd, true)
  try {
    native.flock(fd, true, false)
    return fn()
  } finally {
    hook?.(fd, false)
    closeSync(fd) // releases the lock
  }
}

/** Linux's dev_t split (glibc's gnu_dev_major/minor). */
function majorMinor(dev: number): [number, number] {
  const big = BigInt(dev)
  const major = Number(((big >> 8n) & 0xfffn) | ((big >> 32n) & ~0xfffn))
  const minor = Number((big & 0xffn) | ((big >> 12n) & ~0xffn))
  return [major, minor]
}

/** The pid holding a flock on `path`, or null when none is found (or not on Linux). */
export function flockHolder(path: string): number | null {
  let table: string
  let dev: number
  let ino: number
  try {
    const st = statSync(path)
    dev = st.dev
    ino = st.ino
    table = readFileSync('/proc/locks', 'latin1')
  } catch {
    return null
  }
  const [major, minor] = majorMinor(dev)
  for (const line of table.split('\n')) {
    // "1: FLOCK  ADVISORY  WRITE 12345 fd:01:1234567 0 EOF"; waiters are marked "->"
    const f = line.trim().split(/\s+/)
    if (f[1] !== 'FLOCK' || f.includes('->')) continue
    const where = f[5]?.split(':')
    if (where?.length !== 3) continue
    if (Number.parseInt(where[0] as string, 16) !== major) continue
    if (Number.parseInt(where[1] as string, 16) !== minor) continue
    if (Number(where[2]) !== ino) continue
    const pid = Number(f[4])
    return Number.isInteger(pid) && pid > 0 ? pid : null
  }
  return null
}

/** "this process", or "process 1234 (node dist/src/cli/bin.js append …)", or "another process". */
export function describeHolder(path: string): string {
  const pid = flockHolder(path)
  if (pid === null) return 'another process'
  if (pid === process.pid)
    return 'this process (it is open elsewhere in it, e.g. by another AgentLog on the same root)'
  let cmd = ''
  try {
    cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ')
  } catch {
    // the holder may have exited meanwhile
  }
  if (cmd.length > 80) cmd = `${cmd.slice(0, 79)}…`
  return `process ${pid}${cmd ? ` (${cmd})` : ''}`
}
