import { describe, expect, it } from 'vitest'
import { checkWorkspace, encodeBody, formatLine, parseEntry } from '../../dist/src/engine/index.js'
import { isNoaError } from '../../dist/src/index.js'
import { BLOB } from '../helpers/index.js'

function refused(fn: () => unknown): { code: string; message: string } {
  try {
    fn()
  } catch (err) {
    if (isNoaError(err)) return { code: err.code, message: err.message }
    throw err
  }
  throw new Error('expected a refusal')
}

describe('entry serialization', () => {
  it('writes keys in the seed order for every op', () => {
    const cases: Array<[unknown, string]> = [
      [
        { blob: BLOB, path: 'src/main.rs', op: 'write' },
        `{"seq":1,"op":"write","path":"src/main.rs","blob":"${BLOB}","ts":7}\n`,
      ],
      [{ path: 'src/old.rs', op: 'delete' }, '{"seq":1,"op":"delete","path":"src/old.rs","ts":7}\n'],
      [
        { to: 'src/bar.rs', from: 'src/foo.rs', op: 'rename' },
        '{"seq":1,"op":"rename","from":"src/foo.rs","to":"src/bar.rs","ts":7}\n',
      ],
      [
        { message: 'feat', parent: 'noa_y6w8', snapshot_id: 'noa_z7x9', op: 'snapshot' },
        '{"seq":1,"op":"snapshot","snapshot_id":"noa_z7x9","parent":"noa_y6w8","message":"feat","ts":7}\n',
      ],
      [
        { op: 'snapshot', snapshot_id: 'noa_z7x9', message: '' },
        '{"seq":1,"op":"snapshot","snapshot_id":"noa_z7x9","message":"","ts":7}\n',
      ],
      [
        { base: 'noa_def', from_snapshot: 'noa_abc', from_workspace: 'feature-1', op: 'merge' },
        '{"seq":1,"op":"merge","from_workspace":"feature-1","from_snapshot":"noa_abc","base":"noa_def","ts":7}\n',
      ],
      [
        { op: 'merge', from_workspace: 'feature-1', from_snapshot: 'noa_abc' },
        '{"seq":1,"op":"merge","from_workspace":"feature-1","from_snapshot":"noa_abc","ts":7}\n',
      ],
    ]
    for (const [input, line] of cases) {
      expect(formatLine(1, encodeBody(input), 7)).toBe(line)
      expect(parseEntry(line.slice(0, -1))).toEqual({ seq: 1, ts: 7, ...(input as object) })
    }
  })

  it('escapes strings as JSON', () => {
    expect(encodeBody({ op: 'delete', path: 'a "b"\\c\n' })).toBe('"op":"delete","path":"a \\"b\\"\\\\c\\n"')
  })
})

describe('entry validation', () => {
  const bad: Array<[string, unknown, RegExp]> = [
    ['not an object', 'write', /must be a JSON object/],
    ['array', [], /must be a JSON object/],
    ['unknown op', { op: 'copy', path: 'a' }, /op: must be one of write, delete, rename, snapshot, merge/],
    ['missing op', { path: 'a' }, /op: must be one of/],
    ['missing field', { op: 'write', path: 'a' }, /blob: is required for write/],
    ['extra field', { op: 'delete', path: 'a', blob: BLOB }, /blob: is not a field of delete/],
    ['caller seq', { op: 'delete', path: 'a', seq: 3 }, /seq: is assigned by the workspace owner/],
    ['caller ts', { op: 'delete', path: 'a', ts: 3 }, /ts: is assigned by the workspace owner/],
    ['absolute path', { op: 'delete', path: '/etc/passwd' }, /path: must be relative/],
    ['dotdot segment', { op: 'delete', path: 'a/../b' }, /path: has a '\.\.' segment/],
    ['dot segment', { op: 'delete', path: './b' }, /path: has a '\.' segment/],
    ['empty segment', { op: 'delete', path: 'a//b' }, /path: has an empty segment/],
    ['trailing slash', { op: 'delete', path: 'a/' }, /path: has an empty segment/],
    ['empty path', { op: 'delete', path: '' }, /path: must not be empty/],
    ['NUL', { op: 'delete', path: 'a\0b' }, /path: must not contain NUL/],
    ['lone surrogate', { op: 'delete', path: 'a\ud800' }, /path: has a lone UTF-16 surrogate/],
    [
      'lone surrogate in a message',
      { op: 'snapshot', snapshot_id: 'noa_1', message: '\udfff' },
      /message: has a lone/,
    ],
    ['non-string path', { op: 'delete', path: 7 }, /path: must be a string, got number/],
    ['long path', { op: 'delete', path: 'a'.repeat(5000) }, /path: longer than 4096 bytes/],
    [
      'uppercase blob',
      { op: 'write', path: 'a', blob: BLOB.toUpperCase() },
      /blob: must be 64 lowercase hex/,
    ],
    ['short blob', { op: 'write', path: 'a', blob: 'abc' }, /blob: must be 64 lowercase hex/],
    ['rename onto itself', { op: 'rename', from: 'a', to: 'a' }, /to: must differ from from/],
    ['bad rename source', { op: 'rename', from: '../a', to: 'b' }, /from: has a '\.\.' segment/],
    [
      'bad snapshot id',
      { op: 'snapshot', snapshot_id: 'abc', message: 'm' },
      /snapshot_id: must be a snapshot id/,
    ],
    [
      'snapshot without message',
      { op: 'snapshot', snapshot_id: 'noa_1' },
      /message: is required for snapshot/,
    ],
    [
      'bad parent',
      { op: 'snapshot', snapshot_id: 'noa_1', parent: 'x', message: '' },
      /parent: must be a snapshot id/,
    ],
    [
      'bad from_workspace',
      { op: 'merge', from_workspace: '../x', from_snapshot: 'noa_1' },
      /from_workspace: must be a workspace name/,
    ],
  ]
  for (const [name, input, re] of bad) {
    it(`refuses ${name}`, () => {
      const r = refused(() => encodeBody(input))
      expect(r.code).toBe('NOA_BAD_ENTRY')
      expect(r.message).toMatch(re)
    })
  }

  it('names the entry in a batch', () => {
    expect(refused(() => encodeBody({ op: 'delete' }, 'entry 3')).message).toBe(
      'entry 3: path: is required for delete',
    )
  })

  it('refuses stored lines with bad counters or fields', () => {
    expect(refused(() => parseEntry('{"seq":0,"op":"delete","path":"a","ts":1}')).message).toMatch(
      /seq: must be an integer >= 1/,
    )
    expect(refused(() => parseEntry('{"seq":1,"op":"delete","path":"a"}')).message).toMatch(
      /ts: must be an integer >= 0/,
    )
    expect(refused(() => parseEntry('{"seq":1,"op":"delete","path":"a","ts":1')).message).toMatch(/not JSON/)
    expect(refused(() => parseEntry('[1]')).message).toMatch(/not a JSON object/)
  })
})

describe('workspace names', () => {
  it('accepts the documented alphabet', () => {
    for (const ok of ['default', 'feature-1', 'agent_001', 'a', 'A.b-c_d', '9', 'x'.repeat(128)]) {
      expect(checkWorkspace(ok)).toBe(ok)
    }
  })
  it('refuses names that could leave the log folder or are not names', () => {
    for (const bad of [
      '',
      '.',
      '..',
      '../x',
      'a/b',
      'a\\b',
      '.hidden',
      '-x',
      'x'.repeat(129),
      'x'.repeat(200),
      'a b',
      'a\0b',
      'é',
    ]) {
      expect(refused(() => checkWorkspace(bad)).code).toBe('NOA_BAD_WORKSPACE')
    }
    expect(refused(() => checkWorkspace('x'.repeat(200))).message).toMatch(
      /is 200 characters, the limit is 128/,
    )
    expect(refused(() => checkWorkspace('')).message).toMatch(/must not be empty/)
    expect(refused(() => checkWorkspace(7 as unknown as string)).message).toMatch(/must be a string/)
  })
})
