/** Shared by the gc tests (test/03-store/gc*.test.ts). */
import { readdirSync, statSync, utimesSync } from 'node:fs'
import { join } from 'node:path'
import type { EntryInput, SnapshotEngine } from '../../dist/src/index.js'
import type { setup } from './snapshot.js'

/** Every object file (64-hex ids) and temp file under root/objects. */
export function objectIds(root: string): string[] {
  try {
    return readdirSync(join(root, 'objects'), { recursive: true, encoding: 'utf8' })
      .filter((f) => /^[0-9a-f]{2}\/[0-9a-f]{62}$/.test(f))
      .map((f) => f.replace('/', ''))
      .sort()
  } catch {
    return []
  }
}

/** Makes every file under root/objects look `hours` old (gc's grace period is about mtimes). */
export function age(root: string, hours = 2): void {
  const t = new Date(Date.now() - hours * 3_600_000)
  for (const f of readdirSync(join(root, 'objects'), { recursive: true, encoding: 'utf8' })) {
    const p = join(root, 'objects', f)
    if (statSync(p).isFile()) utimesSync(p, t, t)
  }
}

/** Each listed snapshot's files as path → content (read through the store, hash-checked). */
export async function contents(engine: SnapshotEngine, id: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {}
  for (const [path, blob] of (await engine.tree(id)).entries())
    out[path] = (await engine.store.getBlob(blob)).toString()
  return out
}

export async function write(
  ctx: Awaited<ReturnType<typeof setup>>,
  ws: string,
  files: Record<string, string>,
) {
  const entries: EntryInput[] = []
  for (const [path, text] of Object.entries(files)) {
    entries.push({ op: 'write', path, blob: await ctx.engine.store.putBlob(text) })
  }
  await ctx.log.appendMany(ws, entries)
}
