/**
 * The README as a newcomer meets it: the two set-up commands come first and are the ones CI
 * runs, it stays short, every quick-start block (marked `<!-- quickstart: NAME -->`) runs as
 * written, and every link of the README and docs/ leads somewhere. Shell blocks run under
 * `bash -e -o pipefail` in an empty folder with `noa` resolving to the built CLI; JavaScript
 * blocks run as .mjs files in an empty folder whose node_modules has `noa` (this checkout) and
 * the checkout's own dependencies, as an app that installed them would. The replication block
 * gets a nats-server of its own (NOA_NATS_URL).
 */
import { spawnSync } from 'node:child_process'
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { CLI, ROOT_DIR, tempDir } from '../helpers/index.js'
import { type NatsServer, startNatsServer } from '../helpers/nats.js'

const README = readFileSync(join(ROOT_DIR, 'README.md'), 'utf8')

/** The marked blocks, by name, in the README's order. */
const BLOCKS = new Map(
  [...README.matchAll(/<!-- quickstart: ([a-z-]+) -->\n```(sh|js)\n([\s\S]*?)```\n/g)].map(
    (m) => [m[1] as string, { lang: m[2] as 'sh' | 'js', code: m[3] as string }] as const,
  ),
)

/** An empty folder to run a block in: a `noa` on PATH, node_modules as an app would have it. */
function workdir(): { dir: string; env: NodeJS.ProcessEnv } {
  const dir = tempDir('noa-readme-')
  const bin = join(dir, '.bin')
  mkdirSync(bin)
  writeFileSync(
    join(bin, 'noa'),
    `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(CLI)} "$@"\n`,
  )
  chmodSync(join(bin, 'noa'), 0o755)
  const modules = join(dir, 'node_modules')
  mkdirSync(modules)
  const own = join(ROOT_DIR, 'node_modules')
  for (const name of readdirSync(own)) {
    if (name !== '.bin' && name !== 'noa') symlinkSync(join(own, name), join(modules, name))
  }
  symlinkSync(ROOT_DIR, join(modules, 'noa'))
  const tmp = join(dir, '.tmp') // mktemp -d in a block lands here, removed with the rest
  mkdirSync(tmp)
  const env: NodeJS.ProcessEnv = { ...process.env, PATH: `${bin}:${process.env.PATH}`, TMPDIR: tmp }
  delete env.NOA_ROOT
  delete env.NOA_NATS_URL
  return { dir, env }
}

function run(
  name: string,
  extraEnv: NodeJS.ProcessEnv = {},
): { status: number | null; stdout: string; stderr: string } {
  const block = BLOCKS.get(name)
  if (block === undefined) throw new Error(`README has no <!-- quickstart: ${name} --> block`)
  const { dir, env } = workdir()
  const options = { cwd: dir, env: { ...env, ...extraEnv }, encoding: 'utf8' as const, timeout: 120_000 }
  if (block.lang === 'sh') {
    // A block that fails half-way leaves nothing running (a daemon it started in the background).
    const script = `trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n${block.code}`
    return spawnSync('bash', ['-e', '-o', 'pipefail', '-c', script], options)
  }
  const file = join(dir, `${name}.mjs`)
  writeFileSync(file, block.code)
  return spawnSync(process.execPath, [file], options)
}

describe('the README', () => {
  it('opens with the two set-up commands, the second being what .ci/run runs, and stays short', () => {
    const first = /```sh\n([\s\S]*?)```/.exec(README)?.[1] ?? ''
    expect(first.split('\n').map((l) => l.replace(/\s+#.*$/, ''))).toEqual([
      'npm install && npm start',
      'npm install && npm test',
      '',
    ])
    expect(README.indexOf('```sh')).toBeLessThan(README.indexOf('## Requirements'))
    expect(readFileSync(join(ROOT_DIR, '.ci', 'run'), 'utf8')).toContain("bash -c 'npm install && npm test'")
    expect(README.split('\n').length).toBeLessThanOrEqual(300)
  })

  it('has a quick start for each main job', () => {
    expect([...BLOCKS.keys()]).toEqual([
      'cli',
      'library',
      'serve',
      'langgraph',
      'agents',
      'replicate',
      'growth',
    ])
  })

  it('quick start, a bounded disk: du, prune, gc and compact, and the log starts at its base', () => {
    const r = run('growth')
    expect(r.status, r.stderr).toBe(0)
    expect(r.stdout).toMatch(
      /^workspace +log +checksums +own objects +shared objects +prunable +compactable$/m,
    )
    expect(r.stdout).toMatch(/^main\tdropped noa_[0-9a-f]{64}$/m)
    expect(r.stdout).toMatch(/^freed \d+ B: 4 unreachable objects/m)
    expect(r.stdout).toMatch(/^main: compacted up to seq 6 \(snapshot noa_[0-9a-f]{64}\)/m)
    expect(r.stdout).toMatch(
      /^\{"seq":6,"op":"base","snapshot_id":"noa_[0-9a-f]{64}","ts":\d+\}\n\{"seq":7,"op":"snapshot",/m,
    )
  })

  it('quick start, the command line: blob put, append, snapshot, fork, merge, checkout, diff', () => {
    const r = run('cli')
    expect(r.status, r.stderr).toBe(0)
    expect(r.stdout).toMatch(/^\{"seq":1,"ts":\d+\}$/m)
    expect(r.stdout).toMatch(/^feature\tforked from noa_[0-9a-f]{64} \(main\)$/m)
    expect(r.stdout).toContain('\ngreeting.txt\nnotes.md\n')
    expect(r.stdout).toContain('\nA\tgreeting.txt\nD\thello.txt\nA\tnotes.md\n')
    expect(r.stdout).toMatch(/^\{"seq":\d+,"op":"merge","from_workspace":"feature",/m)
  })

  it('quick start, the library: append, read, snapshot', () => {
    const r = run('library')
    expect(r.stderr).toBe('')
    expect(r.status).toBe(0)
    expect(r.stdout).toMatch(/^\{ seq: 1, ts: \d+ \}\n1 write\n2 rename\nnoa_[0-9a-f]{64} \[/)
    expect(r.stdout).toMatch(/'src\/b\.ts',\s+'[0-9a-f]{64}'/)
  })

  it('quick start, noa serve: an append from another process goes through the daemon, which drains on SIGTERM', () => {
    const r = run('serve')
    expect(r.status, r.stderr).toBe(0)
    expect(r.stdout).toMatch(/^noa serve: serving .*\/\.noa on .*\/\.noa\/noa\.sock \(pid \d+\)$/m)
    expect(r.stdout).toMatch(/^\{"seq":1,"op":"delete","path":"a","ts":\d+\}$/m)
  })

  it('quick start, LangGraph: a graph with no model, every step checkpointed, then forked', () => {
    const r = run('langgraph')
    expect(r.stderr).toBe('')
    expect(r.status).toBe(0)
    expect(r.stdout).toBe("[ 'start', 'plan', 'act' ]\n")
  })

  it('quick start, Agents SDK: the session part, no model and no API key', () => {
    const r = run('agents', { OPENAI_API_KEY: '' })
    expect(r.stderr).toBe('')
    expect(r.status).toBe(0)
    expect(r.stdout).toContain("{ role: 'user', content: 'My order is late.' }")
    expect(r.stdout).toMatch(
      /\n\{\n {2}role: 'assistant',\n {2}status: 'completed',\n {2}content: \[ \{ type: 'output_text', text: 'Let me check\.' \} \]\n\}\n$/,
    )
  })

  describe('quick start, replication', () => {
    let nats: NatsServer
    beforeAll(async () => {
      nats = await startNatsServer() // a fresh server: the block creates the stream NOA itself
    })
    afterAll(async () => {
      await nats?.stop()
    })

    it('init, push from one root, pull into another: the same bytes, in sync', () => {
      const r = run('replicate', { NOA_NATS_URL: nats.url })
      expect(r.status, r.stderr).toBe(0)
      expect(r.stdout).toMatch(/^created stream NOA for noa\.>$/m)
      expect(r.stdout).toContain('\nthe same bytes\n')
      expect(r.stdout).toMatch(/^main +1 +1 +in-sync +0 +0\.000$/m)
    })
  })
})

/** GitHub's anchor for a heading: lower case, punctuation but - and _ dropped, spaces as -. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-')
}

function anchors(text: string): Set<string> {
  const out = new Set<string>()
  let fence = false
  for (const line of text.split('\n')) {
    if (line.startsWith('```')) fence = !fence
    const m = fence ? null : /^#{1,6} (.*)$/.exec(line)
    if (m) out.add(slug(m[1] as string))
  }
  return out
}

/** Pages other branches add (issue 38's siblings); linked from the README before they land. */
const COMING = new Set(['docs/chunked-objects.md', 'docs/retention.md', 'docs/compaction.md'])

describe('links of the README and docs/', () => {
  it('every relative link names a file that exists, and every #anchor a heading of it', () => {
    const pages = ['README.md', ...readdirSync(join(ROOT_DIR, 'docs')).map((f) => `docs/${f}`)].filter((f) =>
      f.endsWith('.md'),
    )
    const broken: string[] = []
    for (const page of pages) {
      const text = readFileSync(join(ROOT_DIR, page), 'utf8')
      let fence = false
      for (const line of text.split('\n')) {
        if (line.startsWith('```')) fence = !fence
        if (fence) continue
        for (const m of line.matchAll(/\]\(([^)\s]+)\)/g)) {
          const target = m[1] as string
          if (/^[a-z]+:/.test(target)) continue
          const [path, anchor] = target.split('#') as [string, string | undefined]
          const file = path === '' ? join(ROOT_DIR, page) : resolve(dirname(join(ROOT_DIR, page)), path)
          const rel = file.slice(ROOT_DIR.length)
          if (!existsSync(file)) {
            if (!COMING.has(rel)) broken.push(`${page}: ${target} (no such file)`)
            continue
          }
          if (anchor !== undefined && !anchors(readFileSync(file, 'utf8')).has(anchor)) {
            broken.push(`${page}: ${target} (no such heading)`)
          }
        }
      }
    }
    expect(broken).toEqual([])
  })
})
