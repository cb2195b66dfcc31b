/**
 * Go's JSON syntax check (`encoding/json`'s scanner, which `Unmarshal` runs over the whole input
 * before it decodes anything), kept state for state so that a file Go refuses is refused here
 * with Go's own words: `invalid character 'x' after object key`, `unexpected end of JSON input`.
 *
 * Input is text as `decodeBytes` gives it; the character named in a message is the byte Go was
 * looking at (the first byte of a multi-byte character).
 */
import { firstByteAt } from './utf8.js'

/** Nesting Go refuses past (`maxNestingDepth`). */
export const MAX_NESTING_DEPTH = 10000

/** strconv.IsPrint for U+0000..U+00FF. */
function isPrintLatin1(c: number): boolean {
  if (c < 0x20 || (c >= 0x7f && c <= 0xa0)) return false
  return c !== 0xad
}

/** Go's `quoteChar` of a byte: the byte as a rune, quoted as strconv.Quote would, in single quotes. */
export function quoteChar(c: number): string {
  if (c === 0x27) return "'\\''"
  if (c === 0x22) return "'\"'"
  const short: Record<number, string> = {
    7: '\\a',
    8: '\\b',
    12: '\\f',
    10: '\\n',
    13: '\\r',
    9: '\\t',
    11: '\\v',
    92: '\\\\',
  }
  const s = short[c]
  if (s !== undefined) return `'${s}'`
  if (isPrintLatin1(c)) return `'${String.fromCharCode(c)}'`
  if (c < 0x20 || c === 0x7f) return `'\\x${c.toString(16).padStart(2, '0')}'`
  return `'\\u${c.toString(16).padStart(4, '0')}'`
}

enum St {
  BeginValueOrEmpty,
  BeginValue,
  BeginStringOrEmpty,
  BeginString,
  EndValue,
  EndTop,
  InString,
  InStringEsc,
  InStringEscU,
  InStringEscU1,
  InStringEscU12,
  InStringEscU123,
  Neg,
  One,
  Zero,
  Dot,
  Dot0,
  E,
  ESign,
  E0,
  T,
  Tr,
  Tru,
  F,
  Fa,
  Fal,
  Fals,
  N,
  Nu,
  Nul,
}

enum Ps {
  ObjectKey,
  ObjectValue,
  ArrayValue,
}

const LITERAL: Partial<Record<St, [number, St | 'end', string]>> = {
  [St.T]: [0x72, St.Tr, "in literal true (expecting 'r')"],
  [St.Tr]: [0x75, St.Tru, "in literal true (expecting 'u')"],
  [St.Tru]: [0x65, 'end', "in literal true (expecting 'e')"],
  [St.F]: [0x61, St.Fa, "in literal false (expecting 'a')"],
  [St.Fa]: [0x6c, St.Fal, "in literal false (expecting 'l')"],
  [St.Fal]: [0x73, St.Fals, "in literal false (expecting 's')"],
  [St.Fals]: [0x65, 'end', "in literal false (expecting 'e')"],
  [St.N]: [0x75, St.Nu, "in literal null (expecting 'u')"],
  [St.Nu]: [0x6c, St.Nul, "in literal null (expecting 'l')"],
  [St.Nul]: [0x6c, 'end', "in literal null (expecting 'l')"],
}

function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x09 || c === 0x0d || c === 0x0a
}

function isHex(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66) || (c >= 0x41 && c <= 0x46)
}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39
}

class GoScanner {
  step: St = St.BeginValue
  parse: Ps[] = []
  endTop = false
  err: string | undefined

  error(c: number, context: string): void {
    this.step = St.EndTop // stays in error: nothing after matters
    this.err = `invalid character ${quoteChar(c)} ${context}`
  }

  push(c: number, ps: Ps, next: St): void {
    this.parse.push(ps)
    if (this.parse.length <= MAX_NESTING_DEPTH) this.step = next
    else this.error(c, 'exceeded max depth')
  }

  /** One byte. */
  feed(c: number): void {
    for (;;) {
      switch (this.step) {
        case St.BeginValueOrEmpty:
          if (isSpace(c)) return
          if (c === 0x5d) {
            this.step = St.EndValue
            continue
          }
          this.step = St.BeginValue
          continue
        case St.BeginValue:
          if (isSpace(c)) return
          switch (c) {
            case 0x7b:
              this.push(c, Ps.ObjectKey, St.BeginStringOrEmpty)
              return
            case 0x5b:
              this.push(c, Ps.ArrayValue, St.BeginValueOrEmpty)
              return
            case 0x22:
              this.step = St.InString
              return
            case 0x2d:
              this.step = St.Neg
              return
            case 0x30:
              this.step = St.Zero
              return
            case 0x74:
              this.step = St.T
              return
            case 0x66:
              this.step = St.F
              return
            case 0x6e:
              this.step = St.N
              return
          }
          if (c >= 0x31 && c <= 0x39) {
            this.step = St.One
            return
          }
          this.error(c, 'looking for beginning of value')
          return
        case St.BeginStringOrEmpty:
          if (isSpace(c)) return
          if (c === 0x7d) {
            this.parse[this.parse.length - 1] = Ps.ObjectValue
            this.step = St.EndValue
            continue
          }
          this.step = St.BeginString
          continue
        case St.BeginString:
          if (isSpace(c)) return
          if (c === 0x22) {
            this.step = St.InString
            return
          }
          this.error(c, 'looking for beginning of object key string')
          return
        case St.EndValue: {
          const n = this.parse.length
          if (n === 0) {
            this.step = St.EndTop
            this.endTop = true
            continue
          }
          if (isSpace(c)) return
          const ps = this.parse[n - 1]
          if (ps === Ps.ObjectKey) {
            if (c === 0x3a) {
              this.parse[n - 1] = Ps.ObjectValue
              this.step = St.BeginValue
              return
            }
            this.error(c, 'after object key')
            return
          }
          if (ps === Ps.ObjectValue) {
            if (c === 0x2c) {
              this.parse[n - 1] = Ps.ObjectKey
              this.step = St.BeginString
              return
            }
            if (c === 0x7d) {
              this.parse.pop()
              this.afterPop()
              return
            }
            this.error(c, 'after object key:value pair')
            return
          }
          if (c === 0x2c) {
            this.step = St.BeginValue
            return
          }
          if (c === 0x5d) {
            this.parse.pop()
            this.afterPop()
            return
          }
          this.error(c, 'after array element')
          return
        }
        case St.EndTop:
          if (this.err === undefined && !isSpace(c)) this.error(c, 'after top-level value')
          return
        case St.InString:
          if (c === 0x22) {
            this.step = St.EndValue
            return
          }
          if (c === 0x5c) {
            this.step = St.InStringEsc
            return
          }
          if (c < 0x20) this.error(c, 'in string literal')
          return
        case St.InStringEsc:
          if (
            c === 0x62 ||
            c === 0x66 ||
            c === 0x6e ||
            c === 0x72 ||
            c === 0x74 ||
            c === 0x5c ||
            c === 0x2f ||
            c === 0x22
          ) {
            this.step = St.InString
            return
          }
          if (c === 0x75) {
            this.step = St.InStringEscU
            return
          }
          this.error(c, 'in string escape code')
          return
        case St.InStringEscU:
        case St.InStringEscU1:
        case St.InStringEscU12:
        case St.InStringEscU123:
          if (isHex(c)) {
            this.step = this.step === St.InStringEscU123 ? St.InString : this.step + 1
            return
          }
          this.error(c, 'in \\u hexadecimal character escape')
          return
        case St.Neg:
          if (c === 0x30) {
            this.step = St.Zero
            return
          }
          if (c >= 0x31 && c <= 0x39) {
            this.step = St.One
            return
          }
          this.error(c, 'in numeric literal')
          return
        case St.One:
          if (isDigit(c)) return
          this.step = St.Zero
          continue
        case St.Zero:
          if (c === 0x2e) {
            this.step = St.Dot
            return
          }
          if (c === 0x65 || c === 0x45) {
            this.step = St.E
            return
          }
          this.step = St.EndValue
          continue
        case St.Dot:
          if (isDigit(c)) {
            this.step = St.Dot0
            return
          }
          this.error(c, 'after decimal point in numeric literal')
          return
        case St.Dot0:
          if (isDigit(c)) return
          if (c === 0x65 || c === 0x45) {
            this.step = St.E
            return
          }
          this.step = St.EndValue
          continue
        case St.E:
          if (c === 0x2b || c === 0x2d) {
            this.step = St.ESign
            return
          }
          this.step = St.ESign
          continue
        case St.ESign:
          if (isDigit(c)) {
            this.step = St.E0
            return
          }
          this.error(c, 'in exponent of numeric literal')
          return
        case St.E0:
          if (isDigit(c)) return
          this.step = St.EndValue
          continue
        default: {
          const lit = LITERAL[this.step] as [number, St | 'end', string]
          if (c === lit[0]) {
            this.step = lit[1] === 'end' ? St.EndValue : lit[1]
            return
          }
          this.error(c, lit[2])
          return
        }
      }
    }
  }

  afterPop(): void {
    if (this.parse.length === 0) {
      this.step = St.EndTop
      this.endTop = true
    } else this.step = St.EndValue
  }
}

/**
 * Go's verdict on `text` as one JSON value: undefined when valid, else the SyntaxError message
 * `json.Unmarshal` returns.
 */
export function goSyntaxError(text: string): string | undefined {
  const s = new GoScanner()
  for (let i = 0; i < text.length; i++) {
    const u = text.charCodeAt(i)
    // Outside ASCII only strings accept anything, and they accept every byte: one step will do.
    const c = u < 0x80 ? u : firstByteAt(text, i)
    s.feed(c)
    if (s.err !== undefined) return s.err
    if (u >= 0xd800 && u <= 0xdbff && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1)
      if (d >= 0xdc00 && d <= 0xdfff) i++
    }
  }
  if (s.endTop) return undefined
  s.feed(0x20)
  if (s.err !== undefined) return s.err
  if (s.endTop) return undefined
  return 'unexpected end of JSON input'
}
