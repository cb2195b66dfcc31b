/**
 * Whether a folder given as a root (`--root`, `$NOA_ROOT`, `./.noa`) is one. A command that only
 * reads refuses a folder that holds other things and nothing of noa's (`--root .` where the root
 * is `./.noa`): read as a root it would look empty, and "no workspaces" would be a wrong answer.
 * The refusal names the nearest folder that is a root, when there is one.
 */
import { existsSync, lstatSync, readdirSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import { Errors } from '../engine/errors.js'

/** What the engine and the store make at the top of a root; one of them marks a root. */
const MARKERS = ['agent-logs', 'objects', 'checksums', 'journal', 'object-logs']
/** What `noa serve` makes there: a root it serves is one even before its first append. */
const SERVE_FILES = ['noa.sock', 'noa.serve.lock']

/**
 * A folder with one of the markers (false for a missing or unreadable one). Whatever their type:
 * a symlink planted as agent-logs/ is for the engine to refuse by name.
 */
export function hasLayout(dir: string): boolean {
  return [...MARKERS, ...SERVE_FILES].some((m) => {
    try {
      lstatSync(join(dir, m))
      return true
    } catch {
      return false
    }
  })
}

/** The folder that is a root nearest to `dir`: its `.noa`, else a parent (or a parent's `.noa`). */
export function nearestRoot(dir: string): string | null {
  if (hasLayout(join(dir, '.noa'))) return join(dir, '.noa')
  for (let d = dirname(dir); ; d = dirname(d)) {
    if (hasLayout(d)) return d
    if (hasLayout(join(d, '.noa'))) return join(d, '.noa')
    if (dirname(d) === d) return null
  }
}

/**
 * Refuses an existing folder that is not empty and has none of noa's folders. An empty folder
 * is an empty root (what `mkdir` then `noa …` makes); a missing one is left to checkRoot.
 */
export function checkLayout(root: string): void {
  if (!existsSync(root) || hasLayout(root)) return
  let names: string[]
  try {
    names = readdirSync(root)
  } catch {
    return // not a readable folder: checkRoot names what it is
  }
  if (names.length === 0) return
  const near = nearestRoot(root)
  const shown = near && relative(process.cwd(), near)
  const hint = near
    ? `; did you mean --root ${shown && !shown.startsWith('..') ? shown : near}?`
    : '; give the root with --root DIR or $NOA_ROOT'
  throw Errors.BAD_ROOT(`${root} is not a noa root (it has no agent-logs/ or objects/ folder)${hint}`, {
    root,
  })
}
