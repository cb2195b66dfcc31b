/**
 * Another user, for the checks that differ by who runs them. Run as root, a test takes the
 * other side with a child that drops to an unprivileged uid (`setpriv`); run as any other user,
 * it takes that side in process. So both sides run in every environment instead of each one
 * skipping half.
 */
import { spawnSync } from 'node:child_process'
import { accessSync, constants, statSync } from 'node:fs'
import { dirname } from 'node:path'
import { DIST, ROOT_DIR } from './index.js'

/** The uid and gid an unprivileged child runs as (no such user needs to exist). */
export const OTHER_UID = 4242

export const isRoot = (): boolean => process.getuid?.() === 0

/**
 * Runs `node <args…>` as OTHER_UID (root only). The child must reach the package: a checkout
 * below a folder others cannot enter (a `mktemp -d` clone is 0700) is named in the error, with
 * the fix (`.ci/run` makes its own checkout enterable when it runs as root).
 */
export function nodeAsOtherUser(args: string[], options: { cwd?: string } = {}) {
  if (!isRoot()) throw new Error('nodeAsOtherUser needs root: only root can drop to another uid')
  for (let dir = ROOT_DIR; ; dir = dirname(dir)) {
    if ((statSync(dir).mode & 0o001) === 0) {
      throw new Error(
        `${dir} cannot be entered by other users (mode ${(statSync(dir).mode & 0o777).toString(8)}), so a check run as uid ${OTHER_UID} cannot load ${DIST}: chmod o+x ${dir}`,
      )
    }
    if (dirname(dir) === dir) break
  }
  accessSync(process.execPath, constants.X_OK)
  return spawnSync(
    'setpriv',
    [`--reuid=${OTHER_UID}`, `--regid=${OTHER_UID}`, '--clear-groups', process.execPath, ...args],
    { encoding: 'utf8', cwd: options.cwd ?? '/' },
  )
}
