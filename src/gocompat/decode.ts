/**
 * A JSON reader that keeps each number's text and each object's members in order, so that `1.0`
 * or `1e3` can be refused where Go decodes into an `int`, and duplicate keys are the decoder's
 * to resolve.
 */

/** A JSON number with its text, as written. */
export class JsonNumber {
  constructor(readonly text: string) {}
}

/** A JSON object with its members in order (duplicates kept: the decoder decides). */
export class JsonObject {
  constructor(readonly members: Array<[string, JsonValue]>) {}
}

export type JsonValue = null | boolean | string | JsonNumber | JsonValue[] | JsonObject

/**
 * Parses JSON text, keeping number texts and member order. Syntax errors are JSON.parse's
 * (thrown as SyntaxError).
 */
export function parseJsonKeepingNumbers(text: string): JsonValue {
  JSON.parse(text) // validates; what follows may assume well-formed input
  let i = 0
  const ws = () => {
    for (;;) {
      const c = text.charCodeAt(i)
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) i++
      else return
    }
  }
  const string = (): string => {
    const start = i
    i++
    for (;;) {
      const c = text.charCodeAt(i)
      if (c === 0x5c) i += 2
      else if (c === 0x22) break
      else i++
    }
    i++
    return JSON.parse(text.slice(start, i)) as string
  }
  const value = (): JsonValue => {
    ws()
    const c = text[i]
    if (c === '{') {
      i++
      const members: Array<[string, JsonValue]> = []
      ws()
      if (text[i] === '}') {
        i++
        return new JsonObject(members)
      }
      for (;;) {
        ws()
        const key = string()
        ws()
        i++ // ':'
        members.push([key, value()])
        ws()
        if (text[i++] === '}') return new JsonObject(members)
      }
    }
    if (c === '[') {
      i++
      const items: JsonValue[] = []
      ws()
      if (text[i] === ']') {
        i++
        return items
      }
      for (;;) {
        items.push(value())
        ws()
        if (text[i++] === ']') return items
      }
    }
    if (c === '"') return string()
    if (text.startsWith('true', i)) {
      i += 4
      return true
    }
    if (text.startsWith('false', i)) {
      i += 5
      return false
    }
    if (text.startsWith('null', i)) {
      i += 4
      return null
    }
    const m = /-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/y
    m.lastIndex = i
    const found = m.exec(text)
    const num = found ? found[0] : ''
    i += num.length
    return new JsonNumber(num)
  }
  return value()
}
