/** checkout, diff and history: what a user does with snapshots every day. */
import { existsSync, lstatSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { describe, expect, it } from 'vitest'
import type { EntryInput } from '../../dist/src/index.js'
import { sha256, TREE_HEADER } from '../../dist/src/store/index.js'
import { runCli, tempDir } from '../helpers/index.js'
import { refusal, setup } from '../helpers/snapshot.js'

/** Every file under dir (relative path → content), symlinks as `-> target`. */
function readTree(dir: string): Record<string, string> {
  const out: Record<string, string> = {}
  for (const f of readdirSync(dir, { recursive: true, encoding: 'utf8' })) {
    const full = join(dir, f)
    const st = lstatSync(full)
    if (st.isFile()) out[f] = readFileSync(full, 'utf8')
  }
  return out
}

async function stored(ctx: Awaited<ReturnType<typeof setup>>, content: Record<string, string>) {
  const entries: EntryInput[] = []
  for (const [path, text] of Object.entries(content)) {
    entries.push({ op: 'write', path, blob: await ctx.engine.store.putBlob(text) })
  }
  return entries
}

describe('checkout', () => {
  it('writes a merge result byte for byte (API and CLI), and ws@seq is the state after that entry', async () => {
    const ctx = await setup()
    const { root, log, engine } = ctx
    await log.appendMany(
      'main',
      await stored(ctx, { 'a.txt': 'one\n', 'src/b.ts': 'two\n', 'src/c/d.md': '# d\n' }),
    )
    const base = await engine.snapshot('main')
    await engine.fork('feat', base.snapshotId as string)
    await log.appendMany('feat', await stored(ctx, { 'src/b.ts': 'two, changed\n', 'new.txt': 'new\n' }))
    await log.append('main', { op: 'delete', path: 'a.txt' })
    const m = await engine.merge('main', ['feat'])
    const dir = join(tempDir(), 'out')
    const r = await engine.checkout(m.snapshotId as string, dir)
    expect(r).toMatchObject({ files: 3, bytes: 21, snapshotId: m.snapshotId, tree: m.tree, dir })
    const tree = await engine.tree(m.snapshotId as string)
    const expected: Record<string, string> = {}
    for (const [path, blob] of tree.entries()) expected[path] = (await engine.store.getBlob(blob)).toString()
    expect(readTree(dir)).toEqual(expected)
    expect(expected).toEqual({ 'src/b.ts': 'two, changed\n', 'src/c/d.md': '# d\n', 'new.txt': 'new\n' })
    expect(readdirSync(dir).some((n) => n.includes('.noa-checkout'))).toBe(false) // no temp file left
    const cliDir = join(tempDir(), 'cli')
    const c = runCli(['checkout', m.snapshotId as string, cliDir, '--root', root])
    expect(c.status).toBe(0)
    expect(c.stdout).toBe(`3 files, 21 bytes of ${m.snapshotId} (tree ${m.tree}) into ${cliDir}\n`)
    expect(readTree(cliDir)).toEqual(expected)
    // main@5 is after main's delete (seq 5) and before the merge; main@1 is the first write only.
    const at5 = join(tempDir(), 'at5')
    await engine.checkout('main@5', at5)
    expect(readTree(at5)).toEqual({ 'src/b.ts': 'two\n', 'src/c/d.md': '# d\n' })
    const at1 = join(tempDir(), 'at1')
    await engine.checkout('main@1', at1)
    expect(readTree(at1)).toEqual({ 'a.txt': 'one\n' })
    expect((await refusal(engine.checkout('main@99', join(tempDir(), 'x')))).message).toBe(
      'workspace main has no seq 99 (its last seq is 7)',
    )
    expect((await refusal(engine.checkout('../x', join(tempDir(), 'x')))).code).toBe('NOA_BAD_ARGUMENT')
  })

  it("refuses a folder that is not empty unless forced, and then replaces only the tree's files", async () => {
    const ctx = await setup()
    await ctx.log.appendMany('ws', await stored(ctx, { a: 'A', 'd/b': 'B' }))
    const s = await ctx.engine.snapshot('ws')
    const dir = tempDir()
    writeFileSync(join(dir, 'a'), 'old')
    writeFileSync(join(dir, 'keep'), 'mine')
    const err = await refusal(ctx.engine.checkout(s.snapshotId as string, dir))
    expect(err.code).toBe('NOA_EXISTS')
    expect(err.message).toMatch(/is not empty \(2 entries\).*pass force: true/)
    expect(readFileSync(join(dir, 'a'), 'utf8')).toBe('old')
    await ctx.engine.checkout(s.snapshotId as string, dir, { force: true })
    expect(readTree(dir)).toEqual({ a: 'A', 'd/b': 'B', keep: 'mine' })
  })

  /** A snapshot whose tree object holds exactly these records (paths unchecked, as a forger would). */
  async function hostile(paths: string[]) {
    const ctx = await setup()
    const blob = await ctx.engine.store.putBlob('pwned\n')
    const bytes = Buffer.from(`${TREE_HEADER}${paths.map((p) => `${p}\0${blob}\n`).join('')}`, 'utf8')
    const [tree] = await ctx.engine.store.putObjects([bytes])
    const record = await ctx.engine.store.putSnapshot(
      { workspace: 'evil', tree: tree as string, since: 0, seq: 0, message: '', ts: 1 },
      [],
    )
    return { ...ctx, id: record.id }
  }

  it('never writes outside the folder: hostile paths are refused, named, before anything is written', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['../escape'], /path "..\/escape" cannot be checked out \(path: has a '..' segment/],
      [['ok', 'a/../../escape'], /"a\/..\/..\/escape" cannot be checked out/],
      [['/etc/evil'], /"\/etc\/evil" cannot be checked out \(path: must be relative/],
      [['a//b'], /empty segment/],
      [[`${'x'.repeat(300)}`], /has a name longer than 255 bytes/],
      [['a', 'a/b'], /"a" is a file and also the folder of "a\/b"/],
    ]
    for (const [paths, message] of cases) {
      const { engine, id } = await hostile(paths)
      const parent = tempDir()
      const dir = join(parent, 'out')
      const err = await refusal(engine.checkout(id, dir))
      expect(err.message, paths.join(',')).toMatch(message)
      expect(err.message).toMatch(/nothing was written$/)
      expect(readdirSync(parent)).toEqual([]) // refused before even the folder is made
      expect(existsSync(join(dirname(parent), 'escape'))).toBe(false)
    }
    // Control characters are legal in a name: written inside the folder, nowhere else.
    const { engine, id } = await hostile(['ctl\u0001\nname', 'sub/\u001b[31mred'])
    const dir = join(tempDir(), 'out')
    await engine.checkout(id, dir)
    expect(Object.keys(readTree(dir)).sort()).toEqual(['ctl\u0001\nname', 'sub/\u001b[31mred'])
  })

  it('refuses symlinks already in the folder, and names that differ only by case on a case-insensitive filesystem', async () => {
    const { engine, id } = await hostile(['link/file', 'plain'])
    const outside = tempDir()
    const dir = tempDir()
    symlinkSync(outside, join(dir, 'link'))
    const err = await refusal(engine.checkout(id, dir, { force: true }))
    expect(err.message).toBe(
      `${join(dir, 'link')} is a symlink; the tree needs a folder there; nothing was written`,
    )
    expect(readdirSync(outside)).toEqual([])
    expect(existsSync(join(dir, 'plain'))).toBe(false)
    const onFile = await hostile(['target'])
    const dir2 = tempDir()
    writeFileSync(join(outside, 'victim'), 'safe')
    symlinkSync(join(outside, 'victim'), join(dir2, 'target'))
    const err2 = await refusal(onFile.engine.checkout(onFile.id, dir2, { force: true }))
    expect(err2.message).toMatch(/target is a symlink; the tree has a file there/)
    expect(readFileSync(join(outside, 'victim'), 'utf8')).toBe('safe')
    const cased = await hostile(['Readme.md', 'docs/x', 'DOCS/y', 'readme.md'])
    const err3 = await refusal(
      cased.engine.checkout(cased.id, join(tempDir(), 'o'), { caseInsensitive: true }),
    )
    expect(err3.message).toMatch(/"(docs|DOCS)" and "(DOCS|docs)" differ only by case/)
    // Detected on the folder itself: this filesystem tells names apart, so both are written.
    const dir3 = join(tempDir(), 'o')
    await cased.engine.checkout(cased.id, dir3)
    expect(Object.keys(readTree(dir3)).length).toBe(4)
  })

  it('names every missing blob with the seq that wrote it, and writes nothing', async () => {
    const ctx = await setup()
    const good = await ctx.engine.store.putBlob('here')
    await ctx.log.appendMany('ws', [
      { op: 'write', path: 'ok', blob: good },
      { op: 'write', path: 'gone', blob: sha256('never stored') },
    ])
    const dir = join(tempDir(), 'o')
    const err = await refusal(ctx.engine.checkout('ws', dir))
    expect(err.code).toBe('NOA_MISSING_BLOB')
    expect(err.message).toBe(
      `1 blob is not in the object store: "gone" (blob ${sha256('never stored')}, written at seq 2 of ws); nothing was written`,
    )
    expect(readdirSync(dir)).toEqual([])
  })
})

describe('diff and history', () => {
  it('lists added, removed and changed paths, with --stat and --patch (text and binary)', async () => {
    const ctx = await setup()
    const { root, log, engine } = ctx
    await log.appendMany('ws', await stored(ctx, { keep: 'same\n', edit: 'a\nb\nc\n', gone: 'bye\n' }))
    const s1 = await engine.snapshot('ws')
    await log.appendMany('ws', [
      ...(await stored(ctx, { edit: 'a\nB\nc\n', added: 'hi\n', bin: 'x\u0000y' })),
      { op: 'delete', path: 'gone' },
    ])
    const d = await engine.diff(s1.snapshotId as string, 'ws')
    expect(d.changes.map((c) => [c.status, c.path])).toEqual([
      ['added', 'added'],
      ['added', 'bin'],
      ['changed', 'edit'],
      ['removed', 'gone'],
    ])
    expect(d).toMatchObject({ added: 2, removed: 1, changed: 1, a: { snapshotId: s1.snapshotId } })
    const cli = (args: string[]) => runCli(['diff', ...args, '--root', root])
    expect(cli([s1.snapshotId as string, 'ws']).stdout).toBe('A\tadded\nA\tbin\nM\tedit\nD\tgone\n')
    expect(cli([s1.snapshotId as string, 'ws', '--stat']).stdout).toBe(
      ' added | 1 +\n bin   | Bin\n edit  | 2 +-\n gone  | 1 -\n 4 files changed (2 added, 1 removed, 1 changed), 2 insertions(+), 2 deletions(-)\n',
    )
    const patch = cli([s1.snapshotId as string, 'ws', '--patch']).stdout
    expect(patch).toContain('--- a/edit\n+++ b/edit\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n')
    expect(patch).toContain('Binary files /dev/null and b/bin differ\n')
    expect(patch).toContain('--- /dev/null\n+++ b/added\n@@ -0,0 +1 @@\n+hi\n')
    expect(patch).toContain('--- a/gone\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n')
    const json = JSON.parse(cli([s1.snapshotId as string, 'ws@8', '--json', '--stat']).stdout)
    expect(json.changes.find((c: { path: string }) => c.path === 'edit')).toMatchObject({
      status: 'changed',
      insertions: 1,
      deletions: 1,
      binary: false,
    })
    expect(cli(['ws', 'ws']).stdout).toBe('')
  })

  it('draws the snapshot, fork and merge graph oldest first, with merge sources and conflicts', async () => {
    const ctx = await setup()
    const { root, log, engine } = ctx
    await log.appendMany('main', await stored(ctx, { a: '1' }))
    const base = await engine.snapshot('main', { message: 'base' })
    await engine.fork('feat', base.snapshotId as string)
    await log.appendMany('feat', await stored(ctx, { a: 'feat' }))
    await log.appendMany('main', await stored(ctx, { a: 'main' }))
    const m = await engine.merge('main', ['feat'])
    expect(m.conflicts.map((c) => c.path)).toEqual(['a'])
    const nodes = await engine.history('main')
    expect(nodes.map((n) => n.kind)).toEqual(['snapshot', 'snapshot', 'merge'])
    expect(nodes[0]?.snapshotId).toBe(base.snapshotId)
    expect(nodes[2]).toMatchObject({
      snapshotId: m.snapshotId,
      parents: [base.snapshotId, m.sources[0]?.snapshotId],
      base: base.snapshotId,
      conflicts: [{ path: 'a', winner: 'main' }],
    })
    const text = runCli(['history', 'main', '--root', root]).stdout.split('\n')
    expect(text[0]).toMatch(/^\* {2}noa_\w{12} snapshot main@1 .* base$/)
    expect(text[1]).toBe('| \\')
    expect(text[2]).toMatch(/^\| \* {2}noa_\w{12} snapshot feat@2 /)
    expect(text[3]).toBe('| /')
    expect(text[4]).toMatch(
      /^\* {2}noa_\w{12} merge main@3 .*\[merged noa_\w{12}; base noa_\w{12}\] \[1 conflict: a kept main\]$/,
    )
    expect(JSON.parse(runCli(['history', 'main', '--json', '--root', root]).stdout)).toHaveLength(3)
  })
})
