/**
 * Every NoaError code, walked: each has its factory in `Errors` (and each factory a code), builds
 * a NoaError carrying that code, its message, details and cause, survives the trip across a
 * MessagePort, and is made somewhere in src/ through its factory. No module but
 * src/engine/errors.ts constructs a NoaError itself, and no entry of the package hands out another
 * Error subclass.
 */
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'
import { deserializeError, serializeError } from '../../dist/src/engine/errors.js'
import {
  Errors,
  isNoaError,
  NOA_ERROR_CODES,
  NoaError,
  type NoaErrorCode,
} from '../../dist/src/engine/index.js'
import { ROOT_DIR } from '../helpers/index.js'

const factoryOf = (code: NoaErrorCode) =>
  (Errors as unknown as Record<string, (m: string, d?: object, o?: ErrorOptions) => NoaError>)[code.slice(4)]

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((d) => d.isFile() && d.name.endsWith('.ts'))
    .map((d) => join(d.parentPath, d.name))
}

describe('NoaError codes', () => {
  it('are distinct, all NOA_ prefixed, and each has exactly one factory', () => {
    expect(new Set(NOA_ERROR_CODES).size).toBe(NOA_ERROR_CODES.length)
    for (const code of NOA_ERROR_CODES) expect(code).toMatch(/^NOA_[A-Z_]+$/)
    expect(Object.keys(Errors).sort()).toEqual(NOA_ERROR_CODES.map((c) => c.slice(4)).sort())
    expect(Object.isFrozen(Errors)).toBe(true)
  })

  it.each([...NOA_ERROR_CODES])('%s: its factory builds it, and it crosses a MessagePort whole', (code) => {
    const cause = new Error('below')
    const details = {
      workspace: 'w',
      file: '/f',
      field: 'x',
      root: '/r',
      tried: [],
      ref: 'm1',
      kind: 'unknown',
    }
    const err = factoryOf(code)?.(`a ${code} refusal`, details, { cause })
    expect(err).toBeInstanceOf(NoaError)
    expect(err).toBeInstanceOf(Error)
    expect(err?.name).toBe('NoaError')
    expect(err?.code).toBe(code)
    expect(err?.message).toBe(`a ${code} refusal`)
    expect(err?.details).toEqual(details)
    expect(err?.cause).toBe(cause)
    expect(isNoaError(err, code)).toBe(true)
    expect(isNoaError(err, code === 'NOA_CLOSED' ? 'NOA_EXISTS' : 'NOA_CLOSED')).toBe(false)
    const back = deserializeError(structuredClone(serializeError(err)))
    expect(back).toBeInstanceOf(NoaError)
    expect({ ...(back as NoaError), message: back.message }).toEqual({ ...err, message: err?.message })
  })

  it('each code is made somewhere in src/, by its factory', () => {
    const text = sources(join(ROOT_DIR, 'src'))
      .map((f) => readFileSync(f, 'utf8'))
      .join('\n')
    const unmade = NOA_ERROR_CODES.filter((c) => !text.includes(`Errors.${c.slice(4)}(`))
    expect(unmade).toEqual([])
  })

  it('no module but src/engine/errors.ts constructs a NoaError', () => {
    const offenders = sources(join(ROOT_DIR, 'src'))
      .filter((f) => !f.endsWith(join('engine', 'errors.ts')))
      .filter((f) => /\bnew NoaError\s*\(/.test(readFileSync(f, 'utf8')))
    expect(offenders).toEqual([])
  })

  it('no entry of the package hands out an Error class but NoaError', async () => {
    const pkg = JSON.parse(readFileSync(join(ROOT_DIR, 'package.json'), 'utf8')) as {
      exports: Record<string, { default: string } | string>
    }
    const others: string[] = []
    for (const [key, target] of Object.entries(pkg.exports)) {
      if (typeof target === 'string') continue
      const mod = (await import(pathToFileURL(join(ROOT_DIR, target.default)).href)) as Record<
        string,
        unknown
      >
      for (const [name, value] of Object.entries(mod)) {
        const isErrorClass = typeof value === 'function' && value.prototype instanceof Error
        if (isErrorClass && value !== NoaError) others.push(`${key}: ${name}`)
      }
    }
    expect(others).toEqual([])
  })

  it("docs/api.md's table lists every code, once, in the order of NOA_ERROR_CODES", () => {
    const doc = readFileSync(join(ROOT_DIR, 'docs', 'api.md'), 'utf8')
    const rows = [...doc.matchAll(/^\| `(NOA_[A-Z_]+)` \|/gm)].map((m) => m[1])
    expect(rows).toEqual([...NOA_ERROR_CODES])
  })
})
