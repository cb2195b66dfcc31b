/**
 * Where a daemon is found for a root: its socket and its lock, both inside the root.
 *
 * The lock decides who may create or remove the socket. The daemon holds an exclusive flock on
 * `noa.serve.lock` for its whole life and binds the socket only while holding it, so whoever can
 * take the lock knows that no daemon serves the root and that a socket left there is stale (its
 * daemon died): it may remove it, and no daemon can bind a new one meanwhile.
 */
import { closeSync, constants, lstatSync, openSync, unlinkSync } from 'node:fs'
import { join } from 'node:path'
import { Errors, type NoaError } from '../engine/errors.js'
import { kindOf, openFileSync, READ_WRITE, READ_WRITE_CREATE } from '../engine/files.js'
import { describeHolder } from '../engine/locks.js'
import { loadNative } from '../engine/native.js'
import { LOCK_NAME, SOCKET_NAME } from './protocol.js'

export function socketPath(root: string): string {
  return join(root, SOCKET_NAME)
}

export function lockPath(root: string): string {
  return join(root, LOCK_NAME)
}

/** sun_path holds 108 bytes, its NUL included. */
const MAX_SUN_PATH = 107

/**
 * An address the kernel takes for the root's socket. A path too long for sun_path is reached
 * through `/proc/self/fd/<fd of the root>/`, which the kernel resolves like any other path; the
 * fd must stay open until bind or connect has returned, then `release` closes it.
 */
export function socketAddress(root: string): { address: string; release(): void } {
  const path = socketPath(root)
  if (Buffer.byteLength(path) <= MAX_SUN_PATH) return { address: path, release() {} }
  const fd = openSync(root, constants.O_RDONLY | constants.O_DIRECTORY)
  let open = true
  return {
    address: `/proc/self/fd/${fd}/${SOCKET_NAME}`,
    release() {
      if (open) closeSync(fd)
      open = false
    },
  }
}

/**
 * What holds the socket's name: nothing, a socket, or something planted there. A symlink is
 * never followed (it could lead a client to someone else's daemon): it is refused like any
 * other thing that is not a socket.
 */
export function socketState(root: string): 'none' | 'socket' {
  const path = socketPath(root)
  let kind: string
  try {
    const st = lstatSync(path)
    if (st.isSocket()) return 'socket'
    kind = kindOf(st)
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOENT' || code === 'ENOTDIR') return 'none'
    throw err
  }
  throw Errors.BAD_SOCKET(
    `${path} is a ${kind}, not a socket: noa serve's socket cannot be there, and noa does not follow or remove it (remove it yourself if it is not meant to be there)`,
    { file: path },
  )
}

/** The daemon's lock, taken: close the fd to release it. */
export interface ServeLock {
  fd: number
  release(): void
}

function isBusy(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException).code
  return code === 'EWOULDBLOCK' || code === 'EAGAIN'
}

/**
 * Takes the root's serve lock without waiting. `create`: the daemon makes the file; a client
 * checking for a stale socket does not (no lock file means no daemon ever held it). Null when
 * another process holds it (or, without `create`, when there is no lock file).
 */
export function tryServeLock(root: string, create: boolean): ServeLock | null {
  const path = lockPath(root)
  let fd: number
  try {
    fd = openFileSync(path, create ? READ_WRITE_CREATE : READ_WRITE, { what: 'serve lock' })
  } catch (err) {
    if (!create && (err as NodeJS.ErrnoException).code === 'ENOENT') return null
    throw err
  }
  try {
    loadNative().flock(fd, true, true)
  } catch (err) {
    closeSync(fd)
    if (isBusy(err)) return null
    throw err
  }
  let held = true
  return {
    fd,
    release() {
      if (held) closeSync(fd)
      held = false
    },
  }
}

/** The daemon's refusal when another daemon already serves the root. */
export function alreadyServed(root: string): NoaError {
  return Errors.DAEMON_RUNNING(
    `root ${root} is already served by ${describeHolder(lockPath(root))}: one daemon per root`,
    { root },
  )
}

/** Removes a socket whose daemon is gone; the caller holds the serve lock. */
export function removeStaleSocket(root: string): boolean {
  if (socketState(root) !== 'socket') return false
  try {
    unlinkSync(socketPath(root))
    return true
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false
    throw err
  }
}
