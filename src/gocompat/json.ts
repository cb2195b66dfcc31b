/**
 * JSON text exactly as Go's `encoding/json.Marshal` (Go ≥ 1.22, Norma v0.4.3 builds with 1.26)
 * writes it, so that a line noa writes is byte-for-byte the line Norma would have written:
 * - `<`, `>`, `&` become `\u003c`, `\u003e`, `\u0026`, and U+2028/U+2029 become `\u2028`/`\u2029`
 *   (Marshal's HTML escaping is on by default);
 * - `\b \f \n \r \t` use their short escapes, other control characters `\u00XX` (lower-case hex),
 *   which is also what JSON.stringify does, so it is used as the base;
 * - text that is not valid Unicode (in Go: invalid UTF-8; here: a lone surrogate) becomes `\ufffd`;
 * - a `json.RawMessage` is compacted (whitespace outside strings removed) and HTML-escaped.
 */

import { type GoInt, goIntText } from './int.js'

const HTML_CHARS = /[<>&\u2028\u2029]/
const HTML_CHARS_G = /[<>&\u2028\u2029]/g
const HTML_ESCAPES: Record<string, string> = {
  '<': '\\u003c',
  '>': '\\u003e',
  '&': '\\u0026',
  '\u2028': '\\u2028',
  '\u2029': '\\u2029',
}

/** Escapes what Go's HTML-safe encoder escapes; applied to JSON text, it only touches strings. */
export function htmlEscape(json: string): string {
  return HTML_CHARS.test(json) ? json.replace(HTML_CHARS_G, (c) => HTML_ESCAPES[c] as string) : json
}

// An escaped backslash is matched first, so a `\\` followed by `ud800` is never taken for an escape.
const SURROGATE_ESCAPE = /\\\\|\\ud[89a-f][0-9a-f]{2}/g

/**
 * JSON.stringify writes a lone surrogate as `\udXXX` (well-formed pairs stay raw), where Go
 * writes the replacement character for text it cannot encode.
 */
function replaceLoneSurrogates(json: string): string {
  return json.includes('\\ud')
    ? json.replace(SURROGATE_ESCAPE, (m) => (m.length === 2 ? m : '\\ufffd'))
    : json
}

/** A string as Go writes it. */
export function goString(s: string): string {
  return replaceLoneSurrogates(htmlEscape(JSON.stringify(s)))
}

/** An integer as Go writes an `int` (no `-0`; a bigint beyond 2^53 exactly). */
export function goInt(n: GoInt): string {
  return goIntText(n)
}

function isJsonSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09
}

/**
 * What Marshal writes for a `json.RawMessage`: the text compacted and HTML-escaped. Throws a
 * SyntaxError (as Marshal returns an error) when the text is not one JSON value.
 */
export function compactRawJson(raw: string): string {
  JSON.parse(raw) // Marshal refuses a RawMessage that is not valid JSON, and so do we
  let out = ''
  let start = 0
  let i = 0
  const n = raw.length
  while (i < n) {
    const c = raw.charCodeAt(i)
    if (c === 0x22) {
      // Skip the string: its closing quote is the first one not preceded by an odd run of `\`.
      let q = raw.indexOf('"', i + 1)
      for (;;) {
        let k = q - 1
        while (raw.charCodeAt(k) === 0x5c) k--
        if ((q - 1 - k) % 2 === 0) break
        q = raw.indexOf('"', q + 1)
      }
      i = q + 1
    } else if (isJsonSpace(c)) {
      if (start < i) out += raw.slice(start, i)
      while (i < n && isJsonSpace(raw.charCodeAt(i))) i++
      start = i
    } else {
      i++
    }
  }
  out = start === 0 ? raw : out + raw.slice(start)
  return htmlEscape(out)
}

/**
 * A value with no Go type behind it (a key noa keeps but Norma's structs do not have), written
 * the way Marshal writes an `any`: JSON with Go's string escaping. Object keys keep their order.
 */
export function goValue(value: unknown): string {
  const json = JSON.stringify(value)
  return json === undefined ? 'null' : replaceLoneSurrogates(htmlEscape(json))
}
