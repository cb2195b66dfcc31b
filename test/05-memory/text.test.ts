import { describe, expect, it } from 'vitest'
import { goToLower, goTrimSpace } from '../../dist/src/gocompat/public.js'
import { isNoaError } from '../../dist/src/index.js'
import {
  age,
  checkMemory,
  type MemoryNote,
  parseMemory,
  relevant,
  renderForInjection,
  renderIndex,
  renderMemory,
  score,
  slug,
  tokenize,
} from '../../dist/src/memory/index.js'

describe('slug (Go: strings.ToLower, [^a-z0-9]+ → -, trim -)', () => {
  const table: Array<[string, string]> = [
    ['Deploy Steps', 'deploy-steps'],
    ['deploy', 'deploy'],
    ['v1.2.3', 'v1-2-3'],
    ['a_b', 'a-b'],
    ['hello, world!!!  ok', 'hello-world-ok'],
    ['a -- b', 'a-b'],
    ['--leading and trailing--', 'leading-and-trailing'],
    ['  (spaces) ', 'spaces'],
    ['İstanbul', 'istanbul'],
    ['DİYARBAKIR', 'diyarbakir'],
    ['xİy', 'xiy'],
    ['\u212Aelvin', 'kelvin'],
    ['café au lait', 'caf-au-lait'],
    ['ΣΑΣ notes', 'notes'],
    ['日本語', ''],
    ['日本語 notes 2', 'notes-2'],
    ['🎉', ''],
    ['🎉🚀 launch 🎉', 'launch'],
    ['!!!', ''],
    ['', ''],
  ]
  for (const [name, expected] of table) {
    it(`${JSON.stringify(name)} → ${JSON.stringify(expected)}`, () => expect(slug(name)).toBe(expected))
  }
})

describe('Go string semantics', () => {
  it('lowercases each rune by its simple mapping', () => {
    expect(goToLower('İ')).toBe('i')
    expect('İ'.toLowerCase()).toBe('i\u0307') // what JS alone would give
    expect(goToLower('ΟΔΟΣ')).toBe('οδοσ') // no final sigma in Go
    expect(goToLower('Σ Σ')).toBe('σ σ')
    expect(goToLower('ÀÉ Straße ẞ')).toBe('àé straße ß')
    expect(goToLower('MiXeD 123')).toBe('mixed 123')
  })

  it('trims what unicode.IsSpace calls space', () => {
    expect(goTrimSpace(' \t\n\v\f\r x y \u0085\u00a0\u2000\u3000')).toBe('x y')
    expect(goTrimSpace('\ufeffx\ufeff')).toBe('\ufeffx\ufeff') // JS trim() would drop these
    expect(goTrimSpace('')).toBe('')
    expect(goTrimSpace(`a${' '.repeat(200_000)}b`)).toBe(`a${' '.repeat(200_000)}b`)
  })
})

describe('note text', () => {
  it('renders Norma bytes', () => {
    expect(
      renderMemory({
        name: 'Deploy steps',
        description: 'how we ship',
        type: 'project',
        content: 'Run `make deploy`.\n\n\n',
      }),
    ).toBe('---\nname: Deploy steps\ndescription: how we ship\ntype: project\n---\n\nRun `make deploy`.\n')
    // Empty description keeps its trailing space; no type line; an empty body is one newline.
    expect(renderMemory({ name: 'X', content: '' })).toBe('---\nname: X\ndescription: \n---\n\n\n')
    // Only \n is trimmed from the end, and nothing from the start.
    expect(renderMemory({ name: 'X', description: 'd', content: '\n  body\r\n\n' })).toBe(
      '---\nname: X\ndescription: d\n---\n\n\n  body\r\n',
    )
  })

  it('parses what it renders', () => {
    const text = '---\nname: Deploy steps\ndescription: how we ship\ntype: project\n---\n\nRun it.\nTwice.\n'
    expect(parseMemory(text, 'deploy-steps.md')).toEqual({
      name: 'Deploy steps',
      description: 'how we ship',
      type: 'project',
      content: 'Run it.\nTwice.\n',
    })
  })

  const fallbacks: Array<
    [string, string, { name: string; description?: string; type?: string; content: string }]
  > = [
    ['no frontmatter: whole file, stem name', 'just text\n', { name: 'note', content: 'just text\n' }],
    [
      'no closing ---: whole file',
      '---\nname: A\nbody without end\n',
      { name: 'note', content: '---\nname: A\nbody without end\n' },
    ],
    [
      'a BOM is not ---',
      '\ufeff---\nname: A\n---\nb',
      { name: 'note', content: '\ufeff---\nname: A\n---\nb' },
    ],
    ['empty name: stem', '---\nname:   \n---\nbody', { name: 'note', content: 'body' }],
    [
      'no name key: stem',
      '---\ndescription: d\n---\nbody',
      { name: 'note', description: 'd', content: 'body' },
    ],
    [
      'CRLF file',
      '---\r\nname: A\r\ndescription: d\r\n---\r\n\r\nbody\r\n',
      { name: 'A', description: 'd', content: 'body\r\n' },
    ],
    [
      'split at the first colon; keys and values trimmed',
      '---\n  name :  a: b  \ndescription:x:y\n---\nc',
      { name: 'a: b', description: 'x:y', content: 'c' },
    ],
    [
      'other keys and lines without colon ignored; last key wins',
      '---\ntags: [a, b]\nname: first\njunk line\nname: second\n---\nc',
      { name: 'second', content: 'c' },
    ],
    [
      'any type string is kept',
      '---\nname: A\ntype: Weird Type\n---\nc',
      { name: 'A', type: 'Weird Type', content: 'c' },
    ],
    ['blank lines before the head', '---\n\n\r\nname: A\n---\nc', { name: 'A', content: 'c' }],
    ['longer closing rule', '---\nname: A\n-----\n\nc', { name: 'A', content: 'c' }],
    [
      'body that starts with dashes after a blank line',
      '---\nname: A\n---\n\n--- x',
      { name: 'A', content: '--- x' },
    ],
    ['body glued to the rule loses its dashes', '---\nname: A\n------ x', { name: 'A', content: ' x' }],
    ['empty file', '', { name: 'note', content: '' }],
  ]
  for (const [what, text, want] of fallbacks) {
    it(`parse: ${what}`, () => {
      expect(parseMemory(text, 'note.md')).toEqual({ description: '', type: '', ...want })
    })
  }

  it('without a file name an empty name stays empty', () => {
    expect(parseMemory('text').name).toBe('')
  })
})

describe('checkMemory', () => {
  const refused = (input: unknown): string => {
    try {
      checkMemory(input as never)
    } catch (err) {
      if (isNoaError(err, 'NOA_BAD_ARGUMENT')) return err.message
      throw err
    }
    throw new Error('expected a refusal')
  }

  it('refuses what would break the file or is not a Norma type', () => {
    expect(refused({ name: '' })).toMatch(/name is empty/)
    expect(refused({ name: ' \t ' })).toMatch(/name is empty/)
    expect(refused({ name: 'a\nb' })).toMatch(/name must be one line/)
    expect(refused({ name: 'a\rb' })).toMatch(/name must be one line/)
    expect(refused({ name: 'a', description: 'x\ny' })).toMatch(/description must be one line/)
    expect(refused({ name: 'a', type: 'bogus' })).toMatch(
      /type must be one of user, feedback, project, reference \(or empty\), got "bogus"/,
    )
    expect(refused({ name: 'a', type: 'User' })).toMatch(/type must be one of/)
    expect(refused({ name: 'a\ud800' })).toMatch(/unpaired UTF-16 surrogate/)
    expect(refused({ name: 'a', content: 'x\udc00' })).toMatch(/content holds an unpaired/)
    expect(refused({ name: 7 })).toMatch(/name must be a string/)
  })

  it('accepts the four types and trims values as the parser would', () => {
    for (const type of ['user', 'feedback', 'project', 'reference', '']) {
      expect(checkMemory({ name: 'a', type }).type).toBe(type)
    }
    expect(checkMemory({ name: '  a  ', description: ' d ', type: ' user ' })).toEqual({
      name: 'a',
      description: 'd',
      type: 'user',
      content: '',
    })
  })
})

function note(fields: Partial<MemoryNote> & { name: string }): MemoryNote {
  return {
    description: '',
    type: '',
    content: '',
    file: `${slug(fields.name)}.md`,
    path: `/m/${slug(fields.name)}.md`,
    mtime: new Date(0),
    ...fields,
  }
}

describe('recall scoring', () => {
  it('tokenizes like Norma', () => {
    expect(tokenize('How do I deploy the API server to prod? x y deploy_v2 İSTANBUL')).toEqual([
      'deploy',
      'api',
      'server',
      'prod',
      'deploy_v2',
      'istanbul',
    ])
    expect(tokenize('the a I my')).toEqual([])
    expect(tokenize('deploy DEPLOY')).toEqual(['deploy', 'deploy']) // duplicates kept
  })

  it('scores 3 for name and type, 2 for description, 1 for body, once per token', () => {
    const n = note({
      name: 'Deploy',
      type: 'project',
      description: 'deploys to prod',
      content: 'deploy deploy',
    })
    expect(score(n, ['deploy'])).toBe(6)
    expect(score(n, ['project'])).toBe(3)
    expect(score(n, ['prod'])).toBe(2)
    expect(score(n, ['deploy', 'deploy'])).toBe(12)
    expect(score(n, ['ploy'])).toBe(6) // substring, not word
    expect(score(note({ name: 'İstanbul trip' }), ['istanbul'])).toBe(3)
  })

  it('orders by score, then newer first, keeping input order among equal mtimes', () => {
    const t = (s: number) => new Date(Date.UTC(2024, 0, 1, 0, 0, s))
    const notes = [
      note({ name: 'deploy unknown time', mtime: undefined }),
      note({ name: 'deploy old', mtime: t(1) }),
      note({ name: 'deploy b', mtime: t(5) }),
      note({ name: 'deploy a', mtime: t(5) }),
      note({ name: 'server', description: 'deploy', mtime: t(0) }),
      note({ name: 'unrelated', content: 'nothing here', mtime: t(9) }),
    ]
    const hits = relevant(notes, 'deploy the server')
    expect(hits.map((h) => [h.note.name, h.score])).toEqual([
      ['server', 5],
      ['deploy b', 3],
      ['deploy a', 3],
      ['deploy old', 3],
      ['deploy unknown time', 3],
    ])
    expect(relevant(notes, 'deploy the server', 2).map((h) => h.note.name)).toEqual(['server', 'deploy b'])
    expect(relevant(notes, 'deploy', 0)).toHaveLength(5)
    expect(relevant(notes, 'the a')).toEqual([])
  })
})

describe('auto-inject text', () => {
  const now = new Date(Date.UTC(2024, 5, 10, 12, 0, 0))
  const ago = (ms: number) => new Date(now.getTime() - ms)
  const H = 3_600_000
  const STALE =
    '(This memory is a point-in-time note, not live state — verify claims about code against the current source before relying on them.)'

  it('names the age and adds the stale note from 48 h on', () => {
    expect(age(note({ name: 'a', mtime: ago(H) }), now)).toBe('today')
    expect(age(note({ name: 'a', mtime: ago(24 * H - 1) }), now)).toBe('today')
    expect(age(note({ name: 'a', mtime: ago(24 * H) }), now)).toBe('yesterday')
    expect(age(note({ name: 'a', mtime: ago(48 * H - 1) }), now)).toBe('yesterday')
    expect(age(note({ name: 'a', mtime: ago(48 * H) }), now)).toBe('2 days ago')
    expect(age(note({ name: 'a', mtime: ago(-5 * 24 * H) }), now)).toBe('today')
    expect(age(note({ name: 'a', mtime: undefined }), now)).toBe('unknown age')
    const text = renderForInjection(
      [
        note({ name: 'Fresh', content: '\n  fresh body \n\n', mtime: ago(H) }),
        note({ name: 'Almost', content: 'almost', mtime: ago(48 * H - 1) }),
        note({ name: 'Old', content: 'old body', mtime: ago(48 * H) }),
        note({ name: 'Older', content: 'older', mtime: ago(10 * 24 * H + 5) }),
        note({ name: 'Lost', content: 'lost', mtime: undefined }),
      ],
      now,
    )
    expect(text).toBe(
      'Relevant memories (saved earlier):\n' +
        '\n--- Fresh (saved today) ---\nfresh body\n' +
        '\n--- Almost (saved yesterday) ---\nalmost\n' +
        `\n--- Old (saved 2 days ago) ---\n${STALE}\nold body\n` +
        `\n--- Older (saved 10 days ago) ---\n${STALE}\nolder\n` +
        '\n--- Lost (saved unknown age) ---\nlost\n',
    )
    expect(renderForInjection([], now)).toBe('')
  })
})

describe('index text', () => {
  it('is Norma text with links to the real files', () => {
    expect(renderIndex([])).toBe('# Memory\n\n(no memories yet)\n')
    expect(
      renderIndex([
        { name: 'B', description: 'about b', file: 'b.md' },
        { name: '日本語', description: '', file: 'note-0a1b2c3d.md' },
        { name: 'Hand made', description: 'x', file: 'My notes (1).md' },
      ]),
    ).toBe(
      '# Memory\n\n- [B](b.md) — about b\n- [日本語](note-0a1b2c3d.md) — \n- [Hand made](My%20notes%20%281%29.md) — x\n',
    )
  })
})
