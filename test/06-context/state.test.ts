/** state.json v1: load outcomes, Go decoding rules, durable save, inheritance. */
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import {
  ContextSession,
  createInitialState,
  decodeState,
  encodeState,
  inheritState,
  isNoaError,
  loadState,
  saveState,
} from '../../dist/src/index.js'
import { assistant, NOW, user } from '../helpers/context-fixtures.js'
import { tempDir } from '../helpers/index.js'

/** A state file as Norma writes it (hand-built). */
const NORMA_FILE = `{
  "version": 1,
  "sessionId": "s1",
  "nextBlockId": 3,
  "blocks": [
    {
      "blockId": "b1",
      "tier": 1,
      "summary": "a \\u003c b",
      "directMessageIds": [
        "h_aaaaaaaaaaaaaaaa"
      ],
      "effectiveMessageIds": [
        "h_aaaaaaaaaaaaaaaa"
      ],
      "archivePath": "/x/s1/tier1/b1_m00002-m00002.md",
      "archiveRel": "tier1/b1_m00002-m00002.md",
      "compressedTokens": 7,
      "startRef": "m00002",
      "endRef": "m00002",
      "createdAt": 1717592400,
      "active": false,
      "compressCallId": "toolu_1"
    },
    {
      "blockId": "b2",
      "tier": 2,
      "topic": "t",
      "summary": "",
      "directBlockIds": [
        "b1"
      ],
      "compressedTokens": 0,
      "active": true
    }
  ],
  "messageRefs": {
    "byRaw": {
      "h_aaaaaaaaaaaaaaaa": "m00002",
      "h_bbbbbbbbbbbbbbbb": "BLOCKED"
    },
    "byRef": {
      "m00002": "h_aaaaaaaaaaaaaaaa"
    }
  },
  "tokenSnapshot": {
    "m00002": 7
  },
  "nudge": {
    "lastPerMessageNudgeTokens": 5,
    "lastNudgeShownTokens": 6,
    "lastShownByTier": {
      "1": 10,
      "10": 30,
      "2": 20
    }
  },
  "stats": {
    "tokensCompressed": 7,
    "compressionCount": 1
  }
}`

function stateAt(text: string) {
  const base = tempDir()
  mkdirSync(join(base, 's1'))
  writeFileSync(join(base, 's1', 'state.json'), text)
  return loadState(base, 's1')
}

describe('loading', () => {
  it('reads what Norma writes and writes it back byte for byte', () => {
    const { state, unknownKeys } = decodeState(NORMA_FILE, 's1', '/x/s1')
    expect(unknownKeys).toEqual([])
    expect(state.blocks[0]).toMatchObject({
      blockId: 'b1',
      summary: 'a < b',
      active: false,
      compressCallId: 'toolu_1',
    })
    expect(state.blocks[1]).toMatchObject({
      blockId: 'b2',
      directMessageIds: [],
      archivePath: '',
      createdAt: 0,
    })
    expect([...state.nudge.lastShownByTier]).toEqual([
      [1, 10],
      [10, 30],
      [2, 20],
    ])
    expect(encodeState(state)).toBe(NORMA_FILE)
  })

  it('missing: the initial state, no error', () => {
    const base = tempDir()
    const load = loadState(base, 's1')
    expect(load.exists).toBe(false)
    expect(load.error).toBeUndefined()
    expect(encodeState(load.state)).toBe(`{
  "version": 1,
  "sessionId": "s1",
  "nextBlockId": 1,
  "blocks": null,
  "messageRefs": {
    "byRaw": {},
    "byRef": {}
  },
  "nudge": {
    "lastPerMessageNudgeTokens": 0,
    "lastNudgeShownTokens": 0
  },
  "stats": {
    "tokensCompressed": 0,
    "compressionCount": 0
  }
}`)
  })

  it('malformed, version 2, wrong types, unreadable: the error together with the initial state', () => {
    const cases: Array<[string, RegExp]> = [
      [NORMA_FILE.slice(0, 100), /: parse state file: /],
      ['', /: parse state file: unexpected end of JSON input$/],
      [NORMA_FILE.replace('"version": 1', '"version": 2'), /: state file version 2, want 1$/],
      ['{}', /: state file version 0, want 1$/],
      ['null', /: state file version 0, want 1$/],
      ['[]', /: parse state file: json: cannot unmarshal array into/],
      [
        NORMA_FILE.replace('"version": 1', '"version": "1"'),
        /cannot unmarshal string into Go struct field stateFile\.version of type int/,
      ],
      [
        NORMA_FILE.replace('"tier": 2', '"tier": 2.0'),
        /cannot unmarshal number 2\.0 into Go struct field blockJSON\.blocks\.tier of type int/,
      ],
      [NORMA_FILE.replace('"active": true', '"active": 1'), /of type bool/],
      [NORMA_FILE.replace('"byRef": {', '"byRef": ["x"], "other": {'), /cannot unmarshal array/],
    ]
    for (const [text, pattern] of cases) {
      const load = stateAt(text)
      expect(load.exists).toBe(true)
      expect(isNoaError(load.error, 'NOA_BAD_STATE'), text.slice(0, 40)).toBe(true)
      expect(load.error?.message).toMatch(pattern)
      expect(load.error?.message.startsWith(load.file)).toBe(true)
      expect(load.state.blocks).toEqual([])
      expect(load.state.sessionId).toBe('s1')
    }
    const base = tempDir()
    mkdirSync(join(base, 's1', 'state.json'), { recursive: true })
    const load = loadState(base, 's1')
    expect(load.error?.code).toBe('NOA_NOT_REGULAR_FILE')
    expect(load.error?.message).toMatch(/is a directory, not a regular file/)
  })

  it('null maps keep the initial empty maps; nextBlockId below 1 becomes 1; bad tier keys are dropped', () => {
    const load = stateAt(`{"version":1,"sessionId":"","nextBlockId":0,"blocks":null,
      "messageRefs":{"byRaw":null,"byRef":null},"tokenSnapshot":null,
      "nudge":{"lastPerMessageNudgeTokens":1,"lastNudgeShownTokens":2,"lastShownByTier":{"2":5,"x":9," 3":7}},
      "stats":null}`)
    expect(load.error).toBeUndefined()
    const s = load.state
    expect(s.sessionId).toBe('s1') // an empty id in the file gives the caller's
    expect(s.nextBlockId).toBe(1)
    expect(s.messageRefs.byRaw.size + s.messageRefs.byRef.size + s.tokenSnapshot.size).toBe(0)
    expect([...s.nudge.lastShownByTier]).toEqual([
      [2, 5],
      [3, 7],
    ])
  })

  it('unknown keys are ignored (and reported); keys match case-insensitively as in Go', () => {
    const load = stateAt(
      NORMA_FILE.replace('"version": 1,', '"version": 1, "future": {"x": 1}, "SessionID": "other",').replace(
        '"tier": 1,',
        '"tier": 1, "colour": "red",',
      ),
    )
    expect(load.error).toBeUndefined()
    expect(load.unknownKeys).toEqual(['future', 'blocks.colour'])
    expect(load.state.sessionId).toBe('s1') // the exact key, later in the file, wins
    const folded = stateAt('{"VERSION":1,"sessionid":"zz"}')
    expect(folded.error).toBeUndefined()
    expect(folded.state.sessionId).toBe('zz')
  })
})

describe('saving', () => {
  it('a session that could not read its state keeps the unreadable file aside when it first saves', () => {
    const base = tempDir()
    mkdirSync(join(base, 's1'))
    writeFileSync(join(base, 's1', 'state.json'), '{"version": 2, "future": true}')
    const warnings: string[] = []
    const s = ContextSession.open({ baseDir: base, sessionId: 's1', onWarn: (w) => warnings.push(w) })
    expect(s.loadError?.message).toMatch(/state file version 2, want 1$/)
    s.save()
    s.save()
    const files = readdirSync(join(base, 's1')).sort()
    expect(files).toHaveLength(2)
    expect(files[0]).toBe('state.json')
    expect(files[1]).toMatch(/^state\.json\.unreadable-\d+$/)
    expect(readFileSync(join(base, 's1', files[1] as string), 'utf8')).toBe('{"version": 2, "future": true}')
    expect(loadState(base, 's1').error).toBeUndefined()
    expect(warnings[0]).toMatch(/starting from an empty state$/)
    expect(warnings[1]).toMatch(/was kept as .*state\.json\.unreadable-\d+$/)
  })

  it('writes through a .noa-state-*.tmp temp file, mode 0644, and leaves none behind', () => {
    const base = tempDir()
    const root = join(base, 'deep', 's1')
    const s = createInitialState('s1', root)
    s.derivedFrom = 'parent'
    const file = saveState(s)
    expect(file).toBe(join(root, 'state.json'))
    expect(statSync(file).mode & 0o777).toBe(0o644)
    expect(readdirSync(root)).toEqual(['state.json'])
    const text = readFileSync(file, 'utf8')
    expect(text).toMatch(/\n {2}},\n {2}"derivedFrom": "parent"\n}$/)
    expect(loadState(join(base, 'deep'), 's1').state.derivedFrom).toBe('parent')
  })
})

describe('inheritance', () => {
  function parentWithBlocks(base: string, id: string) {
    const s = ContextSession.open({
      baseDir: base,
      sessionId: id,
      now: () => NOW,
      config: { minCompressRange: 0 },
    })
    s.compress(
      [user('q'), assistant('a1'), assistant('a2')],
      [{ startRef: 'm00002', endRef: 'm00003', summary: 'sum', topic: '' }],
    )
    return s
  }

  it('skips empty, own, missing, corrupt and block-less ancestors and clones the first usable one', () => {
    const base = tempDir()
    const good = parentWithBlocks(base, 'good')
    mkdirSync(join(base, 'corrupt'))
    writeFileSync(join(base, 'corrupt', 'state.json'), '{"version":')
    saveState(createInitialState('empty', join(base, 'empty')))
    const r = inheritState({
      baseDir: base,
      sessionId: 'child',
      parentSessionIds: ['', 'child', 'missing', 'corrupt', 'empty', '../x', 'good', 'later'],
    })
    expect(r.candidates.map((c) => [c.sessionId, c.skipped.split(':')[0]])).toEqual([
      ['', 'empty id'],
      ['child', 'the session itself'],
      ['missing', 'no state.json'],
      ['corrupt', 'unusable state'],
      ['empty', 'no blocks'],
      ['../x', 'not a session id (it would leave the base directory)'],
      ['good', ''],
    ])
    expect(r.from).toBe('good')
    const st = r.state
    expect(st?.sessionId).toBe('child')
    expect(st?.archiveRoot).toBe(join(base, 'child'))
    expect(st?.derivedFrom).toBe('good')
    expect(st?.stats).toEqual({ tokensCompressed: 0, compressionCount: 0 })
    expect(st?.nudge.lastShownByTier.size).toBe(0)
    // Archives stay where the parent wrote them.
    expect(st?.blocks[0]?.archivePath).toBe(good.state.blocks[0]?.archivePath)
    expect(st?.blocks[0]?.archivePath.startsWith(join(base, 'good'))).toBe(true)
  })

  it('looks at no more than 8 entries, skipped ones included', () => {
    const base = tempDir()
    parentWithBlocks(base, 'far')
    const eight = Array.from({ length: 8 }, (_, i) => `none${i}`)
    expect(
      inheritState({ baseDir: base, sessionId: 'c', parentSessionIds: [...eight, 'far'] }).state,
    ).toBeUndefined()
    expect(
      inheritState({ baseDir: base, sessionId: 'c', parentSessionIds: [...eight.slice(1), 'far'] }).from,
    ).toBe('far')
  })

  it('a session opened with ancestors inherits only without blocks of its own, and records derivedFrom when it saves', () => {
    const base = tempDir()
    parentWithBlocks(base, 'p')
    const warnings: string[] = []
    const child = ContextSession.open({
      baseDir: base,
      sessionId: 'c',
      parentSessionIds: ['p'],
      now: () => NOW,
      onWarn: (w) => warnings.push(w),
      config: { minCompressRange: 0 },
    })
    expect(warnings).toEqual(['noa: inherited 1 block(s) from session p'])
    expect(child.state.blocks).toHaveLength(1)
    const conv = [user('q'), assistant('a1'), assistant('a2'), assistant('b1'), assistant('b2')]
    child.compress(conv, [{ startRef: 'm00004', endRef: 'm00005', summary: 'more', topic: '' }])
    const saved = readFileSync(join(base, 'c', 'state.json'), 'utf8')
    expect(saved).toMatch(/"derivedFrom": "p"\n}$/)
    expect(saved).toMatch(/"sessionId": "c"/)
    // Now it has blocks of its own: nothing is inherited any more.
    const again = ContextSession.open({ baseDir: base, sessionId: 'c', parentSessionIds: ['p'] })
    expect(again.inherited).toBeUndefined()
    expect(again.state.blocks).toHaveLength(2)
  })
})
