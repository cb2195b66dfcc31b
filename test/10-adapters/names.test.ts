/**
 * Thread and session ids ↔ workspace names, and ids ↔ path segments: reversible for every
 * string, never a truncation, and only canonical spellings decode.
 */
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { decodeWorkspace, fromSegment, toSegment, workspaceFor } from '../../dist/src/adapters/names.js'
import { checkPath, isWorkspaceName } from '../../dist/src/index.js'

const scheme = { prefix: 'lg', what: 'thread id' }
const wellFormed = fc.string({ unit: 'grapheme', minLength: 1, maxLength: 200 })

describe('workspace names for ids', () => {
  it('are valid workspace names that decode back to the id (or name its hash)', () => {
    fc.assert(
      fc.property(wellFormed, (id) => {
        const ws = workspaceFor(scheme, id)
        expect(isWorkspaceName(ws)).toBe(true)
        const back = decodeWorkspace(scheme, ws)
        if (back?.kind === 'plain') expect(back.id).toBe(id)
        else expect(ws).toMatch(/^lgh\.[0-9a-f]{64}$/)
      }),
      { numRuns: 2000 },
    )
  })

  it('keep UUIDs and plain ids readable, escape the rest, hash only what does not fit', () => {
    expect(workspaceFor(scheme, '1ef4c2a0-6b2e-6000-8000-000000000000')).toBe(
      'lg.1ef4c2a0-6b2e-6000-8000-000000000000',
    )
    expect(workspaceFor(scheme, 'user 7/chat_1')).toBe('lg.user_207_2fchat_5f1')
    expect(workspaceFor(scheme, 'é')).toBe('lg._c3_a9')
    expect(workspaceFor(scheme, 'a'.repeat(125))).toBe(`lg.${'a'.repeat(125)}`)
    expect(workspaceFor(scheme, 'a'.repeat(126))).toMatch(/^lgh\.[0-9a-f]{64}$/)
    // Two ids that share their first 200 characters still get two workspaces.
    expect(workspaceFor(scheme, `${'a'.repeat(200)}1`)).not.toBe(workspaceFor(scheme, `${'a'.repeat(200)}2`))
  })

  it('decode only their canonical spelling, and nothing of another scheme', () => {
    expect(decodeWorkspace(scheme, 'lg._61')).toBeNull() // "a" need not be escaped
    expect(decodeWorkspace(scheme, 'lg._C3_A9')).toBeNull() // upper-case hex
    expect(decodeWorkspace(scheme, 'lg._c3')).toBeNull() // not UTF-8
    expect(decodeWorkspace(scheme, 'lg._5')).toBeNull()
    expect(decodeWorkspace(scheme, 'lg.')).toBeNull()
    expect(decodeWorkspace(scheme, 'oa.x')).toBeNull()
    expect(decodeWorkspace(scheme, 'lgh.abc')).toBeNull()
    expect(decodeWorkspace(scheme, 'main')).toBeNull()
  })

  it('refuse ids that are not non-empty well-formed strings', () => {
    expect(() => workspaceFor(scheme, '')).toThrow(/thread id must be a non-empty string/)
    expect(() => workspaceFor(scheme, 7 as never)).toThrow(/got number/)
    expect(() => workspaceFor(scheme, 'a\ud800')).toThrow(/lone UTF-16 surrogate/)
  })
})

describe('path segments for ids', () => {
  it('are valid single segments that decode back', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', maxLength: 100 }), (s) => {
        const seg = toSegment(s)
        expect(seg.includes('/')).toBe(false)
        expect(checkPath(`x/${seg}/y`, 'path')).toBe(`x/${seg}/y`)
        expect(fromSegment(seg)).toBe(s)
      }),
      { numRuns: 2000 },
    )
    expect(toSegment('')).toBe('%')
    expect(toSegment('.')).toBe('%2E')
    expect(toSegment('..')).toBe('%2E%2E')
    expect(fromSegment('%2e')).toBeNull()
    expect(fromSegment('%zz')).toBeNull()
  })
})
