/**
 * What someone else can put in a folder noa uses, for the hostile-root tests of every layer:
 * where a file should be, a symlink to a file outside (whose tail looks torn, so that a wrongly
 * followed "repair" would cut it), a dangling symlink (a followed create would make its target),
 * a FIFO (a followed open would block), a socket and a folder; where a folder should be, a
 * symlink to a folder outside and a regular file. `outsideState` snapshots the outside folder,
 * so a test can show it byte-identical afterwards, with nothing created in it.
 */
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import {
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  type Stats,
  symlinkSync,
  writeFileSync,
} from 'node:fs'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { onTestFinished } from 'vitest'

/** A tail that recovery would cut (the last line has no newline). */
export const TORN = 'first line\nsingle line no newline'

export interface Plant {
  name: string
  /** Puts the thing at `path`; `outside` is a folder outside the root. */
  plant(path: string, outside: string): Promise<void> | void
}

async function plantSocket(path: string): Promise<void> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(path, resolve))
  onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())))
}

/** Things planted where noa expects a regular file; each must be refused NOA_NOT_REGULAR_FILE. */
export const FILE_PLANTS: Plant[] = [
  {
    name: 'a symlink to an outside file with a torn-looking tail',
    plant: (path, outside) => {
      writeFileSync(join(outside, 'target.txt'), TORN)
      symlinkSync(join(outside, 'target.txt'), path)
    },
  },
  {
    name: 'a dangling symlink',
    plant: (path, outside) => symlinkSync(join(outside, 'would-be-created'), path),
  },
  { name: 'a FIFO', plant: (path) => void execFileSync('mkfifo', [path]) },
  { name: 'a socket', plant: (path) => plantSocket(path) },
  { name: 'a folder', plant: (path) => mkdirSync(path) },
]

/** Things planted where noa expects a folder; each must be refused NOA_NOT_DIRECTORY. */
export const FOLDER_PLANTS: Plant[] = [
  {
    name: 'a symlink to an outside folder',
    plant: (path, outside) => {
      writeFileSync(join(outside, 'target.txt'), TORN)
      symlinkSync(outside, path)
    },
  },
  { name: 'a regular file', plant: (path) => writeFileSync(path, TORN) },
]

/** Every entry below `dir` (recursively), with its kind and bytes (or link target). */
export function outsideState(dir: string): Record<string, string> {
  return describeTree(
    dir,
    (p, st) => (st.isFile() ? readFileSync(p, 'latin1') : `mode ${st.mode.toString(8)}`),
    () => 'dir',
  )
}

/** Each entry below `dir` by its relative path: a symlink's target, else what `describe` says. */
function describeTree(
  dir: string,
  describe: (path: string, st: Stats) => string,
  folder: (st: Stats) => string,
): Record<string, string> {
  const out: Record<string, string> = {}
  const walk = (d: string, rel: string) => {
    for (const name of readdirSync(d).sort()) {
      const p = join(d, name)
      const r = rel ? `${rel}/${name}` : name
      const st = lstatSync(p)
      if (st.isSymbolicLink()) out[r] = `-> ${readlinkSync(p)}`
      else if (st.isDirectory()) {
        out[r] = folder(st)
        walk(p, r)
      } else out[r] = describe(p, st)
    }
  }
  walk(dir, '')
  return out
}

/**
 * Every entry below `dir` with its kind, mode, size, mtime and SHA-256 (or link target): two
 * listings are equal only if nothing below `dir` was created, removed, written or touched.
 */
export function listing(dir: string): Record<string, string> {
  const meta = (st: Stats) => `mode ${(st.mode & 0o7777).toString(8)} mtime ${st.mtimeMs}`
  return describeTree(
    dir,
    (p, st) => {
      if (!st.isFile()) return `other ${meta(st)}`
      // A huge (sparse) file planted by a test: its size and times stand for its bytes.
      const sha =
        st.size > 256 << 20 ? 'not hashed' : createHash('sha256').update(readFileSync(p)).digest('hex')
      return `file ${st.size} bytes sha256 ${sha} ${meta(st)}`
    },
    (st) => `dir ${meta(st)}`,
  )
}

/** The error a call or promise ends with (fails the test if it succeeds). */
export async function refusal(
  p: Promise<unknown> | (() => unknown),
): Promise<{ code?: string; message: string }> {
  try {
    await (typeof p === 'function' ? p() : p)
  } catch (err) {
    return err as { code?: string; message: string }
  }
  throw new Error('expected a refusal, but it succeeded')
}
