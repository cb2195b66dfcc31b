/**
 * Checkout: a tree's files written into a folder, each checked against its hash on the way.
 *
 * Nothing is written outside the folder. A tree object is only hash-checked, so one made by hand
 * can hold any path: every path is checked as an entry's path is (relative, no empty, `.` or
 * `..` segment, no NUL) and each name against NAME_MAX; a path that is both a file and a folder,
 * or (on a case-insensitive filesystem) two paths that differ only by case, are refused with
 * the paths named; a symlink, or a file where a folder is wanted, already in the folder is
 * refused too (with --force). All of that, and every blob being stored, is checked before the
 * first file is written. Each file goes to a temp file opened with O_EXCL|O_NOFOLLOW in its
 * final folder and is renamed into place, so an interrupted checkout leaves whole files only.
 * Folders are made with the engine's mkdirBelow, which lstat-checks every component, so a
 * symlink swapped in after the checks is still not followed.
 */
import { randomBytes } from 'node:crypto'
import {
  closeSync,
  constants,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  renameSync,
  rmSync,
  writeSync,
} from 'node:fs'
import { join, resolve } from 'node:path'
import { checkPath } from '../engine/entry.js'
import { Errors, type NoaError } from '../engine/errors.js'
import { existingLog } from '../engine/logs.js'
import { writeSeqs } from './records.js'
import type { ResolvedRef, SnapshotView } from './view.js'

export interface CheckoutOptions {
  /** Write into a folder that is not empty (files of the tree are replaced; others are left). */
  force?: boolean
  /** Refuse paths that differ only by case (default: detected on the target folder). */
  caseInsensitive?: boolean
}

export interface CheckoutResult {
  ref: string
  dir: string
  snapshotId: string | null
  tree: string
  files: number
  bytes: number
}

const NAME_MAX = 255

function refuse(message: string, details: Record<string, unknown> = {}): NoaError {
  return Errors.BAD_ARGUMENT(`${message}; nothing was written`, details)
}

export async function checkout(
  engine: SnapshotView,
  ref: string,
  dir: string,
  options: CheckoutOptions = {},
): Promise<CheckoutResult> {
  if (typeof dir !== 'string' || dir === '') throw Errors.BAD_ARGUMENT('checkout needs a folder')
  const target = resolve(dir)
  const resolved = await engine.resolve(ref)
  const { tree } = resolved
  const paths: string[] = []
  const dirs = new Set<string>()
  for (let i = 0; i < tree.size; i++) {
    const path = tree.pathAt(i)
    try {
      checkPath(path, 'path')
    } catch (err) {
      throw refuse(
        `tree ${tree.id}: path ${JSON.stringify(path)} cannot be checked out (${(err as Error).message})`,
        {
          path,
        },
      )
    }
    const parts = path.split('/')
    for (const part of parts) {
      if (Buffer.byteLength(part) > NAME_MAX) {
        throw refuse(
          `tree ${tree.id}: path ${JSON.stringify(path)} has a name longer than ${NAME_MAX} bytes`,
          { path },
        )
      }
    }
    for (let k = 1; k < parts.length; k++) dirs.add(parts.slice(0, k).join('/'))
    paths.push(path)
  }
  for (const path of paths) {
    if (dirs.has(path)) {
      const under = paths.find((p) => p.startsWith(`${path}/`)) as string
      throw refuse(
        `tree ${tree.id}: ${JSON.stringify(path)} is a file and also the folder of ${JSON.stringify(under)}`,
        {
          path,
        },
      )
    }
  }

  // The folder: created if missing; refused if it holds anything, unless forced.
  mkdirSync(target, { recursive: true })
  const existing = readdirSync(target)
  if (existing.length > 0 && !options.force) {
    throw Errors.EXISTS(
      `${target} is not empty (${existing.length} entr${existing.length === 1 ? 'y' : 'ies'}); check out into an empty folder, or pass --force (force: true) to replace the tree's files in it`,
      { dir: target },
    )
  }
  const folded = options.caseInsensitive ?? isCaseInsensitive(target)
  if (folded) {
    const seen = new Map<string, string>()
    for (const p of [...dirs, ...paths]) {
      const key = p.normalize('NFC').toLowerCase()
      const other = seen.get(key)
      if (other !== undefined && other !== p) {
        throw refuse(
          `${JSON.stringify(other)} and ${JSON.stringify(p)} differ only by case, and ${target} is on a case-insensitive filesystem`,
          { path: p },
        )
      }
      seen.set(key, p)
    }
  }
  // Nothing already in the folder may redirect a write: no symlink, no file where a folder goes.
  if (existing.length > 0) {
    for (const d of [...dirs].sort()) {
      const st = lstatSync(join(target, d), { throwIfNoEntry: false })
      if (st && !st.isDirectory()) {
        throw refuse(
          `${join(target, d)} is ${st.isSymbolicLink() ? 'a symlink' : 'not a folder'}; the tree needs a folder there`,
          {
            path: d,
          },
        )
      }
    }
    for (const p of paths) {
      const st = lstatSync(join(target, p), { throwIfNoEntry: false })
      if (st && (st.isSymbolicLink() || st.isDirectory())) {
        throw refuse(
          `${join(target, p)} is ${st.isSymbolicLink() ? 'a symlink' : 'a folder'}; the tree has a file there`,
          {
            path: p,
          },
        )
      }
    }
  }
  await checkBlobsStored(engine, resolved)

  for (const d of [...dirs].sort()) {
    const full = join(target, d)
    try {
      mkdirSync(full)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
    }
    if (!lstatSync(full).isDirectory())
      throw Errors.BAD_ARGUMENT(`${full} is not a folder (replaced during the checkout?)`)
  }
  let bytes = 0
  for (let i = 0; i < tree.size; i++) {
    const path = paths[i] as string
    const data = await engine.store.getBlob(tree.blobAt(i))
    writeFileInPlace(join(target, path), data)
    bytes += data.length
  }
  return { ref, dir: target, snapshotId: resolved.snapshotId, tree: tree.id, files: tree.size, bytes }
}

/** Temp file in the final folder (O_EXCL|O_NOFOLLOW: a planted name cannot redirect it), then rename. */
function writeFileInPlace(file: string, data: Buffer): void {
  const temp = `${file.slice(0, file.lastIndexOf('/') + 1)}.noa-checkout-${randomBytes(6).toString('hex')}.tmp`
  const fd = openSync(
    temp,
    constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
    0o666,
  )
  try {
    try {
      let off = 0
      while (off < data.length) off += writeSync(fd, data, off, data.length - off)
    } finally {
      closeSync(fd)
    }
    renameSync(temp, file)
  } catch (err) {
    rmSync(temp, { force: true })
    throw err
  }
}

/** Whether names in `dir` are compared without case (a probe file and its upper-case name). */
function isCaseInsensitive(dir: string): boolean {
  const probe = join(dir, `.noa-case-${randomBytes(4).toString('hex')}`)
  const fd = openSync(probe, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600)
  closeSync(fd)
  try {
    const upper = join(dir, probe.slice(dir.length + 1).toUpperCase())
    return lstatSync(upper, { throwIfNoEntry: false }) !== undefined
  } finally {
    rmSync(probe, { force: true })
  }
}

/** Refuses a tree with blobs that are not stored, naming each with the seq that wrote it. */
async function checkBlobsStored(engine: SnapshotView, resolved: ResolvedRef): Promise<void> {
  const { tree } = resolved
  const missing: Array<{ path: string; blob: string }> = []
  const checked = new Map<string, boolean>()
  for (let i = 0; i < tree.size; i++) {
    const blob = tree.blobAt(i)
    let ok = checked.get(blob)
    if (ok === undefined) {
      ok = engine.store.has(blob)
      checked.set(blob, ok)
    }
    if (!ok) missing.push({ path: tree.pathAt(i), blob })
  }
  if (missing.length === 0) return
  let seqs = new Map<string, number>()
  try {
    existingLog(engine.root, resolved.workspace)
    seqs = await writeSeqs(
      engine.root,
      resolved.workspace,
      0,
      resolved.seq,
      new Set(missing.map((m) => m.blob)),
    )
  } catch {
    // The log is gone: the blobs are still named.
  }
  const list = missing
    .slice(0, 10)
    .map(
      (m) =>
        `${JSON.stringify(m.path)} (blob ${m.blob}${seqs.has(m.blob) ? `, written at seq ${seqs.get(m.blob)} of ${resolved.workspace}` : ''})`,
    )
  throw Errors.MISSING_BLOB(
    `${missing.length} blob${missing.length === 1 ? ' is' : 's are'} not in the object store: ${list.join(', ')}${missing.length > 10 ? ` and ${missing.length - 10} more` : ''}; nothing was written`,
    {
      missing: missing.map((m) => ({ ...m, workspace: resolved.workspace, seq: seqs.get(m.blob) ?? null })),
    },
  )
}
