/**
 * Writers killed with SIGKILL at random moments (two processes on the same directory, so the
 * lock is exercised too): every note left must be whole and parse, and MEMORY.md must never
 * link a missing file.
 */
import { createHash } from 'node:crypto'
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { expect, it } from 'vitest'
import { MemoryStore, parseMemory, renderIndex } from '../../dist/src/memory/index.js'
import { DIST, killAfterFirstOutput, tempDir } from '../helpers/index.js'

const CHILD = `
import { createHash } from 'node:crypto'
import { MemoryStore } from ${JSON.stringify(pathToFileURL(join(DIST, 'memory', 'index.js')).href)}
const [dir, seedArg] = process.argv.slice(2)
let seed = Number(seedArg)
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648)
const names = ['Alpha', 'ALPHA', 'alpha!', 'Beta', 'Gamma', '日本語', '中文', '🎉', 'Delta', 'Epsilon']
const store = new MemoryStore(dir)
process.stdout.write('ready\\n')
for (let i = 0; ; i++) {
  const name = names[Math.floor(rand() * names.length)]
  const op = rand()
  try {
    if (op < 0.75) {
      const payload = \`\${name} #\${i} \`.repeat(1 + Math.floor(rand() * 3000))
      const sum = createHash('sha256').update(payload).digest('hex')
      store.save({ name, description: \`save \${i}\`, type: 'project', content: \`\${payload}\\nsum:\${sum}\\n\` })
    } else if (op < 0.88) {
      store.delete(name)
    } else {
      store.rename(name, names[Math.floor(rand() * names.length)])
    }
  } catch (err) {
    if (!['NOA_NOT_FOUND', 'NOA_CONFLICT'].includes(err.code)) throw err
  }
}
`

/** Every note whole, every index link present. */
function checkDir(dir: string): number {
  const store = new MemoryStore(dir)
  const { notes, skipped } = store.scanReport()
  expect(skipped).toEqual([])
  for (const n of notes) {
    const text = readFileSync(n.path, 'utf8')
    expect(text.startsWith(`---\nname: ${n.name}\ndescription: `)).toBe(true)
    const m = /^([\s\S]*)\nsum:([0-9a-f]{64})\n$/.exec(parseMemory(text).content)
    expect(m, `${n.file} is whole`).not.toBeNull()
    expect(
      createHash('sha256')
        .update(m?.[1] ?? '')
        .digest('hex'),
    ).toBe(m?.[2])
  }
  for (const f of readdirSync(dir)) {
    // Only temp files of killed writers may be left besides notes, the index and the lock.
    if (!f.endsWith('.md') && f !== '.memory.lock') expect(f).toMatch(/^\..+\.md\.[0-9a-f]{12}\.tmp$/)
  }
  const indexFile = join(dir, 'MEMORY.md')
  if (existsSync(indexFile)) {
    const index = readFileSync(indexFile, 'utf8')
    expect(index.startsWith('# Memory\n\n')).toBe(true)
    for (const [, file] of index.matchAll(/^- \[.*\]\((.*)\) — .*$/gm)) {
      expect(existsSync(join(dir, decodeURIComponent(file as string))), `MEMORY.md links ${file}`).toBe(true)
    }
  }
  return notes.length
}

it('SIGKILLed writers leave whole notes and an index without dangling links', async () => {
  const dir = join(tempDir(), 'memory')
  const script = join(tempDir(), 'writer.mjs')
  writeFileSync(script, CHILD)
  let seen = 0
  for (let round = 0; round < 8; round++) {
    const delay = () => 20 + Math.floor(Math.random() * 200)
    await Promise.all([
      killAfterFirstOutput(script, [dir, String(round * 2 + 1)], delay()),
      killAfterFirstOutput(script, [dir, String(round * 2 + 2)], delay()),
    ])
    seen += checkDir(dir)
  }
  expect(seen).toBeGreaterThan(0)
  // The next writer cleans up and the index is exact again.
  const store = new MemoryStore(dir)
  store.save({ name: 'After', content: `x\nsum:${createHash('sha256').update('x').digest('hex')}\n` })
  checkDir(dir)
  expect(readdirSync(dir).filter((f) => f.endsWith('.tmp'))).toEqual([])
  expect(readFileSync(join(dir, 'MEMORY.md'), 'utf8')).toBe(renderIndex(store.scan()))
})
