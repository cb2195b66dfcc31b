import { existsSync, readFileSync, utimesSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { runCli, tempDir } from '../helpers/index.js'

describe('noa memory', () => {
  it('save, list, recall, index, inject, rename, rm', () => {
    const dir = join(tempDir(), 'mem')
    const save = runCli(
      [
        'memory',
        'save',
        '--dir',
        dir,
        '--name',
        'Deploy steps',
        '--description',
        'how we ship',
        '--type',
        'project',
      ],
      { input: Buffer.from('Run make deploy.\n\n') },
    )
    expect(save).toMatchObject({ status: 0, stdout: `${join(dir, 'deploy-steps.md')}\n`, stderr: '' })
    expect(readFileSync(join(dir, 'deploy-steps.md'), 'utf8')).toBe(
      '---\nname: Deploy steps\ndescription: how we ship\ntype: project\n---\n\nRun make deploy.\n',
    )
    expect(
      runCli(['memory', 'save', '--dir', dir, '--name', '日本語'], { input: Buffer.from('server notes') })
        .status,
    ).toBe(0)
    utimesSync(join(dir, 'deploy-steps.md'), 1_700_000_000, 1_700_000_000)

    const list = runCli(['memory', 'list', '--dir', dir, '--json'])
    expect(list.status).toBe(0)
    const notes = JSON.parse(list.stdout)
    expect(notes.map((n: object) => Object.keys(n))).toEqual([
      ['name', 'description', 'type', 'file', 'mtime'],
      ['name', 'description', 'type', 'file', 'mtime'],
    ])
    expect(notes[0]).toMatchObject({ name: '日本語', description: '', type: '' })
    expect(notes[0].file).toMatch(/^note-[0-9a-f]{8}\.md$/)
    expect(notes[1]).toEqual({
      name: 'Deploy steps',
      description: 'how we ship',
      type: 'project',
      file: 'deploy-steps.md',
      mtime: '2023-11-14T22:13:20Z',
    })
    const text = runCli(['memory', 'list', '--dir', dir])
    expect(text.stdout).toContain('deploy-steps.md  Deploy steps [project] — how we ship\n')

    const recall = runCli(['memory', 'recall', '--dir', dir, '--json', 'deploy', 'the', 'server'])
    expect(recall.status).toBe(0)
    expect(JSON.parse(recall.stdout).map((h: { name: string; score: number }) => [h.name, h.score])).toEqual([
      ['Deploy steps', 4], // 3 in name, 1 in body
      ['日本語', 1],
    ])
    expect(JSON.parse(recall.stdout)[0].content).toBe('Run make deploy.\n')
    const limited = runCli(['memory', 'recall', '--dir', dir, '--limit', '1', 'deploy', 'server'])
    expect(limited.stdout).toBe('  4  deploy-steps.md  Deploy steps [project] — how we ship\n')

    const index = runCli(['memory', 'index', '--dir', dir])
    expect(index.status).toBe(0)
    expect(index.stdout).toBe(readFileSync(join(dir, 'MEMORY.md'), 'utf8'))
    expect(index.stdout).toBe(
      `# Memory\n\n- [日本語](${notes[0].file}) — \n- [Deploy steps](deploy-steps.md) — how we ship\n`,
    )

    const inject = runCli(['memory', 'inject', '--dir', dir, 'deploy'])
    expect(inject.stdout).toMatch(
      /^Relevant memories \(saved earlier\):\n\n--- Deploy steps \(saved \d+ days ago\) ---\n\(This memory is a point-in-time note, not live state — verify claims about code against the current source before relying on them\.\)\nRun make deploy\.\n$/,
    )

    const renamed = runCli(['memory', 'rename', '--dir', dir, 'Deploy steps', 'Shipping'])
    expect(renamed).toMatchObject({ status: 0, stdout: `${join(dir, 'shipping.md')}\n` })
    const rm = runCli(['memory', 'rm', '--dir', dir, '日本語'])
    expect(rm).toMatchObject({ status: 0, stdout: `${join(dir, notes[0].file)}\n` })
    expect(readFileSync(join(dir, 'MEMORY.md'), 'utf8')).toBe(
      '# Memory\n\n- [Shipping](shipping.md) — how we ship\n',
    )
    expect(runCli(['memory', 'rm', '--dir', dir, '日本語'])).toMatchObject({
      status: 1,
      stderr: `noa memory: no memory named "日本語" in ${dir}\n`,
    })
  })

  it('refuses bad input with a clear message and writes nothing', () => {
    const dir = join(tempDir(), 'mem')
    const cases: Array<[string[], string, RegExp]> = [
      [['--name', ''], 'x', /memory name is empty/],
      [['--name', 'a\nb'], 'x', /memory name must be one line/],
      [['--name', 'a', '--description', 'x\ny'], 'x', /memory description must be one line/],
      [
        ['--name', 'a', '--type', 'bogus'],
        'x',
        /memory type must be one of user, feedback, project, reference/,
      ],
      [['--name', 'a'], '\xff', /memory body on stdin is not valid UTF-8/],
    ]
    for (const [args, input, message] of cases) {
      // runCli's string input goes through its `encoding: 'buffer'` option, which Node refuses; pass bytes.
      const r = runCli(['memory', 'save', '--dir', dir, ...args], { input: Buffer.from(input, 'latin1') })
      expect(r.status).toBe(1)
      expect(r.stderr).toMatch(new RegExp(`^noa memory: ${message.source}`))
      expect(r.stdout).toBe('')
    }
    expect(existsSync(dir)).toBe(false)
  })

  it('usage errors exit 2', () => {
    const dir = tempDir()
    const usage: string[][] = [
      ['memory'],
      ['memory', 'frobnicate', '--dir', dir],
      ['memory', 'list'],
      ['memory', 'list', '--dir', dir, '--bogus'],
      ['memory', 'save', '--dir', dir],
      ['memory', 'recall', '--dir', dir],
      ['memory', 'recall', '--dir', dir, '--limit=-1', 'q'],
      ['memory', 'inject', '--dir', dir, '--limit', '0', 'q'],
      ['memory', 'rm', '--dir', dir],
      ['memory', 'rename', '--dir', dir, 'only-one'],
    ]
    for (const args of usage) {
      const r = runCli(args)
      expect(r.status, args.join(' ')).toBe(2)
      expect(r.stderr).toMatch(/^noa memory: .*\nusage: noa memory/s)
    }
    expect(runCli(['memory', '--help'])).toMatchObject({
      status: 0,
      stdout: expect.stringMatching(/^usage: noa memory/),
    })
  })
})
