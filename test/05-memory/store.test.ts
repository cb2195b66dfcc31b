import { execFileSync, spawnSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { isNoaError } from '../../dist/src/index.js'
import { MemoryStore } from '../../dist/src/memory/index.js'
import { DIST, tempDir } from '../helpers/index.js'
import { isRoot, nodeAsOtherUser, OTHER_UID } from '../helpers/users.js'

const h8 = (name: string) => createHash('sha256').update(name, 'utf8').digest('hex').slice(0, 8)

/** Sets a file's mtime to a whole second (exact on every file system). */
function setMtime(path: string, seconds: number): void {
  utimesSync(path, seconds, seconds)
}

function refusal(fn: () => unknown): { code: string; message: string } {
  try {
    fn()
  } catch (err) {
    if (isNoaError(err)) return { code: err.code, message: err.message }
    throw err
  }
  throw new Error('expected a refusal')
}

/** The directory's files other than the lock file, sorted. */
function files(dir: string): string[] {
  return readdirSync(dir)
    .filter((f) => f !== '.memory.lock')
    .sort()
}

describe('save', () => {
  it('writes Norma bytes and the index, byte for byte', () => {
    const dir = join(tempDir(), 'memory')
    const store = new MemoryStore(dir)
    const saved = store.save({
      name: 'Deploy steps',
      description: 'how we ship',
      type: 'project',
      content: 'Run `make deploy`.\nThen tag.\n\n',
    })
    expect(saved).toMatchObject({
      name: 'Deploy steps',
      description: 'how we ship',
      type: 'project',
      content: 'Run `make deploy`.\nThen tag.\n',
      file: 'deploy-steps.md',
      path: join(dir, 'deploy-steps.md'),
    })
    expect(saved.mtime).toBeInstanceOf(Date)
    expect(readFileSync(join(dir, 'deploy-steps.md'), 'utf8')).toBe(
      '---\nname: Deploy steps\ndescription: how we ship\ntype: project\n---\n\nRun `make deploy`.\nThen tag.\n',
    )
    expect(statSync(join(dir, 'deploy-steps.md')).mode & 0o777).toBe(0o644)
    store.save({ name: 'User prefs', content: 'Tabs.' })
    expect(readFileSync(join(dir, 'user-prefs.md'), 'utf8')).toBe(
      '---\nname: User prefs\ndescription: \n---\n\nTabs.\n',
    )
    setMtime(join(dir, 'deploy-steps.md'), 1_700_000_100)
    setMtime(join(dir, 'user-prefs.md'), 1_700_000_000)
    const index =
      '# Memory\n\n- [Deploy steps](deploy-steps.md) — how we ship\n- [User prefs](user-prefs.md) — \n'
    expect(store.rebuildIndex()).toBe(index)
    expect(readFileSync(join(dir, 'MEMORY.md'), 'utf8')).toBe(index)
    expect(store.index()).toBe(index)
    expect(files(dir)).toEqual(['MEMORY.md', 'deploy-steps.md', 'user-prefs.md'])
  })

  it('an empty directory indexes as (no memories yet); index() does not write', () => {
    const dir = tempDir()
    const store = new MemoryStore(dir)
    expect(store.index()).toBe('# Memory\n\n(no memories yet)\n')
    expect(existsSync(join(dir, 'MEMORY.md'))).toBe(false)
    expect(new MemoryStore(join(dir, 'missing')).scan()).toEqual([])
    expect(store.rebuildIndex()).toBe('# Memory\n\n(no memories yet)\n')
    expect(readFileSync(join(dir, 'MEMORY.md'), 'utf8')).toBe('# Memory\n\n(no memories yet)\n')
  })

  it('updates a note with the same name in place', () => {
    const dir = tempDir()
    const store = new MemoryStore(dir)
    store.save({ name: 'Deploy', description: 'v1', type: 'project', content: 'one' })
    store.save({ name: 'Deploy', description: 'v2', content: 'two' })
    expect(files(dir)).toEqual(['MEMORY.md', 'deploy.md'])
    expect(readFileSync(join(dir, 'deploy.md'), 'utf8')).toBe(
      '---\nname: Deploy\ndescription: v2\n---\n\ntwo\n',
    )
    // Surrounding space cannot be read back, so it is not written: " Deploy " is the same note.
    store.save({ name: ' Deploy ', description: ' v3 ', content: 'three' })
    expect(files(dir)).toEqual(['MEMORY.md', 'deploy.md'])
    expect(store.read('Deploy')).toMatchObject({ description: 'v3', content: 'three\n' })
  })

  it('keeps both notes when slugs collide or are empty, with stable names', () => {
    const dir = tempDir()
    const store = new MemoryStore(dir)
    const saves = ['Foo', 'FOO', 'foo!', '日本語', '中文', '🎉', 'Foo', '日本語']
    const got = saves.map((name) => store.save({ name, content: `about ${name}` }).file)
    expect(got).toEqual([
      'foo.md',
      `foo-${h8('FOO')}.md`,
      `foo-${h8('foo!')}.md`,
      `note-${h8('日本語')}.md`,
      `note-${h8('中文')}.md`,
      `note-${h8('🎉')}.md`,
      'foo.md',
      `note-${h8('日本語')}.md`,
    ])
    const notes = store.scan()
    expect(notes.map((n) => n.name).sort()).toEqual(['FOO', 'Foo', 'foo!', '中文', '日本語', '🎉'].sort())
    for (const n of notes) expect(n.content).toBe(`about ${n.name}\n`)
    const index = readFileSync(join(dir, 'MEMORY.md'), 'utf8')
    for (const n of notes) expect(index).toContain(`- [${n.name}](${n.file}) — \n`)
  })

  it('never writes over a file it does not own', () => {
    const dir = tempDir()
    writeFileSync(join(dir, 'foo.md'), 'hand-written, no frontmatter\n') // name "foo" (stem)
    symlinkSync(join(dir, 'nowhere'), join(dir, 'bar.md')) // dangling
    mkdirSync(join(dir, 'baz.md'))
    writeFileSync(join(dir, `qux-${h8('Qux')}.md`), '---\nname: someone else\n---\n')
    writeFileSync(join(dir, 'qux.md'), '---\nname: qux.\n---\n')
    const store = new MemoryStore(dir)
    expect(store.save({ name: 'Foo', content: 'x' }).file).toBe(`foo-${h8('Foo')}.md`)
    expect(store.save({ name: 'Bar', content: 'x' }).file).toBe(`bar-${h8('Bar')}.md`)
    expect(store.save({ name: 'Baz', content: 'x' }).file).toBe(`baz-${h8('Baz')}.md`)
    expect(store.save({ name: 'Qux', content: 'x' }).file).toBe(`qux-${h8('Qux')}-2.md`)
    expect(readFileSync(join(dir, 'foo.md'), 'utf8')).toBe('hand-written, no frontmatter\n')
    // The stem-named note is its own note: saving its name updates it.
    expect(store.save({ name: 'foo', content: 'now with frontmatter' }).file).toBe('foo.md')
  })

  it('updates a note where it lives, whatever its file is called', () => {
    const dir = tempDir()
    writeFileSync(join(dir, 'My notes.md'), '---\nname: Prefs\ndescription: old\n---\n\nold\n')
    const store = new MemoryStore(dir)
    expect(store.save({ name: 'Prefs', description: 'new', content: 'new' }).file).toBe('My notes.md')
    expect(files(dir)).toEqual(['MEMORY.md', 'My notes.md'])
    expect(readFileSync(join(dir, 'MEMORY.md'), 'utf8')).toBe('# Memory\n\n- [Prefs](My%20notes.md) — new\n')
  })

  it('refuses bad input and writes nothing', () => {
    const root = tempDir()
    const dir = join(root, 'memory')
    const store = new MemoryStore(dir)
    const bad = [
      { name: '' },
      { name: '   ' },
      { name: 'two\nlines' },
      { name: 'ok', description: 'two\nlines' },
      { name: 'ok', type: 'bogus' },
    ]
    for (const input of bad) expect(refusal(() => store.save(input)).code).toBe('NOA_BAD_ARGUMENT')
    expect(existsSync(dir)).toBe(false)
    store.save({ name: 'ok', content: 'kept' })
    const before = files(dir).map((f) => [f, readFileSync(join(dir, f), 'utf8')])
    for (const input of bad) expect(refusal(() => store.save(input)).code).toBe('NOA_BAD_ARGUMENT')
    expect(files(dir).map((f) => [f, readFileSync(join(dir, f), 'utf8')])).toEqual(before)
  })

  it('reads notes of any type', () => {
    const dir = tempDir()
    writeFileSync(join(dir, 'x.md'), '---\nname: X\ntype: Something Else\n---\nbody\n')
    expect(new MemoryStore(dir).scan()[0]).toMatchObject({
      name: 'X',
      type: 'Something Else',
      content: 'body\n',
    })
  })

  it('removes temp files of writers that died, and only those', () => {
    const dir = tempDir()
    writeFileSync(join(dir, '.foo.md.0123456789ab.tmp'), 'half')
    writeFileSync(join(dir, '.MEMORY.md.abcdef012345.tmp'), 'half')
    writeFileSync(join(dir, '.keep.tmp'), 'not ours')
    new MemoryStore(dir).save({ name: 'a', content: 'b' })
    expect(files(dir)).toEqual(['.keep.tmp', 'MEMORY.md', 'a.md'])
  })
})

describe('scan', () => {
  it('skips folders, the index and other files; reports the unreadable ones', () => {
    const dir = tempDir()
    const store = new MemoryStore(dir)
    store.save({ name: 'Good', content: 'fine' })
    mkdirSync(join(dir, 'folder.md'))
    writeFileSync(join(dir, 'folder.md', 'inner.md'), 'not scanned')
    writeFileSync(join(dir, 'notes.txt'), 'not a note')
    writeFileSync(join(dir, 'MEMORY.MD.bak'), 'not a note')
    symlinkSync(join(dir, 'missing-target.md'), join(dir, 'dangling.md'))
    symlinkSync('loop.md', join(dir, 'loop.md'))
    symlinkSync(join(dir, 'folder.md'), join(dir, 'dirlink.md'))
    symlinkSync(join(dir, 'good.md'), join(dir, 'alias.md'))
    writeFileSync(Buffer.from(`${dir}/bad-\xff.md`, 'latin1'), '---\nname: Latin1\n---\n')
    expect(spawnSync('mkfifo', [join(dir, 'pipe.md')]).status).toBe(0)

    const { notes, skipped } = store.scanReport()
    // Symlinks are never followed (Norma would read alias.md as a second copy of good.md).
    expect(notes.map((n) => n.file).sort()).toEqual(['good.md'])
    const byFile = Object.fromEntries(skipped.map((s) => [s.file, s]))
    for (const link of ['dangling.md', 'loop.md', 'dirlink.md', 'alias.md']) {
      expect(byFile[link]?.code).toBe('NOA_NOT_REGULAR_FILE')
      expect(byFile[link]?.reason).toMatch(/is a symlink, not a regular file/)
    }
    expect(byFile['pipe.md']?.reason).toMatch(/is a FIFO, not a regular file/)
    expect(byFile['bad-\ufffd.md']?.reason).toMatch(/not valid UTF-8/)
    expect(Object.keys(byFile).length).toBe(6)
    expect(store.scan()).toEqual(notes)
    // The index lists readable notes only, so it never links a file that cannot be read.
    expect(
      store
        .rebuildIndex()
        .split('\n')
        .filter((l) => l.startsWith('- ')).length,
    ).toBe(1)
  })

  it('skips and reports a note this user may not read (EACCES); the index does not link it', () => {
    const dir = tempDir()
    new MemoryStore(dir).save({ name: 'Good', content: 'fine' })
    writeFileSync(join(dir, 'secret.md'), '---\nname: Secret\n---\nx\n', { mode: 0o000 })
    type Seen = { report: ReturnType<MemoryStore['scanReport']>; index: string }
    let seen: Seen
    if (isRoot()) {
      // Root reads any file, so the scan and the index run as another user, who owns the folder
      // and its files and may read every one but the one whose mode is 000.
      execFileSync('chown', ['-R', `${OTHER_UID}:${OTHER_UID}`, dir])
      const memory = join(DIST, 'memory', 'index.js')
      const r = nodeAsOtherUser([
        '--input-type=module',
        '-e',
        `const { MemoryStore } = await import(${JSON.stringify(memory)}); const s = new MemoryStore(${JSON.stringify(dir)}); process.stdout.write(JSON.stringify({ report: s.scanReport(), index: s.rebuildIndex() }))`,
      ])
      expect(r.status, r.stderr).toBe(0)
      seen = JSON.parse(r.stdout) as Seen
    } else {
      const s = new MemoryStore(dir)
      seen = { report: s.scanReport(), index: s.rebuildIndex() }
    }
    expect(seen.report.notes.map((n) => n.file)).toEqual(['good.md'])
    expect(seen.report.skipped).toEqual([expect.objectContaining({ file: 'secret.md', code: 'EACCES' })])
    expect(seen.index).toContain('good.md')
    expect(seen.index).not.toContain('secret')
    expect(readFileSync(join(dir, 'MEMORY.md'), 'utf8')).toBe(seen.index)
  })

  it('orders newest first, equal mtimes by file name', () => {
    const dir = tempDir()
    const store = new MemoryStore(dir)
    for (const name of ['c', 'a', 'd', 'b']) store.save({ name, content: name })
    setMtime(join(dir, 'a.md'), 1_000)
    setMtime(join(dir, 'b.md'), 3_000)
    setMtime(join(dir, 'c.md'), 3_000)
    setMtime(join(dir, 'd.md'), 2_000)
    expect(store.scan().map((n) => n.name)).toEqual(['b', 'c', 'd', 'a'])
    expect(store.scan()[0]?.mtime?.getTime()).toBe(3_000_000)
  })
})

describe('recall and inject', () => {
  it('ranks by score, ties by newer mtime, then by file name', () => {
    const dir = tempDir()
    const store = new MemoryStore(dir)
    store.save({ name: 'Deploy old', content: 'x' })
    store.save({ name: 'Deploy b', content: 'x' })
    store.save({ name: 'Deploy a', content: 'x' })
    store.save({ name: 'Server', description: 'deploy target', content: 'x' })
    store.save({ name: 'Istanbul trip', type: 'user', content: 'deploy? no' })
    store.save({ name: 'Unrelated', content: 'nothing' })
    setMtime(join(dir, 'deploy-old.md'), 1_000)
    setMtime(join(dir, 'deploy-b.md'), 5_000)
    setMtime(join(dir, 'deploy-a.md'), 5_000)
    setMtime(join(dir, 'server.md'), 500)
    setMtime(join(dir, 'istanbul-trip.md'), 9_000)
    const ranked = store.recall('how do I deploy the server?').map((h) => [h.note.name, h.score])
    expect(ranked).toEqual([
      ['Server', 5],
      ['Deploy a', 3],
      ['Deploy b', 3],
      ['Deploy old', 3],
      ['Istanbul trip', 1],
    ])
    expect(store.recall('deploy server', 2).map((h) => h.note.name)).toEqual(['Server', 'Deploy a'])
    expect(store.recall('İSTANBUL user').map((h) => [h.note.name, h.score])).toEqual([['Istanbul trip', 6]])
    expect(store.recall('the and of')).toEqual([])
  })

  it('injects the top notes with their ages', () => {
    const dir = tempDir()
    const store = new MemoryStore(dir)
    const now = new Date(1_700_000_000_000)
    const at = (hoursAgo: number) => 1_700_000_000 - hoursAgo * 3600
    store.save({ name: 'Deploy fresh', content: 'fresh\n' })
    store.save({ name: 'Deploy stale', content: '  stale  \n' })
    store.save({ name: 'Deploy ancient', content: 'ancient' })
    store.save({ name: 'Deploy yesterday', content: 'y' })
    setMtime(join(dir, 'deploy-fresh.md'), at(1))
    setMtime(join(dir, 'deploy-yesterday.md'), at(30))
    setMtime(join(dir, 'deploy-stale.md'), at(48))
    setMtime(join(dir, 'deploy-ancient.md'), at(24 * 40))
    const stale =
      '(This memory is a point-in-time note, not live state — verify claims about code against the current source before relying on them.)'
    expect(store.inject('deploy', { now })).toBe(
      'Relevant memories (saved earlier):\n\n--- Deploy fresh (saved today) ---\nfresh\n' +
        '\n--- Deploy yesterday (saved yesterday) ---\ny\n' +
        `\n--- Deploy stale (saved 2 days ago) ---\n${stale}\nstale\n`,
    )
    expect(store.inject('deploy', { now, limit: 10 })).toContain(
      `\n--- Deploy ancient (saved 40 days ago) ---\n${stale}\nancient\n`,
    )
    expect(store.inject('nothing matches', { now })).toBe('')
  })
})

describe('delete and rename', () => {
  it('delete removes the note and its index line', () => {
    const dir = tempDir()
    const store = new MemoryStore(dir)
    store.save({ name: 'Keep', content: 'k' })
    store.save({ name: 'Drop', content: 'd' })
    expect(store.delete('Drop')).toEqual(['drop.md'])
    expect(files(dir)).toEqual(['MEMORY.md', 'keep.md'])
    expect(readFileSync(join(dir, 'MEMORY.md'), 'utf8')).toBe('# Memory\n\n- [Keep](keep.md) — \n')
    expect(refusal(() => store.delete('Drop')).code).toBe('NOA_NOT_FOUND')
    expect(refusal(() => new MemoryStore(join(dir, 'none')).delete('x')).code).toBe('NOA_NOT_FOUND')
  })

  it('delete removes every file that holds the name', () => {
    const dir = tempDir()
    writeFileSync(join(dir, 'dup.md'), '---\nname: Dup\n---\none\n')
    writeFileSync(join(dir, 'dup copy.md'), '---\nname: Dup\n---\ntwo\n')
    const store = new MemoryStore(dir)
    expect(store.delete('Dup').sort()).toEqual(['dup copy.md', 'dup.md'])
    expect(store.scan()).toEqual([])
    expect(readFileSync(join(dir, 'MEMORY.md'), 'utf8')).toBe('# Memory\n\n(no memories yet)\n')
  })

  it('rename moves the note to its new slug and keeps everything else', () => {
    const dir = tempDir()
    const store = new MemoryStore(dir)
    store.save({ name: 'Old name', description: 'd', type: 'feedback', content: 'body' })
    setMtime(join(dir, 'old-name.md'), 1_600_000_000)
    const renamed = store.rename('Old name', 'New name')
    expect(renamed).toMatchObject({
      name: 'New name',
      description: 'd',
      type: 'feedback',
      file: 'new-name.md',
    })
    expect(renamed.mtime?.getTime()).toBe(1_600_000_000_000)
    expect(files(dir)).toEqual(['MEMORY.md', 'new-name.md'])
    expect(readFileSync(join(dir, 'new-name.md'), 'utf8')).toBe(
      '---\nname: New name\ndescription: d\ntype: feedback\n---\n\nbody\n',
    )
    expect(readFileSync(join(dir, 'MEMORY.md'), 'utf8')).toBe('# Memory\n\n- [New name](new-name.md) — d\n')
    // Same slug: rewritten in place, not moved to a fallback name.
    expect(store.rename('New name', 'NEW NAME!').file).toBe('new-name.md')
    expect(files(dir)).toEqual(['MEMORY.md', 'new-name.md'])
  })

  it('rename refuses a missing note, an existing target and ambiguity', () => {
    const dir = tempDir()
    const store = new MemoryStore(dir)
    store.save({ name: 'A', content: 'a' })
    store.save({ name: 'B', content: 'b' })
    expect(refusal(() => store.rename('Z', 'Y')).code).toBe('NOA_NOT_FOUND')
    expect(refusal(() => store.rename('A', 'B'))).toMatchObject({ code: 'NOA_CONFLICT' })
    expect(refusal(() => store.rename('A', 'bad\nname')).code).toBe('NOA_BAD_ARGUMENT')
    writeFileSync(join(dir, 'a copy.md'), '---\nname: A\n---\ncopy\n')
    expect(refusal(() => store.rename('A', 'C')).message).toMatch(/several files hold memory "A"/)
    expect(files(dir)).toEqual(['MEMORY.md', 'a copy.md', 'a.md', 'b.md'])
    // A rename whose new slug is taken by another note goes to a distinct name.
    expect(store.rename('B', 'a!').file).toBe(`a-${h8('a!')}.md`)
  })
})
