/** Message ids, refs, block ids and Compress inputs, as Norma derives and reads them. */
import { describe, expect, it } from 'vitest'
import {
  createInitialState,
  indexToRef,
  parseBlockId,
  parseBoundary,
  parseCompressArgs,
  processTurn,
  project,
  refToIndex,
  resolveConfig,
  stripRefTag,
} from '../../dist/src/context/index.js'
import type { Message } from '../../dist/src/transcript/index.js'
import {
  assistant,
  compressUse,
  hid,
  marker,
  toolResult,
  toolUse,
  user,
} from '../helpers/context-fixtures.js'

describe('projection and refs', () => {
  const before: Message[] = [user('old question'), assistant('old answer')]
  const after: Message[] = [
    user('Same.'),
    {
      role: 'assistant',
      content: [
        { type: 'text', text: 'Same.' },
        { type: 'text', text: 'Same.' },
      ],
    },
    user('Same.\n<noa-ref id="m00042" tokens="2"/>'), // a view's ref tag is not part of the content
    toolUse('c1', 'Compress', '{"content":[]}'),
    toolResult('c1', '▣ noa | 0 blocks created'),
    toolUse('r1', 'Read', '{"path":"a"}', [{ type: 'thinking', thinking: 'hmm', signature: 's' }]),
    toolResult('r1', 'file a'),
    user('Same.'),
  ]
  const transcript = [...before, marker(), ...after]

  it('projects one message per block after the last marker, repeats numbered _1, _2', () => {
    const p = project(transcript)
    const userSame = hid('user', 'text', 'Same.')
    const asstSame = hid('assistant', 'text', 'Same.')
    expect(p.messages.map((m) => m.id)).toEqual([
      userSame,
      asstSame,
      `${asstSame}_1`,
      `${userSame}_1`,
      hid('assistant', 'tool-call', '{"content":[]}', 'c1', 'Compress'),
      hid('tool', 'tool-result', '▣ noa | 0 blocks created', 'c1', 'Compress'),
      hid('assistant', 'reasoning', 'hmm'),
      hid('assistant', 'tool-call', '{"path":"a"}', 'r1', 'Read'),
      hid('tool', 'tool-result', 'file a', 'r1', 'Read'),
      `${userSame}_2`,
    ])
    expect(p.messages.map((m) => [m.role, m.contentType])).toContainEqual(['tool', 'tool-result'])
  })

  it('gives refs in order, BLOCKED to Compress calls and results and to protected tools', () => {
    const cores = project(transcript).messages
    const plain = processTurn(cores, createInitialState('s', '/r'), resolveConfig()).state.messageRefs
    const refs = cores.map((m) => plain.byRaw.get(m.id))
    expect(refs).toEqual([
      'm00001',
      'm00002',
      'm00003',
      'm00004',
      'BLOCKED',
      'BLOCKED',
      'm00005',
      'm00006',
      'm00007',
      'm00008',
    ])
    expect([...plain.byRef.keys()]).toEqual([
      'm00001',
      'm00002',
      'm00003',
      'm00004',
      'm00005',
      'm00006',
      'm00007',
      'm00008',
    ])
    expect([...plain.byRef.values()].includes(cores[4]?.id as string)).toBe(false)
    const guarded = processTurn(
      cores,
      createInitialState('s', '/r'),
      resolveConfig({ protectedTools: ['rea*'] }),
    )
    expect(cores.map((m) => guarded.state.messageRefs.byRaw.get(m.id)).slice(6)).toEqual([
      'm00005',
      'BLOCKED',
      'BLOCKED',
      'm00006',
    ])
  })

  it('never reassigns a ref: after a compaction the kept tail keeps its refs, new messages continue', () => {
    const cfg = resolveConfig()
    const first = processTurn(project(transcript).messages, createInitialState('s', '/r'), cfg).state
    // A compaction re-records the tail after a new marker; then the conversation goes on.
    const later = [
      ...transcript,
      marker(),
      toolUse('r1', 'Read', '{"path":"a"}'),
      toolResult('r1', 'file a'),
      user('New.'),
    ]
    const second = processTurn(project(later).messages, first, cfg).state
    expect(second.messageRefs.byRaw.get(hid('assistant', 'tool-call', '{"path":"a"}', 'r1', 'Read'))).toBe(
      'm00006',
    )
    expect(second.messageRefs.byRaw.get(hid('tool', 'tool-result', 'file a', 'r1', 'Read'))).toBe('m00007')
    expect(second.messageRefs.byRaw.get(hid('user', 'text', 'New.'))).toBe('m00009')
    for (const [raw, ref] of first.messageRefs.byRaw) expect(second.messageRefs.byRaw.get(raw)).toBe(ref)
    // A ref freed from byRef is not handed out again below the highest one in use.
    const gap = createInitialState('s', '/r')
    gap.messageRefs.byRaw.set('h_x', 'm00005')
    gap.messageRefs.byRef.set('m00005', 'h_x')
    const next = processTurn(
      [{ id: 'h_new', role: 'user', contentType: 'text', text: 'n', toolName: '', toolCallId: '' }],
      gap,
      cfg,
    )
    expect(next.state.messageRefs.byRaw.get('h_new')).toBe('m00006')
  })

  it('strips only a trailing ref tag', () => {
    expect(stripRefTag('a\n<noa-ref id="m00001" tokens="5" src="Bash"/>')).toBe('a')
    expect(stripRefTag('<noa-ref id="m00001"/>  \n')).toBe('')
    expect(stripRefTag('a\n<noa-ref id="m00001"/> b')).toBe('a\n<noa-ref id="m00001"/> b')
    expect(stripRefTag('a <noa-ref id="m00001"/>')).toBe('a <noa-ref id="m00001"/>')
  })
})

describe('ref and block id syntax', () => {
  it('reads refs m1…m99999 in any padding and case', () => {
    expect(indexToRef(2)).toBe('m00002')
    expect(indexToRef(0)).toBe('')
    expect(indexToRef(100000)).toBe('')
    expect(refToIndex('m00002')).toBe(2)
    expect(refToIndex(' M2 ')).toBe(2)
    expect(refToIndex('m000002')).toBe(2)
    expect(refToIndex('m0')).toBeUndefined()
    expect(refToIndex('m100000')).toBeUndefined()
  })

  it('reads block ids b7, b007, 7 and b7(T1)', () => {
    for (const s of ['b7', 'b007', '7', 'b7(T1)', ' B7(t12) ', '+7']) expect(parseBlockId(s)).toBe('b7')
    for (const s of ['b0', '0', '-1', 'bx', 'b7(T1)x', '']) expect(parseBlockId(s)).toBeUndefined()
    expect(parseBoundary('m00003')).toEqual({ kind: 'message', id: 'm00003', num: 3 })
    expect(parseBoundary('b3(T2)')).toEqual({ kind: 'block', id: 'b3', num: 3 })
    expect(parseBoundary('42')).toEqual({ kind: 'block', id: 'b42', num: 42 })
  })
})

describe('Compress input', () => {
  const range = { startRef: 'm00002', endRef: 'm00005', summary: 'S', topic: '' }

  it("reads Norma's shape, with per-range and top-level topic and summaryMaxChars", () => {
    const r = parseCompressArgs(
      JSON.stringify({
        topic: 'top',
        summaryMaxChars: 300,
        content: [
          { startId: 'm00002', endId: 'm00005', summary: '  S  ' },
          { startRef: 'b1', endRef: 'b2', summary: 'T', topic: 'own', summaryMaxChars: 9.7 },
          { messageId: 'm00009', summary: 'U' },
        ],
      }),
    )
    expect(r.diagnostics).toMatchObject({ ok: true, kind: 'ok' })
    expect(r.ranges).toEqual([
      { ...range, topic: 'top', summaryMaxChars: 300 },
      { startRef: 'b1', endRef: 'b2', summary: 'T', topic: 'own', summaryMaxChars: 9 },
      { startRef: 'm00009', endRef: 'm00009', summary: 'U', topic: 'top', summaryMaxChars: 300 },
    ])
  })

  it('tolerates content as a string, fences, trailing commas, raw newlines and cut-off input', () => {
    const inner = '[{"startId":"m00002","endId":"m00005","summary":"S"}]'
    expect(parseCompressArgs(JSON.stringify({ content: inner })).ranges).toEqual([range])
    expect(parseCompressArgs(JSON.stringify(JSON.stringify({ content: JSON.parse(inner) }))).ranges).toEqual([
      range,
    ])
    expect(parseCompressArgs(`\`\`\`json\n{"content":${inner}}\n\`\`\``).ranges).toEqual([range])
    expect(
      parseCompressArgs('{"content":[{"startId":"m00002","endId":"m00005","summary":"S",},],}').ranges,
    ).toEqual([range])
    expect(
      parseCompressArgs('{"content":[{"startId":"m00002","endId":"m00005","summary":"line\nbreak"}]}')
        .ranges[0]?.summary,
    ).toBe('line\nbreak')
    const cut = parseCompressArgs(`{"content":[${inner.slice(1, -1)},{"startId":"m00007","endId":"m0`)
    expect(cut.ranges).toEqual([range])
    expect(cut.diagnostics).toMatchObject({ ok: true, kind: 'truncated', salvaged: true })
    const repaired = parseCompressArgs(
      JSON.stringify({ content: '[{"startId":"m00002","endId":"m00005","summary":"S"]' }),
    )
    expect(repaired.ranges).toEqual([range])
    expect(repaired.diagnostics.tailRepaired).toBe(true)
  })

  it('reads the Compress calls the fixtures write', () => {
    const m = compressUse('c9', [{ startId: 'm00002', endId: 'm00005', summary: 'S' }])
    expect(parseCompressArgs(m.content?.[0]?.input as string).ranges).toEqual([range])
  })

  it('says why nothing could be read', () => {
    expect(parseCompressArgs('').diagnostics.kind).toBe('empty-input')
    expect(parseCompressArgs('null').diagnostics.kind).toBe('empty-input')
    expect(parseCompressArgs('{"topic":"x"}').diagnostics.kind).toBe('missing-content')
    expect(parseCompressArgs('{"content":5}').diagnostics.kind).toBe('content-not-array')
    expect(parseCompressArgs('not json').diagnostics.kind).toBe('malformed-json')
    const none = parseCompressArgs('{"content":[{"startId":"m00002"}]}')
    expect(none.diagnostics).toMatchObject({ ok: false, kind: 'no-valid-ranges', invalidItems: 1 })
    expect(none.diagnostics.invalidReasons).toEqual(['missing endId, missing summary'])
  })
})
