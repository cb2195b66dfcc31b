/**
 * Which of many logs a writer holds (its owner's flock), from one read of /proc/locks (Linux),
 * as engine/locks.ts does for one file: the overview asks it for every workspace at once.
 */
import { readFileSync, statSync } from 'node:fs'

export function lockedFiles(files: readonly string[]): Set<string> {
  let table: string
  try {
    table = readFileSync('/proc/locks', 'latin1')
  } catch {
    return new Set()
  }
  const held = new Set<string>()
  for (const line of table.split('\n')) {
    // "1: FLOCK  ADVISORY  WRITE 12345 fd:01:1234567 0 EOF"; waiters are marked "->"
    const f = line.trim().split(/\s+/)
    if (f[1] !== 'FLOCK' || f.includes('->')) continue
    const where = f[5]?.split(':')
    if (where?.length !== 3) continue
    held.add(
      `${Number.parseInt(where[0] as string, 16)}:${Number.parseInt(where[1] as string, 16)}:${where[2]}`,
    )
  }
  const out = new Set<string>()
  if (held.size === 0) return out
  for (const file of files) {
    try {
      const st = statSync(file)
      const [major, minor] = majorMinor(st.dev)
      if (held.has(`${major}:${minor}:${st.ino}`)) out.add(file)
    } catch {
      // gone meanwhile
    }
  }
  return out
}

/** Linux's dev_t split (glibc's gnu_dev_major/minor). */
function majorMinor(dev: number): [number, number] {
  const big = BigInt(dev)
  const major = Number(((big >> 8n) & 0xfffn) | ((big >> 32n) & ~0xfffn))
  const minor = Number((big & 0xffn) | ((big >> 12n) & ~0xffn))
  return [major, minor]
}
